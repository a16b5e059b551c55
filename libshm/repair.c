// SPDX-License-Identifier: MIT
/*
 * Crash repair of one key.
 *
 * The node table is the authority: every hold and every queued request is a
 * node whose word names its state, session and key, and every change of
 * state is a single store. The key's lists and counts are a cache of it.
 * Repair therefore needs no undo log: it frees what a dead operation had
 * only claimed, completes a handoff whose hold had already moved, and
 * rebuilds the FIFO (by arrival sequence) and the holder list.
 */
#include <stdlib.h>

#include "clock.h"
#include "keyops.h"

static int by_seq(const void *a, const void *b, void *arg)
{
	const struct seg_node *nodes = arg;
	uint64_t x = nodes[*(const uint32_t *)a].seq, y = nodes[*(const uint32_t *)b].seq;

	return x < y ? -1 : x > y;
}

/* A handoff that died before counting itself: count it now. k->token is the
 * last token the key granted, so a grant with a newer one was not counted. */
static void count_grant(struct seg_key *k, const struct seg_node *n)
{
	if (n->token > k->token) {
		k->token = n->token;
		key_count_grant_locked(k);
	}
}

static bool holds_for(const struct segment *seg, uint32_t h, uint64_t waiting_word)
{
	const struct seg_node *hn = seg_node_at(seg, h);

	return hn && atomic_load(&hn->word) == NODE_PACK(NODE_HOLDING, NODE_SESSION(waiting_word),
							 NODE_KEY(waiting_word));
}

/*
 * A node of this key that no list can claim: its operation died before its
 * commit, or is still running lock-free in a live process (whose CAS on the
 * fast word will fail, since the mutex holder bumped it, and which then frees
 * the node itself). Free it only when its session is over; otherwise the
 * session's end (the broker's sweep) frees it.
 */
static void drop_orphan(struct segment *seg, struct seg_node *n, uint64_t w)
{
	const struct seg_session *s = seg_session_at(seg, NODE_SESSION(w));
	uint64_t sg = s ? atomic_load(&s->state_gen) : 0;

	if (SESS_STATE(sg) == SESS_ACTIVE && SESS_GEN(sg) == n->session_gen)
		return;
	atomic_compare_exchange_strong(&n->word, &w, 0);
}

/* The lock holder the fast word names, if it is a hold of this key. */
static uint32_t published_holder(struct segment *seg, struct seg_key *k, uint32_t key)
{
	uint32_t h = FAST_HOLDER(atomic_load(&k->fast));
	uint64_t w;

	if (!h || h - 1 >= seg->nnodes)
		return IDX_NONE;
	w = atomic_load(&seg->nodes[h - 1].word);
	/* A holder whose session slot does not exist would never be swept. */
	return NODE_STATE(w) == NODE_HOLDING && NODE_KEY(w) == key &&
			       seg_session_at(seg, NODE_SESSION(w))
		       ? h - 1
		       : IDX_NONE;
}

int key_repair_locked(struct segment *seg, struct seg_key *k)
{
	uint32_t key = seg_key_index(seg, k), nw = 0, nh = 0, i, *waiting;
	uint32_t wake[64], nwake = 0, holder, watchers = 0;
	bool is_lock = k->kind == LOCAL_KIND_LOCK;
	uint64_t max_seq = 0;

	if (!key_fields_sane(seg, k)) {
		atomic_store(&k->state, KEY_QUARANTINED);
		atomic_fetch_add(&seg->hdr->stats.quarantined, 1);
		return -LOCAL_ECORRUPT;
	}
	waiting = malloc((size_t)seg->nnodes * sizeof(*waiting));
	if (!waiting)
		return -LOCAL_ECORRUPT;
	/* For a lock the fast word is the truth about the holder; a handoff
	 * that had moved its hold but not yet published it is finished below. */
	holder = is_lock ? published_holder(seg, k, key) : IDX_NONE;
	k->h_head = IDX_NONE;
	for (i = 0; i < seg->nnodes; i++) {
		struct seg_node *n = &seg->nodes[i];
		uint64_t w = atomic_load(&n->word);

		if (w == 0 || NODE_KEY(w) != key)
			continue;
		switch (NODE_STATE(w)) {
		case NODE_CLAIMED:
			/* Claimed under this mutex by an operation that died
			 * holding it: nobody else claims for this key so. */
			atomic_compare_exchange_strong(&n->word, &w, 0);
			break;
		case NODE_FAST_CLAIMED:
			/* Not named by the fast word (key_lock() has made a named
			 * one a hold): a lock-free operation in flight. Its
			 * thread, or the sweep of its dead process, frees it. */
			break;
		case NODE_WAITING:
			if (holds_for(seg, n->hold, w) &&
			    (!is_lock || holder == IDX_NONE || holder == n->hold)) {
				/* The hold had moved to this waiter; finish. */
				atomic_store(&n->word,
					     NODE_PACK(NODE_GRANTED, NODE_SESSION(w), key));
				count_grant(k, n);
				if (is_lock)
					holder = n->hold;
				if (nwake < 64)
					wake[nwake++] = i;
				break;
			}
			n->hold = IDX_NONE;
			waiting[nw++] = i;
			if (n->seq > max_seq)
				max_seq = n->seq;
			break;
		case NODE_GRANTED:
			/* Unlinked already; its owner consumes it. Wake it: the
			 * granter may have died before its wake-up call. */
			count_grant(k, n);
			if (nwake < 64)
				wake[nwake++] = i;
			break;
		case NODE_WATCHING:
			watchers++;
			break;
		}
	}
	/* Holds in a second pass: a lock's holder may only be known once the
	 * waiters have been seen. */
	for (i = 0; i < seg->nnodes; i++) {
		struct seg_node *n = &seg->nodes[i];
		uint64_t w = atomic_load(&n->word);

		if (w == 0 || NODE_KEY(w) != key || NODE_STATE(w) != NODE_HOLDING)
			continue;
		if (is_lock && i != holder) {
			drop_orphan(seg, n, w);
			continue;
		}
		n->prev = IDX_NONE;
		n->next = k->h_head;
		k->h_head = i;
		nh++;
	}
	/* A semaphore's slot holds are listed above with the others; no slot
	 * names anything now but a lock's holder, in slot 0. */
	key_clear_fast_holder_locked(k);
	if (is_lock)
		key_publish_holder_locked(k, holder);
	qsort_r(waiting, nw, sizeof(*waiting), by_seq, seg->nodes);
	k->q_head = k->q_tail = IDX_NONE;
	for (i = 0; i < nw; i++) {
		struct seg_node *n = &seg->nodes[waiting[i]];

		n->prev = i ? waiting[i - 1] : IDX_NONE;
		n->next = i + 1 < nw ? waiting[i + 1] : IDX_NONE;
	}
	if (nw) {
		k->q_head = waiting[0];
		k->q_tail = waiting[nw - 1];
	}
	free(waiting);
	k->holders = nh;
	k->waiters = nw;
	atomic_store(&k->watchers, watchers);
	if (k->next_seq <= max_seq)
		k->next_seq = max_seq + 1;
	if (k->kind != LOCAL_KIND_NONE)
		nwake += key_grant_pending_locked(seg, k, wake + nwake, 64 - nwake);
	key_touch_locked(k);
	for (i = 0; i < nwake; i++)
		waiter_wake(seg, wake[i]);
	return 0;
}
