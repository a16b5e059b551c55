// SPDX-License-Identifier: MIT
/* Who may open sessions: the socket's group and --allow-uid / --allow-gid,
 * checked with a child that drops to an unprivileged user. */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker_fixture.h"
#include "harness.h"

#define NOBODY 65534u

/* Open a session as uid/gid NOBODY; the exit status is -(the result). */
static int open_as_nobody(const struct broker_proc *b)
{
	struct child c = { .rd = -1, .wr = -1 };
	int status;

	c.pid = fork();
	if (c.pid == 0) {
		struct local_session_opts o;
		local_session *s;
		int r;

		if (setgroups(0, NULL) || setgid(NOBODY) || setuid(NOBODY))
			_exit(99);
		local_session_opts_init(&o);
		o.socket_path = b->sock;
		o.broker_wait_ms = 0;
		r = local_session_open(&o, &s);
		if (!r)
			r = local_lock(
				s, "sec/k",
				&(struct local_acquire_opts){
					.sz = sizeof(struct local_acquire_opts), .timeout_ms = 0 },
				NULL);
		_exit(r == 0		    ? 0
		      : r == -LOCAL_EDENIED ? 1
		      : r == -LOCAL_EACCESS ? 4
		      : r == -LOCAL_EBROKER ? 2
					    : 3);
	}
	status = child_wait(&c, 10000);
	CHECK(WIFEXITED(status));
	CHECK(WEXITSTATUS(status) != 99);
	return WEXITSTATUS(status);
}

static void start_open_to_nobody(struct broker_proc *b, const char *const *flags)
{
	broker_start(b, flags);
	/* The fixture's directory is private; the socket's group decides. */
	CHECK_OK(chmod(b->dir, 0755));
}

TEST(security, socket_group_lets_its_members_in, 20)
{
	static const char *const flags[] = { "--socket-group", "65534", NULL };
	struct broker_proc b;
	struct stat st;

	start_open_to_nobody(&b, flags);
	CHECK_OK(stat(b.sock, &st));
	CHECK_EQ(st.st_mode & 0777, 0660);
	CHECK_EQ(st.st_gid, NOBODY);
	CHECK_EQ(open_as_nobody(&b), 0);
	broker_stop(&b);
}

TEST(security, other_users_cannot_connect_without_the_group, 20)
{
	struct broker_proc b;

	start_open_to_nobody(&b, NULL);
	/* connect: EACCES -> LOCAL_EACCESS (the socket's mode; the broker
	 * itself never heard of us) */
	CHECK_EQ(open_as_nobody(&b), 4);
	broker_stop(&b);
}

TEST(security, allow_lists_narrow_who_may_open_sessions, 30)
{
	static const char *const uid_only[] = { "--socket-group", "65534", "--allow-uid", "4242",
						NULL };
	static const char *const by_gid[] = { "--socket-group", "65534", "--allow-uid", "4242",
					      "--allow-gid",	"65534", NULL };
	struct broker_proc b;
	local_session *root;

	start_open_to_nobody(&b, uid_only);
	CHECK_EQ(open_as_nobody(&b), 1);       /* refused by the broker */
	root = open_session(&b, "root", 0, 0); /* root is always allowed */
	CHECK_OK(local_lock(root, "sec/root", NULL, NULL));
	broker_stop(&b);

	start_open_to_nobody(&b, by_gid);
	CHECK_EQ(open_as_nobody(&b), 0);
	broker_stop(&b);
}

TEST(security, bad_access_flags_are_usage_errors, 20)
{
	const char *const cases[][2] = { { "--allow-uid", "12x" },
					 { "--allow-gid", "1,,2" },
					 { "--socket-group", "no-such-group-here" } };
	struct broker_proc b;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		broker_names(&b, "flags");
		CHECK_EQ(broker_refuses(&b, (const char *const[]){ cases[i][0], cases[i][1], NULL },
					5000),
			 1);
		broker_stop(&b);
	}
}

/* Child: as NOBODY, refused operator requests until killed. */
static void refused_flood(void *p, int in, int out)
{
	const struct broker_proc *b = p;
	unsigned n;

	(void)in;
	if (setgroups(0, NULL) || setgid(NOBODY) || setuid(NOBODY))
		_exit(99);
	for (n = 1;; n++) {
		CHECK_RC(local_admin_force_release(b->sock, "audit/k", NULL), -LOCAL_EDENIED);
		if (n == 300)
			say(out, "flooding");
	}
}

/*
 * A peer refused by the allow lists can send operator requests as fast as
 * it likes; their lines are limited. The lines of what an admitted
 * operator (root here) did are the audit trail and are never left out,
 * however many refusals share the moment.
 */
TEST(security, a_refused_flood_never_hides_an_operator_action, 60)
{
	static const char *const flags[] = { "--socket-group", "65534",	 "--allow-uid", "4242",
					     "--log-level",    "notice", NULL };
	struct broker_proc b;
	local_session *root;
	struct child flood;
	unsigned i;

	start_open_to_nobody(&b, flags);
	root = open_session(&b, "root", 0, 0);
	CHECK_OK(local_lock(root, "audit/k", NULL, NULL));
	child_spawn(&flood, refused_flood, &b);
	child_expect(&flood, "flooding", 10000);
	CHECK_OK(local_admin_force_release(b.sock, "audit/k", NULL));
	for (i = 1; i < 20; i++)
		CHECK_RC(local_admin_force_release(b.sock, "audit/k", NULL), -LOCAL_ENOTHELD);
	child_kill(&flood);
	child_wait(&flood, 5000);
	CHECK(broker_log_count(&b, "from uid 65534") > 0); /* the flood was seen */
	CHECK_EQ(broker_log_count(&b, "to force-release audit/k from uid 0,"), 20);
	CHECK_EQ(broker_log_count(&b, "operator released audit/k"), 1);
	broker_stop(&b);
}
