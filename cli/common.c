// SPDX-License-Identifier: MIT
/* What the inspection and administration commands share: flags, session. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cli.h"
#include "client.h"

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

bool broker_missing(int err)
{
	switch (err) {
	case -LOCAL_EBROKER:
	case -LOCAL_ENOSOCKET:
	case -LOCAL_EREFUSED:
	case -LOCAL_ENOTSOCK:
	case -LOCAL_EACCESS:
	case -LOCAL_EUNSAFE:
		return true;
	default:
		return false;
	}
}

const char *cli_strerror(int err)
{
	static __thread char buf[sizeof(struct lookup_report) + 64];
	char tried[sizeof(struct lookup_report)];

	if (!broker_missing(err) || broker_lookup_text(tried, sizeof(tried)))
		return local_strerror(err);
	snprintf(buf, sizeof(buf), "%s (%s)", local_strerror(err), tried);
	return buf;
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
		errorf("cannot open a session with the broker: %s", cli_strerror(err));
	return err;
}

int exit_for(int err)
{
	if (broker_missing(err) || err == -LOCAL_EDENIED || err == -LOCAL_EVERSION)
		return EXIT_UNAVAILABLE;
	return EXIT_FAIL;
}

void *grow_array(void *v, size_t n, size_t *cap, size_t size, size_t first)
{
	size_t more = *cap ? 2 * *cap : first;

	if (n < *cap)
		return v;
	v = realloc(v, more * size);
	if (v)
		*cap = more;
	return v;
}
