// SPDX-License-Identifier: MIT
/*
 * libFuzzer target: the command line of shmlock(1). The input, split on NUL
 * bytes, is an argument vector for args_parse() under a flag table of each
 * mode (the one of `lock`, which stops at the first argument, and one of
 * the inspection commands, which take flags anywhere); the whole input is
 * also a duration for duration_parse(). Whatever they accept must be
 * usable as is: positional arguments taken from the vector in order,
 * durations never negative, and a duration printed by duration_format()
 * must read back to the same value (the CLI prints the limits it refuses
 * in that form and users paste them back).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_ARGS 64

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	/* The parsers explain every refusal on stderr: millions of lines per
	 * run. glibc lets a program reassign stderr; libFuzzer took its own
	 * copy at start-up and the sanitizers write to fd 2, so crash reports
	 * still show. */
	FILE *null = fopen("/dev/null", "w");

	(void)argc;
	(void)argv;
	if (null)
		stderr = null;
	return 0;
}

/* @s parses; a duration printed from it must parse back to the same value. */
static void check_duration(const char *s)
{
	const char *why = NULL;
	int64_t ns, back, ms;
	char buf[64];

	if (duration_parse(s, &ns, &why)) {
		if (!why)
			abort();
		return;
	}
	if (*s != '-' && ns < 0)
		abort();
	ms = duration_ms(ns);
	if (ms < 0 || (ns > 0 && ms == 0))
		abort();
	if (ms > INT64_MAX / 1000000)
		return; /* its nanoseconds do not fit: nothing to read back */
	duration_format((uint64_t)ms, buf, sizeof(buf));
	if (!memchr(buf, '\0', sizeof(buf)) || duration_parse(buf, &back, &why) ||
	    back != ms * 1000000)
		abort();
}

/* A private copy of the arguments: args_parse() writes into them. */
static int split(const uint8_t *data, size_t size, char *buf, char **argv, const char *cmd)
{
	int argc = 0;
	size_t i = 0;

	memcpy(buf, data, size);
	buf[size] = '\0';
	argv[argc++] = (char *)cmd;
	while (i <= size && argc < MAX_ARGS) {
		argv[argc++] = buf + i;
		i += strlen(buf + i) + 1;
	}
	argv[argc] = NULL;
	return argc;
}

/* Positional arguments must be entries of the original vector, in order. */
static void check_positional(char **orig, int argc, char **argv, int nargs, bool tail)
{
	int i, j = 1;

	if (nargs < 0 || nargs > argc - 1)
		abort();
	for (i = 1; i <= nargs; i++) {
		while (j < argc && orig[j] != argv[i])
			j++;
		if (j++ == argc)
			abort();
	}
	/* Stopping at the first argument leaves the rest untouched (lock KEY
	 * CHILD...: the child's own flags are not ours). */
	if (tail && nargs && argv[nargs] != orig[argc - 1])
		abort();
}

static void parse_as(const char *cmd, struct flag *flags, enum args_mode mode, const uint8_t *data,
		     size_t size)
{
	char *buf = malloc(size + 1), *argv[MAX_ARGS + 1], *orig[MAX_ARGS + 1];
	int argc, nargs = -1, r;
	struct flag *f;

	if (!buf)
		abort();
	argc = split(data, size, buf, argv, cmd);
	memcpy(orig, argv, sizeof(argv));
	r = args_parse(cmd, flags, argc, argv, mode, &nargs);
	if (r != 0 && r != 1 && r != -EINVAL)
		abort();
	if (r == 0)
		check_positional(orig, argc, argv, nargs, mode == ARGS_STOP_AT_ARG);
	for (f = flags; f->name; f++)
		if (f->set && f->type == FLAG_DURATION && *(int64_t *)f->val < 0)
			abort();
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* cmd_lock()'s table: every flag type, flags stop at the key. */
	struct {
		bool b[4];
		long long n[2];
		int64_t d[6];
		const char *s[3];
	} lv;
	struct flag lock_flags[] = {
		{ "child-exit-code", FLAG_BOOL, &lv.b[0], false },
		{ "kill-grace", FLAG_DURATION, &lv.d[0], false },
		{ "lease", FLAG_DURATION, &lv.d[1], false },
		{ "lock-delay", FLAG_DURATION, &lv.d[2], false },
		{ "monitor-retry", FLAG_INT, &lv.n[0], false },
		{ "n", FLAG_INT, &lv.n[1], false },
		{ "name", FLAG_STRING, &lv.s[0], false },
		{ "pass-stdin", FLAG_BOOL, &lv.b[1], false },
		{ "shell", FLAG_BOOL, &lv.b[2], false },
		{ "socket", FLAG_STRING, &lv.s[1], false },
		{ "timeout", FLAG_DURATION, &lv.d[3], false },
		{ "try", FLAG_DURATION, &lv.d[4], false },
		{ "ttl", FLAG_DURATION, &lv.d[5], false },
		{ "value", FLAG_STRING, &lv.s[2], false },
		{ "verbose", FLAG_BOOL, &lv.b[3], false },
		CLI_FLAGS_END,
	};
	/* The inspection and administration commands': flags anywhere. */
	struct cli_common c = { NULL, false };
	const char *holder = NULL;
	int64_t timeout = 0;
	bool force = false;
	struct flag admin_flags[] = {
		CLI_FLAG_JSON(&c),
		CLI_FLAG_SOCKET(&c),
		{ "force", FLAG_BOOL, &force, false },
		{ "session", FLAG_STRING, &holder, false },
		{ "timeout", FLAG_DURATION, &timeout, false },
		CLI_FLAGS_END,
	};
	char *s;

	memset(&lv, 0, sizeof(lv));
	parse_as("lock", lock_flags, ARGS_STOP_AT_ARG, data, size);
	parse_as("release", admin_flags, ARGS_INTERSPERSED, data, size);
	s = malloc(size + 1);
	if (!s)
		abort();
	memcpy(s, data, size);
	s[size] = '\0';
	check_duration(s);
	free(s);
	return 0;
}
