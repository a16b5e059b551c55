// SPDX-License-Identifier: MIT
/*
 * Uncontended lock and release without the key mutex: one CAS on the key's
 * fast word (see FAST_SLOW in segment.h). Anything else — a queue, a
 * lock-delay, a value to attach, a semaphore, a key that does not exist yet,
 * a lost race — falls back to the mutex path by returning FAST_MISS.
 *
 * Order in fast_acquire(), and why:
 *   1. read the fast word (F0), then check the entry is our key: a reclaim
 *      or re-use of the entry bumps F under the mutex, so the final CAS
 *      against F0 fails if the entry changed after step 1;
 *   2. claim a hold node (a CAS that records session and key) and fill it;
 *   3. check the session is active: the broker marks a session CLOSING
 *      before it sweeps, so either it finds our node, bumps F (our CAS then
 *      fails) and frees the node, or we see CLOSING and back out;
 *   4. CAS F from F0 to {our node}: the commit point.
 */
#include <errno.h>

#include "clock.h"
#include "crashpoint.h"
#include "keyops.h"

static struct seg_key *find(struct segment *seg, const char *key, size_t len, uint32_t hash,
			    uint64_t *f)
{
	uint32_t idx = probe_unlocked(seg, hash);
	struct seg_key *k;

	if (idx == IDX_NONE)
		return NULL;
	k = &seg->keys[idx];
	*f = atomic_load_explicit(&k->fast, memory_order_acquire);
	if ((*f & FAST_SLOW) || !key_matches(k, hash, key, len))
		return NULL;
	return k;
}

/* Our hold, if the fast word names one of ours. */
static bool ours(const struct segment *seg, uint64_t f, uint32_t key, struct owner who)
{
	uint32_t h = FAST_HOLDER(f);
	const struct seg_node *n;

	if (!h || h - 1 >= seg->nnodes)
		return false;
	n = &seg->nodes[h - 1];
	return atomic_load_explicit(&n->word, memory_order_acquire) ==
		       NODE_PACK(NODE_HOLDING, who.slot, key) &&
	       n->session_gen == who.gen;
}

static void free_node(struct seg_node *n, uint64_t w)
{
	/* CAS: a broker sweep may have freed (and someone re-claimed) it. */
	atomic_compare_exchange_strong(&n->word, &w, 0);
}

int fast_acquire(struct segment *seg, const char *key, size_t len, uint32_t hash,
		 const struct acquire_req *req, uint64_t *token, struct node_hints *hints,
		 uint32_t *key_idx)
{
	struct seg_key *k;
	struct seg_node *n;
	uint64_t f, held, claimed;
	uint32_t idx, node;

	if (req->kind != LOCAL_KIND_LOCK || req->value || crash_fast_path_off())
		return FAST_MISS;
	k = find(seg, key, len, hash, &f);
	if (!k)
		return FAST_MISS;
	idx = seg_key_index(seg, k);
	*key_idx = idx;
	if (FAST_HOLDER(f)) {
		if (!session_is(seg, req->who))
			return -LOCAL_ESESSION;
		if (ours(seg, f, idx, req->who)) { /* re-acquire: keep the token */
			*token = seg->nodes[FAST_HOLDER(f) - 1].token;
			return 0;
		}
		/* Held and no queue: a try fails here; a wait queues (mutex). */
		return req->try_only ? -EBUSY : FAST_MISS;
	}
	node = node_claim_as(seg, NODE_FAST_CLAIMED, 0, seg->caps.max_holds, req->who.slot, idx,
			     &hints->hold);
	if (node == IDX_NONE)
		return FAST_MISS; /* the mutex path reports EMAXHOLDS */
	n = &seg->nodes[node];
	claimed = NODE_PACK(NODE_FAST_CLAIMED, req->who.slot, idx);
	CRASH_POINT(FAST_ACQ_CLAIMED);
	n->session_gen = req->who.gen;
	n->token = draw_token(seg);
	n->lease_until_ns = lease_deadline(req->lease_ms);
	n->lease_ms = req->lease_ms;
	n->hold = n->prev = n->next = IDX_NONE;
	if (!session_is(seg, req->who)) {
		free_node(n, claimed);
		return -LOCAL_ESESSION;
	}
	held = NODE_PACK(NODE_HOLDING, req->who.slot, idx);
	if (!atomic_compare_exchange_strong(&n->word, &claimed, held))
		return FAST_MISS; /* taken from us (our process was thought dead) */
	if (!atomic_compare_exchange_strong(&k->fast, &f,
					    FAST_PACK(0, node + 1, FAST_SEQ(f) + 1))) {
		free_node(n, held);
		return FAST_MISS;
	}
	CRASH_POINT(FAST_ACQ_PUBLISHED);
	atomic_fetch_add_explicit(&k->lock_index, 1, memory_order_relaxed);
	key_touch_locked(k); /* safe unlocked: an atomic add and a wake */
	if (req->lease_ms)
		lease_note(seg, node);
	*token = n->token;
	return 0;
}

int fast_release(struct segment *seg, const char *key, size_t len, uint32_t hash,
		 struct owner who)
{
	uint64_t f;
	struct seg_key *k = find(seg, key, len, hash, &f);
	struct seg_node *n;

	if (!k || crash_fast_path_off() || !ours(seg, f, seg_key_index(seg, k), who))
		return FAST_MISS; /* the mutex path tells not-held from ended */
	n = &seg->nodes[FAST_HOLDER(f) - 1];
	if (!atomic_compare_exchange_strong(&k->fast, &f, FAST_PACK(0, 0, FAST_SEQ(f) + 1)))
		return FAST_MISS;
	CRASH_POINT(FAST_REL_PUBLISHED);
	free_node(n, NODE_PACK(NODE_HOLDING, who.slot, seg_key_index(seg, k)));
	key_touch_locked(k);
	return 0;
}
