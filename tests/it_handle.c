// SPDX-License-Identifier: MIT
/*
 * Key handles (local_key_open() and the calls by handle) against a real
 * broker: the same answers and tokens as the calls by name, and never an
 * operation on another key when the entry the handle found last was
 * reclaimed and re-used, when the broker restarted, in a child after fork(),
 * or when the key changed kind.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker_fixture.h"
#include "harness.h"
#include "invariants.h"

static const LOCAL_OPTS(local_acquire_opts, try_once, .timeout_ms = 0);

static struct local_key_info info_of(local_session *s, const char *key)
{
	LOCAL_OPTS(local_key_info, info);

	CHECK_OK(local_info(s, key, &info));
	return info;
}

static local_key *key_open(local_session *s, const char *key)
{
	local_key *h = NULL;

	CHECK_OK(local_key_open(s, key, &h));
	CHECK(h != NULL);
	return h;
}

/* Lock and release by @h twice: the first makes the key (under its mutex),
 * the second is lock-free, and its release leaves the handle its node. */
static void lock_twice(local_key *h)
{
	int i;

	for (i = 0; i < 2; i++) {
		CHECK_OK(local_key_lock(h, &try_once, NULL));
		CHECK_OK(local_key_release(h));
	}
}

/* A broker, sessions "a" and "o", and a handle of a's on @key that keeps its
 * node (the one node in use). */
static local_key *kept_setup(struct broker_proc *b, local_session **a, local_session **o,
			     const char *key)
{
	local_key *h;

	broker_start(b, NULL);
	*a = open_session(b, "a", 0, 0);
	*o = open_session(b, "o", 0, 0);
	h = key_open(*a, key);
	lock_twice(h);
	CHECK_EQ(used_nodes(*o), 1);
	return h;
}

/* Lock, try, re-acquire, release and their errors: as by name, token for token. */
TEST(handle, lock_and_release_answer_as_by_name, 20)
{
	LOCAL_OPTS(local_acquire_opts, brief, .timeout_ms = 50);
	struct broker_proc b;
	local_session *a, *o;
	local_key *ha, *ho;
	uint64_t t1 = 0, t2 = 0, t3 = 0, held = 0;
	int i;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	o = open_session(&b, "o", 0, 0);
	ha = key_open(a, "h/k");
	ho = key_open(o, "h/k");
	CHECK(!strcmp(local_key_name(ha), "h/k"));

	/* A key that does not exist yet is made by the first lock. */
	CHECK_OK(local_key_lock(ha, NULL, &t1));
	CHECK(t1 != 0);
	CHECK_OK(local_held(a, "h/k", &held));
	CHECK_EQ(held, t1);
	CHECK_EQ(info_of(o, "h/k").token, t1);
	/* Re-acquire: at once, the same token, by handle or by name. */
	CHECK_OK(local_key_lock(ha, &try_once, &t2));
	CHECK_EQ(t2, t1);
	CHECK_OK(local_lock(a, "h/k", &try_once, &t2));
	CHECK_EQ(t2, t1);
	/* Another session: busy on a try, a timeout on a wait. */
	CHECK_RC(local_key_lock(ho, &try_once, NULL), -EBUSY);
	CHECK_RC(local_lock(o, "h/k", &try_once, NULL), -EBUSY);
	CHECK_RC(local_key_lock(ho, &brief, NULL), -ETIMEDOUT);
	/* Released by handle: the other takes it, with a larger token. */
	CHECK_OK(local_key_release(ha));
	CHECK_RC(local_key_release(ha), -LOCAL_ENOTHELD);
	CHECK_RC(local_release(a, "h/k"), -LOCAL_ENOTHELD);
	CHECK_OK(local_key_lock(ho, &try_once, &t3));
	CHECK(t3 > t1);
	CHECK_EQ(info_of(a, "h/k").token, t3);
	/* By name and by handle mix: one hold, one release. */
	CHECK_OK(local_release(o, "h/k"));
	CHECK_RC(local_key_release(ho), -LOCAL_ENOTHELD);
	/* Tokens keep rising, whichever way the key is taken. */
	for (i = 0; i < 100; i++) {
		uint64_t t = 0;

		if (i % 2)
			CHECK_OK(local_key_lock(ha, NULL, &t));
		else
			CHECK_OK(local_lock(a, "h/k", NULL, &t));
		CHECK(t > t3);
		CHECK_EQ(info_of(o, "h/k").token, t);
		t3 = t;
		if (i % 3)
			CHECK_OK(local_key_release(ha));
		else
			CHECK_OK(local_release(a, "h/k"));
	}
	/* A value and a lease go the mutex path, by handle too. */
	{
		LOCAL_OPTS(local_acquire_opts, v, .timeout_ms = 0, .value = "leader",
			   .value_len = 6, .lease_ms = 60000);

		CHECK_OK(local_key_lock(ha, &v, &t1));
		CHECK_EQ(info_of(o, "h/k").value_len, 6);
		CHECK_EQ(info_of(o, "h/k").token, t1);
		CHECK_OK(local_key_release(ha));
	}
	CHECK_EQ(info_of(o, "h/k").lock_index, 103);
	CHECK_OK(local_key_close(ha));
	CHECK_OK(local_key_close(ho));
	CHECK_EQ(segment_violations(a), 0);
	broker_stop(&b);
}

/* Semaphores by handle: slots, limits, kinds, as by name. */
TEST(handle, semaphores_answer_as_by_name, 20)
{
	struct broker_proc b;
	local_session *s[3];
	local_key *h[3], *lk;
	uint64_t t[3] = { 0 }, held = 0;
	int i;

	broker_start(&b, NULL);
	for (i = 0; i < 3; i++) {
		s[i] = open_session(&b, "s", 0, 0);
		h[i] = key_open(s[i], "h/sem");
	}
	CHECK_OK(local_key_sem_acquire(h[0], 2, &try_once, &t[0]));
	CHECK_OK(local_key_sem_acquire(h[1], 2, &try_once, &t[1]));
	CHECK(t[1] > t[0]);
	CHECK_RC(local_key_sem_acquire(h[2], 2, &try_once, NULL), -EBUSY);
	CHECK_RC(local_sem_acquire(s[2], "h/sem", 2, &try_once, NULL), -EBUSY);
	/* Asking again: its own token, at once. */
	CHECK_OK(local_key_sem_acquire(h[0], 2, &try_once, &held));
	CHECK_EQ(held, t[0]);
	/* Another limit, another kind, no limit. */
	CHECK_RC(local_key_sem_acquire(h[2], 3, &try_once, NULL), -LOCAL_ELIMIT);
	CHECK_RC(local_key_lock(h[2], &try_once, NULL), -LOCAL_EKIND);
	CHECK_RC(local_key_sem_acquire(h[2], 0, &try_once, NULL), -EINVAL);
	CHECK_OK(local_key_release(h[0]));
	CHECK_OK(local_key_sem_acquire(h[2], 2, &try_once, &t[2]));
	CHECK(t[2] > t[1]);
	CHECK_OK(local_held(s[2], "h/sem", &held));
	CHECK_EQ(held, t[2]);
	CHECK_OK(local_key_release(h[1]));
	CHECK_OK(local_key_release(h[2]));
	CHECK_RC(local_key_release(h[2]), -LOCAL_ENOTHELD);
	/* A lock key used as a semaphore by handle. */
	lk = key_open(s[0], "h/lock");
	CHECK_OK(local_lock(s[1], "h/lock", NULL, NULL));
	CHECK_RC(local_key_sem_acquire(lk, 2, &try_once, NULL), -LOCAL_EKIND);
	CHECK_OK(local_release(s[1], "h/lock"));
	CHECK_RC(local_key_sem_acquire(lk, 2, &try_once, NULL), -LOCAL_EKIND);
	CHECK_OK(local_key_close(lk));
	for (i = 0; i < 3; i++)
		CHECK_OK(local_key_close(h[i]));
	CHECK_EQ(segment_violations(s[0]), 0);
	broker_stop(&b);
}

/*
 * The handle's entry reclaimed and re-used by another key (a table of one
 * entry, so it must be the same one): the handle's calls act on its own key
 * only. The other key, held by the same session, is neither released nor
 * taken again; the handle's lock finds the table full, as by name.
 */
TEST(handle, a_reused_entry_is_never_taken_for_the_key, 20)
{
	static const char *const flags[] = { "--max-keys", "1", "--gc-idle", "0", NULL };
	struct broker_proc b;
	local_session *a;
	local_key *ha, *hb;
	uint64_t tb = 0, tok = 0;
	int i;

	broker_start(&b, flags);
	a = open_session(&b, "a", 0, 0);
	ha = key_open(a, "reuse/a");
	hb = key_open(a, "reuse/b");
	/* Many lock-free rounds: the handle has found and kept its entry. */
	for (i = 0; i < 10; i++) {
		CHECK_OK(local_key_lock(ha, &try_once, NULL));
		CHECK_OK(local_key_release(ha));
	}
	CHECK(keytab_reclaim_idle(a->seg, 0, UINT32_MAX, 0) == 1);
	/* The one entry now holds reuse/b, held by the same session. */
	CHECK_OK(local_lock(a, "reuse/b", NULL, &tb));
	CHECK_EQ(info_of(a, "reuse/a").kind, LOCAL_KIND_NONE);
	CHECK_RC(local_key_release(ha), -LOCAL_ENOTHELD);
	CHECK_RC(local_key_lock(ha, &try_once, NULL), -LOCAL_EMAXKEYS);
	CHECK_RC(local_lock(a, "reuse/a", &try_once, NULL), -LOCAL_EMAXKEYS);
	CHECK_OK(local_held(a, "reuse/b", &tok));
	CHECK_EQ(tok, tb);
	CHECK_EQ(info_of(a, "reuse/b").holders, 1);
	/* The same with reuse/b taken lock-free through its own handle. */
	CHECK_OK(local_key_release(hb));
	CHECK_OK(local_key_lock(hb, &try_once, &tb));
	CHECK_RC(local_key_release(ha), -LOCAL_ENOTHELD);
	CHECK_RC(local_key_lock(ha, NULL, NULL), -LOCAL_EMAXKEYS);
	CHECK_OK(local_held(a, "reuse/b", &tok));
	CHECK_EQ(tok, tb);
	/* Released and reclaimed: the entry is reuse/a's again. */
	CHECK_OK(local_key_release(hb));
	CHECK(keytab_reclaim_idle(a->seg, 0, UINT32_MAX, 0) == 1);
	CHECK_OK(local_key_lock(ha, &try_once, &tok));
	CHECK(tok > tb);
	CHECK_EQ(info_of(a, "reuse/a").holders, 1);
	CHECK_RC(local_key_release(hb), -LOCAL_ENOTHELD);
	CHECK_EQ(info_of(a, "reuse/a").holders, 1);
	CHECK_OK(local_key_release(ha));
	CHECK_OK(local_key_close(ha));
	CHECK_OK(local_key_close(hb));
	CHECK_EQ(segment_violations(a), 0);
	broker_stop(&b);
}

/* A key that changes kind while a handle keeps it: reclaimed as a lock,
 * made again as a semaphore, in the same entry. */
TEST(handle, a_key_made_again_of_another_kind, 20)
{
	static const char *const flags[] = { "--max-keys", "1", "--gc-idle", "0", NULL };
	struct broker_proc b;
	local_session *a, *o;
	local_key *h;

	broker_start(&b, flags);
	a = open_session(&b, "a", 0, 0);
	o = open_session(&b, "o", 0, 0);
	h = key_open(a, "kind/k");
	CHECK_OK(local_key_lock(h, &try_once, NULL));
	CHECK_OK(local_key_release(h));
	CHECK(keytab_reclaim_idle(a->seg, 0, UINT32_MAX, 0) == 1);
	CHECK_OK(local_sem_acquire(o, "kind/k", 3, &try_once, NULL));
	CHECK_RC(local_key_lock(h, &try_once, NULL), -LOCAL_EKIND);
	CHECK_RC(local_lock(a, "kind/k", &try_once, NULL), -LOCAL_EKIND);
	CHECK_RC(local_key_release(h), -LOCAL_ENOTHELD);
	CHECK_OK(local_key_sem_acquire(h, 3, &try_once, NULL));
	CHECK_EQ(info_of(o, "kind/k").holders, 2);
	CHECK_OK(local_key_release(h));
	CHECK_OK(local_release(o, "kind/k"));
	CHECK_OK(local_key_close(h));
	CHECK_EQ(segment_violations(a), 0);
	broker_stop(&b);
}

/* A broker restart keeps the segment and the hold: the handle goes on. */
TEST(handle, a_handle_outlives_a_broker_restart, 30)
{
	struct broker_proc b;
	local_session *a;
	local_key *h;
	uint64_t t1 = 0, t2 = 0;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	h = key_open(a, "restart/k");
	CHECK_OK(local_key_lock(h, NULL, &t1));
	broker_signal_wait(&b, SIGKILL);
	/* No broker: uncontended locking needs none. */
	CHECK_OK(local_key_lock(h, &try_once, &t2));
	CHECK_EQ(t2, t1);
	broker_restart(&b);
	CHECK(WAIT_SESSIONS(a, 1, 5000));
	CHECK_EQ(info_of(a, "restart/k").token, t1);
	CHECK_OK(local_key_release(h));
	CHECK_OK(local_key_lock(h, &try_once, &t2));
	CHECK(t2 > t1);
	CHECK_OK(local_key_release(h));
	CHECK_OK(local_key_close(h));
	CHECK_EQ(segment_violations(a), 0);
	broker_stop(&b);
}

/* A session ended under the handle: -LOCAL_ESESSION, as by name. */
TEST(handle, an_ended_session_is_reported, 20)
{
	struct broker_proc b;
	local_session *a, *o;
	local_key *h;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	o = open_session(&b, "o", 0, 0);
	h = key_open(a, "end/k");
	CHECK_OK(local_key_lock(h, &try_once, NULL));
	CHECK_OK(local_session_destroy(o, local_session_id(a)));
	CHECK_RC(local_key_lock(h, &try_once, NULL), -LOCAL_ESESSION);
	CHECK_RC(local_lock(a, "end/k", &try_once, NULL), -LOCAL_ESESSION);
	CHECK_RC(local_key_sem_acquire(h, 2, &try_once, NULL), -LOCAL_ESESSION);
	CHECK_RC(local_key_release(h), local_release(a, "end/k"));
	CHECK_OK(local_key_close(h));
	broker_stop(&b);
}

/* In a child after fork(): every call by handle says the session is the
 * parent's, and the parent's hold stays. */
TEST(handle, a_child_after_fork_gets_the_session_error, 20)
{
	struct broker_proc b;
	local_session *s;
	local_key *h, *other;
	pid_t pid;
	int status;

	broker_start(&b, NULL);
	s = open_session(&b, "parent", 0, 0);
	h = key_open(s, "fork/k");
	other = key_open(s, "fork/other");
	lock_twice(other); /* it keeps a node, the parent's */
	CHECK_OK(local_key_lock(h, NULL, NULL));
	CHECK_EQ(used_nodes(s), 2);
	pid = fork();
	if (pid == 0) {
		local_key *n = NULL;

		if (local_key_lock(other, &try_once, NULL) != -LOCAL_EFORKED)
			_exit(1);
		if (local_key_lock(h, &try_once, NULL) != -LOCAL_EFORKED)
			_exit(2);
		if (local_key_sem_acquire(other, 2, NULL, NULL) != -LOCAL_EFORKED)
			_exit(3);
		if (local_key_release(h) != -LOCAL_EFORKED)
			_exit(4);
		if (local_key_open(s, "fork/new", &n) != -LOCAL_EFORKED || n)
			_exit(5);
		if (local_key_close(h) != -LOCAL_EFORKED) /* frees the child's copy only */
			_exit(6);
		if (local_key_close(other) != -LOCAL_EFORKED) /* and leaves the node */
			_exit(7);
		_exit(0);
	}
	CHECK(pid > 0);
	CHECK_EQ(waitpid(pid, &status, 0), pid);
	CHECK(WIFEXITED(status));
	CHECK_EQ(WEXITSTATUS(status), 0);
	CHECK_EQ(info_of(s, "fork/k").holders, 1);
	CHECK_EQ(used_nodes(s), 2);
	CHECK_OK(local_key_release(h));
	CHECK_OK(local_key_lock(other, &try_once, NULL));
	CHECK_OK(local_key_release(other));
	CHECK_OK(local_key_close(h));
	CHECK_OK(local_key_close(other));
	broker_stop(&b);
}

/* Bad arguments and limits: the codes the calls by name give. */
TEST(handle, bad_arguments_and_limits, 20)
{
	static const char *const flags[] = { "--max-holds", "1", NULL };
	struct local_acquire_opts unset = { 0 };
	struct broker_proc b;
	char longest[LOCAL_KEY_MAX + 2];
	local_session *a, *o;
	local_key *h = NULL, *one, *two;

	broker_start(&b, flags);
	a = open_session(&b, "a", 0, 0);
	o = open_session(&b, "o", 0, 0);
	CHECK_RC(local_key_open(NULL, "k", &h), -EINVAL);
	CHECK_RC(local_key_open(a, NULL, &h), -EINVAL);
	CHECK_RC(local_key_open(a, "k", NULL), -EINVAL);
	CHECK_RC(local_key_open(a, "", &h), -EINVAL);
	CHECK(h == NULL);
	memset(longest, 'x', sizeof(longest) - 1);
	longest[sizeof(longest) - 1] = '\0';
	CHECK_RC(local_key_open(a, longest, &h), -ENAMETOOLONG);
	CHECK(h == NULL);
	longest[LOCAL_KEY_MAX] = '\0'; /* 255 bytes: the longest key */
	h = key_open(a, longest);
	CHECK_OK(local_key_lock(h, &try_once, NULL));
	CHECK_EQ(info_of(o, longest).holders, 1);
	CHECK_OK(local_key_release(h));
	CHECK_OK(local_key_close(h));

	CHECK_RC(local_key_lock(NULL, NULL, NULL), -EINVAL);
	CHECK_RC(local_key_sem_acquire(NULL, 1, NULL, NULL), -EINVAL);
	CHECK_RC(local_key_release(NULL), -EINVAL);
	CHECK_RC(local_key_close(NULL), -EINVAL);
	CHECK(!strcmp(local_key_name(NULL), ""));
	one = key_open(a, "lim/one");
	two = key_open(o, "lim/two");
	CHECK_RC(local_key_lock(one, &unset, NULL), -EINVAL);
	CHECK_RC(local_lock(a, "lim/one", &unset, NULL), -EINVAL);
	/* One hold in the whole table: the second is refused, by handle as
	 * by name. */
	CHECK_OK(local_key_lock(one, &try_once, NULL));
	CHECK_RC(local_key_lock(two, &try_once, NULL), -LOCAL_EMAXHOLDS);
	CHECK_RC(local_lock(o, "lim/two", &try_once, NULL), -LOCAL_EMAXHOLDS);
	CHECK_OK(local_key_release(one));
	CHECK_OK(local_key_lock(two, &try_once, NULL));
	CHECK_OK(local_key_release(two));
	CHECK_OK(local_key_close(one));
	CHECK_OK(local_key_close(two));
	broker_stop(&b);
}

/* Closing a handle releases nothing: the hold is the session's. */
TEST(handle, closing_a_handle_keeps_the_hold, 20)
{
	struct broker_proc b;
	local_session *a;
	local_key *h;
	uint64_t t = 0, held = 0;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	h = key_open(a, "close/k");
	CHECK_OK(local_key_lock(h, NULL, &t));
	CHECK_OK(local_key_close(h));
	CHECK_OK(local_held(a, "close/k", &held));
	CHECK_EQ(held, t);
	/* A new handle on the key releases it. */
	h = key_open(a, "close/k");
	CHECK_OK(local_key_release(h));
	CHECK_OK(local_key_close(h));
	CHECK_RC(local_held(a, "close/k", &held), -LOCAL_ENOTHELD);
	CHECK_OK(local_session_close(a));
	broker_stop(&b);
}

/*
 * A handle in use while another thread keeps reclaiming its one entry and
 * giving it to another key: every grant by handle is a hold of the handle's
 * key (its session holds that key by name at that moment), every release
 * ends it, and the other key's holds are never touched.
 */
struct churn {
	const struct broker_proc *b;
	local_session *s;
	_Atomic int stop;
	_Atomic long grants, bad;
};

static void *churn_other_key(void *p)
{
	struct churn *c = p;
	uint64_t t = 0, held = 0;
	int i;

	while (!atomic_load(&c->stop)) {
		keytab_reclaim_idle(c->s->seg, 0, UINT32_MAX, 0);
		if (local_lock(c->s, "churn/other", &try_once, &t))
			continue;
		atomic_fetch_add(&c->grants, 1);
		/* Held by name: the handle's thread must not have released it. */
		if (local_held(c->s, "churn/other", &held) || held != t)
			atomic_fetch_add(&c->bad, 1);
		if (local_release(c->s, "churn/other"))
			atomic_fetch_add(&c->bad, 1);
		/* Leave the entry the other key's, free and lock-free, a while:
		 * where a handle that trusted its cached index would take it. */
		for (i = 0; i < 20; i++)
			sched_yield();
	}
	return NULL;
}

TEST(handle, a_handle_races_the_reuse_of_its_entry, 60)
{
	static const char *const flags[] = { "--max-keys", "1", "--gc-idle", "0", NULL };
	struct broker_proc b;
	struct churn c = { 0 };
	local_session *a;
	local_key *h;
	pthread_t th;
	uint64_t t = 0, held = 0, last = 0;
	long i, mine = 0;
	uint64_t end;
	int err;

	broker_start(&b, flags);
	a = open_session(&b, "a", 0, 0);
	c.b = &b;
	c.s = open_session(&b, "other", 0, 0);
	h = key_open(a, "churn/mine");
	CHECK(pthread_create(&th, NULL, churn_other_key, &c) == 0);
	/* Until both sides had the entry often, or 20 s (a starved thread). */
	end = now_ms() + 20000;
	for (i = 0; (mine < 1000 || atomic_load(&c.grants) < 1000) && now_ms() < end; i++) {
		err = local_key_lock(h, &try_once, &t);
		if (err == -LOCAL_EMAXKEYS || err == -EBUSY)
			continue; /* the entry is the other key's, or being reclaimed */
		CHECK_OK(err);
		CHECK(t > last);
		last = t;
		CHECK_OK(local_held(a, "churn/mine", &held));
		CHECK_EQ(held, t);
		CHECK_RC(local_held(a, "churn/other", &held), -LOCAL_ENOTHELD);
		CHECK_OK(local_key_release(h));
		CHECK_RC(local_key_release(h), -LOCAL_ENOTHELD);
		mine++;
		/* Ahead of the other key: leave the entry free a while, as it
		 * does, so that both sides have it often (else one thread takes
		 * it millions of times while the other starves, for 20 s of CPU). */
		if (mine > 2 * atomic_load(&c.grants) + 10)
			for (int y = 0; y < 20; y++)
				sched_yield();
	}
	atomic_store(&c.stop, 1);
	CHECK(pthread_join(th, NULL) == 0);
	CHECK_EQ(atomic_load(&c.bad), 0);
	fprintf(stderr, "    %ld rounds: %ld grants by handle, %ld of the other key\n", i, mine,
		atomic_load(&c.grants));
	CHECK(mine > 0);
	CHECK_OK(local_key_close(h));
	CHECK_EQ(segment_violations(a), 0);
	broker_stop(&b);
}

/*
 * A handle keeps the node of its last lock-free hold for its next one (no
 * claim: fastpath.c, "A handle's node"): one node in use between holds, not
 * a hold (info and stats say free), counted against --max-holds until the
 * handle is closed.
 */
TEST(handle, a_handle_keeps_one_node_between_holds, 20)
{
	static const char *const flags[] = { "--max-holds", "2", NULL };
	struct broker_proc b;
	local_session *a, *o;
	local_key *h;
	uint64_t t = 0, last = 0, held = 0;
	int i;

	broker_start(&b, flags);
	a = open_session(&b, "a", 0, 0);
	o = open_session(&b, "o", 0, 0);
	h = key_open(a, "keep/k");
	lock_twice(h);
	for (i = 0; i < 1000; i++) {
		CHECK_OK(local_key_lock(h, &try_once, &t));
		CHECK(t > last);
		last = t;
		CHECK_OK(local_key_release(h));
		CHECK_EQ(used_nodes(a), 1);
	}
	/* (Asked while held, info and held take the key's mutex, which makes
	 * a lock-free hold a listed one: its release frees the node.) */
	CHECK_EQ(info_of(o, "keep/k").holders, 0);
	CHECK_OK(local_key_lock(h, &try_once, &t));
	CHECK_OK(local_held(a, "keep/k", &held));
	CHECK_EQ(held, t);
	CHECK_OK(local_key_release(h));
	CHECK_EQ(used_nodes(a), 0);
	CHECK_OK(local_key_lock(h, &try_once, &t));
	CHECK_OK(local_key_release(h));
	CHECK_EQ(used_nodes(a), 1);
	/* Released by name (the node freed), the handle keeps another. */
	CHECK_OK(local_key_lock(h, &try_once, NULL));
	CHECK_OK(local_release(a, "keep/k"));
	CHECK_EQ(used_nodes(a), 0);
	CHECK_OK(local_key_lock(h, &try_once, NULL));
	CHECK_OK(local_key_release(h));
	CHECK_EQ(used_nodes(a), 1);
	CHECK_EQ(atomic_load(&a->nkept), 1);
	/* The other node: one hold more, then the cap. */
	CHECK_OK(local_lock(o, "keep/other", &try_once, NULL));
	CHECK_RC(local_lock(a, "keep/third", &try_once, NULL), -LOCAL_EMAXHOLDS);
	/* The key is free to the other session, which takes it by name. */
	CHECK_OK(local_release(o, "keep/other"));
	CHECK_OK(local_lock(o, "keep/k", &try_once, &t));
	CHECK(t > last);
	CHECK_RC(local_key_lock(h, &try_once, NULL), -EBUSY);
	CHECK_OK(local_release(o, "keep/k"));
	/* Closed, the handle gives its node back. */
	CHECK_OK(local_key_close(h));
	CHECK_EQ(used_nodes(a), 0);
	CHECK_EQ(atomic_load(&a->nkept), 0);
	CHECK_OK(local_lock(a, "keep/third", &try_once, NULL));
	CHECK_OK(local_lock(o, "keep/other", &try_once, NULL));
	CHECK_EQ(segment_violations(a), 0);
	broker_stop(&b);
}

/* The node is one thread's: another thread using the same handle claims
 * and frees a node of its own, and the kept one stays the first's. */
static void *lock_release_once(void *p)
{
	local_key *h = p;

	if (local_key_lock(h, &try_once, NULL) || local_key_release(h))
		return (void *)1;
	return NULL;
}

static void *lock_once(void *p)
{
	return local_key_lock(p, &try_once, NULL) ? (void *)1 : NULL;
}

TEST(handle, a_kept_node_is_one_thread_s, 20)
{
	struct broker_proc b;
	local_session *a;
	local_key *h;
	pthread_t th;
	void *rc = (void *)1;
	int i;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	h = key_open(a, "thread/k");
	lock_twice(h);
	CHECK_EQ(used_nodes(a), 1);
	for (i = 0; i < 3; i++) {
		CHECK(pthread_create(&th, NULL, lock_release_once, h) == 0);
		CHECK(pthread_join(th, &rc) == 0);
		CHECK(rc == NULL);
		CHECK_EQ(used_nodes(a), 1);
	}
	/* The other thread's hold (a node of its own), released by the
	 * owner: freed, not kept, as the owner keeps one already. */
	CHECK(pthread_create(&th, NULL, lock_once, h) == 0);
	CHECK(pthread_join(th, &rc) == 0);
	CHECK(rc == NULL);
	CHECK_EQ(used_nodes(a), 2);
	CHECK_OK(local_key_release(h));
	CHECK_EQ(used_nodes(a), 1);
	CHECK_OK(local_key_lock(h, &try_once, NULL));
	CHECK_EQ(used_nodes(a), 1); /* the kept node, now the hold */
	CHECK_OK(local_key_release(h));
	CHECK_EQ(used_nodes(a), 1);
	CHECK_OK(local_key_close(h));
	CHECK_EQ(used_nodes(a), 0);
	broker_stop(&b);
}

/*
 * A session that ends while a handle keeps a node (an operator ends it; a
 * TTL would do the same): its holds end at once, and its slot stays closing
 * until the node is given back, by the handle's next use (which reports the
 * session gone) or its close.
 */
TEST(handle, a_session_ended_under_a_kept_node, 30)
{
	struct broker_proc b;
	local_session *a, *c, *o;
	local_key *ha, *hc, *hk;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	c = open_session(&b, "c", 0, 0);
	o = open_session(&b, "o", 0, 0);
	ha = key_open(a, "ended/a");
	hk = key_open(a, "ended/held");
	hc = key_open(c, "ended/c");
	lock_twice(ha);
	CHECK_OK(local_key_lock(hk, &try_once, NULL));
	lock_twice(hc);
	CHECK_EQ(used_nodes(o), 3);
	CHECK_OK(local_session_destroy(o, local_session_id(a)));
	CHECK_OK(local_session_destroy(o, local_session_id(c)));
	/* The holds end at once; the sessions stay closing. */
	CHECK_OK(local_lock(o, "ended/held", &try_once, NULL));
	CHECK_OK(local_release(o, "ended/held"));
	CHECK_EQ(live_sessions(o), 3);
	/* a: the handle's next use gives the node back; c: its close. */
	CHECK_RC(local_key_lock(ha, &try_once, NULL), -LOCAL_ESESSION);
	CHECK_OK(local_key_close(hc));
	WAIT_SESSIONS(o, 1, 5000);
	CHECK_EQ(used_nodes(o), 0);
	CHECK_EQ(segment_violations(o), 0);
	CHECK_OK(local_key_close(ha));
	CHECK_OK(local_key_close(hk));
	broker_stop(&b);
}

/* Closing a session with a handle still open (the caller's mistake)
 * gives the handle's node back, so the session's slot is freed at once. */
TEST(handle, closing_the_session_gives_the_kept_node_back, 20)
{
	struct broker_proc b;
	local_session *a, *o;
	local_key *h;

	h = kept_setup(&b, &a, &o, "close/kept");
	CHECK_OK(local_session_close(a));
	WAIT_SESSIONS(o, 1, 5000);
	CHECK_EQ(used_nodes(o), 0);
	CHECK_EQ(segment_violations(o), 0);
	free(h); /* what local_key_close() would free: its session is gone */
	broker_stop(&b);
}

/* A process killed while its handle keeps a node: the sweep at its death
 * frees the node with the session. */
TEST(handle, a_kept_node_of_a_killed_process_is_freed, 20)
{
	struct broker_proc b;
	local_session *o;
	int fds[2], status;
	char c = 0;
	pid_t pid;

	broker_start(&b, NULL);
	o = open_session(&b, "o", 0, 0);
	CHECK(pipe(fds) == 0);
	pid = fork();
	if (pid == 0) {
		local_session *s = open_session(&b, "killed", 0, 0);
		local_key *h = NULL;

		if (local_key_open(s, "killed/k", &h))
			_exit(1);
		lock_twice(h);
		if (write(fds[1], "k", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	CHECK(pid > 0);
	close(fds[1]);
	CHECK_EQ(read(fds[0], &c, 1), 1);
	close(fds[0]);
	CHECK_EQ(used_nodes(o), 1);
	CHECK_EQ(live_sessions(o), 2);
	CHECK_OK(kill(pid, SIGKILL));
	CHECK_EQ(waitpid(pid, &status, 0), pid);
	WAIT_SESSIONS(o, 1, 5000);
	CHECK_EQ(used_nodes(o), 0);
	CHECK_EQ(segment_violations(o), 0);
	broker_stop(&b);
}

/* A session's handles keep LOCAL_KEPT_MAX nodes at most: the others free
 * theirs, as by name. */
TEST(handle, a_session_keeps_a_bounded_number_of_nodes, 20)
{
	struct broker_proc b;
	local_session *a;
	local_key *h[LOCAL_KEPT_MAX + 4];
	char key[32];
	unsigned i;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	for (i = 0; i < LOCAL_KEPT_MAX + 4; i++) {
		snprintf(key, sizeof(key), "bound/%u", i);
		h[i] = key_open(a, key);
		lock_twice(h[i]);
	}
	CHECK_EQ(used_nodes(a), LOCAL_KEPT_MAX);
	CHECK_EQ(atomic_load(&a->nkept), LOCAL_KEPT_MAX);
	/* One closed, the next keeps one in its place. */
	CHECK_OK(local_key_close(h[0]));
	CHECK_EQ(used_nodes(a), LOCAL_KEPT_MAX - 1);
	lock_twice(h[LOCAL_KEPT_MAX + 3]);
	CHECK_EQ(used_nodes(a), LOCAL_KEPT_MAX);
	for (i = 1; i < LOCAL_KEPT_MAX + 4; i++)
		CHECK_OK(local_key_close(h[i]));
	CHECK_EQ(used_nodes(a), 0);
	CHECK_EQ(atomic_load(&a->nkept), 0);
	broker_stop(&b);
}

/*
 * A semaphore of limit > 1 is taken through its slots, which claim a node
 * at every acquire (slot_commit() has no handle): a handle cannot take such
 * a node back, so it must not keep it either (it would hold one of the
 * session's LOCAL_KEPT_MAX and a --max-holds node for nothing, and handles
 * of locks that can use one would go without).
 */
TEST(handle, a_semaphore_handle_keeps_no_node_it_cannot_use, 20)
{
	struct broker_proc b;
	local_session *a;
	local_key *h[LOCAL_KEPT_MAX], *lk;
	char key[32];
	unsigned i, j;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	for (i = 0; i < LOCAL_KEPT_MAX; i++) {
		snprintf(key, sizeof(key), "semkeep/%u", i);
		h[i] = key_open(a, key);
		for (j = 0; j < 3; j++) {
			CHECK_OK(local_key_sem_acquire(h[i], 3, &try_once, NULL));
			CHECK_OK(local_key_release(h[i]));
		}
	}
	CHECK_EQ(used_nodes(a), 0);
	CHECK_EQ(atomic_load(&a->nkept), 0);
	/* A lock's handle still keeps its node. */
	lk = key_open(a, "semkeep/lock");
	lock_twice(lk);
	CHECK_EQ(used_nodes(a), 1);
	CHECK_EQ(atomic_load(&a->nkept), 1);
	CHECK_OK(local_key_close(lk));
	for (i = 0; i < LOCAL_KEPT_MAX; i++)
		CHECK_OK(local_key_close(h[i]));
	CHECK_EQ(used_nodes(a), 0);
	CHECK_EQ(segment_violations(a), 0);
	broker_stop(&b);
}

struct mt_arg {
	local_session *s, *other;
	local_key *h;
	int n, id;
	_Atomic long bad, grants;
};

static void *mt_worker(void *p)
{
	struct mt_arg *a = p;
	LOCAL_OPTS(local_key_info, info);
	int i, r;

	for (i = 0; i < a->n; i++) {
		r = local_key_lock(a->h, &try_once, NULL);
		if (r == -EBUSY)
			continue;
		if (r) {
			fprintf(stderr, "lock %d\n", r);
			atomic_fetch_add(&a->bad, 1);
			continue;
		}
		atomic_fetch_add(&a->grants, 1);
		if ((i + a->id) % 13 == 0)
			(void)local_info(a->other, "mt/k", &info); /* adopts the hold */
		if ((i + a->id) % 5 == 0)
			r = local_release(a->s, "mt/k");
		else
			r = local_key_release(a->h);
		if (r && r != -LOCAL_ENOTHELD) {
			fprintf(stderr, "release %d\n", r);
			atomic_fetch_add(&a->bad, 1);
		}
	}
	return NULL;
}

TEST(handle, threads_sharing_handles_keep_the_counts, 60)
{
	struct broker_proc b;
	local_session *s[2];
	local_key *h[2];
	struct mt_arg arg[6];
	pthread_t th[6];
	int i;

	broker_start(&b, NULL);
	for (i = 0; i < 2; i++) {
		s[i] = open_session(&b, "mt", 0, 0);
		h[i] = key_open(s[i], "mt/k");
	}
	for (i = 0; i < 6; i++) {
		arg[i] = (struct mt_arg){
			.s = s[i % 2], .other = s[1 - i % 2], .h = h[i % 2], .n = 20000, .id = i
		};
		CHECK(pthread_create(&th[i], NULL, mt_worker, &arg[i]) == 0);
	}
	for (i = 0; i < 6; i++) {
		CHECK(pthread_join(th[i], NULL) == 0);
		CHECK_EQ(atomic_load(&arg[i].bad), 0);
		fprintf(stderr, "    thread %d: %ld grants\n", i, atomic_load(&arg[i].grants));
	}
	CHECK_EQ(segment_violations(s[0]), 0);
	for (i = 0; i < 2; i++)
		(void)local_release(s[i], "mt/k");
	CHECK(atomic_load(&s[0]->nkept) <= 1);
	CHECK(atomic_load(&s[1]->nkept) <= 1);
	/* (A handle whose node another thread freed counts it until its owner's
	 * next acquire finds that out.) */
	CHECK(used_nodes(s[0]) <= atomic_load(&s[0]->nkept) + atomic_load(&s[1]->nkept));
	for (i = 0; i < 2; i++)
		CHECK_OK(local_key_close(h[i]));
	CHECK_EQ(used_nodes(s[0]), 0);
	CHECK_EQ(atomic_load(&s[0]->nkept), 0);
	CHECK_EQ(atomic_load(&s[1]->nkept), 0);
	CHECK_EQ(segment_violations(s[0]), 0);
	broker_stop(&b);
}

/*
 * After its session ended, any call by a handle that reports the session
 * gone gives the handle's node back (the session's slot stays closing until
 * it does): a lock while another session holds the key, a lock while the
 * key is on the mutex path, a release.
 */
TEST(handle, every_session_error_gives_the_kept_node_back, 40)
{
	struct broker_proc b;
	local_session *a, *o;
	local_key *h;
	int round;

	broker_start(&b, NULL);
	o = open_session(&b, "o", 0, 0);
	for (round = 0; round < 3; round++) {
		a = open_session(&b, "a", 0, 0);
		h = key_open(a, "esess/k");
		lock_twice(h);
		CHECK_EQ(used_nodes(o), 1);
		if (round == 0) /* held by another: no claim to make */
			CHECK_OK(local_lock(o, "esess/k", &try_once, NULL));
		CHECK_OK(local_session_destroy(o, local_session_id(a)));
		if (round == 2)
			CHECK_RC(local_key_release(h), -LOCAL_ESESSION);
		else
			CHECK_RC(local_key_lock(h, &try_once, NULL), -LOCAL_ESESSION);
		CHECK(WAIT_SESSIONS(o, 1, 5000));
		CHECK_EQ(atomic_load(&a->nkept), 0);
		if (round == 0)
			CHECK_OK(local_release(o, "esess/k"));
		CHECK_EQ(used_nodes(o), 0);
		CHECK_OK(local_key_close(h));
		CHECK_RC(local_session_close(a), -LOCAL_ESESSION);
	}
	CHECK_EQ(segment_violations(o), 0);
	broker_stop(&b);
}

/*
 * A broker restart while a handle keeps a node: a live session keeps it (the
 * next lock takes it back); an ended one whose sweep waits for it is still
 * closing after the restart, and ends once the handle gives the node back.
 */
TEST(handle, a_kept_node_across_a_broker_restart, 40)
{
	struct broker_proc b;
	local_session *a, *c, *o;
	local_key *ha, *hc;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	c = open_session(&b, "c", 0, 0);
	o = open_session(&b, "o", 0, 0);
	ha = key_open(a, "rs/a");
	hc = key_open(c, "rs/c");
	lock_twice(ha);
	lock_twice(hc);
	CHECK_OK(local_session_destroy(o, local_session_id(c)));
	CHECK_EQ(live_sessions(o), 3);
	broker_signal_wait(&b, SIGKILL);
	broker_restart(&b);
	CHECK(WAIT_SESSIONS(o, 3, 5000));
	CHECK_EQ(used_nodes(o), 2);
	/* a's node, taken back after the restart. */
	CHECK_OK(local_key_lock(ha, &try_once, NULL));
	CHECK_EQ(used_nodes(o), 2);
	CHECK_OK(local_key_release(ha));
	/* c's: given back at its handle's next call, then the slot is freed. */
	CHECK_RC(local_key_lock(hc, &try_once, NULL), -LOCAL_ESESSION);
	CHECK(WAIT_SESSIONS(o, 2, 5000));
	CHECK_EQ(used_nodes(o), 1);
	CHECK_EQ(segment_violations(o), 0);
	CHECK_OK(local_key_close(ha));
	CHECK_OK(local_key_close(hc));
	CHECK_EQ(used_nodes(o), 0);
	broker_stop(&b);
}

/*
 * A hold taken back from the kept node and then ended by the broker (an
 * operator's force-release; a lease set by a renew running out): the
 * node goes with the hold, the handle finds that at its next lock and
 * claims another, and the counts stay exact. (A lease is set under the
 * mutex only, on a listed hold: never on a node a handle keeps.)
 */
TEST(handle, a_kept_node_ended_as_a_hold, 30)
{
	struct broker_proc b;
	local_session *a, *o;
	local_key *h;

	h = kept_setup(&b, &a, &o, "ended-hold/k");
	/* Taken back, then force-released. */
	CHECK_OK(local_key_lock(h, &try_once, NULL));
	CHECK_OK(local_force_release(o, "ended-hold/k", NULL));
	CHECK_EQ(used_nodes(o), 0);
	CHECK_RC(local_key_release(h), -LOCAL_ENOTHELD);
	CHECK_EQ(atomic_load(&a->nkept), 1); /* found out at the next lock */
	lock_twice(h);
	CHECK_EQ(used_nodes(o), 1);
	CHECK_EQ(atomic_load(&a->nkept), 1);
	/* Taken back, then a lease by a renew (under the mutex: a listed
	 * hold), which runs out. */
	CHECK_OK(local_key_lock(h, &try_once, NULL));
	CHECK_OK(local_renew(a, "ended-hold/k", 50, NULL));
	CHECK(WAIT_FOR(used_nodes(o) == 0, 5000));
	CHECK_RC(local_key_release(h), -LOCAL_EEXPIRED);
	lock_twice(h);
	CHECK_EQ(used_nodes(o), 1);
	CHECK_EQ(atomic_load(&a->nkept), 1);
	CHECK_EQ(segment_violations(o), 0);
	CHECK_OK(local_key_close(h));
	CHECK_EQ(used_nodes(o), 0);
	CHECK_EQ(atomic_load(&a->nkept), 0);
	broker_stop(&b);
}

/*
 * Fencing tokens with two threads of one session on one key: a re-acquire
 * answers the token of the hold it found, never that of another grant. The
 * handle's owner takes its node back with no claim, so the node's word stays
 * the session's across a release and the next take: a re-acquire that read
 * the fast word before the release must not believe the node's token still
 * that hold's (it may be the token the owner is about to commit, which
 * another session gets instead when the owner's commit loses).
 */
#define TOKS_MAX 400000
struct tok_arg {
	local_session *s;
	local_key *h;
	const char *key;
	bool by_name, stop_on_n;
	long n;
	uint64_t *toks;
	_Atomic long ntoks, bad;
	_Atomic int *stop;
};

static void *tok_worker(void *p)
{
	struct tok_arg *a = p;
	uint64_t t;
	long i, j;
	int r;

	for (i = 0; i < a->n && !atomic_load(a->stop); i++) {
		t = 0;
		r = a->by_name ? local_lock(a->s, a->key, &try_once, &t)
			       : local_key_lock(a->h, &try_once, &t);
		if (r == -EBUSY)
			continue;
		if (r) {
			atomic_fetch_add(&a->bad, 1);
			continue;
		}
		j = atomic_fetch_add(&a->ntoks, 1);
		if (j < TOKS_MAX)
			a->toks[j] = t;
		r = a->by_name ? local_release(a->s, a->key) : local_key_release(a->h);
		if (r && r != -LOCAL_ENOTHELD)
			atomic_fetch_add(&a->bad, 1);
	}
	return NULL;
}

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return (a > b) - (a < b);
}

TEST(handle, a_re_acquire_never_answers_another_grant_s_token, 60)
{
	struct broker_proc b;
	local_session *a, *o;
	local_key *h;
	struct tok_arg arg[3];
	pthread_t th[3];
	_Atomic int stop = 0;
	long na, no, i, j, shared = 0;
	uint64_t *ta, *to;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	o = open_session(&b, "o", 0, 0);
	h = key_open(a, "tok/k");
	lock_twice(h);
	ta = calloc(2 * TOKS_MAX, sizeof(*ta));
	to = calloc(TOKS_MAX, sizeof(*to));
	CHECK(ta && to);
	/* Session a: two threads on one handle (the first keeps the node);
	 * session o: by name. */
	for (i = 0; i < 3; i++) {
		arg[i] = (struct tok_arg){ .s = i < 2 ? a : o,
					   .h = h,
					   .key = "tok/k",
					   .by_name = i == 2,
					   .n = 2000000,
					   .toks = i == 0   ? ta
						   : i == 1 ? ta + TOKS_MAX
							    : to,
					   .stop = &stop };
		CHECK(pthread_create(&th[i], NULL, tok_worker, &arg[i]) == 0);
	}
	CHECK(WAIT_FOR(atomic_load(&arg[2].ntoks) >= TOKS_MAX ||
			       atomic_load(&arg[0].ntoks) >= TOKS_MAX,
		       10000) ||
	      1);
	atomic_store(&stop, 1);
	for (i = 0; i < 3; i++) {
		CHECK(pthread_join(th[i], NULL) == 0);
		CHECK_EQ(atomic_load(&arg[i].bad), 0);
	}
	/* Every token session a was told, against every grant of o. */
	na = 0;
	for (i = 0; i < 2; i++) {
		long n = atomic_load(&arg[i].ntoks);

		n = n < TOKS_MAX ? n : TOKS_MAX;
		for (j = 0; j < n; j++)
			ta[na++] = arg[i].toks[j];
	}
	no = atomic_load(&arg[2].ntoks);
	no = no < TOKS_MAX ? no : TOKS_MAX;
	qsort(ta, (size_t)na, sizeof(*ta), cmp_u64);
	qsort(to, (size_t)no, sizeof(*to), cmp_u64);
	for (i = 0, j = 0; i < na && j < no;) {
		if (ta[i] == to[j]) {
			shared++;
			i++;
		} else if (ta[i] < to[j]) {
			i++;
		} else {
			j++;
		}
	}
	fprintf(stderr, "    %ld answers to a, %ld grants to o, %ld tokens in both\n", na, no,
		shared);
	CHECK_EQ(shared, 0);
	free(ta);
	free(to);
	CHECK_OK(local_key_close(h));
	CHECK_EQ(segment_violations(o), 0);
	broker_stop(&b);
}

/*
 * A kept node is an operation in flight: while its process lives, only that
 * process frees it, even when its key has been quarantined meanwhile (the
 * sweep of its ended session cannot lock the key, and must not free the node
 * under a process that may take it back at any moment: the session stays
 * closing until the handle gives it back, as for any other key).
 */
TEST(handle, a_kept_node_of_a_quarantined_key_stays_its_process_s, 30)
{
	LOCAL_OPTS(local_key_info, info);
	struct broker_proc b;
	local_session *a, *o;
	struct seg_key *k;
	local_key *h;

	h = kept_setup(&b, &a, &o, "quar/k");
	/* Damage the entry (a lock of limit 0): the next mutex holder
	 * quarantines it. */
	CHECK_OK(keytab_find(o->seg, "quar/k", strlen("quar/k"), false, &k));
	k->limit = 0;
	key_unlock(k);
	CHECK_RC(local_info(o, "quar/k", &info), -LOCAL_ECORRUPT);
	CHECK_OK(local_session_destroy(o, local_session_id(a)));
	CHECK_EQ(used_nodes(o), 1);
	CHECK_EQ(live_sessions(o), 2);
	CHECK_OK(local_key_close(h));
	CHECK(WAIT_SESSIONS(o, 1, 5000));
	CHECK_EQ(used_nodes(o), 0);
	CHECK_RC(local_session_close(a), -LOCAL_ESESSION);
	broker_stop(&b);
}

/*
 * A session without a process check outlives its process, which may exit
 * without closing it or its handles: the node a handle kept is then nobody's
 * (no other process can use the session), and is freed once the broker sees
 * the process gone, as liblocal(3) says ("or the process's exit"), not left
 * in use for as long as the session lasts. The session and its hold stay.
 */
TEST(handle, a_kept_node_goes_with_its_process_when_the_session_stays, 30)
{
	struct broker_proc b;
	local_session *o;
	int status, i;
	pid_t pid;

	broker_start(&b, NULL);
	o = open_session(&b, "o", 0, 0);
	pid = fork();
	if (pid == 0) {
		struct local_session_opts so;
		local_session *s = NULL;
		local_key *h = NULL;

		local_session_opts_init(&so);
		so.socket_path = b.sock;
		so.name = "nocheck";
		so.flags = LOCAL_SESSION_NO_PROCESS_CHECK;
		if (local_session_open(&so, &s) || local_key_open(s, "noproc/k", &h))
			_exit(1);
		for (i = 0; i < 2; i++)
			if (local_key_lock(h, &try_once, NULL) || local_key_release(h))
				_exit(2);
		if (local_lock(s, "noproc/held", &try_once, NULL))
			_exit(3);
		_exit(0); /* nothing closed: the session outlives this process */
	}
	CHECK(pid > 0);
	CHECK_EQ(waitpid(pid, &status, 0), pid);
	CHECK(WIFEXITED(status));
	CHECK_EQ(WEXITSTATUS(status), 0);
	CHECK_EQ(live_sessions(o), 2);
	CHECK(WAIT_FOR(used_nodes(o) == 1, 5000)); /* the hold only */
	CHECK_EQ(info_of(o, "noproc/held").holders, 1);
	CHECK_EQ(live_sessions(o), 2);
	CHECK_EQ(segment_violations(o), 0);
	broker_stop(&b);
}
