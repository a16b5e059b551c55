/* SPDX-License-Identifier: MIT */
/*
 * The shared-memory segment: layout, creation and attachment.
 *
 * This header is the segment's format, all of it: the layout of every region,
 * every word's bits and every flag a field may carry, and the few named
 * writers of state that another part of the broker owns (the cluster state of
 * a key and of the host, below). The algorithms that run over the format are
 * in their own headers: keyops.h (keys, nodes, tokens, cluster gates),
 * lockword.h (the lock words' protocol), hist.h (histograms), seg_check.h
 * (checks of a slot).
 *
 * Layout (offsets recorded in the header, each 64-byte aligned):
 *
 *   header | sessions[max_sessions] | keys[max_keys] | index[index_size]
 *          | nodes[max_holds + max_waiters] | values[max_keys][2][max_value]
 *          | lease_bits[(nodes + 63) / 64] | staged[max_waiters][max_value]
 *
 * header:     struct seg_header (caps, region offsets, broker's doorbell, table
 *             lock, slow-path stats, the host's cluster state, token counter)
 * sessions:   struct seg_session, one per session slot (SESS_* states and flags)
 * keys:       struct seg_key, placed by hash (KEY_* states, fast word, CL_* bits)
 * index:      the hash index: key entry + 1, 0 empty, INDEX_TOMB deleted
 * nodes:      struct seg_node, holds then waiters (NODE_* states and futex values)
 * values:     two buffers per key; value_word names the current one
 * lease_bits: one bit per node, "this hold's lease deadline changed"
 * staged:     one value buffer per waiter node
 *
 * staged[] holds the value a queued request asks to attach, so whoever
 * grants it publishes the value with the grant: a new leader is never shown
 * with its predecessor's value.
 *
 * Nodes [0, max_holds) are hold nodes, [max_holds, max_holds+max_waiters)
 * waiter nodes, so the two capacities are exact and fail with distinct errors.
 *
 * Everything here is internal: the layout is versioned by SEG_ABI and never
 * appears in include/.
 */
#ifndef SHMLOCK_SEGMENT_H
#define SHMLOCK_SEGMENT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "liblocal.h"

struct lw_judge; /* lockword.h */

#define SEG_MAGIC 0x4b434f4c4d485321ull /* "!SHMLOCK" little-endian */
/* 2: lock-free holds stay NODE_FAST_CLAIMED while the fast word names
 * them, and lock_index/modify_index lag behind the fast word (fast_base).
 * 3: key and table locks are lock words (lockword.h), not glibc mutexes.
 * 4: tokens come from per-key ranges (tok_off, tok_hi); the token counter
 * has a cache line of its own.
 * 5: key entries are placed by hash (keytab.c); KEY_FREED marks a free
 * entry that was used.
 * 6: session slots carry wait/hold histograms (metrics).
 * 7: cluster keys: a key's cluster gate (seg_key.cluster) and the
 * header's cluster prefix table and bell.
 * 8: handoffs and timeouts are counted per key entry (n_handoffs,
 * n_timeouts), no longer in the header's stats line.
 * 9: a cluster semaphore's slots reserved in etcd (seg_key.cluster_slots, the
 * former pad): an older client would grant past them.
 * 10: a release wakes the granted waiter after unlocking the key, and the
 * broker wakes granted waiters left asleep (segment_wake_granted()); a queued
 * request behind the head has NODE_FUTEX_BEHIND. An older broker would leave
 * a waiter asleep if its releaser died between the two.
 * 11: a cluster key is open only under the etcd lease it was opened under
 * (seg_key.cluster_lease against seg_header.cluster_lease_id): an older
 * client would grant under a later lease a key the broker could not close.
 * 12: a semaphore of limit L has K = min(L, SEG_KEY_SLOTS) fast words
 * (seg_key.fast and fast_x[], in the entry's former tail padding), each
 * with its own base: an older client would read only the first and grant
 * past the limit, and an older broker would not sweep the others. */
#define SEG_ABI 12u

/*
 * A lock word (seg_key.lock, seg_header.table_lock): one 32-bit futex word,
 * never a pointer (lockword.h has the protocol and its reasons):
 *
 *   bit 31  LW_WAITERS  someone may sleep on the word: the unlocker wakes one
 *   bit 30  LW_DIED     the owner died inside: the next taker must repair
 *   0..29   the owner's pid, as the broker sees it (0: free)
 */
#define LW_WAITERS (1u << 31)
#define LW_DIED (1u << 30)
#define LW_OWNER_MASK (LW_DIED - 1)
#define LW_OWNER(v) ((v)&LW_OWNER_MASK)

#define SEG_NAME_MAX 64		  /* session name, including the NUL */
#define SEG_CLUSTER_PREFIXES 8	  /* --cluster-prefix, at most this many */
#define SEG_CLUSTER_PREFIX_MAX 64 /* bytes of one, with room for a NUL */
#define SESS_EXPIRED_SLOTS 8

/* ---- sessions --------------------------------------------------------- */

/* Session slot states, kept in the low byte of slot->state_gen. */
enum seg_session_state {
	SESS_FREE = 0,
	SESS_ACTIVE = 1,
	SESS_CLOSING = 2, /* the broker is removing its nodes; no new claims */
};

#define SESS_STATE(sg) ((uint32_t)((sg)&0xff))
#define SESS_GEN(sg) ((uint32_t)((sg) >> 32))
#define SESS_PACK(state, gen) (((uint64_t)(gen) << 32) | (uint64_t)(state))

/*
 * Flag bits of struct seg_session.flags: the one list of them, so that the
 * broker, liblocal and shmlockd --check agree on what a healthy slot holds.
 * Bits 0..15 are the public LOCAL_SESSION_* flags a client may ask for
 * (liblocal.h); bits 16..31 are the broker's own markers, which no client can
 * set (proto_decode_request() refuses them in OPEN).
 */
/* Client-requested: the session survives its creator (pid 0 in the slot). */
#define SESS_FLAG_NO_PROCESS_CHECK ((uint32_t)LOCAL_SESSION_NO_PROCESS_CHECK)
/* Broker-set: an HTTP session, opened by the broker in its own name (its pid
 * and start time, no pidfd). Only tells transports apart in stats. */
#define SESS_FLAG_HTTP (1u << 16)
/* Broker-set: a session of a connection of the TCP line protocol (the
 * connection is its owner), opened as an HTTP session is. */
#define SESS_FLAG_TCP (1u << 17)

/* What a client may put in MSG_OPEN. */
#define SESS_FLAGS_CLIENT SESS_FLAG_NO_PROCESS_CHECK
/* Every bit a healthy slot may carry. */
#define SESS_FLAGS_ALL (SESS_FLAGS_CLIENT | SESS_FLAG_HTTP | SESS_FLAG_TCP)

/* seg_session.expired[].why */
#define SESS_EXPIRED_LEASE 0u	/* a lease expired */
#define SESS_EXPIRED_CLUSTER 1u /* a cluster key's lock was lost */

/*
 * A histogram of durations (metrics): kept in the session slot of the
 * process that measured them, never in a line other sessions write, and
 * never reset when the slot is reused, so the broker's sum over all slots
 * at scrape counts every session that ever ran. bucket[i]: durations in
 * (hist_bounds_us[i - 1], hist_bounds_us[i]]; longer ones only in count.
 */
#define SEG_HIST_BUCKETS 12
/* The buckets' upper bounds in microseconds (100 us to 5 min): part of the
 * format, since a reader adds up what other processes counted. */
#define SEG_HIST_BOUNDS_US                                                                 \
	{                                                                                  \
		100, 1000, 5000, 10000, 50000, 100000, 500000, 1000000, 5000000, 10000000, \
			60000000, 300000000                                                \
	}

struct seg_hist {
	_Atomic uint64_t count;
	_Atomic uint64_t sum_us;
	_Atomic uint64_t bucket[SEG_HIST_BUCKETS];
};

struct seg_session {
	/* {generation, state}: the one word a client checks under a key mutex
	 * before it links a node, so a closing session never gains a node. */
	_Atomic uint64_t state_gen;
	_Atomic uint64_t renewed_ns; /* CLOCK_MONOTONIC of the last renew */
	uint8_t id[16];
	char name[SEG_NAME_MAX];
	int32_t pid;	     /* 0: no process check */
	int32_t creator_pid; /* the process that opened it, check or not */
	uint32_t uid;
	uint64_t start_time; /* /proc/PID/stat field 22, against pid reuse */
	uint64_t created_ns;
	uint32_t ttl_ms;
	uint32_t lock_delay_ms;
	uint32_t behavior;
	uint32_t flags;
	uint32_t closing_lost; /* CLOSING: apply lock-delay (not a voluntary close) */
	/* Holds the broker ended at lease expiry, so that the holder's next
	 * renew, release or check says "expired" rather than "not held".
	 * Written by the broker (key last), cleared by the client. */
	_Atomic uint32_t expired_next;
	struct {
		_Atomic uint32_t key; /* key index + 1; 0: empty */
		uint32_t why;	      /* SESS_EXPIRED_LEASE or SESS_EXPIRED_CLUSTER */
		uint64_t token;
	} expired[SESS_EXPIRED_SLOTS];
	/* Written only by the session's own process, on the contended path
	 * (libshm/hist.c); read by the broker's /metrics. */
	struct seg_hist wait_hist; /* acquires that queued: until granted or given up */
	struct seg_hist hold_hist; /* holds that had queued: grant to release */
} __attribute__((aligned(64)));

/* ---- nodes ------------------------------------------------------------ */

/*
 * A node is a hold or a queued request. Its word packs {state, session slot,
 * key index} so that one CAS claims a free node *and* records whose it is:
 * whoever repairs a key after a crash finds every node of that key by
 * scanning words, with no window in which a claimed node belongs to nobody.
 */
enum seg_node_state {
	NODE_FREE = 0,
	NODE_CLAIMED = 1,  /* being filled in under the key mutex */
	NODE_WAITING = 2,  /* queued, in the key's FIFO */
	NODE_GRANTED = 3,  /* waiter handed a hold (node->hold) not yet consumed */
	NODE_HOLDING = 4,  /* a hold, in the key's holder list */
	NODE_WATCHING = 5, /* a local_watch() in progress: keeps the key alive */
	/*
	 * Claimed by a lock-free acquire (one CAS), filled in without the key
	 * mutex. While the key's fast word names it, it is that key's hold: the
	 * acquire commits by naming it, and leaves it in this state; the next
	 * key_lock() turns it into NODE_HOLDING. While no fast word names it
	 * (before the commit, after a lock-free release, or after a lost race)
	 * it is in flight: only its own thread may write or free it while its
	 * process lives, so that thread frees it with a plain store; the sweep
	 * frees it once that process is dead. See seg_node_is_hold().
	 */
	NODE_FAST_CLAIMED = 6,
};

#define NODE_STATE(w) ((uint32_t)((w)&0xff))
#define NODE_SESSION(w) ((uint32_t)(((w) >> 8) & 0xffffff))
#define NODE_KEY(w) ((uint32_t)((w) >> 32))
#define NODE_PACK(state, sess, key) \
	(((uint64_t)(key) << 32) | ((uint64_t)((sess)&0xffffff) << 8) | (uint64_t)(state))

#define NODE_FUTEX_IDLE 0u
#define NODE_FUTEX_PARKED 1u
#define NODE_FUTEX_WOKEN 2u
/* Waited on by the broker for an HTTP client, not by a sleeping thread: the
 * granter rings the broker's doorbell instead of waking a futex. */
#define NODE_FUTEX_DOORBELL 3u

#define IDX_NONE UINT32_MAX

struct seg_node {
	_Atomic uint64_t word;
	_Atomic uint32_t futex; /* the waiter sleeps here, alone */
	uint32_t session_gen;
	uint32_t next; /* FIFO or holder list, IDX_NONE-terminated */
	uint32_t prev;
	uint32_t hold;		 /* NODE_GRANTED: the hold node given to this waiter */
	uint32_t lease_ms;	 /* NODE_WAITING: the lease to start at the grant */
	uint64_t seq;		 /* arrival order within the key */
	uint64_t token;		 /* HOLDING/GRANTED: the fencing token */
	uint64_t lease_until_ns; /* 0: no lease */
	uint32_t staged_len;	 /* NODE_WAITING: value to attach at the grant, + 1; 0: none */
	/* NODE_WAITING: CLOCK_MONOTONIC in ms (low 32 bits) when it queued, for
	 * `shmlock info`; in the line's spare bytes, on the queueing path. */
	uint32_t queued_ms;
} __attribute__((aligned(64)));

/* ---- keys ------------------------------------------------------------- */

enum seg_key_state {
	KEY_FREE = 0,
	KEY_RESERVED = 1, /* being created under the table mutex */
	KEY_USED = 2,
	KEY_QUARANTINED = 3, /* found damaged; never used again */
	/* Free, but used before: a key placed after it may have probed past
	 * it (entries are placed by hash, keytab.c), so a search goes on.
	 * KEY_FREE is an entry never used since it was last cleaned up. */
	KEY_FREED = 4,
};

static inline bool key_state_free(uint32_t st)
{
	return st == KEY_FREE || st == KEY_FREED;
}

/* value_word packs {which buffer, length}: one store publishes a value. */
#define VALUE_SEL(w) ((uint32_t)((w) >> 32))
#define VALUE_LEN(w) ((uint32_t)((w)&0xffffffffu))
#define VALUE_PACK(sel, len) (((uint64_t)(sel) << 32) | (uint64_t)(len))

/*
 * The fast word of a key: {SLOW flag, holder node + 1 (24 bits), seq}.
 * With SLOW clear the key has an empty queue, no lock-delay and no watcher;
 * it is a lock (idle or held) or a semaphore whose only holder, if any, is
 * the one named here; and uncontended acquire and release are one CAS on
 * this word, without the mutex. Whoever takes the mutex sets SLOW first,
 * which freezes the fast path; key_unlock() clears it again when the key is
 * back in that simple state, and bumps seq as it does. seq changes with
 * every lock-free acquire and release and with every return from the mutex,
 * so a CAS prepared before any mutex holder touched the key always fails
 * after it. While SLOW is set seq stays where the last lock-free operation
 * left it, which is what lets key_lock() count those operations (fast_base).
 * For a lock key the holder named here is the truth, in both modes; for a
 * semaphore it is a hold that key_lock() moves into the holder list.
 */
#define FAST_SLOW (1ull << 63)
/* 39 bits of seq: a thread paused between its read and its CAS would need
 * 5.5e11 changes of the key to be fooled (hours of saturation, not minutes). */
#define FAST_SEQ_MASK ((1ull << 39) - 1)
/* A lock-free acquire that would take seq to a multiple of this (or one
 * past it) goes through the mutex instead, so that key_lock() counts the
 * lock-free operations (fast_base) well before seq could wrap. */
#define FAST_FOLD_EVERY (1ull << 30)
#define FAST_HOLDER(f) ((uint32_t)(((f) >> 39) & 0xffffff)) /* node + 1; 0: free */
#define FAST_SEQ(f) ((f)&FAST_SEQ_MASK)
#define FAST_PACK(slow, holder, seq)                                        \
	(((slow) ? FAST_SLOW : 0) | ((uint64_t)((holder)&0xffffff) << 39) | \
	 ((uint64_t)(seq)&FAST_SEQ_MASK))

/*
 * fast_base: {FOLDING, held, seq}, written under the mutex. The lock-free
 * path does not touch lock_index or modify_index (two locked adds saved per
 * operation): lock_index and modify_index are exact as of fast seq
 * FBASE_SEQ, and every lock-free operation since then is one change, and
 * every other one of them an acquisition, starting with an acquisition if
 * the key was free (!held) at FBASE_SEQ. key_lock() adds them in
 * (fold_fast_counts_locked()), crash-safely: it writes the sums to
 * fold_lock_index/fold_modify_index, then sets FOLDING with the new base,
 * then stores the sums, then clears FOLDING; whoever finds FOLDING set
 * redoes the stores. key_unlock() sets the base to the seq it publishes.
 */
#define FBASE_FOLDING (1ull << 41)
/*
 * Semaphore slots: a semaphore of limit L has K = min(L, SEG_KEY_SLOTS) fast
 * words ("slots"), each exactly the one-holder word above {SLOW, holder node
 * + 1, seq} with a fast_base of its own. Slot 0 is seg_key.fast (and
 * fast_base), so locks and semaphores of limit 1 have K = 1 and the path
 * above unchanged; slots 1..K-1 are fast_x[] and fast_xbase[] in the
 * entry's last line. Every slot is SLOW whenever slot 0 is (the mutex
 * holder freezes them all, key_unlock() opens them all); a slot at or
 * beyond K stays SLOW and names nobody. docs/performance.md, "Lock-free
 * semaphore holders beyond the first", has the protocol and
 * tests/model/slots.pml its model. FOLDING is used in slot 0's base only:
 * it covers the fold of every slot (fold_fast_counts_locked()).
 */
#define SEG_KEY_SLOTS 4u
#define FBASE_HELD (1ull << 40)
#define FBASE_SEQ(b) ((b)&FAST_SEQ_MASK)
#define FBASE_PACK(seq, held, folding)                                 \
	(((uint64_t)(seq)&FAST_SEQ_MASK) | ((held) ? FBASE_HELD : 0) | \
	 ((folding) ? FBASE_FOLDING : 0))

/*
 * seg_key.cluster bits (docs/cluster.md), written under the key mutex. Only
 * the cluster manager opens and shuts a key (the seg_key_cluster_*() writers
 * below); key creation sets CL_KEY, a release without a handoff clears
 * CL_ARMED as it rings.
 */
#define CL_KEY 1u   /* under a --cluster-prefix: a grant needs the host's cluster lock */
#define CL_OPEN 2u  /* the broker holds the key's cluster lock: grants may go on */
#define CL_ARMED 4u /* the broker wants a ring at the next release without handoff */

/* A cluster key's tokens: CLUSTER_TOKEN_BASE + (etcd revision of the host's
 * acquisition << CLUSTER_SEQ_BITS) + local sequence, so that a later holder
 * on any host has a larger one. The base keeps them above the host-local
 * tokens (the segment counter starts at the realtime clock, below 2^61). */
#define CLUSTER_TOKEN_BASE (1ull << 62)
#define CLUSTER_SEQ_BITS 24

struct seg_key {
	_Atomic uint32_t lock; /* lockword.h: the key's mutex */
	uint32_t lock_pad;
	_Atomic uint64_t fast;
	_Atomic uint32_t state;
	_Atomic uint32_t hash; /* read without the mutex by lookups */
	uint32_t kind;	       /* enum local_kind */
	uint32_t limit;
	/* Derived from the nodes (rebuilt by repair): */
	uint32_t holders, waiters;
	uint32_t q_head, q_tail; /* FIFO of NODE_WAITING nodes */
	uint32_t h_head;	 /* holder list */
	uint32_t key_len;
	/* Monotonic counters (only ever raised). lock_index and modify_index
	 * leave out the lock-free operations since fast_base: read them under
	 * the mutex, or with key_counts_peek(). */
	uint64_t next_seq;
	_Atomic uint64_t lock_index;
	_Atomic uint64_t modify_index;
	_Atomic uint64_t fast_base;
	uint64_t fold_lock_index, fold_modify_index; /* see fast_base */
	/* Fencing tokens (docs/architecture.md, "Fencing tokens"). The key
	 * draws them from a range it reserved from the segment's counter: the
	 * grant that makes lock_index L gets tok_off + L, while that is above
	 * tok_last and at most tok_hi, and the range is complete (tok_off <=
	 * token). token: the last token granted and counted under the mutex,
	 * or the base of the range when it was reserved; a new key entry
	 * starts with token 0, which voids whatever range the entry held.
	 * tok_last: the last token drawn under the mutex, stored before any
	 * node shows it, so that a grant its dying granter did not count is
	 * never given again. Written under the mutex only (SLOW set); the
	 * lock-free path reads them with __atomic loads. */
	uint64_t token;
	uint64_t tok_off;
	uint64_t tok_hi;
	uint64_t tok_last;
	uint64_t delay_until_ns; /* lock-delay end, CLOCK_MONOTONIC; 0: none */
	_Atomic uint64_t value_word;
	uint64_t idle_since_ns;
	/* NODE_WATCHING nodes (derived). Like modify_index, written only
	 * under the mutex: key_touch_locked() relies on it. */
	_Atomic uint32_t watchers;
	uint32_t wake_pending; /* under the mutex: key_unlock() wakes watchers */
	/* Cluster keys (docs/cluster.md): CL_* bits (keyops.h), written under
	 * the mutex; set at creation when the key is under a cluster prefix. */
	_Atomic uint32_t cluster;
	/* A cluster semaphore: the slots this host reserved in etcd; no new
	 * hold beyond them (cluster_slots_full()). Under the mutex. */
	uint32_t cluster_slots;
	/* A cluster key: the etcd lease of this host under which the broker
	 * opened it (0: none). Grants and holds are valid only while it is
	 * the host's lease now (seg_header.cluster_lease_id): a key the broker
	 * could not close when that lease ended stays shut under the next one
	 * (cluster_gated()). Under the mutex. */
	_Atomic int64_t cluster_lease;
	char key[LOCAL_KEY_MAX + 1];
	/* This entry's share of the slow-path counters (not one
	 * line every process writes). Raised under the mutex only, with a
	 * plain load and store; read without it. Never cleared when the entry
	 * is reused, so their sum over all entries only ever rises: readers
	 * add them up with seg_slow_counts(). */
	_Atomic uint64_t n_handoffs;
	_Atomic uint64_t n_timeouts;
	/* Semaphore slots 1..SEG_KEY_SLOTS-1 (see SEG_KEY_SLOTS): fast words
	 * and their bases, in the entry's last line, away from slot 0's. */
	_Atomic uint64_t fast_x[SEG_KEY_SLOTS - 1];
	_Atomic uint64_t fast_xbase[SEG_KEY_SLOTS - 1];
} __attribute__((aligned(64)));

/* ---- header ----------------------------------------------------------- */

/* seg_header.cluster_bell: clients add CLUSTER_BELL_FIND when a key the
 * manager may not know gained a waiter (it looks at every key entry), 1 when
 * a key it holds was released without a handoff (it looks at its own). */
#define CLUSTER_BELL_FIND (1u << 16)
/* seg_header.cluster_deadline_ns: 0, no cluster; this, a deadline already
 * past (no lease yet, or jeopardy): no cluster key is granted. */
#define SEG_CLUSTER_DEADLINE_PAST 1ull

struct seg_caps {
	uint32_t max_keys;
	uint32_t max_sessions;
	uint32_t max_waiters;
	uint32_t max_holds;
	uint32_t max_value;
};

/* Counters of the slow paths only: the uncontended path must not write a
 * cache line that every process shares. Grants are the keys' lock_index;
 * handoffs and timeouts are the keys' n_handoffs and n_timeouts (these two
 * here stay 0 since SEG_ABI 8: seg_slow_counts() adds them in anyway). */
struct seg_stats {
	_Atomic uint64_t timeouts;
	_Atomic uint64_t handoffs;
	_Atomic uint64_t repairs;	 /* EOWNERDEAD recoveries */
	_Atomic uint64_t crash_cleanups; /* sessions whose process died */
	_Atomic uint64_t ttl_expiries;
	_Atomic uint64_t sessions_opened;
	_Atomic uint64_t sessions_closed;
	_Atomic uint64_t quarantined;
	_Atomic uint64_t lease_expiries;
	_Atomic uint64_t reclaimed_grants; /* lock_index of keys reclaimed */
};

struct seg_header {
	uint64_t magic;
	uint32_t abi;
	uint32_t header_size;
	uint64_t size;
	struct seg_caps caps;
	uint32_t index_size; /* power of two */
	uint32_t session_size, key_size, node_size;
	uint64_t off_sessions, off_keys, off_index, off_nodes, off_values, off_lease_bits;
	uint64_t off_staged;
	uint64_t created_realtime_ns;
	_Atomic uint32_t broker_pid;
	_Atomic uint64_t broker_started_ns; /* CLOCK_MONOTONIC */
	_Atomic uint32_t broker_doorbell;   /* futex: clients ring the broker */
	_Atomic uint32_t broker_listening;  /* the broker sleeps on the doorbell */
	_Atomic uint32_t table_lock;	    /* lockword.h: key creation and reclaim */
	uint32_t index_tombs;		    /* under table_mutex */
	uint32_t key_hint_unused;	    /* (was a hint; entries are placed by hash now) */
	struct seg_stats stats;
	/* Cluster keys (docs/cluster.md, broker/cluster_*.c). The broker writes
	 * the prefixes before it serves; key creation reads them, so a key
	 * under one starts gated. Clients ring cluster_bell (keyops.h,
	 * cluster_ring()) when a gated key gains a waiter or a cluster key is
	 * released without a handoff. */
	_Atomic uint32_t cluster_bell;
	_Atomic uint32_t cluster_listening;
	/* CLOCK_MONOTONIC: past it, this host may no longer hold the cluster
	 * locks (its etcd lease was not renewed in time): no cluster key is
	 * granted and holders are told (LOCAL_ECLUSTER), even with no broker
	 * left to end their holds. 0: no cluster. Written by the broker. */
	_Atomic uint64_t cluster_deadline_ns;
	/* The broker's etcd lease (0: none), so that a broker restarted
	 * before the deadline re-adopts it and the holds go on. */
	_Atomic int64_t cluster_lease_id;
	uint32_t cluster_nprefix;
	uint32_t cluster_prefix_len[SEG_CLUSTER_PREFIXES];
	char cluster_prefix[SEG_CLUSTER_PREFIXES][SEG_CLUSTER_PREFIX_MAX];
	/* The last token reserved: keys take ranges of it (keyops.h,
	 * key_next_token_locked()), never single tokens. A line of its own:
	 * it is written once per range, by whichever process runs out. */
	_Alignas(64) _Atomic uint64_t token_counter;
} __attribute__((aligned(64)));

/*
 * The layout the uncontended path relies on (docs/architecture.md, "Cache
 * lines the uncontended path writes"): a lock-free acquire or release writes
 * its key's first line (the fast word) and its own hold node, and nothing
 * else in the segment. These keep each of those a line no other key or node
 * shares, and the token counter, which grants reach once per range, off the
 * lines of everything else.
 */
_Static_assert(sizeof(struct seg_node) == 64 && _Alignof(struct seg_node) == 64,
	       "a node is one cache line: sessions claim distinct nodes, so distinct lines");
_Static_assert(sizeof(struct seg_key) % 64 == 0 && _Alignof(struct seg_key) == 64,
	       "a key's lines are its own");
_Static_assert(offsetof(struct seg_key, fast) < 64 && offsetof(struct seg_key, lock) < 64,
	       "the fast word (written by every lock-free operation) is in the key's first line");
_Static_assert(sizeof(struct seg_session) % 64 == 0 && _Alignof(struct seg_session) == 64,
	       "a session slot's lines are its own");
_Static_assert(offsetof(struct seg_header, token_counter) % 64 == 0 &&
		       sizeof(struct seg_header) == offsetof(struct seg_header, token_counter) + 64,
	       "the token counter has the header's last line to itself");
_Static_assert(offsetof(struct seg_key, n_timeouts) >= 64 &&
		       offsetof(struct seg_key, n_timeouts) + 8 <= sizeof(struct seg_key),
	       "the slow-path counters are in their key's own lines, not its fast line");

_Static_assert(sizeof(struct seg_key) == 512,
	       "the semaphore slots live in the key entry's former tail padding: no entry grows");
_Static_assert(offsetof(struct seg_key, fast_x) / 64 == (sizeof(struct seg_key) - 1) / 64 &&
		       offsetof(struct seg_key, fast_xbase) / 64 ==
			       (sizeof(struct seg_key) - 1) / 64,
	       "slots 1..K-1 share the key's last line, not its first (slot 0's)");

/* A process's view of one mapped segment. */
struct segment {
	struct seg_header *hdr;
	size_t size;
	struct seg_caps caps; /* copied at attach: never trust the shared copy */
	uint32_t index_size;
	uint32_t nnodes;
	struct seg_session *sessions;
	struct seg_key *keys;
	_Atomic uint32_t *index; /* key idx + 1; 0 empty; INDEX_TOMB deleted */
	struct seg_node *nodes;
	char *values;
	/* One bit per node: "this hold has a new or earlier lease deadline";
	 * the broker drains it when the doorbell rings. */
	_Atomic uint64_t *lease_bits;
	char *staged;
	/* This process's patience with key and table mutexes in key_lock()
	 * and keytab_find(): 0, as long as it takes (clients); the broker sets
	 * BROKER_LOCK_MS, so a client stopped inside a critical section cannot
	 * stall the HTTP requests it serves (they get -ETIMEDOUT instead). */
	uint32_t lock_timeout_ms;
	/* The broker's event loop: what is left of this turn's patience with
	 * busy locks (lock_budgeted), however many keys are stuck. */
	uint64_t lock_budget_ns;
	bool lock_budgeted;
	/* Who we are in lock words: our pid as the broker sees it (from its
	 * answer to our session's open), and who may judge a word's owner
	 * gone: the broker's own table in the broker, the kernel in a client
	 * that shares the broker's pid namespace, nobody in one that does not
	 * (NULL). See lockword.h. */
	uint32_t lock_self;
	const struct lw_judge *lock_judge;
	/* The broker's own mapping (broker/core/loop.c): a ring this process makes
	 * (a lease its in-process sessions took, a grant to a waiter it armed)
	 * only sets rung_local, which the loop handles at the end of its turn,
	 * instead of a futex wake of its own doorbell thread and an eventfd
	 * round trip per ring. Clients leave ring_local false. */
	bool ring_local;
	bool rung_local;
};

#define INDEX_TOMB UINT32_MAX

/* Bytes needed for @caps; 0 when they are out of range. */
size_t seg_size_for(const struct seg_caps *caps);

/* Check caps against the documented ranges: 0 or -EINVAL. */
int seg_caps_valid(const struct seg_caps *caps);

/* Lay out and initialise a fresh segment of seg_size_for(caps) bytes at @mem. */
int seg_format(void *mem, size_t size, const struct seg_caps *caps);

/*
 * Validate the header of a mapping of @size bytes and fill @seg. Returns 0,
 * -LOCAL_EVERSION (another ABI) or -LOCAL_ECORRUPT (inconsistent header).
 */
int seg_bind(struct segment *seg, void *mem, size_t size);

static inline struct seg_session *seg_session_at(const struct segment *seg, uint32_t i)
{
	return i < seg->caps.max_sessions ? &seg->sessions[i] : NULL;
}

static inline struct seg_key *seg_key_at(const struct segment *seg, uint32_t i)
{
	return i < seg->caps.max_keys ? &seg->keys[i] : NULL;
}

static inline struct seg_node *seg_node_at(const struct segment *seg, uint32_t i)
{
	return i < seg->nnodes ? &seg->nodes[i] : NULL;
}

/* How many slots key entry @k uses: K = min(limit, SEG_KEY_SLOTS) for a
 * semaphore, 1 for anything else. kind and limit change only under the
 * mutex with every slot SLOW; read without it, the answer is bounded. */
static inline uint32_t seg_key_nslots(const struct seg_key *k)
{
	uint32_t l = __atomic_load_n(&k->limit, __ATOMIC_RELAXED);

	if (__atomic_load_n(&k->kind, __ATOMIC_RELAXED) != LOCAL_KIND_SEMAPHORE || l <= 1)
		return 1;
	return l < SEG_KEY_SLOTS ? l : SEG_KEY_SLOTS;
}

/* Slot @i's fast word and base (i < SEG_KEY_SLOTS). */
static inline _Atomic uint64_t *seg_key_slot(struct seg_key *k, uint32_t i)
{
	return i ? &k->fast_x[i - 1] : &k->fast;
}

static inline _Atomic uint64_t *seg_key_slot_base(struct seg_key *k, uint32_t i)
{
	return i ? &k->fast_xbase[i - 1] : &k->fast_base;
}

static inline const _Atomic uint64_t *seg_key_slot_c(const struct seg_key *k, uint32_t i)
{
	return i ? &k->fast_x[i - 1] : &k->fast;
}

static inline uint64_t seg_key_slot_load(const struct seg_key *k, uint32_t i)
{
	return atomic_load_explicit(i ? &k->fast_x[i - 1] : &k->fast, memory_order_acquire);
}

/* Does a slot of @k name node @i (as holder node + 1)? Any slot is asked,
 * not only the first K: a slot past K names nobody in a sane entry. */
static inline bool seg_key_names(const struct seg_key *k, uint32_t i)
{
	uint32_t s;

	for (s = 0; s < SEG_KEY_SLOTS; s++)
		if (FAST_HOLDER(seg_key_slot_load(k, s)) == i + 1)
			return true;
	return false;
}

/* The first node a slot of @k names (node + 1; 0: none). */
static inline uint32_t seg_key_first_named(const struct seg_key *k)
{
	uint32_t s, h;

	for (s = 0; s < SEG_KEY_SLOTS; s++) {
		h = FAST_HOLDER(seg_key_slot_load(k, s));
		if (h)
			return h;
	}
	return 0;
}

/*
 * Is node @i, whose word is @w, a hold? A NODE_HOLDING node, or a
 * NODE_FAST_CLAIMED one a slot of its key names (a lock-free acquire's
 * committed hold). For readers without the key mutex; under it, key_lock()
 * has already turned the second kind into the first.
 */
static inline bool seg_node_is_hold(const struct segment *seg, uint32_t i, uint64_t w)
{
	const struct seg_key *k;

	if (NODE_STATE(w) == NODE_HOLDING)
		return true;
	if (NODE_STATE(w) != NODE_FAST_CLAIMED || NODE_KEY(w) >= seg->caps.max_keys)
		return false;
	k = &seg->keys[NODE_KEY(w)];
	return seg_key_names(k, i);
}

/* Watchers sleep on the low 32 bits of modify_index (little-endian only). */
static inline _Atomic uint32_t *key_change_futex(struct seg_key *k)
{
	_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "futex on low half");
	return (_Atomic uint32_t *)(void *)&k->modify_index;
}

/* The handoff and timeout counts: every key entry's, plus what the header
 * holds (see seg_stats). For readers (local_stats(), the broker's stats). */
static inline void seg_slow_counts(const struct segment *seg, uint64_t *handoffs,
				   uint64_t *timeouts)
{
	uint64_t h = atomic_load_explicit(&seg->hdr->stats.handoffs, memory_order_relaxed);
	uint64_t t = atomic_load_explicit(&seg->hdr->stats.timeouts, memory_order_relaxed);
	uint32_t i;

	for (i = 0; i < seg->caps.max_keys; i++) {
		h += atomic_load_explicit(&seg->keys[i].n_handoffs, memory_order_relaxed);
		t += atomic_load_explicit(&seg->keys[i].n_timeouts, memory_order_relaxed);
	}
	*handoffs = h;
	*timeouts = t;
}

static inline uint32_t seg_key_index(const struct segment *seg, const struct seg_key *k)
{
	return (uint32_t)(k - seg->keys);
}

static inline uint32_t seg_node_index(const struct segment *seg, const struct seg_node *n)
{
	return (uint32_t)(n - seg->nodes);
}

static inline char *seg_value_buf(const struct segment *seg, uint32_t key, uint32_t sel)
{
	return seg->values + ((size_t)key * 2 + (sel & 1)) * seg->caps.max_value;
}

/* The staging buffer of waiter node @n (n >= max_holds). */
static inline char *seg_staged_buf(const struct segment *seg, uint32_t n)
{
	return seg->staged + (size_t)(n - seg->caps.max_holds) * seg->caps.max_value;
}

/*
 * ---- cluster state: the named writers -------------------------------------
 *
 * The cluster manager (broker/cluster/) owns these fields; the gates that
 * read them are in keyops.h (cluster_gated(), cluster_grant_void(),
 * cluster_slots_full()). Each key writer runs under the key's mutex.
 */

/* @k's gate opens under etcd lease @lease: this host holds the key's cluster
 * lock, grants may go on, and the next release without a handoff rings. */
static inline void seg_key_cluster_open(struct seg_key *k, int64_t lease)
{
	atomic_store(&k->cluster_lease, lease);
	atomic_store(&k->cluster, CL_KEY | CL_OPEN | CL_ARMED);
}

/* No new grant of @k; its holds stay valid under its lease (a yield to
 * other hosts, or the last holder gone). With @arm, the next release without
 * a handoff rings the manager. */
static inline void seg_key_cluster_hold_back(struct seg_key *k, bool arm)
{
	uint32_t st = atomic_load(&k->cluster) & ~CL_OPEN;

	atomic_store(&k->cluster, arm ? st | CL_ARMED : st);
}

/* @k is shut: its cluster lock is lost or never was ours. No grant, and
 * what it granted is void (no lease): the caller ends its holds. */
static inline void seg_key_cluster_shut(struct seg_key *k)
{
	seg_key_cluster_hold_back(k, false);
	atomic_store(&k->cluster_lease, 0);
}

/* Ring the manager at @k's next release without a handoff. */
static inline void seg_key_cluster_arm(struct seg_key *k)
{
	atomic_fetch_or(&k->cluster, CL_ARMED);
}

/* The next release rang (or nobody wants it to): the ring is taken. */
static inline void seg_key_cluster_disarm(struct seg_key *k)
{
	atomic_fetch_and(&k->cluster, ~CL_ARMED);
}

/* @k as a fresh entry: a cluster key (gated, never opened) or not one. */
static inline void seg_key_cluster_reset(struct seg_key *k, bool cluster_key)
{
	atomic_store(&k->cluster, cluster_key ? CL_KEY : 0);
	atomic_store(&k->cluster_lease, 0);
}

/* The lease an entry that is no longer @k's key was opened under, forgotten
 * (nothing is granted under it any more). */
static inline void seg_key_cluster_forget_lease(struct seg_key *k)
{
	atomic_store(&k->cluster_lease, 0);
}

/* A cluster semaphore @k takes no holder beyond @slots (those reserved in
 * etcd). */
static inline void seg_key_cluster_slots(struct seg_key *k, uint32_t slots)
{
	k->cluster_slots = slots;
}

/* The host's etcd lease (0: none), for a restarted broker to re-adopt and
 * for cluster_gated() to compare each key's lease with. */
static inline void seg_cluster_set_lease(struct seg_header *h, int64_t lease)
{
	atomic_store(&h->cluster_lease_id, lease);
}

/* The host's cluster deadline (CLOCK_MONOTONIC ns; SEG_CLUSTER_DEADLINE_PAST:
 * nothing may be granted; 0: no cluster). */
static inline void seg_cluster_set_deadline(struct seg_header *h, uint64_t at_ns)
{
	atomic_store(&h->cluster_deadline_ns, at_ns);
}

/* The manager sleeps on the cluster bell (@on), so that a ring must wake it
 * (cluster_ring()), or it is awake and will look anyway. */
static inline void seg_cluster_set_listening(struct seg_header *h, bool on)
{
	atomic_store(&h->cluster_listening, on ? 1u : 0u);
}

/* Publish the cluster prefixes (at most SEG_CLUSTER_PREFIXES, each shorter
 * than SEG_CLUSTER_PREFIX_MAX): key creation reads them (segment.c). */
void seg_cluster_set_prefixes(struct seg_header *h, const char (*prefixes)[SEG_CLUSTER_PREFIX_MAX],
			      uint32_t n);

#endif
