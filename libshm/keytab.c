// SPDX-License-Identifier: MIT
/*
 * The key table: an open-addressing index (linear probing, tombstones) over
 * fixed key entries.
 *
 * Lookups probe the index without any lock and then validate the entry under
 * its own mutex; a miss or a failed validation falls back to a probe under the
 * table mutex, which is authoritative. Creation and reclaim happen only under
 * the table mutex. If the table mutex's owner dies, the index is rebuilt from
 * the entries, which are the truth.
 */
#include <errno.h>
#include <linux/futex.h>
#include <string.h>

#include "clock.h"
#include "crashpoint.h"
#include "futex.h"
#include "keyops.h"
#include "lockword.h"

uint32_t key_hash(const char *key, size_t len)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	size_t i;

	for (i = 0; i < len; i++) {
		h ^= (uint8_t)key[i];
		h *= 16777619u;
	}
	return h;
}

int key_check(const char *key, size_t len)
{
	if (!key || len == 0)
		return -EINVAL;
	if (len > LOCAL_KEY_MAX)
		return -ENAMETOOLONG;
	return 0;
}

/*
 * Freeze the fast path: set SLOW on every slot, so every CAS a lock-free
 * caller prepared before this point fails (and keeps failing: key_unlock()
 * bumps seq when it clears SLOW). seq is left alone, so that it still says
 * where the last lock-free operation left it (see fast_base). Under the
 * mutex the words are usually SLOW already, and then these are loads, not
 * locked instructions. Slot 0 first: an acquire on another slot re-checks
 * every slot after its commit, and takes the mutex path if one is SLOW.
 */
static void enter_slow(struct seg_key *k)
{
	uint32_t i;

	for (i = 0; i < SEG_KEY_SLOTS; i++) {
		_Atomic uint64_t *w = seg_key_slot(k, i);
		uint64_t f = atomic_load(w);

		while (!(f & FAST_SLOW) && !atomic_compare_exchange_weak(w, &f, f | FAST_SLOW))
			;
	}
}

/* Slots 1.. get bases at their (frozen) words: what a fold does last, and
 * what its redo does. */
static void rebase_slots(struct seg_key *k)
{
	uint32_t i;

	for (i = 1; i < SEG_KEY_SLOTS; i++) {
		uint64_t f = atomic_load_explicit(seg_key_slot(k, i), memory_order_relaxed);

		atomic_store(seg_key_slot_base(k, i),
			     FBASE_PACK(FAST_SEQ(f), FAST_HOLDER(f) != 0, 0));
	}
}

/* The lock-free operations slot @i counted since its base: changes in *n,
 * acquisitions returned. */
static uint64_t slot_grants(struct seg_key *k, uint32_t i, uint64_t *n)
{
	uint64_t f = atomic_load_explicit(seg_key_slot(k, i), memory_order_relaxed);
	uint64_t b = atomic_load_explicit(seg_key_slot_base(k, i), memory_order_relaxed);
	uint64_t seq = FAST_SEQ(f);

	*n = (seq - FBASE_SEQ(b)) & FAST_SEQ_MASK;
	/* Nothing since the base; or a base one ahead: a key_unlock() that
	 * died between setting the base and publishing the word, so that no
	 * lock-free operation could start. */
	if (*n == 0 || FBASE_SEQ(b) == ((seq + 1) & FAST_SEQ_MASK)) {
		*n = 0;
		return 0;
	}
	/* They alternate, an acquisition first if the slot was free. */
	return (*n + !(b & FBASE_HELD)) / 2;
}

/*
 * Add the lock-free operations since the slots' bases to lock_index and
 * modify_index (see fast_base in segment.h for the steps, each of which a
 * crash may end). The slots are frozen: SLOW is set and we hold the mutex.
 * Slot 0's base carries FOLDING for the fold of every slot: its redo sets
 * the other slots' bases to their words, which nobody changed since (they
 * are SLOW, and only a mutex holder writes a SLOW word).
 *
 * With K > 1 slots a lock-free grant numbered itself lock_index + K * S + i
 * + 1 (fastpath.c, slot_token()), so the fold also raises tok_last to the
 * highest token any of them could have shown: the next mutex grant maps its
 * range above it (key_next_token_locked()). Raised before anything else
 * changes: a tok_last too high only moves later tokens up.
 */
static void fold_fast_counts_locked(struct seg_key *k)
{
	uint64_t f = atomic_load_explicit(&k->fast, memory_order_relaxed);
	uint64_t b = atomic_load_explicit(&k->fast_base, memory_order_relaxed);
	uint64_t grants = 0, changes = 0, n;
	uint32_t i, nslots = seg_key_nslots(k);

	if (b & FBASE_FOLDING) {
		/* A holder died mid-fold: its sums are recorded; store them. */
		rebase_slots(k);
		atomic_store(&k->lock_index, k->fold_lock_index);
		atomic_store(&k->modify_index, k->fold_modify_index);
		atomic_store(&k->fast_base, b & ~FBASE_FOLDING);
		return;
	}
	for (i = 0; i < nslots; i++) {
		grants += slot_grants(k, i, &n);
		changes += n;
	}
	if (changes == 0)
		return;
	if (nslots > 1 && grants) {
		uint64_t top = __atomic_load_n(&k->tok_off, __ATOMIC_RELAXED) +
			       atomic_load(&k->lock_index) + nslots * grants;
		uint64_t hi = __atomic_load_n(&k->tok_hi, __ATOMIC_RELAXED);

		/* Each was at most tok_hi (key_token_for()): the range cannot
		 * have changed since, a mutex holder would have failed it. */
		if (top > hi)
			top = hi;
		if (top > __atomic_load_n(&k->tok_last, __ATOMIC_RELAXED))
			__atomic_store_n(&k->tok_last, top, __ATOMIC_RELAXED);
	}
	k->fold_lock_index = atomic_load(&k->lock_index) + grants;
	k->fold_modify_index = atomic_load(&k->modify_index) + changes;
	atomic_store(&k->fast_base, FBASE_PACK(FAST_SEQ(f), FAST_HOLDER(f) != 0, 1));
	CRASH_POINT(FOLD_NOTED);
	rebase_slots(k);
	atomic_store(&k->lock_index, k->fold_lock_index);
	atomic_store(&k->modify_index, k->fold_modify_index);
	atomic_store(&k->fast_base, FBASE_PACK(FAST_SEQ(f), FAST_HOLDER(f) != 0, 0));
}

/*
 * A lock-free acquire commits by naming its node in a slot and leaves
 * the node NODE_FAST_CLAIMED (one CAS less than claiming, then re-marking
 * it). Under the mutex it becomes an ordinary hold, so that nothing past
 * key_lock() needs to know: the slots are frozen, and their owners no longer
 * write a node a slot names, so only we change it now. (A node a slot names
 * that is NODE_HOLDING already was given back by key_unlock_giving().)
 */
static void adopt_fast_hold_locked(struct segment *seg, struct seg_key *k)
{
	uint32_t key = seg_key_index(seg, k), i, h;
	uint64_t w;

	for (i = 0; i < SEG_KEY_SLOTS; i++) {
		h = FAST_HOLDER(atomic_load_explicit(seg_key_slot(k, i), memory_order_relaxed));
		if (!h || h - 1 >= seg->nnodes)
			continue;
		w = atomic_load(&seg->nodes[h - 1].word);
		if (w != NODE_PACK(NODE_FAST_CLAIMED, NODE_SESSION(w), key))
			continue;
		atomic_compare_exchange_strong(&seg->nodes[h - 1].word, &w,
					       NODE_PACK(NODE_HOLDING, NODE_SESSION(w), key));
		CRASH_POINT(FAST_HOLD_ADOPTED);
	}
}

/* Can the key leave the mutex to the fast path? A lock, or a semaphore
 * without listed holders (its holds are in its slots, key_unlock_giving()),
 * with an empty queue, no lock-delay pending and nobody
 * watching (a watcher sleeps on modify_index, which the fast path does not
 * touch; so while anyone watches, every change goes through the mutex). */
static bool fast_eligible(const struct seg_key *k)
{
	uint32_t cl = atomic_load_explicit(&k->cluster, memory_order_relaxed);

	if (atomic_load(&k->state) != KEY_USED || k->q_head != IDX_NONE || k->delay_until_ns != 0 ||
	    atomic_load(&k->watchers) != 0)
		return false;
	/* A cluster lock key only while the broker holds it open under a
	 * lease and wants no ring (CL_ARMED: the release must pass the mutex
	 * to ring it); the lock-free acquire checks the rest of the gate at
	 * every grant (cluster_fast_refused()). A key the broker closes or
	 * arms leaves fast mode here: it is SLOW while the broker holds the
	 * mutex, and stays so. Cluster semaphores stay on the mutex path
	 * (cluster_slots_full()). */
	if (cl & CL_KEY)
		return (cl & (CL_OPEN | CL_ARMED)) == CL_OPEN &&
		       atomic_load_explicit(&k->cluster_lease, memory_order_relaxed) &&
		       k->kind == LOCAL_KIND_LOCK && k->holders <= 1;
	if (k->kind == LOCAL_KIND_LOCK)
		return k->holders <= 1;
	return k->kind == LOCAL_KIND_SEMAPHORE && k->holders == 0;
}

void key_unlock(struct seg_key *k)
{
	uint64_t f = atomic_load_explicit(&k->fast, memory_order_relaxed);
	uint64_t seq = (FAST_SEQ(f) + 1) & FAST_SEQ_MASK;
	bool wake = false;
	uint32_t i, nslots;

	/* Watchers registered before we unlock are counted here; one that
	 * registers after re-reads modify_index. */
	if (k->wake_pending) {
		k->wake_pending = 0;
		wake = atomic_load_explicit(&k->watchers, memory_order_relaxed) != 0;
	}
	/* Only the mutex holder writes the words while SLOW is set. The bases
	 * first: lock-free operations count from them as soon as SLOW clears.
	 * Every slot's base before any slot opens: an acquire needs all of
	 * them open, a release only its own. */
	if (fast_eligible(k)) {
		nslots = seg_key_nslots(k);
		for (i = 1; i < nslots; i++) {
			uint64_t g = atomic_load_explicit(seg_key_slot(k, i), memory_order_relaxed);

			atomic_store_explicit(seg_key_slot_base(k, i),
					      FBASE_PACK(FAST_SEQ(g) + 1, FAST_HOLDER(g) != 0, 0),
					      memory_order_release);
		}
		atomic_store_explicit(&k->fast_base, FBASE_PACK(seq, FAST_HOLDER(f) != 0, 0),
				      memory_order_release);
		for (i = 1; i < nslots; i++) {
			uint64_t g = atomic_load_explicit(seg_key_slot(k, i), memory_order_relaxed);

			atomic_store_explicit(seg_key_slot(k, i),
					      FAST_PACK(0, FAST_HOLDER(g), FAST_SEQ(g) + 1),
					      memory_order_release);
		}
		atomic_store_explicit(&k->fast, FAST_PACK(0, FAST_HOLDER(f), seq),
				      memory_order_release);
	}
	lw_unlock(&k->lock);
	/* After the unlock: a watcher woken while we held the mutex would only
	 * go back to sleep on it (it takes it to describe the key). Dying
	 * between the two delays the watchers, which re-check the index on
	 * their own (WATCH_RECHECK_NS in api_watch.c). */
	if (wake)
		futex_wake(key_change_futex(k), INT32_MAX);
}

void key_publish_holder_locked(struct seg_key *k, uint32_t node)
{
	uint64_t f = atomic_load_explicit(&k->fast, memory_order_relaxed);

	/* SLOW stays set and seq unchanged: key_unlock() bumps it. */
	if (k->kind == LOCAL_KIND_LOCK)
		atomic_store_explicit(&k->fast,
				      FAST_PACK(1, node == IDX_NONE ? 0 : node + 1, FAST_SEQ(f)),
				      memory_order_release);
}

void key_clear_fast_holder_locked(struct seg_key *k)
{
	uint32_t i;

	for (i = 0; i < SEG_KEY_SLOTS; i++) {
		_Atomic uint64_t *w = seg_key_slot(k, i);
		uint64_t f = atomic_load_explicit(w, memory_order_relaxed);

		if (FAST_HOLDER(f))
			atomic_store_explicit(w, FAST_PACK(1, 0, FAST_SEQ(f)),
					      memory_order_release);
	}
}

/* Is @h (node + 1) a hold of key @key that a slot may name, by a session
 * slot that exists? (A bogus session is never swept.) */
static bool named_hold_ok(const struct segment *seg, uint32_t h, uint32_t key)
{
	uint64_t w;

	if (h - 1 >= seg->nnodes)
		return false;
	w = atomic_load(&seg->nodes[h - 1].word);
	return w == NODE_PACK(NODE_HOLDING, NODE_SESSION(w), key) &&
	       seg_session_at(seg, NODE_SESSION(w));
}

/*
 * A lock key's holder list mirrors its fast word, which is the truth. A
 * semaphore's slots name the holds taken lock-free or given back while its
 * list was empty: they join the holder list, and the slots name nobody.
 * Whatever a slot names is checked (the segment is untrusted): a hold of
 * this key, no node twice, nothing past the key's K slots, and no slot
 * naming anything while the list has holds; else the key is repaired.
 */
static bool sync_fast_holder_locked(struct segment *seg, struct seg_key *k)
{
	uint32_t h = FAST_HOLDER(atomic_load(&k->fast)), key = seg_key_index(seg, k);
	uint32_t named[SEG_KEY_SLOTS], nn = 0, nslots, i, j;
	struct seg_node *n;

	if (atomic_load(&k->state) != KEY_USED)
		return true;
	nslots = seg_key_nslots(k);
	for (i = 0; i < SEG_KEY_SLOTS; i++) {
		uint32_t x = FAST_HOLDER(atomic_load(seg_key_slot(k, i)));

		if (!x)
			continue;
		if (i >= nslots || !named_hold_ok(seg, x, key))
			return false; /* damaged: repair */
		for (j = 0; j < nn; j++)
			if (named[j] == x - 1)
				return false;
		named[nn++] = x - 1;
	}
	if (k->kind != LOCAL_KIND_LOCK && k->kind != LOCAL_KIND_SEMAPHORE)
		return !nn;
	if (k->kind == LOCAL_KIND_SEMAPHORE) {
		if (!nn)
			return true;
		if (k->holders != 0)
			return false; /* named holds are the only ones */
		k->h_head = IDX_NONE;
		for (j = 0; j < nn; j++) {
			n = &seg->nodes[named[j]];
			n->prev = IDX_NONE;
			n->next = k->h_head;
			k->h_head = named[j];
			k->holders = j + 1;
		}
		CRASH_POINT(SEM_HOLD_LISTED);
		key_clear_fast_holder_locked(k);
		return true;
	}
	if (!h) {
		k->h_head = IDX_NONE;
		k->holders = 0;
		return true;
	}
	k->h_head = h - 1;
	seg->nodes[h - 1].next = IDX_NONE;
	k->holders = 1;
	return true;
}

/*
 * key_unlock(), and for a semaphore of K > 1 slots whose listed holds fit
 * them (at most K, no session twice), with nothing else keeping it on the
 * mutex path, their hand-back to the slots first: each slot names a listed
 * hold (NODE_HOLDING, as a lock's word names its holder), then the list is
 * emptied, then key_unlock() opens the slots. So a holder beyond the first
 * releases without the mutex, and the next acquire finds a free slot. A
 * crash at any step leaves the mutex to be repaired: key_repair_locked()
 * lists every NODE_HOLDING node of the key and clears the slots.
 */
void key_unlock_giving(struct segment *seg, struct seg_key *k)
{
	uint32_t nslots = seg_key_nslots(k), key, nodes[SEG_KEY_SLOTS], nn = 0, i, j, x;
	uint64_t w;

	if (nslots < 2 || !k->holders || k->holders > nslots ||
	    atomic_load(&k->state) != KEY_USED ||
	    (atomic_load_explicit(&k->cluster, memory_order_relaxed) & CL_KEY) ||
	    k->q_head != IDX_NONE || k->delay_until_ns != 0 || atomic_load(&k->watchers) != 0)
		goto out;
	for (i = 0; i < SEG_KEY_SLOTS; i++)
		if (FAST_HOLDER(seg_key_slot_load(k, i)))
			goto out; /* not after a key_lock(): leave it to the next */
	key = seg_key_index(seg, k);
	for (x = k->h_head; x != IDX_NONE; x = seg->nodes[x].next) {
		if (x >= seg->nnodes || nn == nslots)
			goto out;
		w = atomic_load(&seg->nodes[x].word);
		if (w != NODE_PACK(NODE_HOLDING, NODE_SESSION(w), key))
			goto out;
		for (j = 0; j < nn; j++)
			if (NODE_SESSION(atomic_load(&seg->nodes[nodes[j]].word)) ==
			    NODE_SESSION(w))
				goto out; /* a session twice: settlers have not run yet */
		nodes[nn++] = x;
	}
	if (nn != k->holders)
		goto out;
	for (i = 0; i < nn; i++) {
		_Atomic uint64_t *sw = seg_key_slot(k, i);

		atomic_store_explicit(
			sw,
			FAST_PACK(1, nodes[i] + 1,
				  FAST_SEQ(atomic_load_explicit(sw, memory_order_relaxed))),
			memory_order_release);
	}
	CRASH_POINT(SLOT_GIVEN_NAMED);
	k->h_head = IDX_NONE;
	k->holders = 0;
	CRASH_POINT(SLOT_GIVEN_UNLISTED);
out:
	key_unlock(k);
}

void key_counts_peek(const struct seg_key *k, uint64_t *lock_index, uint64_t *modify_index)
{
	uint32_t nslots = seg_key_nslots(k), i;
	unsigned tries;

	/* The bases change (slot 0's FOLDING first) before a fold stores the
	 * counters, and before key_unlock() lets lock-free operations count
	 * from new bases: the same bases on both sides mean the counters and
	 * the words read between belong together. */
	for (tries = 0; tries < 16; tries++) {
		uint64_t b[SEG_KEY_SLOTS], l, m, grants = 0, changes = 0;
		bool same = true;

		for (i = 0; i < nslots; i++)
			b[i] = atomic_load(i ? &k->fast_xbase[i - 1] : &k->fast_base);
		l = atomic_load(&k->lock_index);
		m = atomic_load(&k->modify_index);
		for (i = 0; i < nslots; i++) {
			uint64_t seq = FAST_SEQ(seg_key_slot_load(k, i)), n;

			n = (seq - FBASE_SEQ(b[i])) & FAST_SEQ_MASK;
			if (FBASE_SEQ(b[i]) == ((seq + 1) & FAST_SEQ_MASK))
				n = 0;
			grants += n ? (n + !(b[i] & FBASE_HELD)) / 2 : 0;
			changes += n;
		}
		if (b[0] & FBASE_FOLDING)
			continue;
		for (i = 0; i < nslots; i++)
			if (atomic_load(i ? &k->fast_xbase[i - 1] : &k->fast_base) != b[i])
				same = false;
		if (!same)
			continue;
		*lock_index = l + grants;
		*modify_index = m + changes;
		return;
	}
	/* Changing too fast to catch still: what the mutex holders counted. */
	*lock_index = atomic_load(&k->lock_index);
	*modify_index = atomic_load(&k->modify_index);
}

/* When a lock wait of this process must end: @timeout_ms from now (0: no bound). */
static uint64_t lock_deadline(uint32_t timeout_ms)
{
	return timeout_ms ? mono_ns() + (uint64_t)timeout_ms * 1000000ull : 0;
}

/*
 * lw_lock() in the old mutex's terms: 0, EOWNERDEAD or ETIMEDOUT. In the
 * broker's event loop every wait also draws on the turn's budget
 * (lock_budget_ns), so that however many keys a stopped process sits in,
 * one turn of the loop waits for them all together no longer than that.
 */
static int word_lock(struct segment *seg, _Atomic uint32_t *w, uint64_t deadline_ns)
{
	uint64_t start = 0, now;
	int r;

	if (seg->lock_timeout_ms) {
		/* This process's own patience (the broker's) bounds every wait. */
		now = lock_deadline(seg->lock_timeout_ms);
		if (!deadline_ns || now < deadline_ns)
			deadline_ns = now;
	}
	if (seg->lock_budgeted) {
		start = mono_ns();
		if (!deadline_ns || deadline_ns > start + seg->lock_budget_ns)
			deadline_ns = start + seg->lock_budget_ns;
		if (deadline_ns == start)
			deadline_ns = start + 1; /* spent: try once */
	}
	r = lw_lock(w, seg->lock_self, deadline_ns, seg->lock_judge);
	if (seg->lock_budgeted) {
		now = mono_ns();
		seg->lock_budget_ns -=
			now - start < seg->lock_budget_ns ? now - start : seg->lock_budget_ns;
	}
	return r == LW_RECOVER ? EOWNERDEAD : r == -ETIMEDOUT ? ETIMEDOUT : 0;
}

static int word_trylock(const struct segment *seg, _Atomic uint32_t *w)
{
	int r = lw_trylock(w, seg->lock_self);

	return r == LW_RECOVER ? EOWNERDEAD : r == -EBUSY ? EBUSY : 0;
}

static int locked(struct segment *seg, struct seg_key *k, int r)
{
	if (r && r != EOWNERDEAD)
		return r == EBUSY ? -EBUSY : r == ETIMEDOUT ? -ETIMEDOUT : -LOCAL_ECORRUPT;
	enter_slow(k);
	fold_fast_counts_locked(k);
	adopt_fast_hold_locked(seg, k);
	if (r == EOWNERDEAD) {
		/* Its last owner died inside a critical section: rebuild the
		 * key from the node table before anyone else sees it. */
		atomic_fetch_add(&seg->hdr->stats.repairs, 1);
		r = key_repair_locked(seg, k);
		if (r) {
			lw_unlock(&k->lock);
			return r;
		}
	} else {
		if (!sync_fast_holder_locked(seg, k) || !key_links_sane(seg, k)) {
			/* Damaged fields: quarantine; damaged links: rebuild. */
			atomic_fetch_add(&seg->hdr->stats.repairs, 1);
			key_repair_locked(seg, k);
		}
	}
	if (atomic_load(&k->state) == KEY_QUARANTINED) {
		lw_unlock(&k->lock);
		return -LOCAL_ECORRUPT;
	}
	return 0;
}

int key_lock(struct segment *seg, struct seg_key *k)
{
	return locked(seg, k, word_lock(seg, &k->lock, lock_deadline(seg->lock_timeout_ms)));
}

int key_lock_timed(struct segment *seg, struct seg_key *k, uint32_t timeout_ms)
{
	return locked(seg, k, word_lock(seg, &k->lock, lock_deadline(timeout_ms)));
}

int key_lock_until(struct segment *seg, struct seg_key *k, uint64_t deadline_ns)
{
	return locked(seg, k, word_lock(seg, &k->lock, deadline_ns));
}

int key_trylock(struct segment *seg, struct seg_key *k)
{
	return locked(seg, k, word_trylock(seg, &k->lock));
}

bool key_matches(const struct seg_key *k, uint32_t hash, const char *key, size_t len)
{
	return atomic_load(&k->state) == KEY_USED && atomic_load(&k->hash) == hash &&
	       k->key_len == len && memcmp(k->key, key, len) == 0;
}

/* Lock-free probe: the first live entry with this hash, or IDX_NONE. */
uint32_t probe_unlocked(struct segment *seg, uint32_t hash)
{
	uint32_t mask = seg->index_size - 1, i = hash & mask, n;

	for (n = 0; n < seg->index_size; n++, i = (i + 1) & mask) {
		uint32_t v = atomic_load_explicit(&seg->index[i], memory_order_acquire);

		if (v == 0)
			return IDX_NONE;
		if (v == INDEX_TOMB || v - 1 >= seg->caps.max_keys)
			continue;
		if (atomic_load_explicit(&seg->keys[v - 1].hash, memory_order_relaxed) == hash)
			return v - 1;
	}
	return IDX_NONE;
}

/* Under the table mutex: the exact entry, and where it would be inserted. */
static uint32_t probe_locked(struct segment *seg, uint32_t hash, const char *key, size_t len,
			     uint32_t *slot)
{
	uint32_t mask = seg->index_size - 1, i = hash & mask, n;

	*slot = IDX_NONE;
	for (n = 0; n < seg->index_size; n++, i = (i + 1) & mask) {
		uint32_t v = atomic_load(&seg->index[i]);

		if (v == 0) {
			if (*slot == IDX_NONE)
				*slot = i;
			return IDX_NONE;
		}
		if (v == INDEX_TOMB || v - 1 >= seg->caps.max_keys) {
			if (*slot == IDX_NONE)
				*slot = i;
			continue;
		}
		if (key_matches(&seg->keys[v - 1], hash, key, len))
			return v - 1;
	}
	return IDX_NONE;
}

static void index_remove_locked(struct segment *seg, uint32_t idx)
{
	uint32_t mask = seg->index_size - 1, i = atomic_load(&seg->keys[idx].hash) & mask, n;

	for (n = 0; n < seg->index_size; n++, i = (i + 1) & mask) {
		uint32_t v = atomic_load(&seg->index[i]);

		if (v == 0)
			return;
		if (v == idx + 1) {
			atomic_store(&seg->index[i], INDEX_TOMB);
			seg->hdr->index_tombs++;
			return;
		}
	}
}

/* Rebuild the index from the entries: after a crash under the table lock,
 * when tombstones make probes long, or when the index was found to miss a
 * key. Lock-free readers that miss during the rebuild fall back to the
 * locked probe. Every loop is bounded by the sizes this process copied at
 * attach: a peer that keeps writing into the index cannot keep us here. */
void keytab_index_rebuild_locked(struct segment *seg)
{
	uint32_t mask = seg->index_size - 1, k, i, n;

	for (i = 0; i < seg->index_size; i++)
		atomic_store(&seg->index[i], 0);
	for (k = 0; k < seg->caps.max_keys; k++) {
		uint32_t st = atomic_load(&seg->keys[k].state);

		if (st == KEY_RESERVED) {
			key_entry_free_locked(seg, k); /* a creation that died */
			continue;
		}
		if (st != KEY_USED)
			continue;
		i = atomic_load(&seg->keys[k].hash) & mask;
		for (n = 0; n < seg->index_size && atomic_load(&seg->index[i]) != 0; n++)
			i = (i + 1) & mask;
		if (n < seg->index_size)
			atomic_store(&seg->index[i], k + 1);
	}
	seg->hdr->index_tombs = 0;
}

static int table_locked(struct segment *seg, int r)
{
	if (r == ETIMEDOUT || r == EBUSY)
		return -r;
	if (r == EOWNERDEAD) {
		atomic_fetch_add(&seg->hdr->stats.repairs, 1);
		keytab_index_rebuild_locked(seg);
	}
	return 0;
}

static int table_lock_until(struct segment *seg, uint64_t deadline_ns)
{
	return table_locked(seg, word_lock(seg, &seg->hdr->table_lock, deadline_ns));
}

static void table_unlock(struct segment *seg)
{
	lw_unlock(&seg->hdr->table_lock);
}

static bool key_idle_locked(const struct seg_key *k, uint64_t now)
{
	/* (An open cluster key is the broker's until it gives up the key's
	 * cluster lock: cluster_*.c.) */
	return k->holders == 0 && k->waiters == 0 && atomic_load(&k->watchers) == 0 &&
	       (k->delay_until_ns == 0 || k->delay_until_ns <= now) &&
	       !(atomic_load(&k->cluster) & CL_OPEN);
}

static uint32_t reclaim_idle_until(struct segment *seg, uint64_t idle_ns, uint32_t max,
				   uint64_t deadline_ns)
{
	uint64_t now = mono_ns();
	uint32_t i, freed = 0;

	if (table_lock_until(seg, deadline_ns))
		return 0;
	for (i = 0; i < seg->caps.max_keys && freed < max; i++) {
		struct seg_key *k = &seg->keys[i];

		if (atomic_load(&k->state) != KEY_USED)
			continue;
		if (key_trylock(seg, k))
			continue;
		if (atomic_load(&k->state) == KEY_USED && key_idle_locked(k, now)) {
			if (!k->idle_since_ns)
				k->idle_since_ns = now;
			if (now - k->idle_since_ns >= idle_ns) {
				index_remove_locked(seg, i);
				atomic_fetch_add(&seg->hdr->stats.reclaimed_grants,
						 atomic_load(&k->lock_index));
				key_entry_free_locked(seg, i);
				freed++;
			}
		} else {
			k->idle_since_ns = 0;
		}
		key_unlock(k);
	}
	if (seg->hdr->index_tombs > seg->index_size / 4)
		keytab_index_rebuild_locked(seg);
	table_unlock(seg);
	return freed;
}

uint32_t keytab_reclaim_idle(struct segment *seg, uint64_t idle_ns, uint32_t max,
			     uint32_t timeout_ms)
{
	return reclaim_idle_until(seg, idle_ns, max, lock_deadline(timeout_ms));
}

/*
 * Key entries are placed by hash: a new key takes the first free entry at or
 * after its home, hash % max_keys (linear probing over the entries). So the
 * entries themselves, not only the index (which any client can write), can
 * say whether a key exists: a search from the home stops at an entry never
 * used (KEY_FREE), since every entry between a key's home and its place was
 * in use when it was placed, and a freed one stays KEY_FREED (a tombstone)
 * until key_entry_free_locked() finds nothing can probe past it.
 */
static uint32_t find_free_entry_locked(struct segment *seg, uint32_t hash)
{
	uint32_t n = seg->caps.max_keys, k = hash % n, i;

	for (i = 0; i < n; i++, k = k + 1 == n ? 0 : k + 1)
		if (key_state_free(atomic_load(&seg->keys[k].state)))
			return k;
	return IDX_NONE;
}

void key_entry_free_locked(struct segment *seg, uint32_t idx)
{
	uint32_t n = seg->caps.max_keys, i = idx, steps;

	atomic_store(&seg->keys[idx].state, KEY_FREED);
	/* A tombstone followed by a never-used entry ends no key's probe (that
	 * probe would have met the never-used one): clean it, and so on back.
	 * A crash in between leaves tombstones: longer probes, nothing worse. */
	for (steps = 0; steps < n; steps++) {
		uint32_t next = i + 1 == n ? 0 : i + 1;

		if (atomic_load(&seg->keys[i].state) != KEY_FREED ||
		    atomic_load(&seg->keys[next].state) != KEY_FREE)
			break;
		atomic_store(&seg->keys[i].state, KEY_FREE);
		i = i ? i - 1 : n - 1;
	}
}

static int create_locked(struct segment *seg, uint32_t hash, const char *key, size_t len,
			 uint32_t slot, struct seg_key **out)
{
	uint32_t idx = find_free_entry_locked(seg, hash);
	struct seg_key *k;
	int err;

	if (idx == IDX_NONE)
		return -LOCAL_EMAXKEYS;
	k = &seg->keys[idx];
	err = key_lock(seg, k);
	if (err)
		return err;
	atomic_store(&k->state, KEY_RESERVED);
	k->kind = LOCAL_KIND_NONE;
	k->limit = 0;
	k->holders = k->waiters = 0;
	k->q_head = k->q_tail = k->h_head = IDX_NONE;
	k->lock_index = 0;
	k->token = 0;
	k->delay_until_ns = 0;
	k->idle_since_ns = 0;
	atomic_store(&k->value_word, 0);
	memcpy(k->key, key, len);
	k->key[len] = '\0';
	k->key_len = (uint32_t)len;
	/* A key under a cluster prefix starts gated (cluster_gated()). */
	seg_key_cluster_reset(k, cluster_prefix_match(seg, key, len));
	atomic_store(&k->hash, hash);
	atomic_store(&k->state, KEY_USED);
	atomic_store_explicit(&seg->index[slot], idx + 1, memory_order_release);
	*out = k;
	return 0;
}

/*
 * A key the index does not lead to, found from the entries: the index is a
 * cache of them, and any client can write it; trusting it alone to say a key
 * is new would let one write make a second entry for a key that exists, with
 * a second holder. Entries are placed by hash (find_free_entry_locked()), so
 * this is a probe from the key's home, not a scan of the table.
 */
static uint32_t find_unindexed_locked(struct segment *seg, uint32_t hash, const char *key,
				      size_t len)
{
	uint32_t n = seg->caps.max_keys, k = hash % n, i;

	for (i = 0; i < n; i++, k = k + 1 == n ? 0 : k + 1) {
		uint32_t st = atomic_load(&seg->keys[k].state);

		if (st == KEY_FREE)
			break; /* never used: no key was placed past it */
		if (st == KEY_USED && key_matches(&seg->keys[k], hash, key, len))
			return k;
	}
	return IDX_NONE;
}

int keytab_find(struct segment *seg, const char *key, size_t len, bool create, struct seg_key **out)
{
	return keytab_find_until(seg, key, len, create, out, lock_deadline(seg->lock_timeout_ms));
}

int keytab_find_timed(struct segment *seg, const char *key, size_t len, bool create,
		      struct seg_key **out, uint32_t timeout_ms)
{
	return keytab_find_until(seg, key, len, create, out, lock_deadline(timeout_ms));
}

/* Under the table lock: lock the entry @idx found for the key. */
static int take_found_locked(struct segment *seg, uint32_t idx, struct seg_key **out,
			     uint64_t deadline_ns)
{
	int err = key_lock_until(seg, &seg->keys[idx], deadline_ns);

	if (!err)
		*out = &seg->keys[idx];
	return err;
}

/* Entry @k holds @key: its state, length and bytes (the entry's bytes
 * are NUL-terminated within the entry, and a key changes only under the
 * key mutex: read without it, a guess to confirm under it). */
static bool entry_looks_like(const struct seg_key *k, const char *key, size_t len)
{
	return atomic_load(&k->state) == KEY_USED && k->key_len == len &&
	       memcmp(k->key, key, len) == 0;
}

int keytab_find_hinted(struct segment *seg, const char *key, size_t len, bool create,
		       struct seg_key **out, uint64_t deadline_ns, uint32_t idx)
{
	struct seg_key *k;
	int err;

	if (idx >= seg->caps.max_keys)
		return keytab_find_until(seg, key, len, create, out, deadline_ns);
	k = &seg->keys[idx];
	/* Lock only an entry that looks like ours (as a probe locks only an
	 * entry of our hash): a stale hint must not make us wait for the
	 * mutex of another key, which a stopped process may hold. */
	if (!entry_looks_like(k, key, len))
		return keytab_find_until(seg, key, len, create, out, deadline_ns);
	err = key_lock_until(seg, k, deadline_ns);
	if (err)
		return err;
	/* Under the key mutex, as keytab_find_until() confirms its probe:
	 * an entry is made, re-used and freed only under it. The bytes are
	 * the entry's own, valid and NUL-terminated; equal bytes and length
	 * are the same key (the hash is theirs, no need to compute it). */
	if (entry_looks_like(k, key, len)) {
		*out = k;
		return 0;
	}
	key_unlock(k);
	return keytab_find_until(seg, key, len, create, out, deadline_ns);
}

int keytab_find_until(struct segment *seg, const char *key, size_t len, bool create,
		      struct seg_key **out, uint64_t deadline_ns)
{
	uint32_t hash = key_hash(key, len), idx, slot;
	int err;

	idx = probe_unlocked(seg, hash);
	if (idx != IDX_NONE) {
		struct seg_key *k = &seg->keys[idx];

		err = key_lock_until(seg, k, deadline_ns);
		if (err)
			return err;
		if (key_matches(k, hash, key, len)) {
			*out = k;
			return 0;
		}
		key_unlock(k);
	}
	err = table_lock_until(seg, deadline_ns);
	if (err)
		return err;
	idx = probe_locked(seg, hash, key, len, &slot);
	if (idx == IDX_NONE && create && find_free_entry_locked(seg, hash) == IDX_NONE) {
		/* Full: reclaim idle keys now rather than fail. */
		table_unlock(seg);
		reclaim_idle_until(seg, 0, 64, deadline_ns);
		err = table_lock_until(seg, deadline_ns);
		if (err)
			return err;
		idx = probe_locked(seg, hash, key, len, &slot);
	}
	if (idx == IDX_NONE && create) {
		idx = find_unindexed_locked(seg, hash, key, len);
		if (idx != IDX_NONE) {
			/* The index lost it (it was written over): believe the
			 * entries, and mend the index from them. */
			atomic_fetch_add(&seg->hdr->stats.repairs, 1);
			keytab_index_rebuild_locked(seg);
		}
	}
	if (idx != IDX_NONE)
		err = take_found_locked(seg, idx, out, deadline_ns);
	else if (!create)
		err = -ENOENT;
	else
		err = slot == IDX_NONE ? -LOCAL_EMAXKEYS
				       : create_locked(seg, hash, key, len, slot, out);
	table_unlock(seg);
	return err;
}

/* The table lock and every key lock whose owner is gone (by the judge):
 * taken without waiting, repaired, released. One busy now is left for
 * later: the caller (the broker) must never wait on a lock word. */
uint32_t segment_repair_dead_mutexes(struct segment *seg)
{
	uint32_t i, n = 0;

	if (lw_reap_if_gone(&seg->hdr->table_lock, seg->lock_judge) &&
	    table_locked(seg, word_trylock(seg, &seg->hdr->table_lock)) == 0) {
		table_unlock(seg);
		n++;
	}
	for (i = 0; i < seg->caps.max_keys; i++) {
		struct seg_key *k = &seg->keys[i];

		if (lw_reap_if_gone(&k->lock, seg->lock_judge) && key_trylock(seg, k) == 0) {
			key_unlock(k);
			n++;
		}
	}
	return n;
}

uint32_t segment_mark_gone_owners(struct segment *seg)
{
	uint32_t i, n = lw_reap_if_gone(&seg->hdr->table_lock, seg->lock_judge);

	for (i = 0; i < seg->caps.max_keys; i++)
		n += lw_reap_if_gone(&seg->keys[i].lock, seg->lock_judge);
	return n;
}
