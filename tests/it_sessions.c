// SPDX-License-Identifier: MIT
/* Sessions against a real broker: TTL, close, fork, caps, pidfd fallback. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "broker_fixture.h"
#include "crashpoint.h"
#include "harness.h"
#include "invariants.h"

static uint32_t holders_of(local_session *s, const char *key)
{
	LOCAL_OPTS(local_key_info, info);

	return local_info(s, key, &info) ? 99 : info.holders;
}

TEST(sessions, ttl_expiry_releases_holds, 20)
{
	enum { TTL = 1000 };
	struct broker_proc b;
	local_session *obs, *mortal, *renewed;
	uint64_t t0, end;

	broker_start(&b, NULL);
	obs = open_session(&b, "obs", 0, 0);
	/* A TTL of 1 s renewed every 20 ms: this process may stall for most
	 * of a second (a loaded machine) before the renewed one is lost. With
	 * 200 ms, a stall of 180 ms failed the test. */
	mortal = open_session(&b, "mortal", 0, TTL);
	renewed = open_session(&b, "renewed", 0, TTL);
	CHECK_OK(local_lock(mortal, "ttl/a", NULL, NULL));
	CHECK_OK(local_lock(renewed, "ttl/b", NULL, NULL));
	t0 = now_ms();
	/* Renew one session for 3 TTL periods; the other is left to expire. */
	for (end = t0 + 3 * TTL; now_ms() < end;) {
		CHECK_OK(local_session_renew(renewed));
		usleep(20000);
	}
	CHECK(WAIT_FOR(holders_of(obs, "ttl/a") == 0, 10000));
	CHECK(now_ms() - t0 >= TTL);
	CHECK_EQ(holders_of(obs, "ttl/b"), 1);
	CHECK_RC(local_release(mortal, "ttl/a"), -LOCAL_ESESSION);
	CHECK_RC(local_session_renew(mortal), -LOCAL_ESESSION);
	CHECK_RC(local_lock(mortal, "ttl/c", NULL, NULL), -LOCAL_ESESSION);
	CHECK_RC(local_session_close(mortal), -LOCAL_ESESSION);
	CHECK_OK(local_release(renewed, "ttl/b"));
	CHECK_EQ(segment_violations(obs), 0);
	broker_stop(&b);
}

struct locker_arg {
	const struct broker_proc *b;
	const char *key;
};

/* Child: queue on a key (blocking), report when granted, stay until killed. */
static void blocked_locker(void *p, int in, int out)
{
	const struct locker_arg *a = p;
	local_session *s = open_session(a->b, "waiter", 0, 0);
	char buf[8];

	say(out, "open");
	CHECK_OK(local_lock(s, a->key, NULL, NULL));
	say(out, "got");
	hear(in, buf, sizeof(buf));
}

TEST(sessions, close_releases_without_lock_delay, 20)
{
	struct broker_proc b;
	struct locker_arg la = { &b, "close/k" };
	local_session *obs, *holder;
	struct child w;
	uint64_t t0;

	broker_start(&b, NULL);
	obs = open_session(&b, "obs", 0, 0);
	holder = open_session(&b, "holder", 15000, 0);
	CHECK_OK(local_lock(holder, "close/k", NULL, NULL));
	child_spawn(&w, blocked_locker, &la);
	child_expect(&w, "open", 5000);
	CHECK(WAIT_FOR(({
			       LOCAL_OPTS(local_key_info, i);
			       !local_info(obs, "close/k", &i) && i.waiters == 1;
		       }),
		       5000));
	t0 = now_ms();
	CHECK_OK(local_session_close(holder));
	child_expect(&w, "got", 5000);
	CHECK(now_ms() - t0 < 5000); /* far below the 15 s lock-delay */
	child_kill(&w);
	child_wait(&w, 5000);
	broker_stop(&b);
}

TEST(sessions, ended_session_wakes_its_waiter, 20)
{
	struct broker_proc b;
	local_session *obs;
	struct child c;
	int status;

	broker_start(&b, NULL);
	obs = open_session(&b, "obs", 0, 0);
	CHECK_OK(local_lock(obs, "busy", NULL, NULL));
	/* A caller blocked in local_lock returns ESESSION when the broker ends
	 * its session (here by TTL) instead of sleeping on. */
	c.pid = fork();
	if (c.pid == 0) {
		local_session *t = open_session(&b, "ttl", 0, 100);

		_exit(local_lock(t, "busy", NULL, NULL) == -LOCAL_ESESSION ? 0 : 1);
	}
	c.rd = c.wr = -1;
	status = child_wait(&c, 5000);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK(WAIT_FOR(({
			       LOCAL_OPTS(local_key_info, i);
			       !local_info(obs, "busy", &i) && i.waiters == 0;
		       }),
		       5000));
	broker_stop(&b);
}

TEST(sessions, session_not_inherited_across_fork, 20)
{
	struct broker_proc b;
	local_session *s;
	struct child c;
	int status;

	broker_start(&b, NULL);
	s = open_session(&b, "parent", 0, 0);
	CHECK_OK(local_lock(s, "fork/k", NULL, NULL));
	c.pid = fork();
	if (c.pid == 0) {
		if (local_lock(s, "fork/other", NULL, NULL) != -LOCAL_EFORKED)
			_exit(1);
		if (local_release(s, "fork/k") != -LOCAL_EFORKED)
			_exit(2);
		if (local_session_renew(s) != -LOCAL_EFORKED)
			_exit(3);
		local_session_close(s); /* frees the child's copy only */
		_exit(0);
	}
	c.rd = c.wr = -1;
	status = child_wait(&c, 5000);
	CHECK(WIFEXITED(status));
	CHECK_EQ(WEXITSTATUS(status), 0);
	CHECK_EQ(holders_of(s, "fork/k"), 1);
	CHECK_OK(local_release(s, "fork/k"));
	broker_stop(&b);
}

static void hold_forever(void *p, int in, int out)
{
	const struct broker_proc *b = p;
	local_session *s = open_session(b, "doomed", 0, 0);
	char buf[8];

	CHECK_OK(local_lock(s, "fallback/k", NULL, NULL));
	say(out, "held");
	hear(in, buf, sizeof(buf));
}

TEST(sessions, pidfd_fallback_still_detects_death, 20)
{
	static const char *const flags[] = { "--test-force-pidfd-fallback", NULL };
	struct broker_proc b;
	local_session *obs;
	struct child c;

	broker_start(&b, flags);
	obs = open_session(&b, "obs", 0, 0);
	child_spawn(&c, hold_forever, &b);
	child_expect(&c, "held", 5000);
	CHECK_EQ(holders_of(obs, "fallback/k"), 1);
	child_kill(&c);
	child_wait(&c, 5000);
	CHECK(WAIT_FOR(holders_of(obs, "fallback/k") == 0, 5000));
	CHECK(WAIT_SESSIONS(obs, 1, 5000));
	broker_stop(&b);
}

TEST(sessions, broker_unavailable, 10)
{
	struct local_session_opts o;
	local_session *s;
	uint64_t t0;

	local_session_opts_init(&o);
	o.socket_path = "/tmp/shmlock-test-nonexistent/sock";
	o.broker_wait_ms = 0;
	CHECK_RC(local_session_open(&o, &s), -LOCAL_ENOSOCKET);
	/* With a wait: retried with backoff, then the same answer, on time. */
	o.broker_wait_ms = 300;
	t0 = now_ms();
	CHECK_RC(local_session_open(&o, &s), -LOCAL_ENOSOCKET);
	CHECK(now_ms() - t0 >= 300);
	o.lock_delay_ms = 60001;
	CHECK_RC(local_session_open(&o, &s), -EINVAL);
	o.lock_delay_ms = -1;
	o.behavior = 5;
	CHECK_RC(local_session_open(&o, &s), -EINVAL);
	o.behavior = 0;
	o.flags = 0x100;
	CHECK_RC(local_session_open(&o, &s), -EINVAL);
	CHECK_RC(local_session_open(&o, NULL), -EINVAL);
}

TEST(sessions, capacity_limits_have_distinct_errors, 30)
{
	static const char *const flags[] = {
		"--max-sessions", "3", "--max-keys",  "2", "--max-holds", "2",
		"--max-waiters",  "1", "--max-value", "8", NULL
	};
	LOCAL_OPTS(local_acquire_opts, val, .timeout_ms = 0, .value = "123456789", .value_len = 9);
	LOCAL_OPTS(local_acquire_opts, timed, .timeout_ms = 50);
	struct local_session_opts o;
	struct broker_proc b;
	local_session *a, *c, *d, *e;

	broker_start(&b, flags);
	a = open_session(&b, "a", 0, 0);
	c = open_session(&b, "c", 0, 0);
	d = open_session(&b, "d", 0, 0);
	local_session_opts_init(&o);
	o.socket_path = b.sock;
	CHECK_RC(local_session_open(&o, &e), -LOCAL_EMAXSESSIONS);
	CHECK_RC(local_lock(a, "v", &val, NULL), -LOCAL_EVALUESIZE);
	val.value_len = 8;
	CHECK_OK(local_lock(a, "k1", &val, NULL));
	CHECK_OK(local_lock(a, "k2", NULL, NULL));
	CHECK_RC(local_lock(a, "k3", NULL, NULL), -LOCAL_EMAXKEYS);
	/* One waiter slot: the second timed waiter finds the table full. */
	CHECK_RC(local_lock(c, "k1", &timed, NULL), -ETIMEDOUT);
	CHECK_OK(local_release(a, "k2"));
	CHECK_OK(local_lock(c, "k3", NULL, NULL)); /* reclaims idle k2 */
	CHECK_RC(local_lock(d, "k2", NULL, NULL), -LOCAL_EMAXKEYS);
	CHECK_OK(local_release(c, "k3"));
	CHECK_OK(local_lock(c, "k2", NULL, NULL)); /* reclaims idle k3 */
	CHECK_RC(local_lock(d, "k1",
			    &(struct local_acquire_opts){ .sz = sizeof(struct local_acquire_opts),
							  .timeout_ms = 0 },
			    NULL),
		 -EBUSY);
	CHECK_OK(local_session_close(c));
	CHECK_OK(local_lock(d, "k2", NULL, NULL));
	CHECK_EQ(segment_violations(a), 0);
	broker_stop(&b);
}

static uint32_t waiters_on(local_session *s, const char *key)
{
	LOCAL_OPTS(local_key_info, info);

	return local_info(s, key, &info) ? 0 : info.waiters;
}

TEST(sessions, hold_and_waiter_tables_full, 30)
{
	static const char *const flags[] = { "--max-holds", "1", "--max-waiters", "1", NULL };
	LOCAL_OPTS(local_acquire_opts, timed, .timeout_ms = 100);
	struct broker_proc b;
	struct locker_arg la = { &b, "h1" };
	local_session *a, *c;
	struct child w;

	broker_start(&b, flags);
	a = open_session(&b, "a", 0, 0);
	c = open_session(&b, "c", 0, 0);
	CHECK_OK(local_lock(a, "h1", NULL, NULL));
	CHECK_RC(local_lock(c, "h2", NULL, NULL), -LOCAL_EMAXHOLDS);
	child_spawn(&w, blocked_locker, &la);
	child_expect(&w, "open", 5000);
	CHECK(WAIT_FOR(waiters_on(a, "h1") == 1, 5000));
	CHECK_RC(local_lock(c, "h1", &timed, NULL), -LOCAL_EMAXWAITERS);
	/* The handoff reuses the releaser's hold: a full hold table does not
	 * stop the queue. */
	CHECK_OK(local_release(a, "h1"));
	child_expect(&w, "got", 5000);
	CHECK_EQ(segment_violations(a), 0);
	child_kill(&w);
	child_wait(&w, 5000);
	broker_stop(&b);
}

TEST(sessions, stale_handle_cannot_touch_new_session_in_its_slot, 20)
{
	static const char *const flags[] = { "--max-sessions", "2", NULL };
	LOCAL_OPTS(local_acquire_opts, try, .timeout_ms = 0);
	struct broker_proc b;
	local_session *obs, *mortal, *heir;
	uint64_t tok;

	broker_start(&b, flags);
	obs = open_session(&b, "obs", 0, 0);
	/* 1 s: long enough to take a key before it is gone, on a slow
	 * machine too (with 100 ms a stall there lost the session first). */
	mortal = open_session(&b, "mortal", 0, 1000);
	CHECK_OK(local_lock(mortal, "slot/k", NULL, NULL));
	CHECK(WAIT_SESSIONS(obs, 1, 5000));
	heir = open_session(&b, "heir", 0, 0); /* the only free slot: mortal's */
	CHECK_EQ(heir->who.slot, mortal->who.slot);
	CHECK_OK(local_lock(heir, "slot/k", NULL, &tok));
	CHECK_RC(local_lock(mortal, "slot/k", &try, NULL), -LOCAL_ESESSION);
	CHECK_RC(local_release(mortal, "slot/k"), -LOCAL_ESESSION);
	CHECK_EQ(holders_of(obs, "slot/k"), 1);
	CHECK_OK(local_release(heir, "slot/k"));
	broker_stop(&b);
}

static uint32_t value_len_of(local_session *s, const char *key)
{
	LOCAL_OPTS(local_key_info, info);

	CHECK_OK(local_info(s, key, &info));
	return (uint32_t)info.value_len;
}

TEST(sessions, behavior_delete_drops_values_when_the_session_ends, 20)
{
	LOCAL_OPTS(local_acquire_opts, v, .timeout_ms = 0, .value = "leader-1", .value_len = 8);
	struct local_session_opts o;
	struct broker_proc b;
	local_session *obs, *del, *rel;

	broker_start(&b, NULL);
	obs = open_session(&b, "obs", 0, 0);
	local_session_opts_init(&o);
	o.socket_path = b.sock;
	o.behavior = LOCAL_BEHAVIOR_DELETE;
	CHECK_OK(local_session_open(&o, &del));
	rel = open_session(&b, "release", 0, 0);
	CHECK_OK(local_lock(del, "bd/delete", &v, NULL));
	CHECK_OK(local_lock(rel, "bd/release", &v, NULL));
	/* A plain release keeps the value (Consul), whatever the behavior. */
	CHECK_OK(local_release(del, "bd/delete"));
	CHECK_EQ(value_len_of(obs, "bd/delete"), 8);
	CHECK_OK(local_lock(del, "bd/delete", &v, NULL));
	CHECK_OK(local_session_close(del));
	CHECK_OK(local_session_close(rel));
	CHECK_EQ(value_len_of(obs, "bd/delete"), 0);
	CHECK_EQ(value_len_of(obs, "bd/release"), 8);
	broker_stop(&b);
}

/* Child: open a session, take the key, fork a grandchild that sleeps, bind
 * it to the session, report its pid, then wait to be killed. */
static void binder(void *p, int in, int out)
{
	const struct broker_proc *b = p;
	local_session *s = open_session(b, "binder", 0, 0);
	char buf[8];
	pid_t kid;

	CHECK_OK(local_lock(s, "bind/k", NULL, NULL));
	CHECK_RC(local_session_bind_process(s, getppid()), -EINVAL); /* not our child */
	kid = fork();
	CHECK(kid >= 0);
	if (kid == 0) {
		for (;;)
			pause();
	}
	CHECK_OK(local_session_bind_process(s, kid));
	say(out, "bound %d", (int)kid);
	hear(in, buf, sizeof(buf));
}

/*
 * local_session_bind_process(): the session outlives its own process while
 * the bound child runs, and ends (releasing, with lock-delay) when that
 * child exits too. Another process cannot bind to a session not its own.
 */
TEST(sessions, a_bound_child_keeps_the_session_until_it_exits, 30)
{
	struct broker_proc b;
	local_session *obs;
	struct child c;
	char line[64];
	int kid;

	CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0); /* the orphan is ours */
	broker_start(&b, NULL);
	obs = open_session(&b, "obs", 0, 0);
	child_spawn(&c, binder, &b);
	CHECK_OK(child_read(&c, line, sizeof(line), 5000));
	CHECK(sscanf(line, "bound %d", &kid) == 1);
	child_kill(&c);
	child_wait(&c, 5000);
	/* The session's process is gone; its bound child is not. */
	CHECK_EQ(live_sessions(obs), 2);
	CHECK_EQ(holders_of(obs, "bind/k"), 1);
	CHECK_RC(local_session_bind_process(obs, getppid()), -EINVAL); /* not our child */
	kill((pid_t)kid, SIGKILL);
	pid_wait((pid_t)kid, 5000);
	CHECK(WAIT_SESSIONS(obs, 1, 5000));
	CHECK_EQ(holders_of(obs, "bind/k"), 0);
	broker_stop(&b);
}

#ifdef LOCAL_CRASH_POINTS
/* Child: queue on the key (blocking) until killed; @p: the broker. */
static void queued_locker(void *p, int in, int out)
{
	local_session *s = open_session(p, "queued", 0, 0);
	char buf[8];

	say(out, "open");
	local_lock(s, "backoff/k", NULL, NULL);
	hear(in, buf, sizeof(buf));
}

/* Child: stop (SIGSTOP) inside the key's mutex while queueing on it. */
static void stalled_in_mutex(void *p, int in, int out)
{
	LOCAL_OPTS(local_acquire_opts, timed, .timeout_ms = 100);
	local_session *s;
	char buf[8], num[8];

	snprintf(num, sizeof(num), "%d", CP_ENQ_LINKED);
	setenv("SHMLOCK_STOP_AT", num, 1);
	s = open_session(p, "stalled", 0, 0);
	say(out, "open");
	say(out, "done %d", local_lock(s, "backoff/k", &timed, NULL));
	hear(in, buf, sizeof(buf));
}

/* The largest N in the log's "session ...: K key(s) busy ... (N such
 * line(s) left out)" lines, or -1 when there is none. */
static int busy_lines_left_out(const struct broker_proc *b)
{
	FILE *f = fopen(b->log, "re");
	char line[1024];
	int most = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		const char *at = strstr(line, "key(s) busy");
		const char *count = at ? strstr(at, "retrying (") : NULL;
		int n;

		if (count && sscanf(count, "retrying (%d such line", &n) == 1 && n > most)
			most = n;
	}
	fclose(f);
	return most;
}

/*
 * A session whose sweep waits on a key a stopped process sits in is retried
 * every second for as long as that lasts; its warning is not: it comes at
 * growing intervals, each with the count of the retries it left unsaid.
 */
TEST(sessions, a_sweep_stuck_on_a_busy_key_warns_with_backoff, 60)
{
	struct broker_proc b;
	local_session *obs;
	struct child q, st;
	siginfo_t si;
	char line[64];

	broker_start(&b, NULL);
	obs = open_session(&b, "obs", 0, 0);
	CHECK_OK(local_lock(obs, "backoff/k", NULL, NULL));
	child_spawn(&q, queued_locker, &b);
	child_expect(&q, "open", 5000);
	CHECK(WAIT_FOR(({
			       LOCAL_OPTS(local_key_info, i);
			       !local_info(obs, "backoff/k", &i) && i.waiters == 1;
		       }),
		       5000));
	child_spawn(&st, stalled_in_mutex, &b);
	child_expect(&st, "open", 5000);
	memset(&si, 0, sizeof(si));
	CHECK_OK(waitid(P_PID, (id_t)st.pid, &si, WSTOPPED | WNOWAIT));
	/* The queued one dies: its sweep needs the stalled key. */
	child_kill(&q);
	child_wait(&q, 5000);
	CHECK(WAIT_FOR(busy_lines_left_out(&b) >= 0, 5000));  /* said at once */
	CHECK(WAIT_FOR(busy_lines_left_out(&b) >= 1, 20000)); /* then less often */
	kill(st.pid, SIGCONT);
	CHECK_OK(child_read(&st, line, sizeof(line), 5000));
	CHECK(WAIT_SESSIONS(obs, 2, 10000)); /* obs and the staller: the sweep ended */
	child_kill(&st);
	child_wait(&st, 5000);
	broker_stop(&b);
}

/* Child: hold the key, then on "release" release it and stop (SIGSTOP)
 * between handing it to the waiter and waking it (HANDOFF_UNLOCKED). */
static void releaser_stopped_before_the_wake(void *p, int in, int out)
{
	local_session *s;
	char buf[16], num[8];

	snprintf(num, sizeof(num), "%d", CP_HANDOFF_UNLOCKED);
	setenv("SHMLOCK_STOP_AT", num, 1);
	s = open_session(p, "releaser", 0, 0);
	say(out, "held %d", local_lock(s, "granted/k", NULL, NULL));
	hear(in, buf, sizeof(buf));
	say(out, "released %d", local_release(s, "granted/k"));
	hear(in, buf, sizeof(buf));
}

struct sleeper {
	local_session *s;
	_Atomic int done, rc;
};

static void *lock_without_deadline(void *p)
{
	struct sleeper *sl = p;

	atomic_store(&sl->rc, local_lock(sl->s, "granted/k", NULL, NULL));
	atomic_store(&sl->done, 1);
	return NULL;
}

/*
 * A thread asleep on a key with no deadline is handed the key by a releaser
 * that stops (or dies) before its wake-up call, and then its session ends
 * while its process lives (an operator; a TTL would do the same): the sweep
 * gives the grant back, and must wake the sleeper, whom nobody else will
 * (the broker's wake of granted waiters after a releaser's death finds the
 * node freed). Found by the spin model (key.pml -DEXPIRY -DMAXDEATH=1).
 */
TEST(sessions, a_granted_sleeper_whose_session_ends_is_woken, 30)
{
	struct broker_proc b;
	struct sleeper sl = { 0 };
	local_session *obs;
	struct child r;
	pthread_t th;
	int status;

	broker_start(&b, NULL);
	obs = open_session(&b, "obs", 0, 0);
	child_spawn(&r, releaser_stopped_before_the_wake, &b);
	child_expect(&r, "held 0", 5000);
	sl.s = open_session(&b, "sleeper", 0, 0);
	CHECK(pthread_create(&th, NULL, lock_without_deadline, &sl) == 0);
	CHECK(WAIT_FOR(({
			       LOCAL_OPTS(local_key_info, i);
			       !local_info(obs, "granted/k", &i) && i.waiters == 1;
		       }),
		       5000));
	child_send(&r, "release");
	/* Stopped at the point: the key is the sleeper's, not yet woken. */
	CHECK_EQ(waitpid(r.pid, &status, WUNTRACED), r.pid);
	CHECK(WIFSTOPPED(status));
	CHECK_EQ(atomic_load(&sl.done), 0);
	CHECK_OK(local_session_destroy(obs, local_session_id(sl.s)));
	CHECK(WAIT_FOR(atomic_load(&sl.done), 5000));
	CHECK_EQ(atomic_load(&sl.rc), -LOCAL_ESESSION);
	CHECK(pthread_join(th, NULL) == 0);
	/* The grant went back: the key is free. */
	CHECK_OK(local_lock(obs, "granted/k",
			    &(struct local_acquire_opts){ .sz = sizeof(struct local_acquire_opts),
							  .timeout_ms = 0 },
			    NULL));
	kill(r.pid, SIGCONT);
	child_kill(&r);
	broker_stop(&b);
}
#endif
