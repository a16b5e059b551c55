// SPDX-License-Identifier: MIT
/* Node claiming and the per-key lists (FIFO queue, holder list). */
#include "keyops.h"

uint32_t node_claim_as(struct segment *seg, uint32_t state, uint32_t first, uint32_t count,
		       uint32_t session, uint32_t key, _Atomic uint32_t *hint)
{
	uint32_t start = atomic_load_explicit(hint, memory_order_relaxed);
	uint64_t want = NODE_PACK(state, session, key);
	uint32_t i;

	if (start >= count)
		start = 0;
	/* A session usually gets back the node it freed last: one CAS on a
	 * line already in its cache. */
	for (i = 0; i < count; i++) {
		uint32_t off = start + i < count ? start + i : start + i - count;
		struct seg_node *n = &seg->nodes[first + off];
		uint64_t expect = 0;

		if (atomic_load_explicit(&n->word, memory_order_relaxed) != 0)
			continue;
		if (atomic_compare_exchange_strong(&n->word, &expect, want)) {
			atomic_store_explicit(hint, off, memory_order_relaxed);
			return first + off;
		}
	}
	return IDX_NONE;
}

uint32_t node_claim(struct segment *seg, uint32_t first, uint32_t count, uint32_t session,
		    uint32_t key, _Atomic uint32_t *hint)
{
	return node_claim_as(seg, NODE_CLAIMED, first, count, session, key, hint);
}

/*
 * List walks are bounded by the node count, and every index is checked, so a
 * corrupt link ends the walk instead of the process; callers then repair.
 */
/* The generation matters: a stale handle whose slot was reused must not
 * find the new session's hold. */
static bool node_is(const struct seg_node *n, uint32_t state, uint32_t key, struct owner who)
{
	return atomic_load_explicit(&n->word, memory_order_relaxed) ==
		       NODE_PACK(state, who.slot, key) &&
	       n->session_gen == who.gen;
}

uint32_t key_find_hold_locked(struct segment *seg, struct seg_key *k, struct owner who)
{
	uint32_t key = seg_key_index(seg, k), i = k->h_head, steps = 0;

	while (i != IDX_NONE && i < seg->nnodes && steps++ < seg->nnodes) {
		if (node_is(&seg->nodes[i], NODE_HOLDING, key, who))
			return i;
		i = seg->nodes[i].next;
	}
	return IDX_NONE;
}

uint32_t key_find_waiter_locked(struct segment *seg, struct seg_key *k, struct owner who)
{
	uint32_t key = seg_key_index(seg, k), i = k->q_head, steps = 0;

	while (i != IDX_NONE && i < seg->nnodes && steps++ < seg->nnodes) {
		if (node_is(&seg->nodes[i], NODE_WAITING, key, who))
			return i;
		i = seg->nodes[i].next;
	}
	return IDX_NONE;
}

void queue_unlink_locked(struct segment *seg, struct seg_key *k, uint32_t n)
{
	struct seg_node *node = &seg->nodes[n];
	struct seg_node *prev = seg_node_at(seg, node->prev);
	struct seg_node *next = seg_node_at(seg, node->next);

	if (prev)
		prev->next = node->next;
	else if (k->q_head == n)
		k->q_head = node->next;
	if (next)
		next->prev = node->prev;
	else if (k->q_tail == n)
		k->q_tail = node->prev;
	node->next = node->prev = IDX_NONE;
}

void holders_unlink_locked(struct segment *seg, struct seg_key *k, uint32_t n)
{
	uint32_t *link = &k->h_head, steps = 0;

	while (*link != IDX_NONE && *link < seg->nnodes && steps++ < seg->nnodes) {
		if (*link == n) {
			*link = seg->nodes[n].next;
			seg->nodes[n].next = IDX_NONE;
			return;
		}
		link = &seg->nodes[*link].next;
	}
}
