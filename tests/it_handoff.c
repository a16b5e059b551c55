// SPDX-License-Identifier: MIT
/*
 * The release->next-holder path and the cache lines of distinct keys: a release wakes the waiter it granted after unlocking the key, so
 * a releaser that dies in between must not leave that waiter asleep; and
 * sessions that lock keys of their own use nodes of their own.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdatomic.h>
#include <string.h>

#include "broker_fixture.h"
#include "harness.h"
#include "invariants.h"

static const LOCAL_OPTS(local_acquire_opts, try_once, .timeout_ms = 0);

/* The hold node session @s has on some key, or IDX_NONE. */
static uint32_t hold_node_of(const local_session *s)
{
	const struct segment *seg = s->seg;
	uint32_t i;

	for (i = 0; i < seg->caps.max_holds; i++) {
		uint64_t w = atomic_load(&seg->nodes[i].word);

		if (w && NODE_SESSION(w) == s->who.slot &&
		    (NODE_STATE(w) == NODE_FAST_CLAIMED || NODE_STATE(w) == NODE_HOLDING))
			return i;
	}
	return IDX_NONE;
}

static uint32_t lock_and_see(local_session *s, const char *key)
{
	uint32_t n;

	CHECK_OK(local_lock(s, key, &try_once, NULL));
	n = hold_node_of(s);
	CHECK(n != IDX_NONE);
	CHECK_OK(local_release(s, key));
	return n;
}

/*
 * Two sessions lock keys of their own in turn. Each must keep to nodes of
 * its own, not adjacent ones: all sessions used to start their node search
 * at node 0, so both took turns on the same node (one line written by both
 * processes in every lock+release, until a failed claim moved one away).
 */
TEST(handoff, sessions_lock_distinct_keys_on_nodes_of_their_own, 30)
{
	struct broker_proc b;
	local_session *a, *c;
	uint32_t na[3], nc[3];
	int i, j;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	c = open_session(&b, "c", 0, 0);
	for (i = 0; i < 3; i++) {
		na[i] = lock_and_see(a, "own/a");
		nc[i] = lock_and_see(c, "own/c");
	}
	for (i = 0; i < 3; i++)
		for (j = 0; j < 3; j++) {
			uint32_t d = na[i] > nc[j] ? na[i] - nc[j] : nc[j] - na[i];

			if (d < 2)
				FAIL_AT("session a used node %u, session c node %u: the same or "
					"adjacent lines",
					na[i], nc[j]);
		}
	CHECK_EQ(segment_violations(a), 0);
	CHECK_OK(local_session_close(a));
	CHECK_OK(local_session_close(c));
	broker_stop(&b);
}

struct waiter {
	local_session *s;
	const char *key;
	_Atomic int done;
	int rc;
};

static void *wait_for_key(void *arg)
{
	struct waiter *w = arg;
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 30000);

	w->rc = local_lock(w->s, w->key, &o, NULL);
	atomic_store(&w->done, 1);
	return NULL;
}

/* Is session @s's request queued and asleep on its node's futex? */
static bool parked(const local_session *s)
{
	const struct segment *seg = s->seg;
	uint32_t i;

	for (i = seg->caps.max_holds; i < seg->nnodes; i++) {
		uint64_t w = atomic_load(&seg->nodes[i].word);

		if (NODE_STATE(w) == NODE_WAITING && NODE_SESSION(w) == s->who.slot)
			return atomic_load(&seg->nodes[i].futex) == NODE_FUTEX_PARKED;
	}
	return false;
}

/*
 * A release that grants the queue's head and stops before its wake-up call
 * (as a releaser killed between its unlock and its wake does: crash point
 * HANDOFF_UNLOCKED, covered with a real crash in it_crash_points.c): the
 * broker wakes the granted waiter on its own, without anyone touching the
 * key again. Before, the waiter slept until its own deadline.
 */
TEST(handoff, broker_wakes_a_granted_waiter_left_asleep, 30)
{
	const char *key = "handoff/left-asleep";
	struct waiter w = { .key = key };
	struct broker_proc b;
	local_session *h;
	struct seg_key *k;
	pthread_t t;
	uint32_t node, wake;

	broker_start(&b, NULL);
	h = open_session(&b, "holder", 0, 0);
	w.s = open_session(&b, "waiter", 0, 0);
	CHECK_OK(local_lock(h, key, NULL, NULL));
	CHECK_EQ(pthread_create(&t, NULL, wait_for_key, &w), 0);
	CHECK(WAIT_FOR(parked(w.s), 5000));
	/* release_slow() up to its unlock, without the wake-up call. */
	CHECK_OK(keytab_find(h->seg, key, strlen(key), false, &k));
	node = key_find_hold_locked(h->seg, k, h->who);
	CHECK(node != IDX_NONE);
	wake = key_release_hold_locked(h->seg, k, node, REL_VOLUNTARY);
	key_unlock(k);
	CHECK(wake != IDX_NONE);
	CHECK(WAIT_FOR(atomic_load(&w.done), 10000));
	pthread_join(t, NULL);
	CHECK_OK(w.rc);
	CHECK_OK(local_release(w.s, key));
	CHECK_EQ(segment_violations(h), 0);
	CHECK_OK(local_session_close(w.s));
	CHECK_OK(local_session_close(h));
	broker_stop(&b);
}

/* Requests session @s has queued (waiting) on any key. */
static uint32_t queued_requests(const local_session *s)
{
	const struct segment *seg = s->seg;
	uint32_t i, n = 0;

	for (i = seg->caps.max_holds; i < seg->nnodes; i++) {
		uint64_t w = atomic_load(&seg->nodes[i].word);

		n += NODE_STATE(w) == NODE_WAITING && NODE_SESSION(w) == s->who.slot;
	}
	return n;
}

/*
 * An acquire walks the key's queue for a duplicate request of
 * its session only while the session may have one queued (node_hints.queued,
 * counted under the key mutex). The skip must not let a session queue twice
 * on a key: while one thread of the session waits, another thread's acquire
 * of the key (try or timed) is still LOCAL_EENQUEUED; once the wait is over,
 * granted or timed out, the count is back to 0 and acquires queue again.
 */
TEST(handoff, a_session_never_queues_twice_on_a_key, 30)
{
	LOCAL_OPTS(local_acquire_opts, brief, .timeout_ms = 50);
	const char *key = "handoff/dup";
	struct waiter w = { .key = key };
	struct broker_proc b;
	local_session *h;
	pthread_t t;

	broker_start(&b, NULL);
	h = open_session(&b, "holder", 0, 0);
	w.s = open_session(&b, "waiter", 0, 0);
	CHECK_EQ(atomic_load(&w.s->hints.queued), 0);
	CHECK_OK(local_lock(h, key, NULL, NULL));
	CHECK_EQ(pthread_create(&t, NULL, wait_for_key, &w), 0);
	CHECK(WAIT_FOR(queued_requests(w.s) == 1, 5000));
	CHECK_EQ(atomic_load(&w.s->hints.queued), 1);
	CHECK_RC(local_lock(w.s, key, &try_once, NULL), -LOCAL_EENQUEUED);
	CHECK_RC(local_lock(w.s, key, &brief, NULL), -LOCAL_EENQUEUED);
	CHECK_EQ(queued_requests(w.s), 1);
	CHECK_OK(local_release(h, key));
	CHECK(WAIT_FOR(atomic_load(&w.done), 10000));
	pthread_join(t, NULL);
	CHECK_OK(w.rc);
	CHECK_EQ(atomic_load(&w.s->hints.queued), 0);
	CHECK_OK(local_release(w.s, key));
	/* A wait that times out takes its request back too. */
	CHECK_OK(local_lock(h, key, NULL, NULL));
	CHECK_RC(local_lock(w.s, key, &brief, NULL), -ETIMEDOUT);
	CHECK_EQ(atomic_load(&w.s->hints.queued), 0);
	CHECK_EQ(queued_requests(w.s), 0);
	CHECK_OK(local_release(h, key));
	CHECK_OK(local_lock(w.s, key, &try_once, NULL));
	CHECK_OK(local_release(w.s, key));
	/* A local_enqueue()d request is counted (and never taken back): a
	 * plain acquire of its key still finds it. */
	{
		int granted = -1;

		CHECK_OK(local_lock(h, key, NULL, NULL));
		CHECK_OK(local_enqueue(w.s, key, 0, NULL, &granted, NULL));
		CHECK_EQ(granted, 0);
		CHECK_RC(local_lock(w.s, key, &brief, NULL), -LOCAL_EENQUEUED);
		CHECK_OK(local_release(h, key));
		CHECK_OK(local_wait(w.s, key, 5000, NULL));
		CHECK_OK(local_release(w.s, key));
	}
	CHECK_EQ(segment_violations(h), 0);
	CHECK_OK(local_session_close(w.s));
	CHECK_OK(local_session_close(h));
	broker_stop(&b);
}

/*
 * Metrics: a waited hold is remembered by its key
 * entry (the key hint's), not by a hash of the string; its release still
 * counts its hold time once, and a key locked after it, never waited for,
 * is released lock-free meanwhile without being counted.
 */
TEST(handoff, a_waited_hold_is_timed_at_its_release, 30)
{
	const char *key = "handoff/timed", *other = "handoff/untimed";
	struct waiter w = { .key = key };
	struct broker_proc b;
	const struct seg_hist *hh;
	local_session *h;
	uint64_t before;
	pthread_t t;

	broker_start(&b, NULL);
	h = open_session(&b, "holder", 0, 0);
	w.s = open_session(&b, "waiter", 0, 0);
	hh = &w.s->seg->sessions[w.s->who.slot].hold_hist;
	CHECK_OK(local_lock(h, key, NULL, NULL));
	CHECK_EQ(pthread_create(&t, NULL, wait_for_key, &w), 0);
	CHECK(WAIT_FOR(queued_requests(w.s) == 1, 5000));
	CHECK_OK(local_release(h, key));
	CHECK(WAIT_FOR(atomic_load(&w.done), 10000));
	pthread_join(t, NULL);
	CHECK_OK(w.rc);
	CHECK_EQ(atomic_load(&w.s->nwaited), 1);
	before = atomic_load(&hh->count);
	CHECK_OK(local_lock(w.s, other, &try_once, NULL));
	CHECK_OK(local_release(w.s, other));
	CHECK_EQ(atomic_load(&hh->count), before);
	CHECK_EQ(atomic_load(&w.s->nwaited), 1);
	CHECK_OK(local_release(w.s, key));
	CHECK_EQ(atomic_load(&hh->count), before + 1);
	CHECK_EQ(atomic_load(&w.s->nwaited), 0);
	CHECK_OK(local_session_close(w.s));
	CHECK_OK(local_session_close(h));
	broker_stop(&b);
}

struct hammer {
	local_session *s;
	char key[32], value[8];
	int rounds, rc, wrong_value;
	_Atomic int *go;
};

static void *hammer_key(void *arg)
{
	struct hammer *h = arg;
	struct local_acquire_opts o = {
		.sz = sizeof(o), .timeout_ms = -1, .value = h->value, .value_len = strlen(h->value)
	};
	struct local_key_info info;
	char got[8];
	int i;

	while (!atomic_load(h->go))
		sched_yield();
	for (i = 0; i < h->rounds && !h->rc; i++) {
		h->rc = local_lock(h->s, h->key, &o, NULL);
		if (h->rc)
			break;
		/* Ours while we hold it: the value this acquire brought. */
		info = (struct local_key_info){ .sz = sizeof(info),
						.value_buf = got,
						.value_buf_size = sizeof(got) };
		h->rc = local_info(h->s, h->key, &info);
		if (!h->rc && (info.value_len != o.value_len || memcmp(got, h->value, o.value_len)))
			h->wrong_value++;
		sched_yield(); /* inside: let the other session's thread queue */
		if (!h->rc)
			h->rc = local_release(h->s, h->key);
	}
	return NULL;
}

/*
 * The notes of waited holds are lock-free. Four threads of
 * one session and four of another fight over four keys, one key per pair:
 * every wait that ended in a grant is counted once in the wait histogram,
 * and its release once in the hold histogram, however the threads of the
 * session interleave on the notes (no timeouts here, and never more waited
 * holds than the four notes). Each acquire brings a value of its own, which
 * the key must show while it is held: a handoff used to read the waiter's
 * staged value after granting it, when the waiter's session may already
 * have staged another key's value in the same node (TSan reports that race
 * in this test on the old code; a plain build sees a wrong value rarely).
 */
TEST(handoff, waited_holds_are_counted_once_across_threads, 60)
{
	struct hammer hs[8];
	struct broker_proc b;
	const struct seg_session *slot;
	local_session *w, *o;
	_Atomic int go = 0;
	pthread_t t[8];
	int i;

	broker_start(&b, NULL);
	w = open_session(&b, "w", 0, 0);
	o = open_session(&b, "o", 0, 0);
	for (i = 0; i < 8; i++) {
		hs[i] = (struct hammer){ .s = i < 4 ? w : o, .rounds = 2000, .go = &go };
		snprintf(hs[i].key, sizeof(hs[i].key), "handoff/threads/%d", i % 4);
		snprintf(hs[i].value, sizeof(hs[i].value), "%c%d", i < 4 ? 'w' : 'o', i % 4);
		CHECK_EQ(pthread_create(&t[i], NULL, hammer_key, &hs[i]), 0);
	}
	atomic_store(&go, 1);
	for (i = 0; i < 8; i++) {
		pthread_join(t[i], NULL);
		CHECK_OK(hs[i].rc);
		CHECK_EQ(hs[i].wrong_value, 0);
	}
	slot = &w->seg->sessions[w->who.slot];
	CHECK(atomic_load(&slot->wait_hist.count) > 0);
	CHECK_EQ(atomic_load(&slot->hold_hist.count), atomic_load(&slot->wait_hist.count));
	CHECK_EQ(atomic_load(&w->nwaited), 0);
	CHECK_EQ(atomic_load(&w->hints.queued), 0);
	CHECK_EQ(segment_violations(w), 0);
	CHECK_OK(local_session_close(w));
	CHECK_OK(local_session_close(o));
	broker_stop(&b);
}
