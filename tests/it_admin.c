// SPDX-License-Identifier: MIT
/*
 * Administration against a real broker: operator force release and session
 * destroy (lock-delay applies, successors are woken), and the inspection
 * calls (keys, sessions, holders, stats), idle-key GC and behavior delete.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "broker_fixture.h"
#include "harness.h"
#include "invariants.h"
#include "key_fixture.h"

struct waiter_arg {
	const struct broker_proc *b;
	const char *key;
	uint32_t limit; /* 0: lock */
	int id;
};

/* Child: queue (blocking), report "got ID TIME_MS", stay until "exit". */
static void queue_child(void *p, int in, int out)
{
	const struct waiter_arg *a = p;
	char name[32], buf[64];
	local_session *s;
	int r;

	snprintf(name, sizeof(name), "w%d", a->id);
	s = open_session(a->b, name, 0, 0);
	say(out, "open");
	r = a->limit ? local_sem_acquire(s, a->key, a->limit, NULL, NULL)
		     : local_lock(s, a->key, NULL, NULL);
	if (r)
		say(out, "error %d", r);
	else
		say(out, "got %d %llu", a->id, (unsigned long long)now_ms());
	while (!hear(in, buf, sizeof(buf)) && strcmp(buf, "exit"))
		;
	local_session_close(s);
}

static void spawn_queued(struct child *c, struct waiter_arg *a, local_session *obs,
			 unsigned waiters)
{
	child_spawn(c, queue_child, a);
	child_expect(c, "open", 5000);
	CHECK(WAIT_FOR(info_of(obs, a->key)->waiters == waiters, 5000));
}

static uint64_t expect_got(struct child *c, int id, int timeout_ms)
{
	unsigned long long at;
	char line[128];
	int got;

	if (child_read(c, line, sizeof(line), timeout_ms))
		FAIL_AT("waiter %d: no grant within %d ms", id, timeout_ms);
	if (sscanf(line, "got %d %llu", &got, &at) != 2 || got != id)
		FAIL_AT("waiter %d: expected a grant, got \"%s\"", id, line);
	return at;
}

static void end_child(struct child *c)
{
	child_send(c, "exit");
	child_wait(c, 5000);
}

/* ---- operator actions --------------------------------------------------- */

TEST(admin, force_release_of_one_holder, 20)
{
	enum { DELAY = 300 };
	struct broker_proc b;
	struct waiter_arg wa = { NULL, "adm/sem", 2, 0 };
	local_session *a, *c, *obs;
	struct local_key_info *info;
	struct child w;
	uint64_t t0, got;

	broker_start(&b, NULL);
	wa.b = &b;
	a = open_session(&b, "a", DELAY, 0);
	c = open_session(&b, "c", DELAY, 0);
	obs = open_session(&b, "operator", 0, 0);
	CHECK_OK(local_sem_acquire(a, "adm/sem", 2, NULL, NULL));
	CHECK_OK(local_sem_acquire(c, "adm/sem", 2, NULL, NULL));
	spawn_queued(&w, &wa, obs, 1);
	t0 = now_ms();
	CHECK_OK(local_force_release(obs, "adm/sem", local_session_id(a)));
	info = info_of(obs, "adm/sem");
	CHECK_EQ(info->holders, 1);
	CHECK(!strcmp(info->holder_session, local_session_id(c)));
	/* Lock-delay of the session that lost it: the waiter is held back. */
	if (info->waiters == 1)
		CHECK(info->lock_delay_remaining_ms > 0);
	CHECK_RC(local_held(a, "adm/sem", NULL), -LOCAL_ENOTHELD);
	CHECK_RC(local_release(a, "adm/sem"), -LOCAL_ENOTHELD);
	CHECK_OK(local_held(c, "adm/sem", NULL));
	/* Held back by the lock-delay of the session that lost it. An upper
	 * bound (it was 1 s past the delay) is the machine's load as much as
	 * ours; the default 15 s delay, applied by mistake, misses this
	 * deadline all the same. */
	got = expect_got(&w, 0, DELAY + 10000);
	CHECK(got >= t0 + DELAY);
	CHECK_EQ(info_of(obs, "adm/sem")->holders, 2);
	/* Another force release of the same holder: it holds nothing now. */
	CHECK_RC(local_force_release(obs, "adm/sem", local_session_id(a)), -LOCAL_ENOTHELD);
	CHECK_EQ(segment_violations(obs), 0);
	end_child(&w);
	broker_stop(&b);
}

TEST(admin, force_release_of_every_holder, 20)
{
	enum { DELAY = 300 };
	struct broker_proc b;
	struct waiter_arg wa = { NULL, "adm/lock", 0, 0 };
	local_session *a, *c, *d, *obs;
	struct child w;
	uint64_t t0, got;

	broker_start(&b, NULL);
	wa.b = &b;
	a = open_session(&b, "a", DELAY, 0);
	c = open_session(&b, "c", 0, 0);
	d = open_session(&b, "d", 0, 0);
	obs = open_session(&b, "operator", 0, 0);
	CHECK_OK(local_lock(a, "adm/lock", NULL, NULL));
	spawn_queued(&w, &wa, obs, 1);
	t0 = now_ms();
	CHECK_OK(local_force_release(obs, "adm/lock", NULL));
	CHECK_RC(local_held(a, "adm/lock", NULL), -LOCAL_ENOTHELD);
	/* Held back by the lock-delay of the session that lost it. An upper
	 * bound (it was 1 s past the delay) is the machine's load as much as
	 * ours; the default 15 s delay, applied by mistake, misses this
	 * deadline all the same. */
	got = expect_got(&w, 0, DELAY + 10000);
	CHECK(got >= t0 + DELAY);
	end_child(&w);
	/* Every holder of a semaphore at once. */
	CHECK_OK(local_sem_acquire(c, "adm/sem3", 3, NULL, NULL));
	CHECK_OK(local_sem_acquire(d, "adm/sem3", 3, NULL, NULL));
	CHECK_EQ(info_of(obs, "adm/sem3")->holders, 2);
	CHECK_OK(local_force_release(obs, "adm/sem3", NULL));
	CHECK_EQ(info_of(obs, "adm/sem3")->holders, 0);
	CHECK_RC(local_held(c, "adm/sem3", NULL), -LOCAL_ENOTHELD);
	CHECK_RC(local_held(d, "adm/sem3", NULL), -LOCAL_ENOTHELD);
	/* No lock-delay (0 for both): free at once. */
	CHECK_OK(local_sem_acquire(
		obs, "adm/sem3", 3,
		&(struct local_acquire_opts){ .sz = sizeof(struct local_acquire_opts),
					      .timeout_ms = 0 },
		NULL));
	CHECK_EQ(segment_violations(obs), 0);
	CHECK(WAIT_SESSIONS(obs, 4, 5000));
	broker_stop(&b);
}

/* "NULL: from every holder", however many there are. */
TEST(admin, force_release_of_many_holders, 20)
{
	enum { N = 80 };
	struct broker_proc b;
	local_session *s[N], *obs;
	int i;

	broker_start(&b, NULL);
	obs = open_session(&b, "operator", 0, 0);
	for (i = 0; i < N; i++) {
		s[i] = open_session(&b, "many", 0, 0);
		CHECK_OK(local_sem_acquire(s[i], "adm/many", N, NULL, NULL));
	}
	CHECK_EQ(info_of(obs, "adm/many")->holders, N);
	CHECK_OK(local_force_release(obs, "adm/many", NULL));
	CHECK_EQ(info_of(obs, "adm/many")->holders, 0);
	for (i = 0; i < N; i++)
		CHECK_RC(local_held(s[i], "adm/many", NULL), -LOCAL_ENOTHELD);
	CHECK_EQ(segment_violations(obs), 0);
	broker_stop(&b);
}

TEST(admin, force_release_when_not_held, 20)
{
	struct broker_proc b;
	local_session *a, *c, *obs;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	c = open_session(&b, "c", 0, 0);
	obs = open_session(&b, "operator", 0, 0);
	CHECK_RC(local_force_release(obs, "adm/missing", NULL), -LOCAL_ENOTHELD);
	CHECK_OK(local_lock(a, "adm/free", NULL, NULL));
	CHECK_OK(local_release(a, "adm/free"));
	CHECK_RC(local_force_release(obs, "adm/free", NULL), -LOCAL_ENOTHELD);
	CHECK_RC(local_force_release(obs, "adm/free", local_session_id(a)), -LOCAL_ENOTHELD);
	CHECK_OK(local_lock(a, "adm/held", NULL, NULL));
	/* Held, but not by that session: nothing released. */
	CHECK_RC(local_force_release(obs, "adm/held", local_session_id(c)), -LOCAL_ENOTHELD);
	CHECK_RC(local_force_release(obs, "adm/held", "00000000000000000000000000000000"),
		 -LOCAL_ENOTHELD);
	CHECK_OK(local_held(a, "adm/held", NULL));
	CHECK_RC(local_force_release(obs, "adm/held", "not-a-session-id"), -EINVAL);
	CHECK_RC(local_force_release(obs, "", NULL), -EINVAL);
	CHECK_OK(local_held(a, "adm/held", NULL));
	broker_stop(&b);
}

/* Child: hold "adm/x", report its session id, then block on "adm/y". */
static void doomed_child(void *p, int in, int out)
{
	const struct broker_proc *b = p;
	local_session *s = open_session(b, "doomed", 300, 0);
	char buf[16];

	(void)in;
	CHECK_OK(local_lock(s, "adm/x", NULL, NULL));
	say(out, "id %s", local_session_id(s));
	say(out, "lock-y %d", local_lock(s, "adm/y", NULL, NULL));
	say(out, "after %d %d", local_lock(s, "adm/z", NULL, NULL), local_release(s, "adm/x"));
	hear(in, buf, sizeof(buf));
}

static int count_session(const struct local_session_info *si, void *arg)
{
	const char *id = *(const char **)arg;

	if (!strcmp(si->id, id))
		*(const char **)arg = NULL;
	return 0;
}

TEST(admin, session_destroy_releases_and_wakes, 20)
{
	struct broker_proc b;
	struct waiter_arg wa = { NULL, "adm/x", 0, 0 };
	char line[128], id[64], want[64];
	local_session *obs;
	struct child d, w;
	const char *find;
	uint64_t t0, got;

	broker_start(&b, NULL);
	wa.b = &b;
	obs = open_session(&b, "operator", 0, 0);
	CHECK_OK(local_lock(obs, "adm/y", NULL, NULL));
	child_spawn(&d, doomed_child, &b);
	CHECK_OK(child_read(&d, line, sizeof(line), 5000));
	CHECK_EQ(sscanf(line, "id %63s", id), 1);
	CHECK(WAIT_FOR(info_of(obs, "adm/y")->waiters == 1, 5000));
	spawn_queued(&w, &wa, obs, 1);
	t0 = now_ms();
	CHECK_OK(local_session_destroy(obs, id));
	/* Its blocked waiter (no timeout) returns; then every call says so. */
	snprintf(want, sizeof(want), "lock-y %d", -LOCAL_ESESSION);
	child_expect(&d, want, AT_ONCE_MS);
	snprintf(want, sizeof(want), "after %d %d", -LOCAL_ESESSION, -LOCAL_ESESSION);
	child_expect(&d, want, 5000);
	CHECK_EQ(info_of(obs, "adm/y")->waiters, 0);
	/* Its hold is released with its lock-delay, and the next one gets it. */
	got = expect_got(&w, 0, 10000);
	CHECK(got >= t0 + 300);
	/* How soon after the 300 ms is a figure (it was checked to be within
	 * 1 s, which a loaded machine can miss): expect_got()'s deadline is
	 * already far below the default 15 s lock-delay it would owe if the
	 * session's own were not applied. */
	fprintf(stderr, "    the next waiter was granted %llu ms after the destroy\n",
		(unsigned long long)(got - t0));
	find = id;
	CHECK_OK(local_sessions(obs, count_session, &find));
	CHECK(find != NULL); /* not listed any more */
	CHECK_RC(local_session_destroy(obs, id), -LOCAL_ESESSION);
	CHECK_RC(local_session_destroy(obs, "zz"), -EINVAL);
	CHECK_RC(local_session_destroy(obs, NULL), -EINVAL);
	CHECK_EQ(segment_violations(obs), 0);
	child_kill(&d);
	child_wait(&d, 5000);
	end_child(&w);
	broker_stop(&b);
}

/* ---- inspection ----------------------------------------------------------- */

struct key_seen {
	char names[16][64];
	struct local_key_info info[16]; /* callbacks give no value */
	unsigned n;
	int stop_with;
};

static int collect_key(const char *key, const struct local_key_info *ki, void *arg)
{
	struct key_seen *ks = arg;

	if (ks->n < 16) {
		snprintf(ks->names[ks->n], sizeof(ks->names[0]), "%s", key);
		ks->info[ks->n] = *ki;
	}
	ks->n++;
	return ks->stop_with;
}

static void ks_reset(struct key_seen *ks)
{
	ks->n = 0;
	ks->stop_with = 0;
}

static const struct local_key_info *key_listed(struct key_seen *ks, const char *key)
{
	unsigned i;

	for (i = 0; i < ks->n && i < 16; i++)
		if (!strcmp(ks->names[i], key))
			return &ks->info[i];
	return NULL;
}

TEST(admin, keys_with_and_without_prefix, 20)
{
	LOCAL_OPTS(local_acquire_opts, v, .timeout_ms = 0, .value = "12345", .value_len = 5);
	struct broker_proc b;
	struct key_seen *ks = calloc(1, sizeof(*ks));
	const struct local_key_info *ki;
	local_session *a, *c;

	CHECK(ks);
	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	c = open_session(&b, "c", 0, 0);
	CHECK_OK(local_lock(a, "ks/a/1", &v, NULL));
	CHECK_OK(local_sem_acquire(a, "ks/a/2", 4, NULL, NULL));
	CHECK_OK(local_sem_acquire(c, "ks/a/2", 4, NULL, NULL));
	CHECK_OK(local_lock(a, "ks/b/1", NULL, NULL));
	CHECK_OK(local_keys(c, "ks/a/", collect_key, ks));
	CHECK_EQ(ks->n, 2);
	ki = key_listed(ks, "ks/a/1");
	CHECK(ki);
	CHECK_EQ(ki->kind, LOCAL_KIND_LOCK);
	CHECK_EQ(ki->holders, 1);
	CHECK_EQ(ki->value_len, 5);
	ki = key_listed(ks, "ks/a/2");
	CHECK(ki);
	CHECK_EQ(ki->kind, LOCAL_KIND_SEMAPHORE);
	CHECK_EQ(ki->limit, 4);
	CHECK_EQ(ki->holders, 2);
	CHECK(!key_listed(ks, "ks/b/1"));
	ks_reset(ks);
	CHECK_OK(local_keys(c, NULL, collect_key, ks));
	CHECK_EQ(ks->n, 3);
	CHECK(key_listed(ks, "ks/a/1") && key_listed(ks, "ks/a/2") && key_listed(ks, "ks/b/1"));
	ks_reset(ks);
	CHECK_OK(local_keys(c, "", collect_key, ks));
	CHECK_EQ(ks->n, 3);
	ks_reset(ks);
	CHECK_OK(local_keys(c, "ks/b/1", collect_key, ks));
	CHECK_EQ(ks->n, 1);
	ks_reset(ks);
	CHECK_OK(local_keys(c, "nothing/", collect_key, ks));
	CHECK_EQ(ks->n, 0);
	/* A callback's non-zero return stops the walk and is returned. */
	ks_reset(ks);
	ks->stop_with = 7;
	CHECK_RC(local_keys(c, NULL, collect_key, ks), 7);
	CHECK_EQ(ks->n, 1);
	CHECK_RC(local_keys(c, NULL, NULL, NULL), -EINVAL);
	free(ks);
	broker_stop(&b);
}

struct sess_seen {
	struct local_session_info v[8];
	unsigned n;
};

static int collect_session(const struct local_session_info *si, void *arg)
{
	struct sess_seen *ss = arg;

	if (ss->n < 8)
		ss->v[ss->n] = *si;
	ss->n++;
	return 0;
}

static const struct local_session_info *session_listed(const struct sess_seen *ss, const char *id)
{
	unsigned i;

	for (i = 0; i < ss->n && i < 8; i++)
		if (!strcmp(ss->v[i].id, id))
			return &ss->v[i];
	return NULL;
}

TEST(admin, sessions_list_holds_waits_and_ttl, 20)
{
	struct broker_proc b;
	struct waiter_arg wa = { NULL, "ss/lock", 0, 0 };
	const struct local_session_info *si;
	struct local_session_opts o;
	struct sess_seen ss = { .n = 0 };
	local_session *a, *obs, *free_agent;
	struct child w;
	unsigned i;

	broker_start(&b, NULL);
	wa.b = &b;
	obs = open_session(&b, "obs", 0, 0);
	local_session_opts_init(&o);
	o.socket_path = b.sock;
	o.name = "busy";
	o.ttl_ms = 5000;
	o.lock_delay_ms = 1234;
	o.behavior = LOCAL_BEHAVIOR_DELETE;
	CHECK_OK(local_session_open(&o, &a));
	local_session_opts_init(&o);
	o.socket_path = b.sock;
	o.name = "free-agent";
	o.flags = LOCAL_SESSION_NO_PROCESS_CHECK;
	CHECK_OK(local_session_open(&o, &free_agent));
	CHECK_OK(local_lock(a, "ss/lock", NULL, NULL));
	CHECK_OK(local_sem_acquire(a, "ss/sem", 2, NULL, NULL));
	spawn_queued(&w, &wa, obs, 1);
	CHECK_OK(local_sessions(obs, collect_session, &ss));
	CHECK_EQ(ss.n, 4);
	si = session_listed(&ss, local_session_id(a));
	CHECK(si);
	CHECK(!strcmp(si->name, "busy"));
	CHECK_EQ(si->pid, getpid());
	CHECK_EQ(si->uid, getuid());
	CHECK_EQ(si->ttl_ms, 5000);
	CHECK(si->ttl_remaining_ms > 0 && si->ttl_remaining_ms <= 5000);
	CHECK_EQ(si->lock_delay_ms, 1234);
	CHECK_EQ(si->behavior, LOCAL_BEHAVIOR_DELETE);
	CHECK_EQ(si->holds, 2);
	CHECK_EQ(si->waiting, 0);
	si = session_listed(&ss, local_session_id(obs));
	CHECK(si);
	CHECK_EQ(si->ttl_ms, 0);
	CHECK_EQ(si->ttl_remaining_ms, 0);
	CHECK_EQ(si->holds, 0);
	CHECK_EQ(si->lock_delay_ms, 0);
	si = session_listed(&ss, local_session_id(free_agent));
	CHECK(si);
	CHECK_EQ(si->pid, 0);
	for (i = 0, si = NULL; i < ss.n && i < 8; i++)
		if (ss.v[i].pid == w.pid)
			si = &ss.v[i];
	CHECK(si);
	CHECK_EQ(si->waiting, 1);
	CHECK_EQ(si->holds, 0);
	child_kill(&w); /* still queued: it cannot hear "exit" */
	child_wait(&w, 5000);
	CHECK_RC(local_sessions(obs, NULL, NULL), -EINVAL);
	broker_stop(&b);
}

struct holder_seen {
	struct local_holder v[4];
	unsigned n;
	int stop_with;
};

static int collect_holder(const struct local_holder *h, void *arg)
{
	struct holder_seen *hs = arg;

	if (hs->n < 4)
		hs->v[hs->n] = *h;
	hs->n++;
	return hs->stop_with;
}

TEST(admin, holders_of_a_semaphore, 20)
{
	LOCAL_OPTS(local_acquire_opts, leased, .timeout_ms = 0, .lease_ms = 10000);
	struct broker_proc b;
	struct holder_seen hs = { .n = 0 };
	local_session *s[3], *obs;
	uint64_t tok[3];
	unsigned i, j, found = 0;

	broker_start(&b, NULL);
	obs = open_session(&b, "obs", 0, 0);
	for (i = 0; i < 3; i++) {
		char name[16];

		snprintf(name, sizeof(name), "holder-%u", i);
		s[i] = open_session(&b, name, 0, 0);
		CHECK_OK(local_sem_acquire(s[i], "h/sem", 3, i == 1 ? &leased : NULL, &tok[i]));
	}
	CHECK_OK(local_holders(obs, "h/sem", collect_holder, &hs));
	CHECK_EQ(hs.n, 3);
	for (i = 0; i < 3; i++)
		for (j = 0; j < 3; j++) {
			const struct local_holder *h = &hs.v[j];
			char name[16];

			if (strcmp(h->session, local_session_id(s[i])))
				continue;
			found++;
			snprintf(name, sizeof(name), "holder-%u", i);
			CHECK(!strcmp(h->name, name));
			CHECK_EQ(h->pid, getpid());
			CHECK_EQ(h->token, tok[i]);
			if (i == 1)
				CHECK(h->lease_remaining_ms > 0 && h->lease_remaining_ms <= 10000);
			else
				CHECK_EQ(h->lease_remaining_ms, 0);
		}
	CHECK_EQ(found, 3);
	memset(&hs, 0, sizeof(hs));
	hs.stop_with = 5;
	CHECK_RC(local_holders(obs, "h/sem", collect_holder, &hs), 5);
	CHECK_EQ(hs.n, 1);
	memset(&hs, 0, sizeof(hs));
	CHECK_OK(local_holders(obs, "h/none", collect_holder, &hs));
	CHECK_EQ(hs.n, 0);
	CHECK_OK(local_release(s[0], "h/sem"));
	CHECK_OK(local_holders(obs, "h/sem", collect_holder, &hs));
	CHECK_EQ(hs.n, 2);
	CHECK_RC(local_holders(obs, "h/sem", NULL, NULL), -EINVAL);
	broker_stop(&b);
}

static void hold_and_wait(void *p, int in, int out)
{
	const struct broker_proc *b = p;
	local_session *s = open_session(b, "crasher", 0, 0);
	char buf[8];

	CHECK_OK(local_lock(s, "st/crash", NULL, NULL));
	say(out, "held");
	hear(in, buf, sizeof(buf));
}

static uint64_t sessions_closed(local_session *obs)
{
	LOCAL_OPTS(local_stats, st);

	return local_stats(obs, &st) ? 0 : st.sessions_closed;
}

TEST(admin, stats_counters_move, 20)
{
	static const char *const flags[] = {
		"--max-keys",	 "64", "--max-sessions", "16",	"--max-holds", "32",
		"--max-waiters", "48", "--max-value",	 "100", NULL
	};
	LOCAL_OPTS(local_acquire_opts, timed, .timeout_ms = 20);
	LOCAL_OPTS(local_stats, s0);
	LOCAL_OPTS(local_stats, s1);
	struct broker_proc b;
	local_session *a, *c, *mortal, *obs;
	struct child crasher;
	uint64_t tok = 0;

	broker_start(&b, flags);
	obs = open_session(&b, "obs", 0, 0);
	a = open_session(&b, "a", 0, 0);
	c = open_session(&b, "c", 0, 0);
	CHECK_OK(local_stats(obs, &s0));
	CHECK_EQ(s0.broker_pid, b.pid);
	CHECK_EQ(s0.max_keys, 64);
	CHECK_EQ(s0.max_sessions, 16);
	CHECK_EQ(s0.max_holds, 32);
	CHECK_EQ(s0.max_waiters, 48);
	CHECK_EQ(s0.max_value, 100);
	CHECK_EQ(s0.sessions, 3);
	CHECK_EQ(s0.holds, 0);
	CHECK_EQ(s0.lease_expiries, 0);
	CHECK(s0.sessions_opened >= 3);
	/* Grants (a lock, two semaphore slots), a timeout. */
	CHECK_OK(local_lock(a, "st/lock", NULL, NULL));
	CHECK_OK(local_sem_acquire(a, "st/sem", 2, NULL, NULL));
	CHECK_OK(local_sem_acquire(c, "st/sem", 2, NULL, NULL));
	CHECK_RC(local_lock(c, "st/lock", &timed, NULL), -ETIMEDOUT);
	CHECK_OK(local_stats(obs, &s1));
	CHECK_EQ(s1.grants - s0.grants, 3);
	CHECK_EQ(s1.timeouts - s0.timeouts, 1);
	CHECK_EQ(s1.keys, 2);
	CHECK_EQ(s1.holds, 3);
	CHECK_EQ(s1.waiters, 0);
	CHECK(s1.uptime_ms >= s0.uptime_ms);
	/* A lease expiry. */
	s0 = s1;
	CHECK_OK(local_lock(a, "st/lease",
			    &(struct local_acquire_opts){ .sz = sizeof(struct local_acquire_opts),
							  .timeout_ms = 0,
							  .lease_ms = 50 },
			    &tok));
	CHECK(WAIT_FOR(local_check_token(obs, "st/lease", tok) == -LOCAL_ESTALE, 5000));
	CHECK_OK(local_stats(obs, &s1));
	CHECK_EQ(s1.lease_expiries - s0.lease_expiries, 1);
	CHECK_EQ(s1.grants - s0.grants, 1);
	CHECK_EQ(s1.ttl_expiries, s0.ttl_expiries);
	/* A TTL expiry. */
	s0 = s1;
	/* 1 s: long enough to take a key before it is gone, on a slow
	 * machine too (with 100 ms a stall there lost the session first). */
	mortal = open_session(&b, "mortal", 0, 1000);
	CHECK_OK(local_lock(mortal, "st/ttl", NULL, NULL));
	CHECK(WAIT_FOR(info_of(obs, "st/ttl")->holders == 0, 5000));
	/* The hold goes first, then the session's slot: its close is
	 * counted when the sweep frees the slot, a moment later. */
	CHECK(WAIT_FOR(sessions_closed(obs) - s0.sessions_closed == 1, 5000));
	CHECK_OK(local_stats(obs, &s1));
	CHECK_EQ(s1.ttl_expiries - s0.ttl_expiries, 1);
	CHECK_EQ(s1.sessions_opened - s0.sessions_opened, 1);
	CHECK_EQ(s1.sessions_closed - s0.sessions_closed, 1);
	CHECK_EQ(s1.crash_cleanups, s0.crash_cleanups);
	/* A crash cleanup. */
	s0 = s1;
	child_spawn(&crasher, hold_and_wait, &b);
	child_expect(&crasher, "held", 5000);
	child_kill(&crasher);
	child_wait(&crasher, 5000);
	CHECK(WAIT_FOR(info_of(obs, "st/crash")->holders == 0, 5000));
	CHECK(WAIT_SESSIONS(obs, 3, 5000));
	CHECK_OK(local_stats(obs, &s1));
	CHECK_EQ(s1.crash_cleanups - s0.crash_cleanups, 1);
	CHECK_EQ(s1.ttl_expiries, s0.ttl_expiries);
	CHECK_EQ(s1.lease_expiries, s0.lease_expiries);
	CHECK_EQ(s1.sessions, 3);
	CHECK_EQ(s1.holds, 3);
	CHECK_RC(local_stats(obs, NULL), -EINVAL);
	broker_stop(&b);
}

/* ---- idle keys ------------------------------------------------------------- */

static int key_exists(local_session *s, const char *key)
{
	struct key_seen *ks = calloc(1, sizeof(*ks));
	int found;

	CHECK(ks);
	CHECK_OK(local_keys(s, key, collect_key, ks));
	found = key_listed(ks, key) != NULL;
	free(ks);
	return found;
}

TEST(admin, gc_idle_reclaims_idle_keys, 20)
{
	static const char *const flags[] = { "--gc-idle", "1", NULL };
	LOCAL_OPTS(local_stats, st0);
	LOCAL_OPTS(local_stats, st1);
	struct broker_proc b;
	local_session *a;
	uint64_t t1 = 0, t2 = 0;

	broker_start(&b, flags);
	a = open_session(&b, "a", 0, 0);
	CHECK_OK(local_lock(a, "gc/idle", NULL, &t1));
	CHECK_OK(local_release(a, "gc/idle"));
	CHECK_OK(local_sem_acquire(a, "gc/held", 2, NULL, NULL));
	CHECK(key_exists(a, "gc/idle"));
	CHECK_OK(local_stats(a, &st0));
	CHECK(WAIT_FOR(!key_exists(a, "gc/idle"), 8000));
	/* A held key stays; counters and tokens do not go back. */
	CHECK(key_exists(a, "gc/held"));
	CHECK_OK(local_stats(a, &st1));
	CHECK(st1.grants >= st0.grants);
	CHECK_EQ(st1.keys, 1);
	CHECK_EQ(info_of(a, "gc/idle")->kind, LOCAL_KIND_NONE);
	CHECK_OK(local_lock(a, "gc/idle", NULL, &t2));
	CHECK(t2 > t1);
	CHECK_EQ(info_of(a, "gc/idle")->lock_index, 1);
	CHECK_EQ(segment_violations(a), 0);
	broker_stop(&b);
}

static void delete_child(void *p, int in, int out)
{
	const struct broker_proc *b = p;
	LOCAL_OPTS(local_acquire_opts, v, .timeout_ms = 0, .value = "leader-x", .value_len = 8);
	struct local_session_opts o;
	local_session *s;
	char buf[8];

	local_session_opts_init(&o);
	o.socket_path = b->sock;
	o.lock_delay_ms = 0;
	o.behavior = LOCAL_BEHAVIOR_DELETE;
	CHECK_OK(local_session_open(&o, &s));
	CHECK_OK(local_lock(s, "bd/k", &v, NULL));
	say(out, "held");
	hear(in, buf, sizeof(buf));
}

TEST(admin, behavior_delete_drops_the_value_and_the_key, 20)
{
	static const char *const flags[] = { "--gc-idle", "1", NULL };
	struct broker_proc b;
	local_session *obs;
	struct child d;

	broker_start(&b, flags);
	obs = open_session(&b, "obs", 0, 0);
	child_spawn(&d, delete_child, &b);
	child_expect(&d, "held", 5000);
	CHECK_EQ(info_of(obs, "bd/k")->value_len, 8);
	/* Invalidated by its death: the value goes with the hold. */
	child_kill(&d);
	child_wait(&d, 5000);
	CHECK(WAIT_FOR(info_of(obs, "bd/k")->holders == 0, 5000));
	CHECK_EQ(info_of(obs, "bd/k")->value_len, 0);
	/* ... and the key itself once it is idle. */
	CHECK(WAIT_FOR(!key_exists(obs, "bd/k"), 8000));
	CHECK_EQ(segment_violations(obs), 0);
	broker_stop(&b);
}
