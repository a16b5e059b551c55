// SPDX-License-Identifier: MIT
/* shmlock: command dispatch. See shmlock(1). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "client.h"

/* How long a lookup waits in silence before it says what it waits for. */
#define WAIT_NOTICE_MS 1000

static const struct command {
	const char *name;
	int (*run)(int argc, char **argv);
} commands[] = {
	{ "lock", cmd_lock },	      { "status", cmd_status },	  { "keys", cmd_keys },
	{ "info", cmd_info },	      { "leader", cmd_leader },	  { "watch", cmd_watch },
	{ "sessions", cmd_sessions }, { "release", cmd_release }, { "session", cmd_session },
	{ "reset", cmd_reset },
};

static bool is_any(const char *s, const char *const *names)
{
	for (; *names; names++)
		if (!strcmp(s, *names))
			return true;
	return false;
}

static int cmd_help(int argc, char **argv)
{
	if (argc > 2)
		return usage_error("help", "too many arguments");
	if (help_print(argc == 2 ? argv[1] : NULL, stdout)) {
		errorf("unknown command \"%s\"; run 'shmlock help' for the list", argv[1]);
		return EXIT_USAGE;
	}
	return EXIT_OK;
}

static int cmd_version(int argc, char **argv)
{
	(void)argv;
	if (argc > 1)
		return usage_error("version", "too many arguments");
	printf("shmlock %s (liblocal %d.%d)\n", SHMLOCK_VERSION, LOCAL_VERSION_MAJOR,
	       LOCAL_VERSION_MINOR);
	return EXIT_OK;
}

/* A person at a terminal is told what the silence is: nothing answers at
 * the broker's socket yet, and how long the CLI goes on trying. */
static void waiting_notice(const char *paths, int wait_ms)
{
	int tenths = (wait_ms + 50) / 100;

	errorf("waiting for a broker at %s (up to %d.%d s in all; is shmlockd running? "
	       "SHMLOCK_BROKER_WAIT_MS sets the wait)",
	       paths, tenths / 10, tenths % 10);
}

int main(int argc, char **argv)
{
	static const char *const helps[] = { "help", "-h", "-help", "--help", NULL };
	static const char *const versions[] = { "version", "-version", "--version", NULL };
	size_t i;

	if (argc < 2) {
		help_print(NULL, stderr);
		return EXIT_USAGE;
	}
	if (isatty(STDERR_FILENO))
		broker_wait_notice(waiting_notice, WAIT_NOTICE_MS);
	if (is_any(argv[1], helps))
		return cmd_help(argc - 1, argv + 1);
	if (is_any(argv[1], versions))
		return cmd_version(argc - 1, argv + 1);
	for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(commands[i].name, argv[1]))
			return commands[i].run(argc - 1, argv + 1);
	errorf("unknown command \"%s\"; run 'shmlock help' for the list", argv[1]);
	return EXIT_USAGE;
}
