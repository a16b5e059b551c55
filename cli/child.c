// SPDX-License-Identifier: MIT
/* The child's command line and environment. */
#include <stdlib.h>
#include <string.h>

#include "lock.h"

extern char **environ;

char **child_argv(const struct lock_opts *o)
{
	const char *shell = getenv("SHELL");
	size_t i, len = 1;
	char **argv, *cmd;

	if (!o->shell)
		return o->child;
	if (!shell || !*shell)
		shell = "/bin/sh";
	for (i = 0; o->child[i]; i++)
		len += strlen(o->child[i]) + 1;
	argv = calloc(4, sizeof(*argv));
	cmd = calloc(1, len);
	if (!argv || !cmd) {
		free(argv);
		free(cmd);
		return NULL;
	}
	/* Joined with spaces, as consul lock does: "CHILD..." is shell text. */
	for (i = 0; o->child[i]; i++) {
		if (i)
			strcat(cmd, " ");
		strcat(cmd, o->child[i]);
	}
	argv[0] = (char *)shell;
	argv[1] = (char *)"-c";
	argv[2] = cmd;
	return argv;
}

void child_argv_free(const struct lock_opts *o, char **argv)
{
	if (argv && argv != o->child) {
		free(argv[2]);
		free(argv);
	}
}

static bool is_ours(const char *e)
{
	static const char *const ours[] = { "SHMLOCK_HELD=",	 "SHMLOCK_KEY=",
					    "SHMLOCK_TOKEN=",	 "SHMLOCK_SESSION=",
					    "CONSUL_LOCK_HELD=", NULL };
	size_t i;

	for (i = 0; ours[i]; i++)
		if (!strncmp(e, ours[i], strlen(ours[i])))
			return true;
	return false;
}

/* Our environment, less stale SHMLOCK_* variables, plus the hold's. With
 * -socket, SHMLOCK_SOCKET too, so that shmlock run by the child finds the
 * same broker. The first *kept entries are borrowed from environ. */
char **child_env(const struct lock_opts *o, uint64_t token, const char *session_id, size_t *kept)
{
	size_t n = 0, i, k = 0;
	char **env;
	int bad = 0;

	while (environ[n])
		n++;
	env = calloc(n + 7, sizeof(*env));
	if (!env)
		return NULL;
	for (i = 0; i < n; i++)
		if (!is_ours(environ[i]) &&
		    !(o->socket && !strncmp(environ[i], "SHMLOCK_SOCKET=", 15)))
			env[k++] = environ[i];
	*kept = k;
	bad |= asprintf(&env[k++], "SHMLOCK_HELD=true") < 0;
	/* What `consul lock` promises its child, so that scripts written for
	 * it run unchanged. */
	bad |= asprintf(&env[k++], "CONSUL_LOCK_HELD=true") < 0;
	bad |= asprintf(&env[k++], "SHMLOCK_KEY=%s", o->key) < 0;
	bad |= asprintf(&env[k++], "SHMLOCK_TOKEN=%llu", (unsigned long long)token) < 0;
	bad |= asprintf(&env[k++], "SHMLOCK_SESSION=%s", session_id) < 0;
	if (o->socket)
		bad |= asprintf(&env[k++], "SHMLOCK_SOCKET=%s", o->socket) < 0;
	if (bad) {
		/* asprintf() leaves its pointer undefined on failure. */
		for (i = *kept; i < k; i++)
			env[i] = NULL;
		free(env);
		return NULL;
	}
	return env;
}

void child_env_free(char **env, size_t kept)
{
	size_t i;

	if (!env)
		return;
	for (i = kept; env[i]; i++)
		free(env[i]);
	free(env);
}
