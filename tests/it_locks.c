// SPDX-License-Identifier: MIT
/* Locks against a real broker: the API contract, FIFO order, handoff. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "broker_fixture.h"
#include "harness.h"
#include "invariants.h"

TEST(locks, session_ids_are_unique_hex, 20)
{
	struct broker_proc b;
	local_session *s1, *s2;
	const char *id;
	size_t i;

	broker_start(&b, NULL);
	s1 = open_session(&b, "one", 0, 0);
	s2 = open_session(&b, "two", 0, 0);
	id = local_session_id(s1);
	CHECK_EQ(strlen(id), 32);
	for (i = 0; i < 32; i++)
		CHECK((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f'));
	CHECK(strcmp(id, local_session_id(s2)) != 0);
	CHECK_OK(local_session_close(s1));
	CHECK_OK(local_session_close(s2));
	broker_stop(&b);
}

TEST(locks, lock_try_release_and_tokens, 20)
{
	LOCAL_OPTS(local_acquire_opts, try, .timeout_ms = 0);
	struct broker_proc b;
	local_session *a, *c;
	uint64_t t1 = 0, t2 = 0, t3 = 0, t4 = 0;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	c = open_session(&b, "c", 0, 0);
	CHECK_OK(local_lock(a, "res", &try, &t1));
	CHECK(t1 > 0);
	CHECK_RC(local_lock(c, "res", &try, &t2), -EBUSY);
	/* Re-acquiring a held lock succeeds at once and keeps the token. */
	CHECK_OK(local_lock(a, "res", &try, &t2));
	CHECK_EQ(t2, t1);
	CHECK_OK(local_lock(a, "other", NULL, &t3));
	CHECK(t3 != t1);
	CHECK_OK(local_release(a, "res"));
	CHECK_RC(local_release(a, "res"), -LOCAL_ENOTHELD);
	CHECK_RC(local_release(c, "res"), -LOCAL_ENOTHELD);
	CHECK_RC(local_release(c, "never-seen"), -LOCAL_ENOTHELD);
	CHECK_OK(local_lock(c, "res", &try, &t4));
	/* Tokens rise per key and differ across keys (not ordered across). */
	CHECK(t4 > t1);
	CHECK(t4 != t3);
	CHECK_EQ(segment_violations(a), 0);
	local_session_close(a);
	local_session_close(c);
	broker_stop(&b);
}

TEST(locks, timed_acquire_times_out, 20)
{
	LOCAL_OPTS(local_acquire_opts, timed, .timeout_ms = 100);
	LOCAL_OPTS(local_key_info, info);
	struct broker_proc b;
	local_session *a, *c;
	uint64_t t0;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	c = open_session(&b, "c", 0, 0);
	CHECK_OK(local_lock(a, "k", NULL, NULL));
	t0 = now_ms();
	CHECK_RC(local_lock(c, "k", &timed, NULL), -ETIMEDOUT);
	CHECK(now_ms() - t0 >= 100);
	CHECK_OK(local_info(a, "k", &info));
	CHECK_EQ(info.waiters, 0);
	CHECK_EQ(info.holders, 1);
	CHECK_EQ(segment_violations(a), 0);
	broker_stop(&b);
}

TEST(locks, bad_arguments, 20)
{
	LOCAL_OPTS(local_acquire_opts, big, .timeout_ms = 0, .value = "", .value_len = 4096);
	char long_key[LOCAL_KEY_MAX + 2];
	struct broker_proc b;
	local_session *a;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	memset(long_key, 'x', sizeof(long_key) - 1);
	long_key[sizeof(long_key) - 1] = '\0';
	CHECK_RC(local_lock(a, "", NULL, NULL), -EINVAL);
	CHECK_RC(local_lock(a, NULL, NULL, NULL), -EINVAL);
	CHECK_RC(local_lock(NULL, "k", NULL, NULL), -EINVAL);
	CHECK_RC(local_lock(a, long_key, NULL, NULL), -ENAMETOOLONG);
	long_key[LOCAL_KEY_MAX] = '\0'; /* exactly 255 bytes is fine */
	CHECK_OK(local_lock(a, long_key, NULL, NULL));
	CHECK_RC(local_lock(a, "v", &big, NULL), -LOCAL_EVALUESIZE);
	CHECK_RC(local_release(a, ""), -EINVAL);
	broker_stop(&b);
}

TEST(locks, value_and_info, 20)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 0, .value = "node-1", .value_len = 6);
	char value[16];
	LOCAL_OPTS(local_key_info, info, .value_buf = value, .value_buf_size = sizeof(value));
	struct broker_proc b;
	local_session *a;
	uint64_t tok;

	broker_start(&b, NULL);
	a = open_session(&b, "leader-a", 0, 0);
	CHECK_OK(local_info(a, "missing", &info));
	CHECK_EQ(info.kind, LOCAL_KIND_NONE);
	CHECK_OK(local_lock(a, "svc/leader", &o, &tok));
	CHECK_OK(local_info(a, "svc/leader", &info));
	CHECK_EQ(info.kind, LOCAL_KIND_LOCK);
	CHECK_EQ(info.holders, 1);
	CHECK_EQ(info.token, tok);
	CHECK_EQ(info.lock_index, 1);
	CHECK(!strcmp(info.holder_session, local_session_id(a)));
	CHECK(!strcmp(info.holder_name, "leader-a"));
	CHECK_EQ(info.holder_pid, getpid());
	CHECK_EQ(info.value_len, 6);
	CHECK(!memcmp((char *)info.value_buf, "node-1", 6));
	/* Re-acquire replaces the value, keeps the token. */
	o.value = "node-1b";
	o.value_len = 7;
	CHECK_OK(local_lock(a, "svc/leader", &o, &tok));
	CHECK_OK(local_info(a, "svc/leader", &info));
	CHECK_EQ(info.token, tok);
	CHECK_EQ(info.value_len, 7);
	CHECK_OK(local_release(a, "svc/leader"));
	CHECK_OK(local_info(a, "svc/leader", &info));
	CHECK_EQ(info.holders, 0);
	CHECK_EQ(info.holder_session[0], '\0');
	broker_stop(&b);
}

struct waiter_arg {
	const struct broker_proc *b;
	const char *key;
	int id;
	int lock_delay_ms;
};

/* Child: queue on the key, report when granted, release on command. */
static void queue_child(void *p, int in, int out)
{
	struct waiter_arg *a = p;
	char name[32], buf[64];
	local_session *s;
	uint64_t tok;
	int r;

	snprintf(name, sizeof(name), "w%d", a->id);
	s = open_session(a->b, name, a->lock_delay_ms, 0);
	say(out, "open");
	r = local_lock(s, a->key, NULL, &tok);
	if (r)
		say(out, "error %d", r);
	else
		say(out, "got %d %llu", a->id, (unsigned long long)tok);
	if (hear(in, buf, sizeof(buf)) == 0 && !strcmp(buf, "release"))
		say(out, "released %d", local_release(s, a->key));
	hear(in, buf, sizeof(buf)); /* stay alive until told */
}

static unsigned waiters_of(local_session *s, const char *key)
{
	LOCAL_OPTS(local_key_info, info);

	return local_info(s, key, &info) ? 0 : info.waiters;
}

TEST(locks, fifo_handoff_across_processes, 30)
{
	enum { N = 6 };
	struct waiter_arg args[N];
	struct child kids[N];
	struct broker_proc b;
	local_session *a;
	char line[64], want[64];
	unsigned long long last = 0, tok;
	int i, id;

	broker_start(&b, NULL);
	a = open_session(&b, "holder", 0, 0);
	CHECK_OK(local_lock(a, "fifo", NULL, NULL));
	/* Queue the children one at a time so their arrival order is known. */
	for (i = 0; i < N; i++) {
		args[i] = (struct waiter_arg){ &b, "fifo", i, 0 };
		child_spawn(&kids[i], queue_child, &args[i]);
		child_expect(&kids[i], "open", 5000);
		CHECK(WAIT_FOR(waiters_of(a, "fifo") == (unsigned)i + 1, 5000));
	}
	CHECK_EQ(segment_violations(a), 0);
	CHECK_OK(local_release(a, "fifo"));
	for (i = 0; i < N; i++) {
		CHECK_OK(child_read(&kids[i], line, sizeof(line), 5000));
		CHECK_EQ(sscanf(line, "got %d %llu", &id, &tok), 2);
		CHECK_EQ(id, i);
		CHECK(tok > last);
		last = tok;
		/* Nobody behind has it yet: strict FIFO, one holder. */
		if (i + 1 < N)
			CHECK_EQ(child_read(&kids[i + 1], line, sizeof(line), 20), -ETIMEDOUT);
		child_send(&kids[i], "release");
		snprintf(want, sizeof(want), "released 0");
		child_expect(&kids[i], want, 5000);
	}
	for (i = 0; i < N; i++) {
		child_send(&kids[i], "exit");
		child_wait(&kids[i], 5000);
	}
	CHECK(WAIT_SESSIONS(a, 1, 5000));
	CHECK_EQ(segment_violations(a), 0);
	broker_stop(&b);
}

/* Child: take the lock and report, then wait to be killed. */
static void hold_child(void *p, int in, int out)
{
	struct waiter_arg *a = p;
	local_session *s = open_session(a->b, "holder", a->lock_delay_ms, 0);
	char buf[16];

	CHECK_OK(local_lock(s, a->key, NULL, NULL));
	say(out, "held");
	hear(in, buf, sizeof(buf));
}

static void killed_holder_hands_over(int lock_delay_ms)
{
	struct waiter_arg ha = { NULL, "crash", 0, lock_delay_ms }, wa[2];
	struct child holder, w[2];
	struct broker_proc b;
	local_session *obs;
	char line[64];
	uint64_t t0;
	int i, id;
	unsigned long long tok;

	broker_start(&b, NULL);
	ha.b = &b;
	obs = open_session(&b, "observer", 0, 0);
	child_spawn(&holder, hold_child, &ha);
	child_expect(&holder, "held", 5000);
	for (i = 0; i < 2; i++) {
		wa[i] = (struct waiter_arg){ &b, "crash", i, 0 };
		child_spawn(&w[i], queue_child, &wa[i]);
		child_expect(&w[i], "open", 5000);
		CHECK(WAIT_FOR(waiters_of(obs, "crash") == (unsigned)i + 1, 5000));
	}
	t0 = now_ms();
	child_kill(&holder);
	child_wait(&holder, 5000);
	CHECK_OK(child_read(&w[0], line, sizeof(line), 5000 + lock_delay_ms));
	CHECK_EQ(sscanf(line, "got %d %llu", &id, &tok), 2);
	CHECK_EQ(id, 0);
	if (lock_delay_ms)
		CHECK(now_ms() - t0 >= (uint64_t)lock_delay_ms - 5);
	CHECK_EQ(child_read(&w[1], line, sizeof(line), 20), -ETIMEDOUT);
	CHECK_EQ(segment_violations(obs), 0);
	for (i = 0; i < 2; i++) {
		child_kill(&w[i]);
		child_wait(&w[i], 5000);
	}
	broker_stop(&b);
}

TEST(locks, killed_holder_hands_over_in_fifo_order, 30)
{
	killed_holder_hands_over(0);
}

TEST(locks, killed_holder_hands_over_after_lock_delay, 30)
{
	killed_holder_hands_over(300);
}

TEST(locks, killed_waiter_leaves_queue_order_kept, 30)
{
	enum { N = 3 };
	struct waiter_arg wa[N];
	struct child w[N];
	struct broker_proc b;
	local_session *a;
	char line[64];
	int i, id;
	unsigned long long tok;

	broker_start(&b, NULL);
	a = open_session(&b, "holder", 0, 0);
	CHECK_OK(local_lock(a, "q", NULL, NULL));
	for (i = 0; i < N; i++) {
		wa[i] = (struct waiter_arg){ &b, "q", i, 0 };
		child_spawn(&w[i], queue_child, &wa[i]);
		child_expect(&w[i], "open", 5000);
		CHECK(WAIT_FOR(waiters_of(a, "q") == (unsigned)i + 1, 5000));
	}
	child_kill(&w[1]);
	child_wait(&w[1], 5000);
	CHECK(WAIT_FOR(waiters_of(a, "q") == N - 1, 5000));
	CHECK_EQ(segment_violations(a), 0);
	CHECK_OK(local_release(a, "q"));
	CHECK_OK(child_read(&w[0], line, sizeof(line), 5000));
	CHECK_EQ(sscanf(line, "got %d %llu", &id, &tok), 2);
	CHECK_EQ(id, 0);
	child_send(&w[0], "release");
	child_expect(&w[0], "released 0", 5000);
	CHECK_OK(child_read(&w[2], line, sizeof(line), 5000));
	CHECK_EQ(sscanf(line, "got %d %llu", &id, &tok), 2);
	CHECK_EQ(id, 2);
	child_kill(&w[0]);
	child_kill(&w[2]);
	broker_stop(&b);
}

struct thread_arg {
	const struct broker_proc *b;
	volatile int *inside;
	volatile int *violations;
	int rounds;
};

static void *contender(void *p)
{
	struct thread_arg *t = p;
	local_session *s = open_session(t->b, "thread", 0, 0);
	int i;

	for (i = 0; i < t->rounds; i++) {
		CHECK_OK(local_lock(s, "mt", NULL, NULL));
		if (__atomic_add_fetch(t->inside, 1, __ATOMIC_SEQ_CST) != 1)
			__atomic_add_fetch(t->violations, 1, __ATOMIC_SEQ_CST);
		__atomic_sub_fetch(t->inside, 1, __ATOMIC_SEQ_CST);
		CHECK_OK(local_release(s, "mt"));
	}
	local_session_close(s);
	return NULL;
}

TEST(locks, threads_with_own_sessions_exclude_each_other, 60)
{
	enum { T = 4 };
	volatile int inside = 0, violations = 0;
	struct thread_arg ta = { NULL, &inside, &violations, 2000 };
	struct broker_proc b;
	pthread_t th[T];
	local_session *obs;
	int i;

	broker_start(&b, NULL);
	ta.b = &b;
	obs = open_session(&b, "obs", 0, 0);
	for (i = 0; i < T; i++)
		CHECK(pthread_create(&th[i], NULL, contender, &ta) == 0);
	for (i = 0; i < T; i++)
		pthread_join(th[i], NULL);
	CHECK_EQ(violations, 0);
	CHECK(WAIT_SESSIONS(obs, 1, 5000));
	CHECK_EQ(segment_violations(obs), 0);
	CHECK_EQ(used_nodes(obs), 0);
	broker_stop(&b);
}
