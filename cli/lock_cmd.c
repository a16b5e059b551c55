// SPDX-License-Identifier: MIT
/* `shmlock lock`: the command line, checked as consul lock checks it. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "lock.h"

#define NAME_MAX_BYTES 63 /* struct local_session_info.name, less the NUL */

void verbose(const struct lock_opts *o, const char *fmt, ...)
{
	va_list ap;

	if (!o->verbose)
		return;
	va_start(ap, fmt);
	vmsg("shmlock: ", fmt, ap);
	va_end(ap);
}

/* Cut @s to at most @max bytes without splitting a UTF-8 sequence. */
static size_t utf8_cut(const char *s, size_t max)
{
	size_t n = strlen(s);

	if (n <= max)
		return n;
	n = max;
	while (n && ((unsigned char)s[n] & 0xc0) == 0x80)
		n--;
	return n;
}

/*
 * Consul names the session "Consul lock for 'CHILD' at 'PREFIX'". Names
 * hold 63 bytes here, so the command is shortened first: the key is what
 * tells one session from another in `shmlock sessions`.
 */
#define NAME_FIXED (sizeof("shmlock lock for '' at ''") - 1)

static char *default_name(const char *key, char **child)
{
	char cmd[NAME_MAX_BYTES + 1] = "", *name;
	size_t room, len = 0, i, k;

	k = utf8_cut(key, NAME_MAX_BYTES);
	room = NAME_MAX_BYTES > k + NAME_FIXED ? NAME_MAX_BYTES - k - NAME_FIXED : 0;
	for (i = 0; child[i] && len < room; i++) {
		size_t n = utf8_cut(child[i], room - len - (i > 0));

		if (i)
			cmd[len++] = ' ';
		memcpy(cmd + len, child[i], n);
		len += n;
		cmd[len] = '\0';
	}
	if (asprintf(&name, "shmlock lock for '%s' at '%.*s'", cmd, (int)k, key) < 0)
		return NULL;
	name[utf8_cut(name, NAME_MAX_BYTES)] = '\0';
	return name;
}

static int check_ms(const char *flag, int64_t ns, int64_t max_ms, int64_t *ms)
{
	*ms = duration_ms(ns);
	if (*ms > max_ms) {
		char buf[32];

		duration_format((uint64_t)max_ms, buf, sizeof(buf));
		return usage_error("lock", "-%s must be at most %s", flag, buf);
	}
	return 0;
}

/*
 * consul lock's API options: where Consul's HTTP API is and how to reach it.
 * A local broker has no such address, token or datacenter, but scripts
 * written for consul lock pass them: accept them, and say in -verbose that
 * they do not apply. The CONSUL_HTTP_* variables are not read either.
 */
static const char *const consul_api_flags[] = {
	"http-addr",   "token",	     "token-file",	"datacenter", "ca-file",   "ca-path",
	"client-cert", "client-key", "tls-server-name", "namespace",  "partition", NULL,
};
#define CONSUL_API_FLAGS 11
_Static_assert(sizeof(consul_api_flags) / sizeof(consul_api_flags[0]) == CONSUL_API_FLAGS + 1,
	       "CONSUL_API_FLAGS counts consul_api_flags");

static void say_consul_flags_ignored(const struct lock_opts *o, const struct flag *api, bool stale)
{
	size_t i;

	for (i = 0; api[i].name; i++)
		if (api[i].set)
			verbose(o,
				"-%s is consul lock's; it does not apply to a local broker "
				"(ignored)",
				api[i].name);
	if (stale)
		verbose(o,
			"-stale is consul lock's; it does not apply to a local broker (ignored)");
	for (i = 0; environ[i]; i++)
		if (!strncmp(environ[i], "CONSUL_HTTP_", 12)) {
			size_t n = strcspn(environ[i], "=");

			verbose(o, "%.*s does not apply to a local broker (ignored)", (int)n,
				environ[i]);
		}
}

int cmd_lock(int argc, char **argv)
{
	struct lock_opts o = { .shell = true, .lock_delay_ms = -1 };
	bool stale = false;
	long long limit = 1, monitor_retry = 3;
	int64_t timeout = 0, ttl = 0, lease = 0, lock_delay = 0, grace = 5000000000LL, ms;
	struct flag flags[] = {
		{ "child-exit-code", FLAG_BOOL, &o.child_exit_code, false },
		{ "kill-grace", FLAG_DURATION, &grace, false },
		{ "lease", FLAG_DURATION, &lease, false },
		{ "lock-delay", FLAG_DURATION, &lock_delay, false },
		{ "monitor-retry", FLAG_INT, &monitor_retry, false },
		{ "n", FLAG_INT, &limit, false },
		{ "name", FLAG_STRING, &o.name, false },
		{ "pass-stdin", FLAG_BOOL, &o.pass_stdin, false },
		{ "shell", FLAG_BOOL, &o.shell, false },
		{ "socket", FLAG_STRING, &o.socket, false },
		{ "timeout", FLAG_DURATION, &timeout, false },
		{ "try", FLAG_DURATION, &timeout, false },
		{ "ttl", FLAG_DURATION, &ttl, false },
		{ "value", FLAG_STRING, &o.value, false },
		{ "verbose", FLAG_BOOL, &o.verbose, false },
		{ "stale", FLAG_BOOL, &stale, false },
		CLI_FLAGS_END,
	};
	/* Room for the Consul API options after the table's own end. */
	struct flag all[sizeof(flags) / sizeof(flags[0]) + CONSUL_API_FLAGS];
	const char *ignored[CONSUL_API_FLAGS];
	size_t nown = sizeof(flags) / sizeof(flags[0]) - 1, i;
	char *name = NULL;
	int nargs, r;

	memcpy(all, flags, nown * sizeof(flags[0]));
	for (i = 0; i < CONSUL_API_FLAGS; i++)
		all[nown + i] =
			(struct flag){ consul_api_flags[i], FLAG_STRING, &ignored[i], false };
	all[nown + CONSUL_API_FLAGS] = flags[nown];
	r = args_parse("lock", all, argc, argv, ARGS_STOP_AT_ARG, &nargs);
	if (r) {
		if (r > 0)
			help_print("lock", stdout);
		return CLI_PARSE_EXIT(r);
	}
	if (nargs < 2)
		return usage_error("lock", nargs ? "missing the command to run" : "missing KEY");
	o.key = argv[1];
	o.child = argv + 2;
	argv[1 + nargs] = NULL;
	if (key_usage_error("lock", o.key))
		return EXIT_USAGE;
	if (limit < 1 || limit > UINT32_MAX)
		return usage_error("lock", "-n: the holder limit must be from 1 to %u (got %lld)",
				   UINT32_MAX, limit);
	o.limit = (uint32_t)limit;
	if (monitor_retry < 0 || monitor_retry > UINT32_MAX)
		return usage_error("lock", "-monitor-retry must be >= 0 (got %lld)", monitor_retry);
	o.monitor_retry = (uint32_t)monitor_retry;
	/* Consul's -timeout=0 means no limit: keep that reading. */
	o.timeout_ms = timeout ? duration_ms(timeout) : -1;
	if (check_ms("ttl", ttl, UINT32_MAX, &ms))
		return EXIT_USAGE;
	o.ttl_ms = (uint32_t)ms;
	if (check_ms("lease", lease, UINT32_MAX, &ms))
		return EXIT_USAGE;
	o.lease_ms = (uint32_t)ms;
	if (args_flag(all, "lock-delay")->set) {
		if (check_ms("lock-delay", lock_delay, LOCAL_LOCK_DELAY_MAX_MS, &ms))
			return EXIT_USAGE;
		o.lock_delay_ms = (int32_t)ms;
	}
	o.kill_grace_ms = duration_ms(grace);
	if (o.name) {
		name = strndup(o.name, utf8_cut(o.name, NAME_MAX_BYTES));
	} else {
		name = default_name(o.key, o.child);
	}
	if (!name) {
		errorf("out of memory");
		return EXIT_FAIL;
	}
	o.name = name;
	say_consul_flags_ignored(&o, all + nown, stale);
	r = lock_run(&o);
	free(name);
	return r;
}
