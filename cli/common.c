// SPDX-License-Identifier: MIT
/* What the inspection and administration commands share: flags, session. */
#include <time.h>

#include "cli.h"

uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int cli_parse(const char *cmd, struct flag *flags, int argc, char **argv, int *nargs)
{
	int r = args_parse(cmd, flags, argc, argv, ARGS_INTERSPERSED, nargs);

	if (r == 1)
		help_print(cmd, stdout);
	return r;
}

int cli_open(const struct cli_common *c, const char *name, local_session **out)
{
	struct local_session_opts o;
	int err;

	local_session_opts_init(&o);
	o.socket_path = c->socket;
	o.name = name;
	err = local_session_open(&o, out);
	if (err)
		errorf("cannot open a session with the broker%s%s: %s", c->socket ? " at " : "",
		       c->socket ? c->socket : "", local_strerror(err));
	return err;
}

int exit_for(int err)
{
	switch (err) {
	case -LOCAL_EBROKER:
	case -LOCAL_EDENIED:
	case -LOCAL_EVERSION:
		return EXIT_UNAVAILABLE;
	default:
		return EXIT_FAIL;
	}
}
