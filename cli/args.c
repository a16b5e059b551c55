// SPDX-License-Identifier: MIT
/*
 * Flags as Go's flag package reads them (what `consul lock` accepts):
 * -name, --name, -name=value, --name=value, and -name value for flags that
 * take a value; booleans take only the = form, so `-shell false` is not
 * mistaken for a command. "--" ends the flags.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

void vmsg(const char *prefix, const char *fmt, va_list ap)
{
	char *msg = NULL, *safe = NULL;
	int n = vasprintf(&msg, fmt, ap);

	if (n >= 0)
		safe = text_escape(msg, (size_t)n, 0);
	fprintf(stderr, "%s%s\n", prefix, safe ? safe : "out of memory");
	free(safe);
	if (n >= 0)
		free(msg);
}

void errorf(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg("shmlock: ", fmt, ap);
	va_end(ap);
}

int usage_error(const char *cmd, const char *fmt, ...)
{
	char prefix[64];
	va_list ap;

	snprintf(prefix, sizeof(prefix), "shmlock %s: ", cmd);
	va_start(ap, fmt);
	vmsg(prefix, fmt, ap);
	va_end(ap);
	fprintf(stderr, "Run 'shmlock help %s' for usage.\n", cmd);
	return EXIT_USAGE;
}

int key_usage_error(const char *cmd, const char *key)
{
	if (!*key)
		return usage_error(cmd, "KEY must not be empty");
	if (strlen(key) > LOCAL_KEY_MAX)
		return usage_error(cmd, "KEY is longer than %d bytes", LOCAL_KEY_MAX);
	return 0;
}

struct flag *args_flag(struct flag *flags, const char *name)
{
	for (; flags->name; flags++)
		if (!strcmp(flags->name, name))
			return flags;
	return NULL;
}

static int parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = { "1", "t", "T", "true", "TRUE", "True" };
	static const char *const no[] = { "0", "f", "F", "false", "FALSE", "False" };
	size_t i;

	for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (!strcmp(s, yes[i])) {
			*out = true;
			return 0;
		}
		if (!strcmp(s, no[i])) {
			*out = false;
			return 0;
		}
	}
	return -EINVAL;
}

static int set_value(const char *cmd, struct flag *f, const char *v)
{
	const char *why = "parse error";
	long long n;
	int64_t ns;
	char *end;

	switch (f->type) {
	case FLAG_BOOL:
		if (parse_bool(v, f->val))
			goto bad;
		break;
	case FLAG_STRING:
		*(const char **)f->val = v;
		break;
	case FLAG_INT:
		errno = 0;
		n = strtoll(v, &end, 10);
		if (!*v || *end || errno) {
			why = errno == ERANGE ? "value out of range" : "not an integer";
			goto bad;
		}
		*(long long *)f->val = n;
		break;
	case FLAG_DURATION:
		if (duration_parse(v, &ns, &why))
			goto bad;
		if (ns < 0) {
			why = "negative duration";
			goto bad;
		}
		*(int64_t *)f->val = ns;
		break;
	}
	f->set = true;
	return 0;
bad:
	usage_error(cmd, "invalid value \"%s\" for flag -%s: %s", v, f->name, why);
	return -EINVAL;
}

int args_parse(const char *cmd, struct flag *flags, int argc, char **argv, enum args_mode mode,
	       int *nargs)
{
	int i = 1, npos = 0;

	while (i < argc) {
		char *arg = argv[i], *name, *eq;
		struct flag *f;

		if (arg[0] != '-' || !arg[1]) {
			if (mode == ARGS_STOP_AT_ARG)
				break;
			argv[1 + npos++] = argv[i++];
			continue;
		}
		i++;
		if (!strcmp(arg, "--"))
			break;
		name = arg + 1 + (arg[1] == '-');
		if (!*name || *name == '-' || *name == '=') {
			usage_error(cmd, "bad flag syntax: %s", arg);
			return -EINVAL;
		}
		eq = strchr(name, '=');
		if (eq)
			*eq = '\0';
		f = args_flag(flags, name);
		if (!f && (!strcmp(name, "h") || !strcmp(name, "help")))
			return 1;
		if (!f) {
			usage_error(cmd, "flag provided but not defined: -%s", name);
			return -EINVAL;
		}
		if (eq) {
			if (set_value(cmd, f, eq + 1))
				return -EINVAL;
		} else if (f->type == FLAG_BOOL) {
			*(bool *)f->val = true;
			f->set = true;
		} else if (i < argc) {
			if (set_value(cmd, f, argv[i++]))
				return -EINVAL;
		} else {
			usage_error(cmd, "flag needs an argument: -%s", name);
			return -EINVAL;
		}
	}
	/* Whatever follows the flags (or "--") is positional, in order. */
	while (i < argc)
		argv[1 + npos++] = argv[i++];
	*nargs = npos;
	return 0;
}
