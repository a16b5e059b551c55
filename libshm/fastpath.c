// SPDX-License-Identifier: MIT
/*
 * Uncontended acquire and release without the key mutex: one CAS on the
 * key's fast word (see FAST_SLOW in segment.h). Anything else — a queue, a
 * lock-delay, a value to attach, a lease, a watcher, a semaphore that has a
 * holder already, a key that does not exist yet, a lost race — falls back to
 * the mutex path by returning FAST_MISS.
 *
 * The locked instructions, all of them: acquire = claim a node (CAS), commit
 * (CAS on the fast word); release = CAS on the fast word. The token is
 * computed, not drawn: the key's range and its grant count (fast_token()).
 * Nothing else is written that another process reads: the node keeps
 * the state it was claimed in (NODE_FAST_CLAIMED), and the key's lock_index
 * and modify_index are brought up to date by the next mutex holder, which
 * counts the lock-free operations from the fast word's seq (fast_base).
 *
 * Order in fast_acquire(), and why:
 *   1. read the fast word (F0), then check the entry is our key: a reclaim
 *      or re-use of the entry happens under the mutex, which sets SLOW, and
 *      the word never comes back to F0, so the final CAS against F0 fails
 *      if the entry changed after step 1;
 *   2. claim a hold node as NODE_FAST_CLAIMED (a CAS that records session
 *      and key, and a full barrier) and fill it in; while no fast word names
 *      it, nobody else writes or frees it while our process lives (the sweep
 *      leaves it to us, repair ignores it);
 *   3. check the session is active: the broker marks a session CLOSING
 *      before it sweeps, so either it finds our node (and, through the key
 *      mutex, sets SLOW: our CAS then fails, and we free the node), or we
 *      see CLOSING and back out;
 *   4. CAS F from F0 to {our node}: the commit point. From here the node is
 *      the key's hold, which mutex holders may end (the sweep, lease expiry,
 *      an operator) and free; we no longer touch it.
 * fast_release() un-names the node with one CAS; the node is then in flight
 * again, ours alone, and a plain store frees it. (If a mutex holder made it
 * NODE_HOLDING meanwhile, the sweep may free it too: then a CAS frees it.)
 *
 * Cluster keys (docs/cluster.md, "The lock-free path") are in fast mode only
 * while the broker holds them open and wants no ring (fast_eligible()), and
 * a lock-free acquire also checks the gate between steps 1 and 4
 * (cluster_fast_refused(): open, the key's lease the host's lease now, the
 * host's deadline more than a slack ahead by the coarse clock; the token
 * range by fast_token()). Everything the broker changes in the key (closing
 * it, arming it, a new range) it changes under the key mutex, which sets
 * SLOW first: our CAS against F0 then fails. The header's lease and
 * deadline it writes without the mutex, and the deadline passes by itself
 * (a stopped broker writes nothing): those are read after F0 and before
 * the CAS, so a grant committed with them valid was decided while they
 * were, as the mutex path decides under the mutex before it grants. The
 * broker, closing a key, sets SLOW under the mutex before it gives the etcd
 * lock up, and finds a lock-free hold committed before that (adopted by
 * key_lock()) to end.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "clock.h"
#include "crashpoint.h"
#include "client.h"
#include "keyops.h"

/* find() without a usable hint: measure, check, hash and probe. */
static __attribute__((noinline)) struct seg_key *find_probe(struct segment *seg, const char *key,
							    struct key_hint *kh, uint64_t *f,
							    uint32_t *out_idx)
{
	size_t len = strnlen(key, LOCAL_KEY_MAX + 1);
	uint32_t idx, hash;
	struct seg_key *k;

	if (key_check(key, len))
		return NULL;
	hash = key_hash(key, len);
	idx = probe_unlocked(seg, hash);
	if (idx == IDX_NONE)
		return NULL;
	k = &seg->keys[idx];
	*f = atomic_load_explicit(&k->fast, memory_order_acquire);
	if (!key_matches(k, hash, key, len))
		return NULL;
	atomic_store_explicit(&kh->key, (uintptr_t)key, memory_order_relaxed);
	atomic_store_explicit(&kh->idx, idx, memory_order_relaxed);
	*out_idx = idx;
	return *f & FAST_SLOW ? NULL : k;
}

/*
 * The entry of @key (a C string, not yet checked), in fast mode, with its
 * fast word in *f; NULL otherwise (then the caller's own checks of the key
 * report what is wrong with it, if anything). The entry the same string was
 * found in last time is tried first, with one comparison of the bytes:
 * that saves measuring, hashing and probing (a third of an uncontended
 * lock+release). The entry's bytes decide, as for any probe: they are a
 * valid key, NUL-terminated, so equal strings are the same key. The last
 * byte of the entry's buffer is NUL in every valid entry (a key is at most
 * LOCAL_KEY_MAX bytes, and only a key that long writes that byte), so the
 * bounded compare ends inside the buffer and equality means the caller's
 * key has a valid length: one load, not key_len and the byte it names.
 */
static inline struct seg_key *find(struct segment *seg, const char *key, struct node_hints *hints,
				   uint64_t *f, uint32_t *out_idx)
{
	struct key_hint *kh = key_hint_of(hints, key);
	uint32_t idx = atomic_load_explicit(&kh->idx, memory_order_relaxed);
	struct seg_key *k;

	if (atomic_load_explicit(&kh->key, memory_order_relaxed) != (uintptr_t)key ||
	    idx >= seg->caps.max_keys)
		return find_probe(seg, key, kh, f, out_idx);
	k = &seg->keys[idx];
	*f = atomic_load_explicit(&k->fast, memory_order_acquire);
	if (atomic_load_explicit(&k->state, memory_order_relaxed) != KEY_USED ||
	    k->key[LOCAL_KEY_MAX] != '\0' || strncmp(k->key, key, LOCAL_KEY_MAX + 1) != 0)
		return find_probe(seg, key, kh, f, out_idx);
	*out_idx = idx; /* the caller's, without a division by the entry size */
	return *f & FAST_SLOW ? NULL : k;
}

/* The word of our hold, if the fast word names one of ours; else 0. */
static inline __attribute__((always_inline)) uint64_t ours(const struct segment *seg, uint64_t f,
							   uint32_t key, struct owner who)
{
	uint32_t h = FAST_HOLDER(f);
	const struct seg_node *n;
	uint64_t w;

	if (h - 1 >= seg->nnodes) /* h 0 (none) too: it wraps */
		return 0;
	n = &seg->nodes[h - 1];
	w = atomic_load_explicit(&n->word, memory_order_acquire);
	/* (@f may be stale, and the node claimed again meanwhile by a thread of
	 * our session, writing the same gen: a relaxed read.) */
	if ((w != NODE_PACK(NODE_FAST_CLAIMED, who.slot, key) &&
	     w != NODE_PACK(NODE_HOLDING, who.slot, key)) ||
	    __atomic_load_n(&n->session_gen, __ATOMIC_RELAXED) != who.gen)
		return 0;
	return w;
}

/*
 * The token of our hold that slot @slot names in its word @f (ours() said
 * so), for a re-acquire; 0 when the slot no longer shows @f. The node's
 * word alone does not say the token is still that hold's: once the hold is
 * released, a thread of our session may take the node back (a key
 * handle's, whose word stays ours: take_kept()) or claim it again for the
 * key, and write the token of a grant it is about to commit, which another
 * session gets instead when that commit loses. The slot unchanged after the
 * read (seq moves at every change) means no release came between: the
 * tokens are stored with release after the release they follow was read,
 * so a token read (acquire) from a later grant is followed by a read of the
 * slot that sees that release, or later.
 */
static inline __attribute__((always_inline)) uint64_t
held_token(const struct segment *seg, const _Atomic uint64_t *slot, uint64_t f)
{
	uint64_t tok = __atomic_load_n(&seg->nodes[FAST_HOLDER(f) - 1].token, __ATOMIC_ACQUIRE);

	return atomic_load_explicit(slot, memory_order_relaxed) == f ? tok : 0;
}

/*
 * The token an acquire committing on fast word @f gets: the key's range
 * (key_token_for()) at the grant count that commit makes. lock_index is
 * exact as of fast_base, and the lock-free operations since alternate,
 * starting with an acquisition if the key was free then (as
 * fold_fast_counts_locked() counts them). Read after @f (acquire): the
 * fields are what the mutex holder that published @f left, unless a mutex
 * holder has come since, and then our CAS against @f fails. 0: the mutex
 * path must draw.
 */
static inline __attribute__((always_inline)) uint64_t fast_token(const struct seg_key *k,
								 uint64_t f, uint64_t b)
{
	uint64_t n = (FAST_SEQ(f) + 1 - FBASE_SEQ(b)) & FAST_SEQ_MASK;

	if (b & FBASE_FOLDING)
		return 0;
	return key_token_for(k, atomic_load_explicit(&k->lock_index, memory_order_relaxed) +
					(n + !(b & FBASE_HELD)) / 2);
}

/* acquire_at() for a key handle's first try (fast_key_lock()): a cluster
 * key, or a claim that needs a search, is left to a second try with
 * everything (FAST_AGAIN, before anything is written), so that the first
 * calls nothing: no argument moves and spills around calls on the common
 * path. */
#define FAST_AGAIN (FAST_MISS + 1)

/* Free a node no fast word names and that is in flight: ours alone. */
static void free_in_flight(struct seg_node *n)
{
	atomic_store_explicit(&n->word, 0, memory_order_release);
}

/*
 * ---- A handle's node ------------------------------------------------------
 *
 * A node no fast word names, NODE_FAST_CLAIMED, is in flight: only its own
 * process writes or frees it while that process lives (the sweep counts it
 * busy and waits; repair and resets leave it), and the sweep frees it once
 * the process is dead. A key handle keeps the node of its lock-free hold
 * after the release, in that state, instead of freeing it, and its next
 * lock-free acquire takes it back with no CAS: of the three locked
 * instructions of a lock+release (claim, commit, release) it saves the
 * first, which is most of what a handle costs over a robust mutex
 * (docs/performance.md, "Key handles").
 *
 * The node is one thread's, the handle's owner (the first thread to keep
 * one through it, set once by a CAS): any thread may use a handle at once,
 * and only a node one thread alone takes and puts back can do without a
 * locked instruction. Other threads claim and free as by name. The handle
 * keeps the node (h->kept) while it is the hold too (h->kept_busy), so that
 * the session's count of kept nodes (s->nkept, at most LOCAL_KEPT_MAX, so
 * that handles cannot use up --max-holds) changes only when a handle first
 * keeps one and when it loses it (the hold was released another way, or
 * ended by the broker: found at the next acquire, when the key is free
 * while the handle thinks its node the hold) or gives it up.
 *
 * Why taking it back needs no barrier: the session check after a claim
 * (step 3 at the top) is there so that a sweep cannot miss a node claimed
 * while it scans. A kept node is in flight or a hold from its first claim
 * on, so the sweep of our session sees it at every pass and stays pending
 * (busy) while our process lives, whatever our check reads; a hold we
 * commit meanwhile it finds at its next pass and ends, as if we had
 * committed just before it began. Only where the word itself must change
 * (the key is in another entry now) is the node freed and claimed again.
 *
 * What it costs: a kept node counts against --max-holds; and a session that
 * ends while its process lives (a TTL, an operator) keeps its slot until the
 * node is given back: by its owner's next call on the handle (which then
 * reports -LOCAL_ESESSION, whatever path found that: handle_answer()),
 * local_key_close() or local_session_close(), or the process's exit.
 */

/* This thread, as a number no other live thread shares: its thread
 * pointer, read without a call where the compiler can. */
static inline uintptr_t thread_self(void)
{
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
	return (uintptr_t)__builtin_thread_pointer();
#else
	return (uintptr_t)pthread_self();
#endif
}

/* Is this thread @h's owner? */
static inline bool handle_mine(const local_key *h)
{
	return atomic_load_explicit(&h->owner, memory_order_relaxed) == thread_self();
}

/* @h keeps no node any more (its owner's call). */
static void kept_drop(local_key *h)
{
	atomic_store_explicit(&h->kept, IDX_NONE, memory_order_relaxed);
	h->kept_busy = false;
	atomic_fetch_sub_explicit(&h->s->nkept, 1, memory_order_relaxed);
}

/* Free @n if it is still our session's, in flight (else leave it alone:
 * it is a hold, or no longer ours). */
static void free_if_in_flight(local_key *h, struct seg_node *n)
{
	uint64_t w = atomic_load_explicit(&n->word, memory_order_relaxed);

	if (w == NODE_PACK(NODE_FAST_CLAIMED, h->s->who.slot, NODE_KEY(w)) &&
	    n->session_gen == h->s->who.gen &&
	    !seg_node_is_hold(h->s->seg, n - h->s->seg->nodes, w))
		free_in_flight(n);
}

/* Keep node @node (in flight, ours alone) in @h, if this thread may and
 * the session keeps fewer than LOCAL_KEPT_MAX: true when kept. */
static __attribute__((noinline)) bool kept_adopt(local_key *h, uint32_t node)
{
	local_session *s = h->s;
	uintptr_t me = thread_self(), o = atomic_load_explicit(&h->owner, memory_order_relaxed);
	uint64_t w;

	/* Another thread's handle: no locked instruction per release (many
	 * threads may share a handle). */
	if (o != me && (o || !atomic_compare_exchange_strong(&h->owner, &o, me)))
		return false;
	if (atomic_load_explicit(&h->kept, memory_order_relaxed) != IDX_NONE) {
		if (!h->kept_busy)
			return false;
		/* Its node was the hold, and is no longer (another's release
		 * freed it): forget it, keep this one. */
		kept_drop(h);
	}
	/* A semaphore's slots claim a node at every acquire (slot_commit()
	 * takes none back): kept, it would only hold a node and a place in
	 * the bound. (Read without the mutex: a wrong answer keeps or frees a
	 * node in flight, either of which is safe.) */
	w = atomic_load_explicit(&s->seg->nodes[node].word, memory_order_relaxed);
	if (NODE_KEY(w) >= s->seg->caps.max_keys || seg_key_nslots(&s->seg->keys[NODE_KEY(w)]) > 1)
		return false;
	/* At the bound, a load, not two locked instructions per release. */
	if (atomic_load_explicit(&s->nkept, memory_order_relaxed) >= LOCAL_KEPT_MAX)
		return false;
	if (atomic_fetch_add_explicit(&s->nkept, 1, memory_order_relaxed) >= LOCAL_KEPT_MAX) {
		atomic_fetch_sub_explicit(&s->nkept, 1, memory_order_relaxed);
		return false;
	}
	h->kept_busy = false;
	atomic_store_explicit(&h->kept, node, memory_order_relaxed);
	return true;
}

/* A node in flight, ours alone, that we are done with (@node): back to
 * handle @h (NULL: none) when it is the one @h keeps for this thread, or
 * @h can keep it; else freed. */
static inline __attribute__((always_inline)) void put_in_flight(struct segment *seg, local_key *h,
								uint32_t node)
{
	if (h) {
		if (__builtin_expect(atomic_load_explicit(&h->kept, memory_order_relaxed) == node &&
					     handle_mine(h),
				     1)) {
			h->kept_busy = false;
			return;
		}
		if (kept_adopt(h, node))
			return;
	}
	free_in_flight(&seg->nodes[node]);
}

/* The hold on node @node was freed (it had been made a listed hold): if it
 * was @h's, @h no longer keeps it. */
static inline void kept_freed(local_key *h, uint32_t node)
{
	if (h && atomic_load_explicit(&h->kept, memory_order_relaxed) == node && handle_mine(h))
		kept_drop(h);
}

/* The node @h keeps, taken back by its owner for a claim into @claimed (the
 * word it has while in flight for that key: then unchanged); IDX_NONE when
 * it keeps none for this thread, or none usable (then it is given up, and
 * the caller claims as usual). */
static __attribute__((noinline)) uint32_t kept_lost(struct segment *seg, local_key *h, uint32_t p)
{
	/* Busy: our hold on this key, and yet the key is free (the caller
	 * found no holder): released another way, or ended; no longer ours.
	 * Else it is ours, in flight, for another entry (the key moved): we
	 * free it. */
	if (!h->kept_busy && p < seg->caps.max_holds)
		free_if_in_flight(h, &seg->nodes[p]);
	kept_drop(h);
	return IDX_NONE;
}

static inline __attribute__((always_inline)) uint32_t take_kept(struct segment *seg, local_key *h,
								uint64_t claimed, struct owner who)
{
	uint32_t p = atomic_load_explicit(&h->kept, memory_order_relaxed);
	const struct seg_node *n;

	if (p == IDX_NONE || !handle_mine(h))
		return IDX_NONE;
	if (__builtin_expect(h->kept_busy || p >= seg->caps.max_holds, 0))
		return kept_lost(seg, h, p);
	n = &seg->nodes[p];
	if (__builtin_expect(atomic_load_explicit(&n->word, memory_order_relaxed) != claimed ||
				     n->session_gen != who.gen,
			     0))
		return kept_lost(seg, h, p);
	h->kept_busy = true;
	return p;
}

void fast_key_unpark(local_key *h)
{
	struct segment *seg = h->s->seg;
	uint32_t p = atomic_load_explicit(&h->kept, memory_order_relaxed);

	if (p == IDX_NONE)
		return;
	/* A node that is the hold stays the session's hold. */
	if (!h->kept_busy && p < seg->caps.max_holds)
		free_if_in_flight(h, &seg->nodes[p]);
	kept_drop(h);
}

/*
 * Claim a hold node in flight (NODE_FAST_CLAIMED, steps 2 and 3 at the
 * top) for a grant of @tok on key @idx, in *node: 0, FAST_MISS (none free:
 * the mutex path reports EMAXHOLDS) or -LOCAL_ESESSION (the node is freed).
 */
static inline __attribute__((always_inline)) int
claim_in_flight(struct segment *seg, uint32_t idx, uint64_t tok, struct owner who,
		struct node_hints *hints, local_key *h, bool first_try, uint32_t *node)
{
	uint64_t claimed = NODE_PACK(NODE_FAST_CLAIMED, who.slot, idx);
	struct seg_node *n;

	/* A handle's own node, kept since its last release: no CAS. */
	if (h) {
		*node = take_kept(seg, h, claimed, who);
		if (__builtin_expect(*node != IDX_NONE, 1)) {
			/* As its last hold left it (the lease and links a
			 * lock-free hold never sets; take_kept() checked the
			 * word and session_gen): only the token is new. */
			n = &seg->nodes[*node];
			CRASH_POINT(FAST_ACQ_TAKEN);
			__atomic_store_n(&n->token, tok, __ATOMIC_RELEASE); /* held_token() */
			goto check;
		}
	}
	/* Usually the node this session freed last: one CAS, no search. */
	*node = atomic_load_explicit(&hints->hold, memory_order_relaxed);
	n = *node < seg->caps.max_holds ? &seg->nodes[*node] : NULL;
	if (!n || !atomic_compare_exchange_strong(&n->word, &(uint64_t){ 0 }, claimed)) {
		if (first_try)
			return FAST_AGAIN; /* the search is a call: the second try's */
		*node = node_claim_as(seg, NODE_FAST_CLAIMED, 0, seg->caps.max_holds, who.slot, idx,
				      &hints->hold);
		if (*node == IDX_NONE)
			return FAST_MISS;
		n = &seg->nodes[*node];
	}
	CRASH_POINT(FAST_ACQ_CLAIMED);
	__atomic_store_n(&n->session_gen, who.gen, __ATOMIC_RELAXED); /* ours() */
	__atomic_store_n(&n->token, tok, __ATOMIC_RELEASE);	      /* held_token() */
	n->lease_until_ns = 0;
	n->lease_ms = 0;
	n->hold = n->prev = n->next = IDX_NONE;
check:
	if (!session_is(seg, who)) {
		kept_freed(h, *node);
		free_in_flight(n);
		return -LOCAL_ESESSION;
	}
	return 0;
}

/*
 * ---- Semaphore slots (limit > 1) ------------------------------------------
 *
 * A semaphore of limit L has K = min(L, SEG_KEY_SLOTS) fast words, each the
 * one-holder word above (segment.h, SEG_KEY_SLOTS); docs/performance.md,
 * "Lock-free semaphore holders beyond the first", has the design and
 * tests/model/slots.pml its model. In short:
 *   - read every slot: any SLOW is the mutex path's; one naming a hold of
 *     our session is a re-acquire (its token, no second unit);
 *   - else take the first free slot i, number the grant lock_index + K * S +
 *     i + 1 (S: the grants every slot showed since its base), claim a node
 *     and commit with the one-holder CAS on slot i;
 *   - then read the other slots again (after a seq_cst fence: the commit
 *     and these loads are a store-then-load pair, and two threads of one
 *     session committing at once must see at least one of each other): a
 *     SLOW one, or one naming another hold of our session, sends us to
 *     settle() under the mutex (first giving our slot back, in the second
 *     case, when we still can);
 *   - release: the slot naming our hold, with the one-holder CAS.
 */

/* The grant number a commit on slot @i of @nslots would make, from the
 * words @f read (before), or 0 when the mutex path must count. */
static inline __attribute__((always_inline)) uint64_t
slot_token(const struct seg_key *k, const uint64_t *f, uint32_t nslots, uint32_t i)
{
	uint64_t b0 = atomic_load_explicit(&k->fast_base, memory_order_relaxed), b, S;
	uint32_t j;

	/* Twice the grants the slots showed: each slot's (d + !held) / 2,
	 * d its changes since its base; slot 0's odd bit goes in the halving
	 * below, the others' here. */
	S = ((f[0] - b0) & FAST_SEQ_MASK) + !(b0 & FBASE_HELD); /* seq bits only */
#pragma GCC unroll 4
	for (j = 1; j < SEG_KEY_SLOTS; j++) {
		if (j >= nslots)
			break;
		b = atomic_load_explicit(&k->fast_xbase[j - 1], memory_order_relaxed);
		S += (((f[j] - b) & FAST_SEQ_MASK) + !(b & FBASE_HELD)) & ~1ull;
	}
	/* FOLDING (slot 0's base only): a fold is under way. A slot read
	 * before a mutex holder came and went shows a seq below its new base:
	 * a distance near 2^39, where no slot runs more than FAST_FOLD_EVERY
	 * operations without the mutex (so a sane sum stays below 2^33). */
	if ((b0 & FBASE_FOLDING) || S >= (1ull << 38))
		return 0;
	return key_token_for(k, atomic_load_explicit(&k->lock_index, memory_order_relaxed) +
					nslots * (S / 2) + i + 1);
}

/*
 * After a lock-free commit of node @node whose token is @tok: the mutex
 * decides whether it stands. Under it (key_lock() has listed every slot's
 * hold), if our node is still our session's hold and the session has
 * another, ours was the later commit (the other thread's re-check ran
 * before ours, or saw ours and settles too): end ours and answer the
 * other's token. Else ours stands. Our node no longer a hold of ours (the
 * sweep, an operator): FAST_MISS, the mutex path answers.
 */
static __attribute__((noinline)) int settle(struct segment *seg, struct seg_key *k, uint32_t idx,
					    uint32_t node, uint64_t tok, struct owner who,
					    uint64_t *token)
{
	struct seg_node *n = &seg->nodes[node];
	uint32_t x, other = IDX_NONE, wake = IDX_NONE, steps = 0;
	int err = key_lock(seg, k);

	if (err)
		return err == -LOCAL_ECORRUPT ? err : FAST_MISS;
	if (atomic_load(&k->state) != KEY_USED || k->kind != LOCAL_KIND_SEMAPHORE ||
	    atomic_load(&n->word) != NODE_PACK(NODE_HOLDING, who.slot, idx) ||
	    n->session_gen != who.gen || !session_is(seg, who)) {
		key_unlock_giving(seg, k);
		return FAST_MISS;
	}
	for (x = k->h_head; x != IDX_NONE && x < seg->nnodes && steps++ < seg->nnodes;
	     x = seg->nodes[x].next)
		if (x != node &&
		    atomic_load(&seg->nodes[x].word) == NODE_PACK(NODE_HOLDING, who.slot, idx) &&
		    seg->nodes[x].session_gen == who.gen)
			other = x;
	if (other != IDX_NONE) {
		tok = seg->nodes[other].token;
		wake = key_release_hold_locked(seg, k, node, REL_VOLUNTARY);
		CRASH_POINT(SLOT_SETTLED);
	}
	key_unlock_giving(seg, k);
	if (wake != IDX_NONE)
		waiter_wake(seg, wake);
	*token = tok;
	return 0;
}

/*
 * The re-check after our commit on slot @i (word @g) found other slots
 * held (words @f): if one is another hold of our session (a thread of it
 * committed at the same time), give ours back and let the mutex path
 * answer that one's token; if ours cannot be given back (the slot was
 * frozen meanwhile), settle under the mutex. Else our grant stands.
 */
static __attribute__((noinline)) int slot_twin(struct segment *seg, struct seg_key *k, uint32_t idx,
					       uint32_t node, uint64_t tok, struct owner who,
					       uint64_t *token, const uint64_t *f, uint32_t nslots,
					       uint32_t i, uint64_t g)
{
	uint32_t j;

	for (j = 0; j < nslots; j++) {
		if (j == i || !FAST_HOLDER(f[j]) || !ours(seg, f[j], idx, who))
			continue;
		if (!atomic_compare_exchange_strong(seg_key_slot(k, i), &g,
						    FAST_PACK(0, 0, FAST_SEQ(g) + 1)))
			return settle(seg, k, idx, node, tok, who, token);
		CRASH_POINT(SLOT_YIELDED);
		free_in_flight(&seg->nodes[node]);
		return FAST_MISS;
	}
	*token = tok;
	return 0;
}

/* slots_acquire_k() past its choice of free slot @i: number the grant,
 * claim a node, commit, re-check. Inlined with @i a constant for the first
 * holder (slot 0). */
static inline __attribute__((always_inline)) int
slot_commit(struct segment *seg, struct seg_key *k, uint64_t *f, uint32_t idx, uint32_t nslots,
	    uint32_t i, struct owner who, struct node_hints *hints, uint64_t *token)
{
	uint64_t o[SEG_KEY_SLOTS], tok, g, any = 0, changed = 0;
	uint32_t j, node;
	int err;

	if (((FAST_SEQ(f[i]) + 1) & (FAST_FOLD_EVERY - 1)) <= 1)
		return FAST_MISS;
	tok = slot_token(k, f, nslots, i);
	if (!tok)
		return FAST_MISS;
	err = claim_in_flight(seg, idx, tok, who, hints, NULL, false, &node);
	if (err)
		return err;
	g = FAST_PACK(0, node + 1, FAST_SEQ(f[i]) + 1);
	if (!atomic_compare_exchange_strong(seg_key_slot(k, i), &f[i], g)) {
		free_in_flight(&seg->nodes[node]);
		return FAST_MISS;
	}
	if (i)
		CRASH_POINT(SLOT_ACQ_PUBLISHED);
	else
		CRASH_POINT(FAST_ACQ_PUBLISHED);
	/* The re-check: every slot, read after our commit. A store-then-load
	 * pair: our commit is a seq_cst read-modify-write, and these loads are
	 * seq_cst (acquire loads would not do), so of two commits at once at
	 * least one's re-check sees the other's (C11's single total order). On
	 * x86 the locked CAS is the barrier and these are plain loads. */
	f[i] = g; /* what we wrote: our own slot counts as unchanged */
#pragma GCC unroll 4
	for (j = 0; j < SEG_KEY_SLOTS; j++) {
		if (j >= nslots)
			break;
		o[j] = atomic_load_explicit(seg_key_slot(k, j), memory_order_seq_cst);
		changed |= o[j] ^ f[j];
	}
	/* A slot whose word did not change names the hold it named before,
	 * which was not ours (the first pass asked), and is not SLOW; a
	 * changed one may be frozen, or name a twin's commit. */
	if (__builtin_expect(changed != 0, 0)) {
		for (j = 0; j < nslots; j++)
			any |= o[j];
		if (any & FAST_SLOW)
			return settle(seg, k, idx, node, tok, who, token);
		return slot_twin(seg, k, idx, node, tok, who, token, o, nslots, i, g);
	}
	*token = tok; /* not the node's: the hold may already have been ended */
	return 0;
}

static inline __attribute__((always_inline)) int
slots_acquire_k(struct segment *seg, struct seg_key *k, uint64_t f0, uint32_t idx, uint32_t limit,
		uint32_t nslots, bool try_only, struct owner who, struct node_hints *hints,
		uint64_t *token)
{
	uint64_t f[SEG_KEY_SLOTS], any = f0;
	uint32_t i = IDX_NONE, j;

	f[0] = f0;
#pragma GCC unroll 4
	for (j = 1; j < SEG_KEY_SLOTS; j++) {
		if (j >= nslots)
			break;
		f[j] = atomic_load_explicit(&k->fast_x[j - 1], memory_order_acquire);
		any |= f[j];
	}
	if (any & FAST_SLOW)
		return FAST_MISS;
	if (__builtin_expect(!(any & ~FAST_SEQ_MASK), 1))
		return slot_commit(seg, k, f, idx, nslots, 0, who, hints, token); /* the first */
	/* Some slot is held: ours (a re-acquire: its token, no second unit),
	 * or take the first free one. */
	if (!session_is(seg, who))
		return -LOCAL_ESESSION;
	for (j = 0; j < nslots; j++) {
		if (!FAST_HOLDER(f[j])) {
			if (i == IDX_NONE)
				i = j;
		} else if (ours(seg, f[j], idx, who)) {
			*token = held_token(seg, seg_key_slot(k, j), f[j]);
			return *token ? 0 : FAST_MISS;
		}
	}
	/* Every slot held: with limit == K the key is full (the list is empty
	 * while the slots are open); a wait, or room past K, is the mutex
	 * path's. */
	if (i == IDX_NONE)
		return try_only && limit == nslots ? -EBUSY : FAST_MISS;
	return slot_commit(seg, k, f, idx, nslots, i, who, hints, token);
}

/* slots_acquire_k() with K a constant in the common case (limit >= 4):
 * the loops over the slots lose their bounds checks. */
static inline __attribute__((always_inline)) int
slots_acquire_at(struct segment *seg, struct seg_key *k, uint64_t f0, uint32_t idx, uint32_t limit,
		 bool try_only, struct owner who, struct node_hints *hints, uint64_t *token)
{
	if (__builtin_expect(limit >= SEG_KEY_SLOTS, 1))
		return slots_acquire_k(seg, k, f0, idx, limit, SEG_KEY_SLOTS, try_only, who, hints,
				       token);
	return slots_acquire_k(seg, k, f0, idx, limit, limit, try_only, who, hints, token);
}

/* Is entry @k of @kind and @limit? Stable while SLOW is clear (they change
 * under the mutex only, which sets SLOW first, and our commit's CAS then
 * fails); a mismatch is the mutex path's to report. A function of its own
 * so that TSan's suppression of this read (tests/tsan.supp) names it alone. */
static inline __attribute__((always_inline)) bool kind_matches(const struct seg_key *k,
							       uint32_t kind, uint32_t limit)
{
	return k->kind == kind && k->limit == limit;
}

/*
 * The lock-free acquire, inlined into each entry point below so that the
 * lock kind and limit are constants there and no request is built: the
 * call layers were a third of an uncontended lock+release.
 */
static inline __attribute__((always_inline)) int
acquire_at(struct segment *seg, struct seg_key *k, uint64_t f, const uint64_t *base, uint32_t idx,
	   uint32_t kind, uint32_t limit, bool try_only, bool first_try, struct owner who,
	   struct node_hints *hints, local_key *h, uint64_t *token, uint32_t *key_idx)
{
	uint64_t tok;
	uint32_t node;
	int err;

	if (!kind_matches(k, kind, limit))
		return FAST_MISS;
	/* A cluster key only while its host holds it (see the top). */
	if (first_try) {
		if (__builtin_expect(
			    atomic_load_explicit(&k->cluster, memory_order_relaxed) & CL_KEY, 0))
			return FAST_AGAIN; /* the gate reads the clock: a call */
	} else if (__builtin_expect(cluster_fast_refused(seg, k), 0)) {
		return FAST_MISS;
	}
	*key_idx = idx;
	if (kind == LOCAL_KIND_SEMAPHORE && limit > 1)
		return slots_acquire_at(seg, k, f, idx, limit, try_only, who, hints, token);
	if (__builtin_expect(FAST_HOLDER(f) != 0, 0)) {
		uint64_t w;

		if (!session_is(seg, who))
			return -LOCAL_ESESSION;
		w = ours(seg, f, idx, who);
		if (w) { /* re-acquire: keep the token (0: the mutex path's) */
			*token = held_token(seg, &k->fast, f);
			return *token ? 0 : FAST_MISS;
		}
		/* Held, no queue: a try on a full key fails here; anything
		 * else (a wait; a semaphore with room) is the mutex path's. */
		return try_only && limit == 1 ? -EBUSY : FAST_MISS;
	}
	/* Let key_lock() count what has been done, before seq could wrap.
	 * Two values, as acquisitions may all land on odd or on even ones. */
	if (((FAST_SEQ(f) + 1) & (FAST_FOLD_EVERY - 1)) <= 1)
		return FAST_MISS;
	/* The base read after @f: the caller's, or now. */
	tok = fast_token(k, f,
			 base ? *base : atomic_load_explicit(&k->fast_base, memory_order_relaxed));
	if (!tok)
		return FAST_MISS; /* the key's token range is spent: the mutex path reserves */
	err = claim_in_flight(seg, idx, tok, who, hints, h, first_try, &node);
	if (err)
		return err;
	if (!atomic_compare_exchange_strong(&k->fast, &f,
					    FAST_PACK(0, node + 1, FAST_SEQ(f) + 1))) {
		put_in_flight(seg, h, node);
		return FAST_MISS;
	}
	CRASH_POINT(FAST_ACQ_PUBLISHED);
	*token = tok; /* not n->token: the hold may already have been ended */
	return 0;
}

/* acquire_at() the entry find() gives for @key. */
static inline __attribute__((always_inline)) int
acquire(struct segment *seg, const char *key, uint32_t kind, uint32_t limit, bool try_only,
	struct owner who, struct node_hints *hints, uint64_t *token, uint32_t *key_idx)
{
	uint64_t f;
	uint32_t idx;
	struct seg_key *k = find(seg, key, hints, &f, &idx);

	if (__builtin_expect(!k, 0))
		return FAST_MISS;
	return acquire_at(seg, k, f, NULL, idx, kind, limit, try_only, false, who, hints, NULL,
			  token, key_idx);
}

int fast_acquire(struct segment *seg, const char *key, const struct acquire_req *req,
		 uint64_t *token, struct node_hints *hints, uint32_t *key_idx)
{
	/* A lease must reach the broker, a value be published under the
	 * mutex: both go the mutex path. */
	if (req->value || req->lease_ms || req->fast_tried || crash_fast_path_off())
		return FAST_MISS;
	return acquire(seg, key, req->kind, req->limit, req->try_only, req->who, hints, token,
		       key_idx);
}

/* session_usable(), inline: a call is 5% of an uncontended lock+release. */
static inline bool usable(const local_session *s)
{
	return s->fork_gen == atomic_load_explicit(&fork_gen, memory_order_relaxed);
}

/* What api_acquire() does after a lock-free grant: only a session that had
 * a lease expire has notes to drop (one load of its own slot). */
static inline void acquired(local_session *s, uint32_t key_idx, uint64_t tok, uint64_t *token)
{
	if (atomic_load_explicit(&s->seg->sessions[s->who.slot].expired_next, memory_order_relaxed))
		api_forget_expiry(s, key_idx);
	if (token)
		*token = tok;
}

/* The lock-free part of local_lock() and local_sem_acquire(): FAST_MISS
 * when anything unusual (a bad session, options of another size, a lease,
 * a value, a NULL key, a bad limit) is the full path's to check and report,
 * in its order. */
static inline __attribute__((always_inline)) int
entry_acquire(local_session *s, const char *key, uint32_t kind, uint32_t limit,
	      const struct local_acquire_opts *opts, uint64_t *token)
{
	uint32_t key_idx;
	uint64_t tok;
	int err;

	if (__builtin_expect(!s || !key || !usable(s) || !limit || crash_fast_path_off() ||
				     (opts && (opts->sz != sizeof(*opts) || opts->lease_ms ||
					       opts->value || opts->value_len)),
			     0))
		return FAST_MISS;
	err = acquire(s->seg, key, kind, limit, opts && opts->timeout_ms == 0, s->who, &s->hints,
		      &tok, &key_idx);
	if (!err)
		acquired(s, key_idx, tok, token);
	return err;
}

int fast_lock(local_session *s, const char *key, const struct local_acquire_opts *opts,
	      uint64_t *token)
{
	int err = entry_acquire(s, key, LOCAL_KIND_LOCK, 1, opts, token);

	return err != FAST_MISS ? err : api_lock_full(s, key, opts, token);
}

int fast_sem_acquire(local_session *s, const char *key, uint32_t limit,
		     const struct local_acquire_opts *opts, uint64_t *token)
{
	int err = entry_acquire(s, key, LOCAL_KIND_SEMAPHORE, limit, opts, token);

	return err != FAST_MISS ? err : api_sem_acquire_full(s, key, limit, opts, token);
}

/* The release of our hold @w that slot @slot names, read as @f. */
static inline __attribute__((always_inline)) int release_slot(struct segment *seg,
							      _Atomic uint64_t *slot, uint64_t f,
							      uint64_t w, struct owner who,
							      local_key *h)
{
	struct seg_node *n;

	if (!session_is(seg, who))
		return FAST_MISS; /* the mutex path tells not-held from ended */
	/* A sweep that began after this check sets SLOW before it touches
	 * the key, so our CAS fails and the mutex path answers. */
	n = &seg->nodes[FAST_HOLDER(f) - 1];
	if (!atomic_compare_exchange_strong(slot, &f, FAST_PACK(0, 0, FAST_SEQ(f) + 1)))
		return FAST_MISS;
	CRASH_POINT(FAST_REL_PUBLISHED);
	/* No mutex holder came between our read and our CAS, so the node is
	 * as ours() saw it. */
	if (NODE_STATE(w) == NODE_FAST_CLAIMED)
		put_in_flight(seg, h, FAST_HOLDER(f) - 1);
	else if (atomic_compare_exchange_strong(&n->word, &w, 0)) /* NODE_HOLDING: */
		kept_freed(h, FAST_HOLDER(f) - 1); /* the sweep frees unnamed holds too */
	return 0;
}

/* release_at() when slot 0 does not name our hold: a semaphore's other
 * slots (none for a lock). */
static __attribute__((noinline)) int release_other_slot(struct segment *seg, struct seg_key *k,
							uint32_t idx, struct owner who)
{
	uint32_t j, nslots = seg_key_nslots(k);
	uint64_t f, w;

	for (j = 1; j < nslots; j++) {
		f = atomic_load_explicit(&k->fast_x[j - 1], memory_order_acquire);
		if (f & FAST_SLOW)
			return FAST_MISS; /* frozen: the mutex path's (our CAS must not clear it) */
		w = ours(seg, f, idx, who);
		if (w)
			return release_slot(seg, &k->fast_x[j - 1], f, w, who, NULL);
	}
	return FAST_MISS;
}

/* The lock-free release of entry @k (index @idx) whose fast word was @f,
 * inlined into each entry point below. */
static inline __attribute__((always_inline)) int release_at(struct segment *seg, struct seg_key *k,
							    uint64_t f, uint32_t idx,
							    struct owner who, local_key *h)
{
	uint64_t w = ours(seg, f, idx, who);

	if (__builtin_expect(!w, 0))
		return release_other_slot(seg, k, idx, who);
	return release_slot(seg, &k->fast, f, w, who, h);
}

/* release_at() the entry find() gives for @key. */
static inline __attribute__((always_inline)) int release(struct segment *seg, const char *key,
							 struct owner who, struct node_hints *hints)
{
	uint64_t f;
	uint32_t idx;
	struct seg_key *k = find(seg, key, hints, &f, &idx);

	if (!k)
		return FAST_MISS;
	return release_at(seg, k, f, idx, who, NULL);
}

int fast_release(struct segment *seg, const char *key, struct owner who, struct node_hints *hints)
{
	if (crash_fast_path_off())
		return FAST_MISS;
	return release(seg, key, who, hints);
}

int fast_unlock(local_session *s, const char *key)
{
	/* After a local_enqueue(), a release may end that request too; a
	 * hold granted after a wait is timed by the full path (metrics,
	 * api.c waited_for()). The full path's, as is every error. */
	if (!s || !key || !usable(s) || crash_fast_path_off() ||
	    atomic_load_explicit(&s->npending, memory_order_relaxed) ||
	    atomic_load_explicit(&s->nwaited, memory_order_relaxed))
		return api_release_full(s, key);
	if (release(s->seg, key, s->who, &s->hints) == FAST_MISS)
		return api_release_tried(s, key); /* not a second lock-free try */
	return 0;
}

/*
 * ---- Key handles (local_key_*) --------------------------------------------
 *
 * The same lock-free acquire and release, with the entry found from the
 * handle instead of the name. A handle caches the entry it found its key in
 * and that entry's fast_base at the time; the check that the entry still
 * holds the key is then the fast word clear of FAST_SLOW and fast_base
 * unchanged (with the entry's hash and length, which are in the line already
 * read), not a comparison of the bytes. Why that is enough:
 *   - an entry changes key (reclaim, then creation) only under its mutex,
 *     with FAST_SLOW set, and only an eligible key_unlock() clears FAST_SLOW
 *     again, writing fast_base first; so each stretch of time in which the
 *     word is clear of FAST_SLOW (a "run") has one key and one fast_base;
 *   - every write of fast_base (key_unlock(), a fold, a reset) stores a seq
 *     larger than the one it replaces, so no two runs share a fast_base
 *     (up to the 2^39 wrap of seq, which the same-line hash and length
 *     guard as well);
 *   - the cache is written only when the fast word read before and after the
 *     check of the bytes and the read of fast_base was the same, clear of
 *     FAST_SLOW: the bytes and the base are then those of one run;
 *   - a use reads the cache (acquire: what its writer read is the past), the
 *     fast word (acquire), then fast_base: equal to the cached one, the word
 *     is of that run (a later run's base would differ, and a word of an
 *     earlier run cannot be read after the cache's writer read a later one).
 * So a fast word that passes belongs to a run in which the entry held the
 * handle's key, exactly as find() establishes with the bytes; and, as
 * there, the CAS that commits fails if the run ended since. Anything else
 * (no cache, another base, SLOW) is handle_probe(): the bytes, by the cached
 * entry or a probe, as find() does.
 */

/* The handle's entry by its bytes (the cached one, else a probe): find()
 * for a handle, which also caches what it found when it can. */
static __attribute__((noinline)) struct seg_key *handle_probe(struct segment *seg, local_key *h,
							      uint64_t *f, uint32_t *out_idx)
{
	uint32_t idx = HCACHE_IDX(atomic_load_explicit(&h->cache, memory_order_relaxed));
	struct seg_key *k;
	uint64_t b;

	if (idx >= seg->caps.max_keys || !key_matches(&seg->keys[idx], h->hash, h->name, h->len)) {
		idx = probe_unlocked(seg, h->hash);
		if (idx == IDX_NONE)
			return NULL;
	}
	k = &seg->keys[idx];
	*f = atomic_load_explicit(&k->fast, memory_order_acquire);
	if (!key_matches(k, h->hash, h->name, h->len))
		return NULL;
	b = atomic_load_explicit(&k->fast_base, memory_order_relaxed);
	/* The bytes and the base before the second read of the word. */
	atomic_thread_fence(memory_order_acquire);
	if (!(*f & FAST_SLOW) && !(b & FBASE_FOLDING) &&
	    atomic_load_explicit(&k->fast, memory_order_relaxed) == *f)
		atomic_store_explicit(&h->cache, HCACHE_PACK(idx, b), memory_order_release);
	*out_idx = idx;
	return *f & FAST_SLOW ? NULL : k;
}

/* acquired() with notes to drop: a call, kept out of the first try. */
static __attribute__((noinline)) int handle_acquired_expiry(local_session *s, uint32_t key_idx,
							    uint64_t tok, uint64_t *token)
{
	api_forget_expiry(s, key_idx);
	if (token)
		*token = tok;
	return 0;
}

/* The cached entry, checked as above, with its fast word in *f and the
 * fast_base read after it in *b; NULL when the cache cannot answer. */
static inline __attribute__((always_inline)) struct seg_key *
handle_cached(const struct segment *seg, const local_key *h, uint64_t *f, uint64_t *b,
	      uint32_t *out_idx)
{
	uint64_t c = atomic_load_explicit(&h->cache, memory_order_acquire);
	uint32_t idx = HCACHE_IDX(c);
	struct seg_key *k;

	if (__builtin_expect(idx >= seg->caps.max_keys, 0))
		return NULL;
	k = &seg->keys[idx];
	*f = atomic_load_explicit(&k->fast, memory_order_acquire);
	*b = atomic_load_explicit(&k->fast_base, memory_order_relaxed);
	if (__builtin_expect(
		    !(*f & FAST_SLOW) && (c & HCACHE_BASE) == (*b & (FBASE_HELD | FAST_SEQ_MASK)) &&
			    atomic_load_explicit(&k->hash, memory_order_relaxed) == h->hash &&
			    k->key_len == h->len,
		    1)) {
		*out_idx = idx;
		return k;
	}
	return NULL;
}

/* find() for a handle: the cached entry, else by its bytes. */
static inline __attribute__((always_inline)) struct seg_key *
handle_find(struct segment *seg, local_key *h, uint64_t *f, uint32_t *out_idx)
{
	uint64_t b;
	struct seg_key *k = handle_cached(seg, h, f, &b, out_idx);

	return k ? k : handle_probe(seg, h, f, out_idx);
}

/* Can the lock-free path take @opts? (A lease, a value: the mutex path.) */
static inline bool opts_lock_free(const struct local_acquire_opts *opts)
{
	return !opts ||
	       (opts->sz == sizeof(*opts) && !opts->lease_ms && !opts->value && !opts->value_len);
}

/* entry_acquire() for a handle, up to the grant (its token in *tok, the
 * entry in *key_idx): by its cache first (@first_try: a call-free try,
 * FAST_AGAIN when that is not enough), else with everything. */
static inline __attribute__((always_inline)) int
handle_acquire(local_key *h, uint32_t kind, uint32_t limit, const struct local_acquire_opts *opts,
	       bool first_try, uint64_t *tok, uint32_t *key_idx)
{
	local_session *s = h->s;
	struct segment *seg = s->seg;
	struct seg_key *k;
	uint32_t idx;
	uint64_t f, b;

	if (__builtin_expect(!usable(s) || !limit || crash_fast_path_off() || !opts_lock_free(opts),
			     0))
		return FAST_MISS;
	if (first_try) {
		k = handle_cached(seg, h, &f, &b, &idx);
		if (__builtin_expect(!k, 0))
			return FAST_AGAIN;
	} else {
		k = handle_find(seg, h, &f, &idx);
		if (!k)
			return FAST_MISS;
	}
	return acquire_at(seg, k, f, first_try ? &b : NULL, idx, kind, limit,
			  opts && opts->timeout_ms == 0, first_try, s->who, &s->hints, h, tok,
			  key_idx);
}

/* What follows a grant by handle_acquire(): acquired(), with its call in
 * a tail position, out of the way of the first try. */
static inline __attribute__((always_inline)) int handle_acquired(local_key *h, uint32_t key_idx,
								 uint64_t tok, uint64_t *token)
{
	local_session *s = h->s;

	if (__builtin_expect(atomic_load_explicit(&s->seg->sessions[s->who.slot].expired_next,
						  memory_order_relaxed),
			     0))
		return handle_acquired_expiry(s, key_idx, tok, token);
	if (token)
		*token = tok;
	return 0;
}

/*
 * What a call by @h answers, @err: when it is that the session has ended,
 * the node @h keeps is of no more use, and the session's slot stays closing
 * while it is kept (the sweep waits for a node in flight): its owner gives
 * it back now, whichever way the call found the session gone (a key held by
 * another, a key on the mutex path, a release). Other threads leave it:
 * only the owner changes what a handle keeps.
 */
static __attribute__((noinline)) int handle_answer(local_key *h, int err)
{
	if (err == -LOCAL_ESESSION && handle_mine(h))
		fast_key_unpark(h);
	return err;
}

/* The calls by name, for what the lock-free path left. */
static __attribute__((noinline)) int handle_acquire_full(local_key *h, uint32_t kind,
							 uint32_t limit,
							 const struct local_acquire_opts *opts,
							 uint64_t *token)
{
	return handle_answer(h, kind == LOCAL_KIND_LOCK
					? api_lock_full(h->s, h->name, opts, token)
					: api_sem_acquire_full(h->s, h->name, limit, opts, token));
}

static __attribute__((noinline)) int handle_release_full(local_key *h, bool tried)
{
	return handle_answer(h, tried ? api_release_tried(h->s, h->name)
				      : api_release_full(h->s, h->name));
}

/* What a try by the cache leaves (FAST_AGAIN): the same with everything,
 * then the calls by name. */
static __attribute__((noinline)) int handle_acquire_again(local_key *h, uint32_t kind,
							  uint32_t limit,
							  const struct local_acquire_opts *opts,
							  uint64_t *token)
{
	uint32_t key_idx;
	uint64_t tok;
	int err = handle_acquire(h, kind, limit, opts, false, &tok, &key_idx);

	if (!err)
		return handle_acquired(h, key_idx, tok, token);
	if (err != FAST_MISS)
		return handle_answer(h, err);
	return handle_acquire_full(h, kind, limit, opts, token);
}

int fast_key_lock(local_key *h, const struct local_acquire_opts *opts, uint64_t *token)
{
	uint32_t key_idx;
	uint64_t tok;
	int err = handle_acquire(h, LOCAL_KIND_LOCK, 1, opts, true, &tok, &key_idx);

	if (__builtin_expect(!err, 1))
		return handle_acquired(h, key_idx, tok, token);
	if (err < 0)
		return handle_answer(h, err);
	if (err == FAST_AGAIN)
		return handle_acquire_again(h, LOCAL_KIND_LOCK, 1, opts, token);
	return handle_acquire_full(h, LOCAL_KIND_LOCK, 1, opts, token);
}

int fast_key_sem_acquire(local_key *h, uint32_t limit, const struct local_acquire_opts *opts,
			 uint64_t *token)
{
	uint32_t key_idx;
	uint64_t tok;
	int err = handle_acquire(h, LOCAL_KIND_SEMAPHORE, limit, opts, true, &tok, &key_idx);

	if (__builtin_expect(!err, 1))
		return handle_acquired(h, key_idx, tok, token);
	if (err < 0)
		return handle_answer(h, err);
	if (err == FAST_AGAIN)
		return handle_acquire_again(h, LOCAL_KIND_SEMAPHORE, limit, opts, token);
	return handle_acquire_full(h, LOCAL_KIND_SEMAPHORE, limit, opts, token);
}

/* fast_key_release() when the cache cannot answer: by the bytes. */
static __attribute__((noinline)) int handle_release_again(local_key *h)
{
	local_session *s = h->s;
	struct seg_key *k;
	uint64_t f;
	uint32_t idx;

	k = handle_probe(s->seg, h, &f, &idx);
	if (!k || release_at(s->seg, k, f, idx, s->who, h) == FAST_MISS)
		return handle_release_full(h, true);
	return 0;
}

int fast_key_release(local_key *h)
{
	local_session *s = h->s;
	struct segment *seg = s->seg;
	struct seg_key *k;
	uint64_t f, b;
	uint32_t idx;

	/* As fast_unlock(): what it leaves to the full path, this does too. */
	if (!usable(s) || crash_fast_path_off() ||
	    atomic_load_explicit(&s->npending, memory_order_relaxed) ||
	    atomic_load_explicit(&s->nwaited, memory_order_relaxed))
		return handle_release_full(h, false);
	k = handle_cached(seg, h, &f, &b, &idx);
	if (__builtin_expect(!k, 0))
		return handle_release_again(h);
	if (release_at(seg, k, f, idx, s->who, h) == FAST_MISS)
		return handle_release_full(h, true);
	return 0;
}
