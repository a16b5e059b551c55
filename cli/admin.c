// SPDX-License-Identifier: MIT
/*
 * Operator actions: release -force, session destroy, reset. The broker does
 * each itself, without a session of ours: they work with every table full.
 */
#include <errno.h>
#include <string.h>

#include "cli.h"

int cmd_release(int argc, char **argv)
{
	struct cli_common c = { 0 };
	const char *holder = NULL;
	bool force = false;
	struct flag flags[] = { CLI_FLAG_SOCKET(&c),
				{ "force", FLAG_BOOL, &force, false },
				{ "session", FLAG_STRING, &holder, false },
				CLI_FLAGS_END };
	int nargs, r, err;

	r = cli_parse("release", flags, argc, argv, &nargs);
	if (r)
		return CLI_PARSE_EXIT(r);
	if (nargs > 1)
		return usage_error("release", "unexpected argument \"%s\"", argv[2]);
	if (!nargs)
		return usage_error("release", "missing KEY");
	/* A holder releases its own keys itself; this takes them from others. */
	if (!force)
		return usage_error("release", "taking %s from its holders needs -force", argv[1]);
	if (holder && strlen(holder) != LOCAL_SESSION_ID_LEN)
		return usage_error("release",
				   "-session: \"%s\" is not a session id (%d hex "
				   "characters)",
				   holder, LOCAL_SESSION_ID_LEN);
	err = local_admin_force_release(c.socket, argv[1], holder);
	if (err == -LOCAL_ECORRUPT)
		errorf("%s is quarantined as damaged; 'shmlock reset %s' drops its holds and "
		       "brings it back",
		       argv[1], argv[1]);
	else if (err == -LOCAL_ENOTHELD)
		errorf("%s is not held%s%s", argv[1], holder ? " by session " : "",
		       holder ? holder : "");
	else if (err == -LOCAL_ESESSION && holder)
		errorf("no session %s", holder);
	else if (err)
		errorf("cannot release %s: %s", argv[1], cli_strerror(err));
	return err ? exit_for(err) : EXIT_OK;
}

int cmd_session(int argc, char **argv)
{
	struct cli_common c = { 0 };
	struct flag flags[] = { CLI_FLAG_SOCKET(&c), CLI_FLAGS_END };
	int nargs, r, err;

	r = cli_parse("session", flags, argc, argv, &nargs);
	if (r)
		return CLI_PARSE_EXIT(r);
	if (!nargs)
		return usage_error("session", "missing subcommand (destroy)");
	if (strcmp(argv[1], "destroy"))
		return usage_error("session", "unknown subcommand \"%s\"", argv[1]);
	if (nargs < 2)
		return usage_error("session", "missing session ID");
	if (nargs > 2)
		return usage_error("session", "unexpected argument \"%s\"", argv[3]);
	if (strlen(argv[2]) != LOCAL_SESSION_ID_LEN)
		return usage_error("session", "\"%s\" is not a session id (%d hex characters)",
				   argv[2], LOCAL_SESSION_ID_LEN);
	err = local_admin_session_destroy(c.socket, argv[2]);
	if (err == -LOCAL_ESESSION)
		errorf("no session %s", argv[2]);
	else if (err)
		errorf("cannot destroy session %s: %s", argv[2], cli_strerror(err));
	return err ? exit_for(err) : EXIT_OK;
}

int cmd_reset(int argc, char **argv)
{
	struct cli_common c = { 0 };
	struct flag flags[] = { CLI_FLAG_SOCKET(&c), CLI_FLAGS_END };
	int nargs, r, err;

	r = cli_parse("reset", flags, argc, argv, &nargs);
	if (r)
		return CLI_PARSE_EXIT(r);
	if (!nargs)
		return usage_error("reset", "missing KEY");
	if (nargs > 1)
		return usage_error("reset", "unexpected argument \"%s\"", argv[2]);
	err = local_admin_reset(c.socket, argv[1]);
	if (err == -ENOENT)
		errorf("%s is not quarantined (see 'shmlock keys -quarantined')", argv[1]);
	else if (err == -ETIMEDOUT)
		errorf("cannot reset %s now: a live process holds its lock word or the key "
		       "table's (the broker's log names it); try again",
		       argv[1]);
	else if (err)
		errorf("cannot reset %s: %s", argv[1], cli_strerror(err));
	return err ? exit_for(err) : EXIT_OK;
}
