/* SPDX-License-Identifier: MIT */
/*
 * Per-key algorithms shared by liblocal and the broker: key lookup, the
 * acquire / enqueue / release / grant steps, and crash repair. There is one
 * implementation of each, linked into both.
 *
 * Locking: the table mutex (key creation and reclaim) is taken before a key
 * mutex, never after. Every function named *_locked expects the caller to
 * hold the key's mutex.
 */
#ifndef SHMLOCK_KEYOPS_H
#define SHMLOCK_KEYOPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "clock.h"
#include "segment.h"

/* Who is acting: a session slot and the generation the caller knows it by. */
struct owner {
	uint32_t slot;
	uint32_t gen;
};

/* A key entry a caller's key string was last found in, by the string's
 * address: the lock-free path tries it before hashing and probing. Only a
 * guess, which that path confirms against the entry's own bytes; so threads
 * sharing a session may overwrite it, even tear it, harmlessly. */
struct key_hint {
	_Atomic uintptr_t key;
	_Atomic uint32_t idx;
};

#define KEY_HINTS 8 /* a power of two */

/* Where a session starts looking for a free node (the one it freed last),
 * and for the key entries it uses. */
struct node_hints {
	_Atomic uint32_t hold;
	_Atomic uint32_t wait;
	struct key_hint keys[KEY_HINTS];
	/* Requests this session queued (key_acquire_locked(),
	 * under the key mutex) that may still be queued; acquire_slow() and
	 * local_wait() take back their own once the wait has taken it out of
	 * the queue (granted, or timed out and unlinked), as does a release
	 * that ends a granted local_enqueue() request nobody waited for; other
	 * outcomes keep it counted (so it only over-counts). With @sole (this struct is
	 * its session's only handle: local_session_open()), 0 means the
	 * session has no request in any queue, and an acquire skips the walk
	 * of the key's queue for a duplicate (7 other processes' node lines
	 * per handoff with 8 processes on a key). */
	_Atomic uint32_t queued;
	bool sole;
};

static inline struct key_hint *key_hint_of(struct node_hints *h, const char *key)
{
	return &h->keys[((uintptr_t)key >> 4) & (KEY_HINTS - 1)];
}

/* The entry @key (this string address) was found in last; IDX_NONE if
 * none is remembered. A guess, for the caller to confirm. */
static inline uint32_t key_hint_idx(struct node_hints *h, const char *key)
{
	struct key_hint *kh = key_hint_of(h, key);

	return atomic_load_explicit(&kh->key, memory_order_relaxed) == (uintptr_t)key
		       ? atomic_load_explicit(&kh->idx, memory_order_relaxed)
		       : IDX_NONE;
}

static inline void key_hint_set(struct node_hints *h, const char *key, uint32_t idx)
{
	struct key_hint *kh = key_hint_of(h, key);

	atomic_store_explicit(&kh->key, (uintptr_t)key, memory_order_relaxed);
	atomic_store_explicit(&kh->idx, idx, memory_order_relaxed);
}

struct acquire_req {
	struct owner who;
	uint32_t kind;	/* LOCAL_KIND_LOCK or LOCAL_KIND_SEMAPHORE */
	uint32_t limit; /* 1 for locks */
	uint32_t lease_ms;
	bool try_only;
	bool fast_tried;   /* the lock-free path missed just now: go to the mutex */
	const void *value; /* NULL: leave the value alone */
	size_t value_len;
	/* If set, an enqueue stores the clock it read for the node here: the
	 * caller's wait starts then (metrics: one clock read, not two). */
	uint64_t *queued_ns;
};

/* ---- key table (keytab.c) --------------------------------------------- */

uint32_t key_hash(const char *key, size_t len);

/* Validate a caller's key: 0, -EINVAL (empty, or NUL inside) or -ENAMETOOLONG. */
int key_check(const char *key, size_t len);

/*
 * Find @key and return with its mutex held. With @create, a missing key is
 * made (reclaiming idle keys if the table is full). Returns 0, -ENOENT (not
 * found, !create), -LOCAL_EMAXKEYS or -LOCAL_ECORRUPT.
 */
int keytab_find(struct segment *seg, const char *key, size_t len, bool create,
		struct seg_key **out);
/* The same, giving up with -ETIMEDOUT after @timeout_ms on any lock (the
 * broker: a stopped client must not stall it), or at @deadline_ns
 * (CLOCK_MONOTONIC, absolute; 0: none): the caller's own deadline. */
int keytab_find_timed(struct segment *seg, const char *key, size_t len, bool create,
		      struct seg_key **out, uint32_t timeout_ms);
int keytab_find_until(struct segment *seg, const char *key, size_t len, bool create,
		      struct seg_key **out, uint64_t deadline_ns);

/* keytab_find_until(), trying entry @idx first (a session's key hint:
 * key_hint_idx()), which it confirms under the key's mutex: the mutex path
 * of a key the session used before skips hashing and probing. */
int keytab_find_hinted(struct segment *seg, const char *key, size_t len, bool create,
		       struct seg_key **out, uint64_t deadline_ns, uint32_t idx);

/*
 * Lock a key's mutex, repairing it if its last owner died, and switch the key
 * to slow mode (see FAST_SLOW): count the lock-free operations since it left
 * the mutex into lock_index and modify_index (fast_base), and make a
 * lock-free hold the fast word names an ordinary NODE_HOLDING one (listed,
 * for a semaphore). 0 or -LOCAL_ECORRUPT. key_unlock() returns the key to
 * the fast path when it is simple again (see fast_eligible()).
 */
int key_lock(struct segment *seg, struct seg_key *k);
void key_unlock(struct seg_key *k);
/* key_unlock(), giving a semaphore's listed holds back to its slots when
 * they fit (keytab.c): the unlock of the semaphore mutex paths. */
void key_unlock_giving(struct segment *seg, struct seg_key *k);

/* As key_lock(), giving up with -ETIMEDOUT: the broker must not stall on a
 * client stopped (SIGSTOP) inside a critical section, or on a mutex word a
 * rogue process scribbled over. */
int key_lock_timed(struct segment *seg, struct seg_key *k, uint32_t timeout_ms);
int key_lock_until(struct segment *seg, struct seg_key *k, uint64_t deadline_ns);
/* As key_lock(), without waiting: -EBUSY while someone else holds it. */
int key_trylock(struct segment *seg, struct seg_key *k);

/* Record a lock key's holder (IDX_NONE: free) in its fast word: the commit
 * point of every holder change made under the mutex. */
void key_publish_holder_locked(struct seg_key *k, uint32_t node);
/* A semaphore's fast word names no hold once its holder list has them all. */
void key_clear_fast_holder_locked(struct seg_key *k);

/* lock_index and modify_index of @k now, read without its mutex (they lag
 * behind the lock-free operations until the next key_lock(): fast_base). */
void key_counts_peek(const struct seg_key *k, uint64_t *lock_index, uint64_t *modify_index);

/* Lock-free lookup for the fast path: a candidate entry (IDX_NONE: none),
 * to be confirmed with key_matches() after reading its fast word. */
uint32_t probe_unlocked(struct segment *seg, uint32_t hash);
bool key_matches(const struct seg_key *k, uint32_t hash, const char *key, size_t len);

/* Under the table lock: the index rebuilt from the live entries (after a
 * crash under the table lock, or when the index was found wrong). Bounded
 * by the sizes copied at attach, whatever a peer writes meanwhile. */
void keytab_index_rebuild_locked(struct segment *seg);

/* Under the table lock: free key entry @idx (KEY_FREED, and back to
 * KEY_FREE where no key's probe can pass it; see find_free_entry_locked()). */
void key_entry_free_locked(struct segment *seg, uint32_t idx);

/* Reclaim up to @max keys idle for @idle_ns; returns how many were freed.
 * @timeout_ms bounds the wait for the table mutex (0: none). */
uint32_t keytab_reclaim_idle(struct segment *seg, uint64_t idle_ns, uint32_t max,
			     uint32_t timeout_ms);

/* ---- nodes (nodes.c) -------------------------------------------------- */

/*
 * Claim a free node from [first, first+count) for (session, key): one CAS
 * makes it NODE_CLAIMED and records the owner. @hint is where to start
 * looking (updated). Returns the node index or IDX_NONE when all are taken.
 */
uint32_t node_claim(struct segment *seg, uint32_t first, uint32_t count, uint32_t session,
		    uint32_t key, _Atomic uint32_t *hint);
/* The same, claiming into @state (NODE_FAST_CLAIMED for the fast path). */
uint32_t node_claim_as(struct segment *seg, uint32_t state, uint32_t first, uint32_t count,
		       uint32_t session, uint32_t key, _Atomic uint32_t *hint);

/* Is @who's session still active with the generation it knows? Inline: the
 * lock-free path asks on every acquire. */
static inline bool session_is(const struct segment *seg, struct owner who)
{
	/* Not seg_session_at(): its NULL is one more test on the lock path. */
	return who.slot < seg->caps.max_sessions &&
	       atomic_load(&seg->sessions[who.slot].state_gen) == SESS_PACK(SESS_ACTIVE, who.gen);
}

/* Walk the key's holder list for @who's hold; IDX_NONE if none. */
uint32_t key_find_hold_locked(struct segment *seg, struct seg_key *k, struct owner who);
/* ... and its queued request, if any. */
uint32_t key_find_waiter_locked(struct segment *seg, struct seg_key *k, struct owner who);

void queue_unlink_locked(struct segment *seg, struct seg_key *k, uint32_t n);
void holders_unlink_locked(struct segment *seg, struct seg_key *k, uint32_t n);

/* ---- acquire / release (keyops.c) ------------------------------------- */

/*
 * One attempt under the key mutex. Returns 0 with *token set (granted, or
 * already held), 1 with *waiter set (queued; sleep with waiter_wait), or a
 * negative code.
 */
int key_acquire_locked(struct segment *seg, struct seg_key *k, const struct acquire_req *req,
		       uint64_t *token, uint32_t *waiter, struct node_hints *hints);

/*
 * Sleep until the queued request @waiter is granted, its deadline passes
 * (then leave the queue), or its session ends. Returns 0 with *token set,
 * -ETIMEDOUT, or -LOCAL_ESESSION. Takes no lock while sleeping.
 */
int waiter_wait(struct segment *seg, uint32_t waiter, uint32_t key, struct owner who,
		uint64_t deadline_ns, uint64_t *token);

/*
 * The non-blocking forms of waiter_wait() for a waiter that does not sleep
 * (the broker waiting for an HTTP client). waiter_arm_doorbell() has the
 * granter ring the broker's doorbell; it returns false when the request is
 * no longer waiting (granted already: poll it now). waiter_poll() takes a
 * grant (0, *token set), else returns -EAGAIN while queued (also when a
 * timed key_lock() could not leave the queue: try again), or with @cancel
 * leaves the queue (-ETIMEDOUT); -LOCAL_ESESSION when the session ended.
 */
bool waiter_arm_doorbell(struct segment *seg, uint32_t waiter, uint32_t key, struct owner who);
int waiter_poll(struct segment *seg, uint32_t waiter, uint32_t key, struct owner who, bool cancel,
		uint64_t *token);

/*
 * How a hold ends: REL_LOST applies the holder's lock-delay (death, TTL,
 * operator); REL_SESSION_END applies its behavior (delete drops the value).
 */
enum release_how {
	REL_VOLUNTARY = 0,
	REL_LOST = 1u << 0,
	REL_SESSION_END = 1u << 1,
};

/*
 * Called (when set) each time a lost hold puts key @k in lock-delay until
 * @until_ns, with the session that lost it: the broker keeps who it was, so
 * that a waiter can be told why it waits (broker/core/delay_notes.c). NULL in
 * clients. Under the key's mutex: must not block.
 */
extern void (*key_delay_hook)(const struct seg_key *k, const struct seg_session *s, unsigned how,
			      uint64_t until_ns);

/*
 * End hold @h. Hands the key to the next waiter when allowed; returns the
 * waiter node to wake after unlocking, or IDX_NONE.
 */
uint32_t key_release_hold_locked(struct segment *seg, struct seg_key *k, uint32_t h, unsigned how);

/*
 * Grant queued requests while the key has room and no lock-delay runs.
 * Appends the woken nodes to @wake (capacity @nwake); returns how many.
 */
uint32_t key_grant_pending_locked(struct segment *seg, struct seg_key *k, uint32_t *wake,
				  uint32_t nwake);

/* Wake a granted waiter, skipping the syscall if it has not parked. */
void waiter_wake(struct segment *seg, uint32_t n);

/* The broker: wake every granted waiter still asleep (its releaser died
 * between unlocking the key and waking it). Returns how many. */
uint32_t segment_wake_granted(struct segment *seg);

/* Replace the key's value (double-buffered: readers never see a torn one). */
void key_set_value_locked(struct segment *seg, struct seg_key *k, const void *v, size_t len);

/* Count a grant under the mutex: only mutex holders write lock_index, so
 * no locked add is needed (readers without the mutex load it). */
static inline void key_count_grant_locked(struct seg_key *k)
{
	atomic_store_explicit(&k->lock_index,
			      atomic_load_explicit(&k->lock_index, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

/* Record a change: bump modify_index; key_unlock() wakes the watchers, if
 * any. */
void key_touch_locked(struct seg_key *k);

/*
 * Fencing tokens: each key draws from a range it reserved from the segment's
 * counter (tok_off, tok_hi in struct seg_key), so a grant writes only the
 * key's own lines; the counter's line is written once per range. The grant
 * that makes lock_index @grants gets tok_off + @grants; that token is valid
 * while the range is complete (tok_off <= token: see struct seg_key) and not
 * spent. Strictly increasing per key, unique across keys; not ordered across
 * keys (docs/architecture.md, "Fencing tokens").
 */
#define TOKEN_SPAN_MIN 16ull	    /* a new key's first range */
#define TOKEN_SPAN_MAX (1ull << 20) /* a busy key's ranges grow to this */

/* The token of the grant that makes lock_index @grants, from the key's
 * current range; 0 when the range is spent or void, or the token was drawn
 * already (the mutex path then moves on: key_next_token_locked()). */
/* Raise one of the key's slow-path counters (n_handoffs, n_timeouts):
 * the mutex orders the writers, so no locked instruction. */
static inline void key_count_locked(_Atomic uint64_t *c)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

static inline uint64_t key_token_for(const struct seg_key *k, uint64_t grants)
{
	uint64_t off = __atomic_load_n(&k->tok_off, __ATOMIC_RELAXED);
	uint64_t tok = off + grants;

	if (off > __atomic_load_n(&k->token, __ATOMIC_RELAXED) || tok <= off ||
	    tok > __atomic_load_n(&k->tok_hi, __ATOMIC_RELAXED) ||
	    tok <= __atomic_load_n(&k->tok_last, __ATOMIC_RELAXED))
		return 0;
	return tok;
}

/* Under the key mutex, lock_index exact (key_lock() folded it): the token
 * of the grant about to be counted, reserving a fresh range when the key's
 * is spent (one atomic add on the segment's counter). */
uint64_t key_next_token_locked(struct segment *seg, struct seg_key *k);

/* ---- cluster keys (cluster_gate.c; docs/cluster.md) ---------------------- */

/* Has this host's cluster deadline passed (seg_header.cluster_deadline_ns)? */
static inline bool cluster_deadline_passed(const struct segment *seg)
{
	uint64_t dl = atomic_load_explicit(&seg->hdr->cluster_deadline_ns, memory_order_acquire);

	return dl && mono_ns() >= dl;
}

/*
 * Is what was granted of cluster key @k void now? Past the host's deadline,
 * or opened under an etcd lease that is not the host's lease now
 * (seg_key.cluster_lease): a later lease owns no etcd lock the key was taken
 * under. A key never opened (lease 0) has nothing granted to void. Under the
 * key mutex (or as a hint without it).
 */
static inline bool cluster_key_stale(const struct segment *seg, const struct seg_key *k)
{
	int64_t lease = atomic_load_explicit(&k->cluster_lease, memory_order_relaxed);

	return cluster_deadline_passed(seg) ||
	       (lease &&
		lease != atomic_load_explicit(&seg->hdr->cluster_lease_id, memory_order_acquire));
}

/*
 * May nobody be granted @k now? A cluster key is gated unless the broker
 * opened it (it holds the key's cluster lock) under the lease the host holds
 * now and before the host's deadline, and also once the range the broker
 * set for this acquisition is spent or void: key_next_token_locked() must
 * never draw a cluster key's token from the segment's counter. Under the key
 * mutex; false for every host-local key.
 */
static inline bool cluster_gated(const struct segment *seg, const struct seg_key *k)
{
	uint32_t st = atomic_load_explicit(&k->cluster, memory_order_relaxed);
	uint64_t off, hi;

	if (!(st & CL_KEY))
		return false;
	if (!(st & CL_OPEN) || !atomic_load_explicit(&k->cluster_lease, memory_order_relaxed) ||
	    cluster_key_stale(seg, k))
		return true;
	off = __atomic_load_n(&k->tok_off, __ATOMIC_RELAXED);
	hi = __atomic_load_n(&k->tok_hi, __ATOMIC_RELAXED);
	return off > __atomic_load_n(&k->token, __ATOMIC_RELAXED) ||
	       off + atomic_load_explicit(&k->lock_index, memory_order_relaxed) + 1 > hi ||
	       __atomic_load_n(&k->tok_last, __ATOMIC_RELAXED) >= hi;
}

/*
 * The lock-free path stops granting a cluster key this long before the
 * host's deadline, and leaves the rest to the mutex path, whose gate reads
 * the precise clock. It reads CLOCK_MONOTONIC_COARSE (mono_coarse_ns()): the
 * kernel's time at its last tick, never ahead of CLOCK_MONOTONIC, and
 * behind it by at most a few ticks (4 ms each at HZ=250, 10 ms at HZ=100; a
 * CPU that finds the tick stalled for 5 updates it itself). So a grant the
 * coarse clock allows, coarse + slack < deadline, is before the deadline.
 */
#define CLUSTER_FAST_SLACK_NS (100ull * 1000000ull)

/*
 * Must the lock-free acquire leave cluster key @k to the mutex path? Yes
 * unless the key is open and not armed (the broker wants no ring), under
 * the lease the host holds now, and the host's deadline is more than
 * CLUSTER_FAST_SLACK_NS ahead: cluster_gated()'s checks, but for the token
 * range, which fast_token() checks (0 when spent), and with the cheap
 * clock. Read after the fast word F0 (acquire), before the CAS that
 * commits on it: whatever the broker changes under the key mutex sets SLOW
 * first, so that CAS fails; what it changes without the mutex (the
 * header's lease and deadline) and the clock are read here, and a client
 * paused between this check and its CAS is the pause inside a critical
 * step that the mutex path has too (docs/cluster.md, "Guarantees and what
 * they assume"). False for a host-local key, at the cost of one load.
 */
static inline bool cluster_fast_refused(const struct segment *seg, const struct seg_key *k)
{
	uint32_t st = atomic_load_explicit(&k->cluster, memory_order_relaxed);
	int64_t lease;
	uint64_t dl;

	if (__builtin_expect(!(st & CL_KEY), 1))
		return false;
	lease = atomic_load_explicit(&k->cluster_lease, memory_order_relaxed);
	dl = atomic_load_explicit(&seg->hdr->cluster_deadline_ns, memory_order_acquire);
	return (st & (CL_OPEN | CL_ARMED)) != CL_OPEN || !lease ||
	       lease != atomic_load_explicit(&seg->hdr->cluster_lease_id, memory_order_acquire) ||
	       dl <= SEG_CLUSTER_DEADLINE_PAST || dl <= CLUSTER_FAST_SLACK_NS ||
	       mono_coarse_ns() >= dl - CLUSTER_FAST_SLACK_NS; /* no overflow either way */
}

/*
 * A waiter's grant of cluster key @k, just consumed, is void: the key was
 * opened under a lease the host no longer holds (or its deadline passed).
 * The gate is checked when a hold is handed over, but a releaser stopped
 * between that check and the handoff goes on when it resumes, after the
 * broker has shut the key; the waiter is the last to look before its
 * caller is told. Without the key mutex (the hold is the waiter's, unless
 * the broker ended it when it shut the key).
 */
static inline bool cluster_grant_void(const struct segment *seg, const struct seg_key *k)
{
	uint32_t st = atomic_load_explicit(&k->cluster, memory_order_relaxed);

	/* Shut already (the broker may have closed it, ending the hold, before
	 * the waiter looks), or open under another lease. */
	return (st & CL_KEY) &&
	       (!(st & CL_OPEN) || !atomic_load_explicit(&k->cluster_lease, memory_order_relaxed) ||
		cluster_key_stale(seg, k));
}

/* A cluster semaphore's limit is at most this many slots (one etcd key
 * each, broker/cluster/cluster_sem.c): a larger one is refused with LOCAL_ELIMIT
 * when the key takes its kind (keyops.c). */
#define CLUSTER_SEM_MAX 64

/* A cluster semaphore takes no new holder beyond the slots
 * this host reserved in etcd (broker/cluster/cluster_sem.c). Under the key mutex. */
static inline bool cluster_slots_full(const struct seg_key *k)
{
	return (atomic_load_explicit(&k->cluster, memory_order_relaxed) & CL_KEY) &&
	       k->kind == LOCAL_KIND_SEMAPHORE && k->holders >= k->cluster_slots;
}

/* Issue 16, the semaphore's batch: the broker lowered cluster_slots below
 * the holders, to give slots back to hosts waiting in etcd; a release then
 * hands nothing on (the slot goes back) until the holders are within them
 * again. Under the key mutex. */
static inline bool cluster_slots_over(const struct seg_key *k)
{
	return (atomic_load_explicit(&k->cluster, memory_order_relaxed) & CL_KEY) &&
	       k->kind == LOCAL_KIND_SEMAPHORE && k->holders > k->cluster_slots;
}

/*
 * Tell the broker's cluster thread to look at the cluster keys. The bell
 * says which look: cluster_ring() adds CLUSTER_BELL_FIND (a key it may not
 * know yet gained a waiter: it looks at every key entry), while
 * cluster_ring_release() adds 1 (a key it holds, and so looks at anyway, was
 * released without a handoff: it looks at its own keys only). A carry out
 * of the low half costs one needless look at every entry (the bell's
 * encoding, CLUSTER_BELL_FIND, is in segment.h).
 */
void cluster_ring(struct seg_header *h);
void cluster_ring_release(struct seg_header *h);
/* Is @key under one of the cluster prefixes the broker published? */
bool cluster_prefix_match(const struct segment *seg, const char *key, size_t len);

/* lease.c: now + @lease_ms (0: no lease), and telling the broker about a
 * new or earlier deadline of hold node @node. */
uint64_t lease_deadline(uint32_t lease_ms);
void lease_note(struct segment *seg, uint32_t node);
/* Wake the broker's doorbell thread (lease notes, grants to HTTP waiters). */
void broker_ring(struct seg_header *h);
/* Ring the broker from @seg's process: a flag only in the broker itself. */
void seg_ring(struct segment *seg);

/* ---- lock-free fast path (fastpath.c) ---------------------------------- */

#define FAST_MISS 1 /* not for the fast path: take the mutex path */

/*
 * Uncontended acquire of a key without its mutex. @key is a caller's string
 * not yet checked (a bad one is a FAST_MISS, for the caller to report).
 * Returns 0 (granted or already held; *token set), -EBUSY (a try on a held
 * lock), -LOCAL_ESESSION, or FAST_MISS when the mutex path must decide.
 */
int fast_acquire(struct segment *seg, const char *key, const struct acquire_req *req,
		 uint64_t *token, struct node_hints *hints, uint32_t *key_idx);
/* Release of our hold on a key without its mutex: 0 or FAST_MISS. */
int fast_release(struct segment *seg, const char *key, struct owner who, struct node_hints *hints);
/* The whole of local_lock() and local_release(): the lock-free path with no
 * request built and no call layer (those were a third of the
 * cost), and when that cannot answer, a tail call to api_lock_full() or
 * api_release_full() (api.c) or api_sem_acquire_full() (api_sem.c), which
 * check and report everything again. */
int fast_lock(local_session *s, const char *key, const struct local_acquire_opts *opts,
	      uint64_t *token);
int fast_unlock(local_session *s, const char *key);
int fast_sem_acquire(local_session *s, const char *key, uint32_t limit,
		     const struct local_acquire_opts *opts, uint64_t *token);
int api_sem_acquire_full(local_session *s, const char *key, uint32_t limit,
			 const struct local_acquire_opts *opts, uint64_t *token);
int api_lock_full(local_session *s, const char *key, const struct local_acquire_opts *opts,
		  uint64_t *token);
int api_release_full(local_session *s, const char *key);
int api_release_tried(local_session *s, const char *key);

/* ---- crash repair (repair.c) ------------------------------------------ */

/*
 * Rebuild a key's lists and counts from the node table, which is the truth:
 * free nodes a dead operation had claimed, finish a half-done handoff, re-sort
 * the queue by arrival, then grant what can be granted. Called with the key
 * mutex held after EOWNERDEAD, or when a list is found inconsistent. Returns 0
 * or -LOCAL_ECORRUPT (the key was quarantined).
 */
int key_repair_locked(struct segment *seg, struct seg_key *k);

/*
 * Repair every key (and the table) whose lock owner is gone by this
 * process's judge (seg->lock_judge: in the broker, dead or never admitted):
 * such a lock is only noticed when someone next locks it, and a waiter
 * granted by a releaser that died before its wake-up call sleeps until then.
 * Reads each lock word without locking; takes only the gone ones, without
 * waiting (a busy one is left for the next call). Returns how many were
 * repaired.
 */
uint32_t segment_repair_dead_mutexes(struct segment *seg);

/*
 * Mark every lock word whose owner seg->lock_judge says is gone as left by a
 * dead owner (lockword.h), waking its waiters; the next taker repairs. The
 * broker calls it when a client process exits, before its sweep takes the
 * keys. Returns how many it marked.
 */
uint32_t segment_mark_gone_owners(struct segment *seg);

/* Sanity checks used before trusting a key's own fields (repair quarantines
 * a key that fails them) and its list heads and counts (repair rebuilds).
 * Inline: every key_lock() asks (the calls were a tenth of a
 * semaphore's mutex path). */
static inline bool key_fields_sane(const struct segment *seg, const struct seg_key *k)
{
	uint32_t st = atomic_load(&k->state);

	(void)seg;
	if (st > KEY_FREED)
		return false;
	if (st != KEY_USED)
		return true;
	if (k->key_len < 1 || k->key_len > LOCAL_KEY_MAX)
		return false;
	if (k->kind > LOCAL_KIND_SEMAPHORE)
		return false;
	if (k->kind != LOCAL_KIND_NONE && k->limit < 1)
		return false;
	/* A lock-delay is at most LOCAL_LOCK_DELAY_MAX_MS from when it was
	 * set: a later end is damage, and would refuse grants for ever. */
	if (k->delay_until_ns &&
	    k->delay_until_ns > mono_ns() + (uint64_t)LOCAL_LOCK_DELAY_MAX_MS * 1000000ull)
		return false;
	return VALUE_LEN(atomic_load(&k->value_word)) <= seg->caps.max_value;
}

static inline bool key_idx_ok(const struct segment *seg, uint32_t i)
{
	return i == IDX_NONE || i < seg->nnodes;
}

static inline bool key_queue_end_ok(const struct segment *seg, const struct seg_key *k, uint32_t n)
{
	uint64_t w = atomic_load(&seg->nodes[n].word);

	return w == NODE_PACK(NODE_WAITING, NODE_SESSION(w), seg_key_index(seg, k));
}

static inline bool key_links_sane(const struct segment *seg, const struct seg_key *k)
{
	if (!key_fields_sane(seg, k))
		return false;
	if (atomic_load(&k->state) != KEY_USED)
		return true;
	if (!key_idx_ok(seg, k->q_head) || !key_idx_ok(seg, k->q_tail) ||
	    !key_idx_ok(seg, k->h_head))
		return false;
	if ((k->q_head == IDX_NONE) != (k->waiters == 0) ||
	    (k->h_head == IDX_NONE) != (k->holders == 0) ||
	    (k->q_head == IDX_NONE) != (k->q_tail == IDX_NONE))
		return false;
	/* The ends of the queue are waiting requests of this key: a cycle or
	 * a stale link that skipped a node shows there, in O(1), before a
	 * grant walks into it. */
	if (k->q_head != IDX_NONE &&
	    (!key_queue_end_ok(seg, k, k->q_head) || seg->nodes[k->q_head].prev != IDX_NONE ||
	     !key_queue_end_ok(seg, k, k->q_tail) || seg->nodes[k->q_tail].next != IDX_NONE))
		return false;
	return k->kind == LOCAL_KIND_NONE || k->holders <= k->limit;
}

#endif
