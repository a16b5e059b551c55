// SPDX-License-Identifier: MIT
/*
 * A hostile but admitted client against the session table: it maps the
 * segment read-write, so it can write any session slot, mark free slots
 * live, or rewrite the process a slot says opened it. The broker decides who
 * owns a session only from the kernel (SO_PEERCRED, pidfds, /proc) and its
 * own table, so none of that fills the table for good, survives a restart as
 * a live session, or binds the attacker's process to someone else's session.
 * Also here: a session whose process the broker cannot watch is never
 * opened (a holder nobody watches would keep its holds after death).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker_fixture.h"
#include "client.h"
#include "harness.h"
#include "invariants.h"
#include "procinfo.h"

#define MAX_SESSIONS 16
static const char *const small_table[] = { "--max-sessions", "16", NULL };
/* The same, with the adoption's NOTICE line in the log. */
static const char *const small_table_noticed[] = { "--max-sessions", "16", "--log-level", "notice",
						   NULL };

/*
 * Mark every free slot ACTIVE as a ghost of @pid (start time @start, uid 0):
 * what a client that writes the table leaves there. Returns how many.
 */
static unsigned forge_ghosts(local_session *s, pid_t pid, uint64_t start)
{
	unsigned i, n = 0;

	for (i = 0; i < s->seg->caps.max_sessions; i++) {
		struct seg_session *g = &s->seg->sessions[i];
		uint64_t sg = atomic_load(&g->state_gen);

		if (SESS_STATE(sg) != SESS_FREE)
			continue;
		memset(g->id, 0x5a, sizeof(g->id));
		g->id[0] = (uint8_t)i;
		snprintf(g->name, sizeof(g->name), "ghost");
		g->pid = pid;
		g->creator_pid = pid;
		g->uid = 0;
		g->start_time = start;
		g->ttl_ms = 0;
		g->lock_delay_ms = 0;
		g->behavior = LOCAL_BEHAVIOR_RELEASE;
		g->flags = 0;
		atomic_store(&g->state_gen, SESS_PACK(SESS_ACTIVE, SESS_GEN(sg) + 1));
		n++;
	}
	return n;
}

/* Does a new session open now? (Closed again at once.) */
static bool a_session_opens(const struct broker_proc *b)
{
	LOCAL_OPTS(local_session_opts, o, .name = "probe");
	local_session *s = NULL;

	setenv("SHMLOCK_SOCKET", b->sock, 1);
	if (local_session_open(&o, &s))
		return false;
	local_session_close(s);
	return true;
}

/*
 * Free slots marked live by a client (pid 1, start time 0) fill the table
 * until the broker notices no session of its own is there: it frees them
 * within seconds, and then sessions open again.
 */
TEST(hostile_sessions, ghost_slots_are_reclaimed_by_the_running_broker, 30)
{
	struct broker_proc b;
	local_session *obs;

	broker_start(&b, small_table);
	obs = open_session(&b, "obs", 0, 0);
	CHECK_OK(local_lock(obs, "ghost/k", NULL, NULL));
	CHECK_EQ(forge_ghosts(obs, 1, 0), MAX_SESSIONS - 1);
	CHECK_EQ(live_sessions(obs), MAX_SESSIONS);
	CHECK(WAIT_FOR(a_session_opens(&b), 10000));
	CHECK(WAIT_SESSIONS(obs, 1, 10000));
	/* The real session was not among them. */
	CHECK_OK(local_release(obs, "ghost/k"));
	CHECK_EQ(segment_violations(obs), 0);
	broker_stop(&b);
}

/* A live process of ours that does not map the segment: a fresh exec. */
static pid_t bystander(void)
{
	pid_t pid = fork();

	CHECK(pid >= 0);
	if (pid == 0) {
		execl("/bin/sleep", "sleep", "60", (char *)NULL);
		_exit(127);
	}
	/* Exec'd once its command line says so. */
	CHECK(WAIT_FOR(({
			       char path[64], cmd[16] = "";
			       FILE *f;
			       snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
			       f = fopen(path, "re");
			       if (f) {
				       if (!fgets(cmd, sizeof(cmd), f))
					       cmd[0] = '\0';
				       fclose(f);
			       }
			       !strcmp(cmd, "sleep");
		       }),
		       5000));
	return pid;
}

/*
 * Ghosts written while the broker is down (here: stopped, then killed) are
 * not re-adopted as live sessions by the next broker, neither with a start
 * time of 0 nor with the real identity (pid, start time, uid) of a live
 * process that does not map the segment.
 */
TEST(hostile_sessions, ghost_slots_are_not_adopted_at_restart, 30)
{
	struct broker_proc b;
	local_session *obs;
	uint64_t by_start = 0;
	pid_t by = bystander();
	unsigned n;

	broker_start(&b, small_table_noticed);
	obs = open_session(&b, "obs", 0, 0);
	CHECK_OK(local_lock(obs, "ghost/held", NULL, NULL));
	CHECK_OK(proc_start_time(by, &by_start));
	kill(b.pid, SIGSTOP); /* its periodic sweep must not get there first */
	n = forge_ghosts(obs, 1, 0);
	CHECK_EQ(n, MAX_SESSIONS - 1);
	/* Half of them naming the bystander, as the kernel knows it. */
	for (n = 0; n < MAX_SESSIONS; n += 2)
		if (!strcmp(obs->seg->sessions[n].name, "ghost")) {
			obs->seg->sessions[n].pid = by;
			obs->seg->sessions[n].creator_pid = by;
			obs->seg->sessions[n].uid = (uint32_t)geteuid();
			obs->seg->sessions[n].start_time = by_start;
		}
	broker_signal_wait(&b, SIGKILL);
	broker_restart(&b);
	/* What it adopted, in its own words (a periodic sweep later would
	 * free ghosts too, but not say they were adopted). */
	CHECK(WAIT_FOR(broker_log_has(&b, "re-adopted "), 5000));
	CHECK(broker_log_has(&b, "re-adopted 1 live sessions"));
	CHECK_EQ(live_sessions(obs), 1);
	/* obs was adopted and still holds its key. */
	{
		LOCAL_OPTS(local_key_info, ki);

		CHECK_OK(local_info(obs, "ghost/held", &ki));
		CHECK_EQ(ki.holders, 1);
	}
	CHECK_OK(local_release(obs, "ghost/held"));
	CHECK_EQ(segment_violations(obs), 0);
	kill(by, SIGKILL);
	pid_wait(by, 5000);
	broker_stop(&b);
}

/* Child: open a session, take the key, report the session's slot, stay. */
static void victim(void *p, int in, int out)
{
	const struct broker_proc *b = p;
	local_session *s = open_session(b, "victim", 0, 0);
	char buf[8];

	CHECK_OK(local_lock(s, "bind/victim", NULL, NULL));
	say(out, "slot %u", s->who.slot);
	hear(in, buf, sizeof(buf));
}

/*
 * MSG_BIND is judged by who the kernel says asks (SO_PEERCRED) against the
 * process that opened the session as the broker recorded it, not against
 * the slot's creator_pid, which the attacker rewrote to its own pid: its
 * child is not bound to the victim's session, and the victim's death ends
 * that session.
 */
TEST(hostile_sessions, bind_trusts_the_kernel_not_the_slot, 30)
{
	struct broker_proc b;
	local_session *att;
	struct child v;
	char line[64];
	unsigned slot;
	pid_t kid;

	CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
	broker_start(&b, NULL);
	att = open_session(&b, "attacker", 0, 0);
	child_spawn(&v, victim, &b);
	CHECK_OK(child_read(&v, line, sizeof(line), 5000));
	CHECK(sscanf(line, "slot %u", &slot) == 1 && slot < att->seg->caps.max_sessions);
	/* The attacker names itself the victim's creator and asks, with the
	 * victim's id (readable in the segment), to bind its own child. */
	att->seg->sessions[slot].creator_pid = getpid();
	memcpy(att->raw_id, att->seg->sessions[slot].id, sizeof(att->raw_id));
	kid = fork();
	CHECK(kid >= 0);
	if (kid == 0) {
		for (;;)
			pause();
	}
	CHECK_RC(local_session_bind_process(att, kid), -LOCAL_EDENIED);
	child_kill(&v);
	child_wait(&v, 5000);
	/* The victim's session ends with its process: only the attacker's
	 * (under another id now, so counted from the table) is left. */
	CHECK(WAIT_SESSIONS(att, 1, 5000));
	kill(kid, SIGKILL);
	pid_wait(kid, 5000);
	broker_stop(&b);
}

#ifdef LOCAL_CRASH_POINTS
/*
 * When the broker cannot watch a process (epoll's watch limit, or out of
 * memory: forced here by the test build's hook), that process gets no
 * session: one whose death went unseen would keep its holds for ever. The
 * open fails with -ENOSPC, the table is left as it was, and sessions open
 * again once watching works.
 */
TEST(hostile_sessions, a_process_the_broker_cannot_watch_gets_no_session, 30)
{
	LOCAL_OPTS(local_session_opts, o, .name = "unwatched");
	struct broker_proc b;
	local_session *obs, *s = NULL;
	char flag[200], env[240];
	FILE *f;

	/* Named as the runner's sweep of leftovers expects. */
	snprintf(flag, sizeof(flag), "/tmp/shmlock-test-%d-fail-watch", (int)getpid());
	snprintf(env, sizeof(env), "SHMLOCK_FAIL_PIDFD_WATCH=%s", flag);
	putenv(env); /* the broker inherits it */
	broker_start(&b, NULL);
	unsetenv("SHMLOCK_FAIL_PIDFD_WATCH");
	obs = open_session(&b, "obs", 0, 0);
	f = fopen(flag, "w");
	CHECK(f != NULL);
	fclose(f);
	setenv("SHMLOCK_SOCKET", b.sock, 1);
	CHECK_RC(local_session_open(&o, &s), -ENOSPC);
	CHECK_EQ(live_sessions(obs), 1);
	CHECK(broker_log_has(&b, "cannot watch"));
	unlink(flag);
	CHECK_OK(local_session_open(&o, &s));
	CHECK_OK(local_session_close(s));
	broker_stop(&b);
}
#endif
