// SPDX-License-Identifier: MIT
/*
 * Resetting a quarantined key entry: see keyreset.h.
 *
 * A quarantined entry is out of everyone's reach: key_lock() answers
 * LOCAL_ECORRUPT for it, so no client links, unlinks or grants anything on
 * it any more, and the broker's sweep frees its nodes one by one as their
 * sessions end. That is what makes the reset simple: under the entry's mutex
 * nobody else changes its nodes, and freeing them is a CAS each, as the
 * sweep does. The lock words are taken directly here (not with key_lock(),
 * which refuses a quarantined entry), table lock first, as everywhere.
 */
#include <errno.h>
#include <string.h>

#include "clock.h"
#include "futex.h"
#include "keyops.h"
#include "keyreset.h"
#include "lockword.h"

const char *key_entry_name(const struct seg_key *k, size_t *len)
{
	uint32_t n = k->key_len;

	*len = n >= 1 && n <= LOCAL_KEY_MAX ? n : strnlen(k->key, LOCAL_KEY_MAX);
	return k->key;
}

/* 0 (with *died set when the last owner died inside) or -ETIMEDOUT. */
static int lock_for(struct segment *seg, _Atomic uint32_t *w, uint32_t timeout_ms, bool *died)
{
	int r = lw_lock(w, seg->lock_self, mono_ns() + (uint64_t)timeout_ms * 1000000ull,
			seg->lock_judge);

	*died = r == LW_RECOVER;
	return r < 0 ? r : 0;
}

static void unlock(_Atomic uint32_t *w)
{
	lw_unlock(w); /* a dead owner's work is redone by the reset itself */
}

static void note_session(struct key_reset_result *res, uint32_t slot)
{
	uint32_t i;

	for (i = 0; i < res->nsessions; i++)
		if (res->sessions[i] == slot)
			return;
	if (res->nsessions < 8)
		res->sessions[res->nsessions++] = slot;
}

/* Free every node of entry @idx, waking its sleepers; count them in @res. */
static void drop_nodes_locked(struct segment *seg, uint32_t idx, struct key_reset_result *res)
{
	uint32_t i;

	for (i = 0; i < seg->nnodes; i++) {
		struct seg_node *n = &seg->nodes[i];
		uint64_t w = atomic_load(&n->word);
		uint32_t st = NODE_STATE(w);

		if (!w || NODE_KEY(w) != idx)
			continue;
		/* An unnamed lock-free claim is an operation in flight: its
		 * thread frees it with a plain store, so it must stay its own. */
		if (st == NODE_FAST_CLAIMED && !seg_node_is_hold(seg, i, w))
			continue;
		if (!atomic_compare_exchange_strong(&n->word, &w, 0))
			continue;
		if (st == NODE_HOLDING || st == NODE_FAST_CLAIMED) {
			res->holds++;
		} else if (st == NODE_WAITING || st == NODE_GRANTED) {
			/* Its sleeper finds the word changed and returns. */
			res->waiters++;
			waiter_wake(seg, i);
		} else if (st == NODE_WATCHING) {
			res->watchers++;
		} else {
			continue; /* NODE_CLAIMED: its claimer died under this mutex */
		}
		note_session(res, NODE_SESSION(w));
	}
}

/* A fresh, free entry; modify_index only ever rises (watchers compare it). */
static void clear_entry_locked(struct segment *seg, struct seg_key *k)
{
	uint32_t i;
	uint64_t seq = (FAST_SEQ(atomic_load(&k->fast)) + 1) & FAST_SEQ_MASK;

	k->kind = LOCAL_KIND_NONE;
	k->limit = 0;
	k->holders = k->waiters = 0;
	k->q_head = k->q_tail = k->h_head = IDX_NONE;
	k->token = 0;
	k->delay_until_ns = 0;
	k->idle_since_ns = 0;
	k->wake_pending = 0;
	atomic_store(&k->watchers, 0);
	atomic_store(&k->value_word, 0);
	atomic_store(&k->lock_index, 0);
	k->fold_lock_index = k->fold_modify_index = 0;
	/* SLOW, nobody named, seq moved on: no CAS prepared before succeeds.
	 * Every slot, as a later key in this entry may be a semaphore. */
	for (i = 1; i < SEG_KEY_SLOTS; i++) {
		uint64_t xs = (FAST_SEQ(atomic_load(seg_key_slot(k, i))) + 1) & FAST_SEQ_MASK;

		atomic_store(seg_key_slot_base(k, i), FBASE_PACK(xs, 0, 0));
		atomic_store(seg_key_slot(k, i), FAST_PACK(1, 0, xs));
	}
	atomic_store(&k->fast_base, FBASE_PACK(seq, 0, 0));
	atomic_store(&k->fast, FAST_PACK(1, 0, seq));
	atomic_store(&k->modify_index, atomic_load(&k->modify_index) + 1);
	key_entry_free_locked(seg, seg_key_index(seg, k));
}

int key_reset_quarantined(struct segment *seg, uint32_t idx, uint32_t timeout_ms,
			  struct key_reset_result *res)
{
	struct seg_key *k = seg_key_at(seg, idx);
	bool table_died, key_died;
	int err;

	memset(res, 0, sizeof(*res));
	if (!k || atomic_load(&k->state) != KEY_QUARANTINED)
		return -ENOENT;
	err = lock_for(seg, &seg->hdr->table_lock, timeout_ms, &table_died);
	if (err)
		return err;
	err = lock_for(seg, &k->lock, timeout_ms, &key_died);
	if (err) {
		if (table_died)
			keytab_index_rebuild_locked(seg);
		unlock(&seg->hdr->table_lock);
		return err;
	}
	if (atomic_load(&k->state) != KEY_QUARANTINED) {
		err = -ENOENT; /* reset by someone else meanwhile */
	} else {
		drop_nodes_locked(seg, idx, res);
		clear_entry_locked(seg, k);
	}
	/* Also what a table mutex found EOWNERDEAD needs. */
	keytab_index_rebuild_locked(seg);
	(void)key_died; /* the entry is cleared either way */
	unlock(&k->lock);
	unlock(&seg->hdr->table_lock);
	if (!err)
		futex_wake(key_change_futex(k), INT32_MAX); /* watchers leave */
	return err;
}
