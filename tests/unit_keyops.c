// SPDX-License-Identifier: MIT
/*
 * The key protocol's decisions (libshm/keyops.c, repair.c) in one process,
 * on a segment formatted in anonymous memory, with no broker: who is
 * granted, in which order requests queue, when a release hands the key on
 * and when it does not (lock-delay), and what repair rebuilds from the node
 * table after an operation died half-way.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "harness.h"
#include "keyops.h"

static const struct seg_caps caps = {
	.max_keys = 8, .max_sessions = 8, .max_waiters = 16, .max_holds = 16, .max_value = 32
};

struct mem_seg {
	struct segment seg;
	struct node_hints hints[8]; /* one per session slot */
};

/* A formatted, bound segment; sessions 0..@nsessions-1 active with gen 1. */
static void seg_make(struct mem_seg *b, uint32_t nsessions)
{
	size_t size = seg_size_for(&caps);
	void *mem;
	uint32_t i;

	memset(b, 0, sizeof(*b));
	CHECK(size > 0);
	mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(mem != MAP_FAILED);
	CHECK_OK(seg_format(mem, size, &caps));
	CHECK_OK(seg_bind(&b->seg, mem, size));
	for (i = 0; i < nsessions; i++)
		atomic_store(&seg_session_at(&b->seg, i)->state_gen, SESS_PACK(SESS_ACTIVE, 1));
}

static struct owner who(uint32_t slot)
{
	return (struct owner){ .slot = slot, .gen = 1 };
}

/* The key @name, created if new, with its mutex held. */
static struct seg_key *key_locked(struct mem_seg *b, const char *name)
{
	struct seg_key *k = NULL;

	CHECK_OK(keytab_find(&b->seg, name, strlen(name), true, &k));
	CHECK(k != NULL);
	return k;
}

/* One acquire attempt of @slot under the mutex: 0 (granted, *token), 1
 * (queued, *waiter) or a negative code. */
static int acquire(struct mem_seg *b, struct seg_key *k, uint32_t slot, uint32_t kind,
		   uint32_t limit, bool try_only, uint64_t *token, uint32_t *waiter)
{
	struct acquire_req req = {
		.who = who(slot), .kind = kind, .limit = limit, .try_only = try_only
	};

	*token = 0;
	*waiter = IDX_NONE;
	return key_acquire_locked(&b->seg, k, &req, token, waiter, &b->hints[slot]);
}

static uint32_t node_state(struct mem_seg *b, uint32_t n)
{
	return NODE_STATE(atomic_load(&b->seg.nodes[n].word));
}

static uint32_t node_session(struct mem_seg *b, uint32_t n)
{
	return NODE_SESSION(atomic_load(&b->seg.nodes[n].word));
}

TEST(keyops, first_request_is_granted_the_rest_queue_in_arrival_order, 30)
{
	struct mem_seg b;
	struct seg_key *k;
	uint64_t t0, t;
	uint32_t w[4], n, i;

	seg_make(&b, 4);
	k = key_locked(&b, "q");
	CHECK_EQ(acquire(&b, k, 0, LOCAL_KIND_LOCK, 1, false, &t0, &w[0]), 0);
	CHECK(t0 != 0);
	CHECK_EQ(k->holders, 1);
	/* The holder asking again keeps its hold and its token. */
	CHECK_EQ(acquire(&b, k, 0, LOCAL_KIND_LOCK, 1, false, &t, &w[0]), 0);
	CHECK_EQ(t, t0);
	/* A try never queues. */
	CHECK_RC(acquire(&b, k, 1, LOCAL_KIND_LOCK, 1, true, &t, &w[1]), -EBUSY);
	CHECK_EQ(k->waiters, 0);
	for (i = 1; i < 4; i++)
		CHECK_EQ(acquire(&b, k, i, LOCAL_KIND_LOCK, 1, false, &t, &w[i]), 1);
	CHECK_EQ(k->waiters, 3);
	/* A session has one request per key. */
	CHECK_RC(acquire(&b, k, 2, LOCAL_KIND_LOCK, 1, false, &t, &n), -EALREADY);
	/* The queue is the arrival order, head to tail, seq rising. */
	n = k->q_head;
	for (i = 1; i < 4; i++) {
		CHECK_EQ(n, w[i]);
		CHECK_EQ(node_state(&b, n), NODE_WAITING);
		CHECK_EQ(node_session(&b, n), i);
		if (i > 1)
			CHECK(b.seg.nodes[n].seq > b.seg.nodes[b.seg.nodes[n].prev].seq);
		n = b.seg.nodes[n].next;
	}
	CHECK_EQ(n, IDX_NONE);
	CHECK_EQ(k->q_tail, w[3]);
	CHECK(key_links_sane(&b.seg, k));
	key_unlock(k);
}

TEST(keyops, release_hands_the_hold_to_the_queue_head_with_a_larger_token, 30)
{
	struct mem_seg b;
	struct seg_key *k;
	uint64_t t0, t;
	uint32_t w1, w2, h, woken;

	seg_make(&b, 3);
	k = key_locked(&b, "handoff");
	CHECK_EQ(acquire(&b, k, 0, LOCAL_KIND_LOCK, 1, false, &t0, &h), 0);
	CHECK_EQ(acquire(&b, k, 1, LOCAL_KIND_LOCK, 1, false, &t, &w1), 1);
	CHECK_EQ(acquire(&b, k, 2, LOCAL_KIND_LOCK, 1, false, &t, &w2), 1);
	h = key_find_hold_locked(&b.seg, k, who(0));
	CHECK(h != IDX_NONE);
	woken = key_release_hold_locked(&b.seg, k, h, REL_VOLUNTARY);
	/* Direct handoff: the same hold node, now session 1's; no dip. */
	CHECK_EQ(woken, w1);
	CHECK_EQ(node_state(&b, w1), NODE_GRANTED);
	CHECK_EQ(b.seg.nodes[w1].hold, h);
	CHECK_EQ(node_state(&b, h), NODE_HOLDING);
	CHECK_EQ(node_session(&b, h), 1);
	CHECK(b.seg.nodes[w1].token > t0);
	CHECK_EQ(k->holders, 1);
	CHECK_EQ(k->waiters, 1);
	CHECK_EQ(k->q_head, w2);
	CHECK_EQ(key_find_hold_locked(&b.seg, k, who(1)), h);
	CHECK(key_links_sane(&b.seg, k));
	key_unlock(k);
}

TEST(keyops, lost_hold_with_lock_delay_hands_nothing_on_until_it_ends, 30)
{
	struct mem_seg b;
	struct seg_key *k;
	uint64_t t;
	uint32_t w, h, wake[4];

	seg_make(&b, 2);
	seg_session_at(&b.seg, 0)->lock_delay_ms = 60000;
	k = key_locked(&b, "delay");
	CHECK_EQ(acquire(&b, k, 0, LOCAL_KIND_LOCK, 1, false, &t, &h), 0);
	CHECK_EQ(acquire(&b, k, 1, LOCAL_KIND_LOCK, 1, false, &t, &w), 1);
	h = key_find_hold_locked(&b.seg, k, who(0));
	/* Lost (death, TTL): the lock-delay starts and the waiter stays. */
	CHECK_EQ(key_release_hold_locked(&b.seg, k, h, REL_LOST), IDX_NONE);
	CHECK(k->delay_until_ns > mono_ns());
	CHECK_EQ(k->holders, 0);
	CHECK_EQ(node_state(&b, w), NODE_WAITING);
	CHECK_EQ(key_grant_pending_locked(&b.seg, k, wake, 4), 0);
	/* Nor may a newcomer barge in meanwhile. */
	CHECK_RC(acquire(&b, k, 0, LOCAL_KIND_LOCK, 1, true, &t, &h), -EBUSY);
	/* Once the delay is over, the queue's head is granted. */
	k->delay_until_ns = mono_ns() - 1;
	CHECK_EQ(key_grant_pending_locked(&b.seg, k, wake, 4), 1);
	CHECK_EQ(wake[0], w);
	CHECK_EQ(node_state(&b, w), NODE_GRANTED);
	CHECK_EQ(k->holders, 1);
	CHECK_EQ(k->waiters, 0);
	key_unlock(k);
}

TEST(keyops, semaphore_grants_up_to_its_limit_and_refuses_another_kind, 30)
{
	struct mem_seg b;
	struct seg_key *k;
	uint64_t t;
	uint32_t w, h, wake[4];

	seg_make(&b, 4);
	k = key_locked(&b, "sem");
	CHECK_EQ(acquire(&b, k, 0, LOCAL_KIND_SEMAPHORE, 2, false, &t, &w), 0);
	CHECK_EQ(acquire(&b, k, 1, LOCAL_KIND_SEMAPHORE, 2, false, &t, &w), 0);
	CHECK_EQ(k->holders, 2);
	CHECK_EQ(acquire(&b, k, 2, LOCAL_KIND_SEMAPHORE, 2, false, &t, &w), 1);
	/* The key has its kind and limit now: a lock, or another limit, is refused. */
	CHECK(acquire(&b, k, 3, LOCAL_KIND_LOCK, 1, true, &t, &h) < 0);
	CHECK(acquire(&b, k, 3, LOCAL_KIND_SEMAPHORE, 3, true, &t, &h) < 0);
	h = key_find_hold_locked(&b.seg, k, who(1));
	CHECK_EQ(key_release_hold_locked(&b.seg, k, h, REL_VOLUNTARY), w);
	CHECK_EQ(node_state(&b, w), NODE_GRANTED);
	CHECK_EQ(k->holders, 2);
	CHECK_EQ(key_grant_pending_locked(&b.seg, k, wake, 4), 0);
	CHECK(key_links_sane(&b.seg, k));
	key_unlock(k);
}

TEST(keyops, repair_rebuilds_a_scrambled_queue_in_arrival_order, 30)
{
	struct mem_seg b;
	struct seg_key *k;
	uint64_t t;
	uint32_t w[4], h, i, n;

	seg_make(&b, 4);
	k = key_locked(&b, "repair");
	CHECK_EQ(acquire(&b, k, 0, LOCAL_KIND_LOCK, 1, false, &t, &h), 0);
	for (i = 1; i < 4; i++)
		CHECK_EQ(acquire(&b, k, i, LOCAL_KIND_LOCK, 1, false, &t, &w[i]), 1);
	/* An enqueue that died half-way: links and counts wrong, and a node
	 * claimed for the key but never linked. */
	k->q_head = w[3];
	k->q_tail = w[1];
	b.seg.nodes[w[3]].next = IDX_NONE;
	k->waiters = 1;
	n = node_claim(&b.seg, caps.max_holds, caps.max_waiters, 3, seg_key_index(&b.seg, k),
		       &b.hints[3].wait);
	CHECK(n != IDX_NONE);
	CHECK(!key_links_sane(&b.seg, k));
	CHECK_OK(key_repair_locked(&b.seg, k));
	CHECK(key_links_sane(&b.seg, k));
	CHECK_EQ(node_state(&b, n), NODE_FREE);
	CHECK_EQ(k->waiters, 3);
	CHECK_EQ(k->holders, 1);
	for (n = k->q_head, i = 1; i < 4; i++, n = b.seg.nodes[n].next)
		CHECK_EQ(n, w[i]);
	CHECK_EQ(n, IDX_NONE);
	key_unlock(k);
}

TEST(keyops, repair_finishes_a_handoff_whose_releaser_died, 30)
{
	struct mem_seg b;
	struct seg_key *k;
	struct seg_node *wn;
	uint64_t t;
	uint32_t w, h, key;

	seg_make(&b, 2);
	k = key_locked(&b, "half");
	key = seg_key_index(&b.seg, k);
	CHECK_EQ(acquire(&b, k, 0, LOCAL_KIND_LOCK, 1, false, &t, &h), 0);
	CHECK_EQ(acquire(&b, k, 1, LOCAL_KIND_LOCK, 1, false, &t, &w), 1);
	h = key_find_hold_locked(&b.seg, k, who(0));
	/* The releaser died after moving the hold to the waiter's session,
	 * before unlinking the waiter and marking it granted. */
	wn = &b.seg.nodes[w];
	wn->hold = h;
	wn->token = t + 1;
	b.seg.nodes[h].token = t + 1;
	atomic_store(&b.seg.nodes[h].word, NODE_PACK(NODE_HOLDING, 1, key));
	key_publish_holder_locked(k, h);
	CHECK_OK(key_repair_locked(&b.seg, k));
	CHECK_EQ(node_state(&b, w), NODE_GRANTED);
	CHECK_EQ(node_state(&b, h), NODE_HOLDING);
	CHECK_EQ(node_session(&b, h), 1);
	CHECK_EQ(k->waiters, 0);
	CHECK_EQ(k->holders, 1);
	CHECK_EQ(k->q_head, IDX_NONE);
	CHECK(key_links_sane(&b.seg, k));
	key_unlock(k);
}

TEST(keyops, repair_quarantines_a_key_whose_own_fields_are_damaged, 30)
{
	struct mem_seg b;
	struct seg_key *k;
	uint64_t t;
	uint32_t h;

	seg_make(&b, 1);
	k = key_locked(&b, "bad");
	CHECK_EQ(acquire(&b, k, 0, LOCAL_KIND_LOCK, 1, false, &t, &h), 0);
	k->kind = 77;
	CHECK_RC(key_repair_locked(&b.seg, k), -LOCAL_ECORRUPT);
	CHECK_EQ(atomic_load(&k->state), KEY_QUARANTINED);
	key_unlock(k);
}

TEST(keyops, closed_session_is_refused_before_any_change, 30)
{
	struct mem_seg b;
	struct seg_key *k;
	uint64_t t;
	uint32_t w;

	seg_make(&b, 2);
	atomic_store(&seg_session_at(&b.seg, 1)->state_gen, SESS_PACK(SESS_CLOSING, 1));
	k = key_locked(&b, "closed");
	CHECK_RC(acquire(&b, k, 1, LOCAL_KIND_LOCK, 1, false, &t, &w), -LOCAL_ESESSION);
	CHECK_EQ(k->holders, 0);
	CHECK_EQ(k->waiters, 0);
	/* A stale generation is another session. */
	CHECK_RC(key_acquire_locked(&b.seg, k,
				    &(struct acquire_req){ .who = { .slot = 0, .gen = 2 },
							   .kind = LOCAL_KIND_LOCK,
							   .limit = 1 },
				    &t, &w, &b.hints[0]),
		 -LOCAL_ESESSION);
	key_unlock(k);
}
