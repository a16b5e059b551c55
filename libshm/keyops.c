// SPDX-License-Identifier: MIT
/*
 * Acquire, enqueue, handoff and release: the per-key protocol.
 *
 * All steps run under the key's robust mutex, except a waiter's sleep, which
 * is on its own node's futex word. The order of the stores in each step is
 * chosen so that the node table alone tells repair (repair.c) what happened
 * when the actor dies between any two of them; the CRASH_POINT()s mark the
 * gaps that tests kill at.
 */
#include <errno.h>
#include <string.h>

#include "clock.h"
#include "crashpoint.h"
#include "futex.h"
#include "keyops.h"

/* Spin this long for a grant before parking: a handoff from a running holder
 * on the other core usually lands within it and saves two syscalls. Only a
 * request queued at the head spins: one behind others waits for a handoff
 * each, and its spin would only keep a core from the processes that pass
 * the key on (8 processes on 2 cores: every handoff waited for it). */
#define WAIT_SPIN_NS 4000ull
/* The node's futex word as enqueue leaves it for a request queued behind
 * another: idle, as NODE_FUTEX_IDLE to granters (anything but PARKED or
 * DOORBELL means "not asleep"), and "do not spin" to waiter_wait(). */
#define NODE_FUTEX_BEHIND 4u

/*
 * Under the key mutex a node word is only read lock-free by its own waiter
 * (which needs the stores before it: release) and by scans that re-read it
 * under the mutex, so no full barrier is needed. The one Dekker-style pair,
 * claim-then-check-session against the broker's CLOSING-then-scan, uses the
 * CAS in node_claim(), which is a full barrier.
 */
static inline void node_set(_Atomic uint64_t *word, uint64_t v)
{
	atomic_store_explicit(word, v, memory_order_release);
}

void key_touch_locked(struct seg_key *k)
{
	/* modify_index and the watcher count are written only under the key
	 * mutex (the lock-free path leaves both alone; a watch registers and
	 * ends under it), so the mutex orders them: a watcher that registered
	 * before this section is counted by key_unlock(), one that registers
	 * after it re-reads the new index. No locked add is needed; watchers
	 * sleep on the index's low 32 bits (key_change_futex()), and
	 * key_unlock() calls FUTEX_WAKE after the store, as futex(2) wants. */
	atomic_store_explicit(&k->modify_index,
			      atomic_load_explicit(&k->modify_index, memory_order_relaxed) + 1,
			      memory_order_release);
	k->wake_pending = 1;
}

void key_set_value_locked(struct segment *seg, struct seg_key *k, const void *v, size_t len)
{
	uint64_t w = atomic_load(&k->value_word);
	uint32_t sel = VALUE_SEL(w) ^ 1;

	if (len)
		memcpy(seg_value_buf(seg, seg_key_index(seg, k), sel), v, len);
	CRASH_POINT(VALUE_WRITTEN);
	atomic_store(&k->value_word, VALUE_PACK(sel, (uint32_t)len));
}

/* Lock-delay over? Clears the deadline once passed, so the fast path reads
 * the clock only while a delay is pending. */
static bool delay_over_locked(struct seg_key *k)
{
	if (!k->delay_until_ns)
		return true;
	if (mono_ns() < k->delay_until_ns)
		return false;
	k->delay_until_ns = 0;
	return true;
}

static int check_kind_locked(struct seg_key *k, const struct acquire_req *req)
{
	/* A key keeps its kind and limit while it exists (as Consul's
	 * semaphore): until --gc-idle reclaims it, even when idle. */
	if (k->kind == LOCAL_KIND_NONE) {
		/* Issue 16: a cluster semaphore has one etcd key per slot. */
		if (req->kind == LOCAL_KIND_SEMAPHORE && req->limit > CLUSTER_SEM_MAX &&
		    (atomic_load_explicit(&k->cluster, memory_order_relaxed) & CL_KEY))
			return -LOCAL_ELIMIT;
		k->kind = req->kind;
		k->limit = req->limit;
		return 0;
	}
	if (k->kind != req->kind)
		return -LOCAL_EKIND;
	if (k->limit != req->limit)
		return -LOCAL_ELIMIT;
	return 0;
}

/*
 * The token of the grant about to be counted (lock_index + 1): from the
 * key's range when that works (key_token_for()). Else, when the range has
 * room above tok_last (a grant its dying granter had not counted took the
 * token the count says is next), map the rest of the range above tok_last.
 * Else reserve (g, g + span] from the segment's counter: tok_off, tok_hi,
 * then token = g, which completes the range (key_token_for() wants tok_off
 * <= token). tok_last is stored before the caller writes the token where
 * anyone could see it. A crash between any two stores leaves the range
 * spent or void, so the next grant reserves again: tokens may be skipped,
 * never given twice. The span grows with the key's grants: a busy key
 * touches the counter rarely, an idle one wastes little when reclaimed.
 */
uint64_t key_next_token_locked(struct segment *seg, struct seg_key *k)
{
	uint64_t grants = atomic_load_explicit(&k->lock_index, memory_order_relaxed) + 1;
	uint64_t tok = key_token_for(k, grants), off, last, span, g;

	if (tok)
		goto drawn;
	off = __atomic_load_n(&k->tok_off, __ATOMIC_RELAXED);
	last = __atomic_load_n(&k->tok_last, __ATOMIC_RELAXED);
	if (off <= __atomic_load_n(&k->token, __ATOMIC_RELAXED) && last >= off + grants &&
	    last < __atomic_load_n(&k->tok_hi, __ATOMIC_RELAXED)) {
		__atomic_store_n(&k->tok_off, last + 1 - grants, __ATOMIC_RELAXED);
		CRASH_POINT(TOKEN_REMAPPED);
		tok = last + 1;
		goto drawn;
	}
	span = grants < TOKEN_SPAN_MIN	 ? TOKEN_SPAN_MIN
	       : grants > TOKEN_SPAN_MAX ? TOKEN_SPAN_MAX
					 : grants;
	g = atomic_fetch_add(&seg->hdr->token_counter, span);
	CRASH_POINT(TOKEN_RESERVED);
	__atomic_store_n(&k->tok_off, g + 1 - grants, __ATOMIC_RELAXED);
	__atomic_store_n(&k->tok_hi, g + span, __ATOMIC_RELAXED);
	CRASH_POINT(TOKEN_RANGE_SET);
	__atomic_store_n(&k->token, g, __ATOMIC_RELAXED);
	tok = g + 1;
drawn:
	__atomic_store_n(&k->tok_last, tok, __ATOMIC_RELAXED);
	return tok;
}

static int grant_uncontended_locked(struct segment *seg, struct seg_key *k,
				    const struct acquire_req *req, uint64_t *token,
				    _Atomic uint32_t *hint)
{
	uint32_t key = seg_key_index(seg, k);
	struct seg_node *node;
	uint32_t n;

	n = node_claim(seg, 0, seg->caps.max_holds, req->who.slot, key, hint);
	if (n == IDX_NONE)
		return -LOCAL_EMAXHOLDS;
	node = &seg->nodes[n];
	CRASH_POINT(GRANT_CLAIMED);
	/* Checked after the claim: the broker marks a session CLOSING before
	 * it sweeps the session's nodes, so either it sees this node or we
	 * see CLOSING. */
	if (!session_is(seg, req->who)) {
		node_set(&node->word, 0);
		return -LOCAL_ESESSION;
	}
	/* Read without the mutex by a thread of the session whose fast word is
	 * stale (fastpath.c: ours(), held_token()): atomic stores. */
	__atomic_store_n(&node->session_gen, req->who.gen, __ATOMIC_RELAXED);
	__atomic_store_n(&node->token, key_next_token_locked(seg, k), __ATOMIC_RELEASE);
	node->lease_until_ns = lease_deadline(req->lease_ms);
	node->lease_ms = req->lease_ms;
	node->hold = IDX_NONE;
	node->prev = IDX_NONE;
	node->next = k->h_head;
	node_set(&node->word, NODE_PACK(NODE_HOLDING, req->who.slot, key));
	k->h_head = n;
	key_publish_holder_locked(k, n);
	CRASH_POINT(GRANT_LINKED);
	k->holders++;
	key_count_grant_locked(k);
	__atomic_store_n(&k->token, node->token, __ATOMIC_RELAXED);
	if (req->value)
		key_set_value_locked(seg, k, req->value, req->value_len);
	key_touch_locked(k);
	CRASH_POINT(GRANT_DONE);
	if (req->lease_ms)
		lease_note(seg, n);
	*token = node->token;
	return 0;
}

static int enqueue_locked(struct segment *seg, struct seg_key *k, const struct acquire_req *req,
			  uint32_t *waiter, _Atomic uint32_t *hint)
{
	uint32_t key = seg_key_index(seg, k);
	struct seg_node *node, *tail;
	uint64_t now;
	uint32_t n;

	n = node_claim(seg, seg->caps.max_holds, seg->caps.max_waiters, req->who.slot, key, hint);
	if (n == IDX_NONE)
		return -LOCAL_EMAXWAITERS;
	node = &seg->nodes[n];
	CRASH_POINT(ENQ_CLAIMED);
	if (!session_is(seg, req->who)) {
		node_set(&node->word, 0);
		return -LOCAL_ESESSION;
	}
	node->session_gen = req->who.gen;
	node->seq = k->next_seq++;
	node->lease_ms = req->lease_ms;
	node->staged_len = 0;
	if (req->value) {
		if (req->value_len)
			memcpy(seg_staged_buf(seg, n), req->value, req->value_len);
		node->staged_len = (uint32_t)req->value_len + 1;
	}
	node->hold = IDX_NONE;
	node->token = 0;
	now = mono_ns();
	node->queued_ms = (uint32_t)(now / 1000000); /* shmlock info's wait time */
	if (req->queued_ns)
		*req->queued_ns = now;
	node->next = IDX_NONE;
	node->prev = k->q_tail;
	atomic_store(&node->futex, k->q_tail == IDX_NONE ? NODE_FUTEX_IDLE : NODE_FUTEX_BEHIND);
	node_set(&node->word, NODE_PACK(NODE_WAITING, req->who.slot, key));
	tail = seg_node_at(seg, k->q_tail);
	if (tail)
		tail->next = n;
	else
		k->q_head = n;
	k->q_tail = n;
	CRASH_POINT(ENQ_LINKED);
	k->waiters++;
	*waiter = n;
	return 1;
}

int key_acquire_locked(struct segment *seg, struct seg_key *k, const struct acquire_req *req,
		       uint64_t *token, uint32_t *waiter, struct node_hints *hints)
{
	uint32_t h;
	int err;

	if (req->value && req->value_len > seg->caps.max_value)
		return -LOCAL_EVALUESIZE;
	if (!session_is(seg, req->who))
		return -LOCAL_ESESSION; /* a clear answer; the claim re-checks */
	err = check_kind_locked(k, req);
	if (err)
		return err;
	h = key_find_hold_locked(seg, k, req->who);
	if (h != IDX_NONE) {
		/* Consul: re-acquiring a held lock succeeds at once, keeps the
		 * token and updates the value. */
		if (req->value) {
			key_set_value_locked(seg, k, req->value, req->value_len);
			key_touch_locked(k);
		}
		*token = seg->nodes[h].token;
		return 0;
	}
	/* A duplicate is another request of this session: none queued, no
	 * walk (node_hints.queued, read under the key mutex that every
	 * enqueue of the session's requests held when it counted). */
	if ((!hints->sole || atomic_load_explicit(&hints->queued, memory_order_relaxed)) &&
	    key_find_waiter_locked(seg, k, req->who) != IDX_NONE)
		return -EALREADY;
	/* No barging: a free slot goes to the queue's head, not to us. A
	 * cluster key also needs the host's cluster lock (cluster_gated()). */
	if (k->holders < k->limit && k->q_head == IDX_NONE && delay_over_locked(k) &&
	    !cluster_gated(seg, k) && !cluster_slots_full(k)) /* slots from etcd */
		return grant_uncontended_locked(seg, k, req, token, &hints->hold);
	if (req->try_only)
		return -EBUSY;
	err = enqueue_locked(seg, k, req, waiter, &hints->wait);
	if (err == 1)
		atomic_fetch_add_explicit(&hints->queued, 1, memory_order_relaxed);
	/* Cluster keys: a waiter on a gated key asks the broker to
	 * take the key's cluster lock. Host-local keys never get here. */
	if (err == 1 && (cluster_gated(seg, k) || cluster_slots_full(k)))
		cluster_ring(seg->hdr);
	return err;
}

/*
 * Give hold node @h (already claimed or being handed over) to waiter @w.
 * Store order, so repair can always tell what happened:
 *   w->hold, w->token  — private to w until its word changes;
 *   h->word = HOLDING by w's session — the hold moves here;
 *   unlink w from the queue — repair rebuilds the queue anyway;
 *   the staged value, if any, becomes the key's — read from w's node while
 *     the node is still w's request;
 *   w->word = GRANTED — the waiter may now consume it (and reuse the node).
 */
static void grant_waiter_locked(struct segment *seg, struct seg_key *k, uint32_t w, uint32_t h)
{
	struct seg_node *wn = &seg->nodes[w], *hn = &seg->nodes[h];
	uint64_t ww = atomic_load(&wn->word);
	uint32_t key = seg_key_index(seg, k);
	uint64_t token = key_next_token_locked(seg, k);

	wn->hold = h;
	wn->token = token;
	CRASH_POINT(HANDOFF_HOLD_SET);
	__atomic_store_n(&hn->token, token,
			 __ATOMIC_RELEASE); /* as in grant_uncontended_locked() */
	__atomic_store_n(&hn->session_gen, wn->session_gen, __ATOMIC_RELAXED);
	hn->lease_until_ns = lease_deadline(wn->lease_ms);
	hn->lease_ms = wn->lease_ms;
	node_set(&hn->word, NODE_PACK(NODE_HOLDING, NODE_SESSION(ww), key));
	key_publish_holder_locked(k, h);
	CRASH_POINT(HANDOFF_TRANSFERRED);
	/* Unlink first: once GRANTED, the waiter may free its node and queue
	 * it on another key, and our unlink would then cut that key's queue
	 * (found by the spin model). */
	queue_unlink_locked(seg, k, w);
	CRASH_POINT(HANDOFF_UNLINKED);
	/* The staged value before GRANTED: once granted, the waiter may free
	 * its node and stage another request's value in it (a data race
	 * found by TSan: a key could get another key's value).
	 * Bounds-checked: node fields may be damaged (found by fuzz_segment). */
	if (wn->staged_len && wn->staged_len - 1 <= seg->caps.max_value && w >= seg->caps.max_holds)
		key_set_value_locked(seg, k, seg_staged_buf(seg, w), wn->staged_len - 1);
	/* seq_cst, against the waiter's PARKED store and re-read. */
	atomic_store(&wn->word, NODE_PACK(NODE_GRANTED, NODE_SESSION(ww), key));
	CRASH_POINT(HANDOFF_GRANTED);
	k->waiters--;
	key_count_grant_locked(k);
	__atomic_store_n(&k->token, token, __ATOMIC_RELAXED);
	key_touch_locked(k);
	key_count_locked(&k->n_handoffs);
	if (hn->lease_ms)
		lease_note(seg, h);
}

/* Lock-delay made visible: the broker's note of who caused it. */
void (*key_delay_hook)(const struct seg_key *k, const struct seg_session *s, unsigned how,
		       uint64_t until_ns);

static void apply_loss_locked(struct segment *seg, struct seg_key *k, uint32_t slot, unsigned how)
{
	const struct seg_session *s = seg_session_at(seg, slot);
	uint64_t until;

	if (!s)
		return;
	if ((how & REL_LOST) && s->lock_delay_ms) {
		until = mono_ns() + (uint64_t)s->lock_delay_ms * 1000000ull;
		if (until > k->delay_until_ns)
			k->delay_until_ns = until;
		if (key_delay_hook)
			key_delay_hook(k, s, how, until);
	}
	if ((how & REL_SESSION_END) && s->behavior == LOCAL_BEHAVIOR_DELETE)
		key_set_value_locked(seg, k, NULL, 0);
}

uint32_t key_release_hold_locked(struct segment *seg, struct seg_key *k, uint32_t h, unsigned how)
{
	struct seg_node *hn = &seg->nodes[h];
	uint32_t w = k->q_head;

	if (how)
		apply_loss_locked(seg, k, NODE_SESSION(atomic_load(&hn->word)), how);
	if (w != IDX_NONE && w < seg->nnodes && delay_over_locked(k) && !cluster_gated(seg, k) &&
	    !cluster_slots_over(k) && /* a slot being given back to another host */
	    NODE_STATE(atomic_load(&seg->nodes[w].word)) == NODE_WAITING) {
		/* Direct handoff: the hold node changes owner in place, so the
		 * hold count never dips and nobody can barge in between. */
		grant_waiter_locked(seg, k, w, h);
		return w;
	}
	key_publish_holder_locked(k, IDX_NONE);
	holders_unlink_locked(seg, k, h);
	CRASH_POINT(REL_UNLINKED);
	node_set(&hn->word, 0);
	CRASH_POINT(REL_FREED);
	k->holders--;
	key_touch_locked(k);
	/* Cluster keys: no handoff, so the broker may give up (or yield) the
	 * key's cluster lock; it asks for one ring at a time (CL_ARMED), so a
	 * queue that empties for a moment at every turn costs no wake-up. */
	if (atomic_load_explicit(&k->cluster, memory_order_relaxed) & CL_ARMED) {
		seg_key_cluster_disarm(k);
		cluster_ring_release(seg->hdr); /* a key the broker holds: no full scan */
	}
	return IDX_NONE;
}

uint32_t key_grant_pending_locked(struct segment *seg, struct seg_key *k, uint32_t *wake,
				  uint32_t nwake)
{
	static _Atomic uint32_t hint; /* racy by design: only a starting point */
	uint32_t key = seg_key_index(seg, k), n = 0;

	while (n < nwake && k->holders < k->limit && k->q_head != IDX_NONE &&
	       k->q_head < seg->nnodes && delay_over_locked(k) && !cluster_gated(seg, k) &&
	       !cluster_slots_full(k)) { /* a cluster semaphore's slots from etcd */
		uint32_t w = k->q_head;
		uint64_t ww = atomic_load(&seg->nodes[w].word);
		uint32_t h;

		if (NODE_STATE(ww) != NODE_WAITING || NODE_KEY(ww) != key)
			break; /* inconsistent: the caller repairs */
		h = node_claim(seg, 0, seg->caps.max_holds, NODE_SESSION(ww), key, &hint);
		if (h == IDX_NONE)
			break; /* hold table full: retried on the next release */
		seg->nodes[h].prev = IDX_NONE;
		seg->nodes[h].next = k->h_head;
		k->h_head = h;
		k->holders++;
		grant_waiter_locked(seg, k, w, h);
		wake[n++] = w;
	}
	return n;
}

void waiter_wake(struct segment *seg, uint32_t n)
{
	struct seg_node *node = seg_node_at(seg, n);

	/* After the key mutex is dropped the node may already be consumed and
	 * reused; a stray wake is harmless because every sleeper re-checks its
	 * word in a loop. */
	uint32_t was;

	if (!node)
		return;
	was = atomic_exchange(&node->futex, NODE_FUTEX_WOKEN);
	if (was == NODE_FUTEX_PARKED)
		futex_wake(&node->futex, 1);
	else if (was == NODE_FUTEX_DOORBELL)
		seg_ring(seg); /* the broker's own grants need no futex wake */
}

/*
 * A release hands the key over under the mutex and wakes the new holder
 * only after unlocking it (api.c, release_slow()), so that the woken process
 * never runs into the mutex still held by its waker. A releaser that dies in
 * between (crash point HANDOFF_UNLOCKED) leaves its waiter granted and
 * asleep, and no mutex marked for repair: the broker calls this when a
 * process dies, at restart and once a second. Only a waiter still asleep is
 * touched (a CAS from PARKED or DOORBELL, never an exchange that could eat
 * a doorbell still armed); a stray wake-up of a node reused meanwhile is
 * harmless, as in waiter_wake().
 */
uint32_t segment_wake_granted(struct segment *seg)
{
	uint32_t i, n = 0;

	for (i = seg->caps.max_holds; i < seg->nnodes; i++) {
		struct seg_node *node = &seg->nodes[i];
		uint32_t f;

		if (NODE_STATE(atomic_load_explicit(&node->word, memory_order_relaxed)) !=
		    NODE_GRANTED)
			continue;
		f = atomic_load(&node->futex);
		if ((f != NODE_FUTEX_PARKED && f != NODE_FUTEX_DOORBELL) ||
		    !atomic_compare_exchange_strong(&node->futex, &f, NODE_FUTEX_WOKEN))
			continue;
		if (f == NODE_FUTEX_PARKED)
			futex_wake(&node->futex, 1);
		else
			seg_ring(seg);
		n++;
	}
	return n;
}

/* Take a grant: the hold is ours once the waiter node is freed. */
static int consume_grant(struct seg_node *node, uint64_t granted, uint64_t *token)
{
	*token = node->token;
	CRASH_POINT(GRANTED_CONSUMED);
	/* CAS: the broker may have swept this node if the session closed. */
	return atomic_compare_exchange_strong(&node->word, &granted, 0) ? 0 : -LOCAL_ESESSION;
}

static int cancel_wait(struct segment *seg, uint32_t waiter, uint32_t key, struct owner who,
		       uint64_t *token)
{
	struct seg_node *node = &seg->nodes[waiter];
	struct seg_key *k = seg_key_at(seg, key);
	uint64_t w;
	int err;

	if (!k)
		return -LOCAL_ESESSION;
	err = key_lock(seg, k);
	if (err == -ETIMEDOUT)
		return -EAGAIN; /* a timed key_lock() (the broker): still queued */
	if (err)
		return err;
	w = atomic_load(&node->word);
	if (w == NODE_PACK(NODE_GRANTED, who.slot, key)) {
		/* The grant landed as we timed out: take it, never strand it. */
		err = consume_grant(node, w, token);
	} else if (w == NODE_PACK(NODE_WAITING, who.slot, key)) {
		queue_unlink_locked(seg, k, waiter);
		CRASH_POINT(CANCEL_UNLINKED);
		node_set(&node->word, 0);
		CRASH_POINT(CANCEL_FREED);
		k->waiters--;
		key_count_locked(&k->n_timeouts);
		err = -ETIMEDOUT;
	} else {
		err = -LOCAL_ESESSION;
	}
	key_unlock(k);
	return err;
}

int waiter_wait(struct segment *seg, uint32_t waiter, uint32_t key, struct owner who,
		uint64_t deadline_ns, uint64_t *token)
{
	struct seg_node *node = &seg->nodes[waiter];
	/* Derived, never re-read: the grant may land before our first look. */
	uint64_t waiting = NODE_PACK(NODE_WAITING, who.slot, key), w;
	uint64_t granted = NODE_PACK(NODE_GRANTED, who.slot, key);
	/* Only the queue's head spins (NODE_FUTEX_BEHIND: not the head). */
	uint64_t spin_until =
		atomic_load(&node->futex) == NODE_FUTEX_IDLE ? mono_ns() + WAIT_SPIN_NS : 0;

	CRASH_POINT(ENQ_PARKED);
	for (;;) {
		w = atomic_load(&node->word);
		if (w != waiting)
			break;
		if (spin_until && mono_ns() < spin_until) {
			__builtin_ia32_pause();
			continue;
		}
		/* Announce the park, then re-check: a granter that set the word
		 * before our exchange sees PARKED and wakes us; one after it
		 * changes the word we re-read. */
		atomic_store(&node->futex, NODE_FUTEX_PARKED);
		if (atomic_load(&node->word) != waiting)
			continue;
		if (futex_wait_until(&node->futex, NODE_FUTEX_PARKED, deadline_ns) == -ETIMEDOUT)
			return cancel_wait(seg, waiter, key, who, token);
		if (deadline_ns && mono_ns() >= deadline_ns && atomic_load(&node->word) == waiting)
			return cancel_wait(seg, waiter, key, who, token);
	}
	if (w == granted)
		return consume_grant(node, w, token);
	/* Gone while the session lives: an operator reset the key's damaged
	 * entry (or repair dropped the request); the session is not at fault. */
	return session_is(seg, who) ? -LOCAL_ECORRUPT : -LOCAL_ESESSION;
}

bool waiter_arm_doorbell(struct segment *seg, uint32_t waiter, uint32_t key, struct owner who)
{
	struct seg_node *node = &seg->nodes[waiter];

	/* As a parking thread does: announce, then re-check. A granter that
	 * changed the word before our store is seen by the re-read; one after
	 * it finds DOORBELL and rings. */
	atomic_store(&node->futex, NODE_FUTEX_DOORBELL);
	return atomic_load(&node->word) == NODE_PACK(NODE_WAITING, who.slot, key);
}

int waiter_poll(struct segment *seg, uint32_t waiter, uint32_t key, struct owner who, bool cancel,
		uint64_t *token)
{
	struct seg_node *node = &seg->nodes[waiter];
	uint64_t w = atomic_load(&node->word);

	if (w == NODE_PACK(NODE_GRANTED, who.slot, key))
		return consume_grant(node, w, token);
	if (w != NODE_PACK(NODE_WAITING, who.slot, key))
		return -LOCAL_ESESSION;
	return cancel ? cancel_wait(seg, waiter, key, who, token) : -EAGAIN;
}
