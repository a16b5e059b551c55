/* SPDX-License-Identifier: MIT */
/*
 * liblocal — locks, sessions and fencing tokens in shared memory.
 *
 * A process opens a session with the shmlockd broker (one Unix-socket round
 * trip), then takes and releases locks directly in the broker's shared-memory
 * segment: no system call when uncontended, a futex sleep in strict FIFO
 * order when contended. When the process dies, the broker releases what its
 * sessions held and hands the keys to the next waiters.
 *
 * Conventions for every call below:
 *  - returns 0 on success or a negative error code: a negated errno value
 *    (-EINVAL, -ETIMEDOUT, ...) or a negated LOCAL_E* code; local_strerror()
 *    turns either into text;
 *  - never aborts, exits or prints;
 *  - thread-safe: one session may be used from many threads at once, but a
 *    session is the unit of ownership (two threads of one session share its
 *    holds; threads that must exclude each other use separate sessions);
 *  - a session belongs to the process that opened it and is not inherited by
 *    fork(): in a child every call on it returns -LOCAL_EFORKED.
 */
#ifndef LIBLOCAL_H
#define LIBLOCAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && __GNUC__ >= 4
#define LOCAL_API __attribute__((visibility("default")))
#else
#define LOCAL_API
#endif

#define LOCAL_VERSION_MAJOR 0
#define LOCAL_VERSION_MINOR 2

/*
 * Growable structs. Every struct that crosses this API starts with
 * `size_t sz`, the size of the struct as the caller's copy of this header
 * declares it, so that a later liblocal can add fields at the end without
 * breaking programs built against an earlier header (libbpf's OPTS pattern):
 *  - a struct the caller passes in (options) or has filled in (local_info(),
 *    local_watch(), local_stats(), ...) must have sz set: declare it with
 *    LOCAL_OPTS(), which sets sz and zeroes the rest. sz 0 (or smaller than
 *    sz itself) fails with -EINVAL;
 *  - fields beyond the caller's sz are neither read (options take their
 *    defaults) nor written;
 *  - a caller built against a newer header than the library passes a larger
 *    sz: the bytes beyond what the library knows must be zero (an option it
 *    cannot honour is never silently ignored), or the call fails with
 *    -E2BIG; in a struct filled in, those bytes are left as they are;
 *  - a struct liblocal fills in (including those handed to callbacks) has
 *    sz set to the bytes it filled: a field lies within them when
 *    LOCAL_HAS(ptr, field).
 * Written as LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 0); a static or
 * const object takes the qualifier in front: static LOCAL_OPTS(...). C++
 * (before C++20's designated initializers): `local_acquire_opts o{};
 * o.sz = sizeof o;`, then the fields.
 */
#define LOCAL_OPTS(TYPE, ...) LOCAL_OPTS_(TYPE, __VA_ARGS__, )
#define LOCAL_OPTS_(TYPE, NAME, ...) struct TYPE NAME = { .sz = sizeof(struct TYPE), __VA_ARGS__ }
#define LOCAL_HAS(PTR, FIELD) \
	((PTR)->sz >= offsetof(__typeof__(*(PTR)), FIELD) + sizeof((PTR)->FIELD))

/* The largest key, in bytes (keys are 1..LOCAL_KEY_MAX bytes, no NUL). */
#define LOCAL_KEY_MAX 255
/* The largest value a broker may be configured to accept (--max-value). */
#define LOCAL_VALUE_MAX 65536
/* A session id: 32 lowercase hex characters and a NUL. */
#define LOCAL_SESSION_ID_LEN 32
/* Session lock-delay bounds, in milliseconds (Consul's 0..60 s, 15 s). */
#define LOCAL_LOCK_DELAY_MAX_MS 60000
#define LOCAL_LOCK_DELAY_DEFAULT_MS 15000

/* Library-specific error codes; calls return them negated. */
enum local_error {
	LOCAL_EBASE = 10000,
	LOCAL_ENOTHELD = LOCAL_EBASE, /* the session does not hold the key */
	LOCAL_ESESSION,		      /* session closed, expired or destroyed */
	LOCAL_EBROKER,		      /* the broker cannot be reached */
	LOCAL_EVERSION,		      /* broker or segment of another version */
	LOCAL_EPROTO,		      /* malformed reply from the broker */
	LOCAL_EMAXKEYS,		      /* the key table is full */
	LOCAL_EMAXSESSIONS,	      /* the session table is full */
	LOCAL_EMAXWAITERS,	      /* the waiter table is full */
	LOCAL_EMAXHOLDS,	      /* the hold table is full */
	LOCAL_EVALUESIZE,	      /* value longer than the broker's --max-value */
	LOCAL_EKIND,		      /* key is a semaphore, used as a lock (or back) */
	LOCAL_ELIMIT,		      /* semaphore limit differs from the key's */
	LOCAL_ECORRUPT,		      /* segment entry damaged; quarantined */
	LOCAL_EFORKED,		      /* session used in a child after fork() */
	LOCAL_EDENIED,		      /* the broker refused this peer */
	LOCAL_EEXPIRED,		      /* the hold's lease expired (it was released) */
	LOCAL_ESTALE,		      /* token is not a current hold of the key */
	LOCAL_EENQUEUED,	      /* already queued (or holding) on this key */
	LOCAL_ENOTENQUEUED,	      /* local_wait() without local_enqueue() */
	/* No broker found: the most telling outcome of the paths tried (see
	 * "FINDING THE BROKER" in liblocal(3)). */
	LOCAL_ENOSOCKET, /* no socket at any path tried */
	LOCAL_EREFUSED,	 /* a socket, but no broker listening on it */
	LOCAL_ENOTSOCK,	 /* something else than a socket at the path */
	LOCAL_EACCESS,	 /* the socket's mode or group lets us not in */
	LOCAL_EUNSAFE,	 /* socket in a directory others could plant */
	LOCAL_ECLUSTER,	 /* this host lost the cluster key's lock (etcd) */
	LOCAL_ELAST
};

enum local_behavior {
	LOCAL_BEHAVIOR_RELEASE = 0, /* holds are released when the session ends */
	LOCAL_BEHAVIOR_DELETE = 1,  /* ... and the keys' values are dropped */
};

enum local_session_flags {
	/* The session survives its creator's death: it ends only by close,
	 * TTL expiry or an operator. */
	LOCAL_SESSION_NO_PROCESS_CHECK = 1u << 0,
};

enum local_kind {
	LOCAL_KIND_NONE = 0, /* no such key (or idle: never held) */
	LOCAL_KIND_LOCK = 1,
	LOCAL_KIND_SEMAPHORE = 2,
};

typedef struct local_session local_session;

struct local_session_opts {
	size_t sz;		 /* sizeof(struct local_session_opts): LOCAL_OPTS() */
	const char *socket_path; /* NULL: $SHMLOCK_SOCKET, then the lookup order */
	const char *name;	 /* NULL: the program's name */
	uint32_t ttl_ms;	 /* 0: no TTL */
	int32_t lock_delay_ms;	 /* -1: default (15000); 0..60000 */
	int behavior;		 /* enum local_behavior */
	unsigned flags;		 /* enum local_session_flags */
	int32_t broker_wait_ms;	 /* no broker listening: retry this long; -1:
				  * $SHMLOCK_BROKER_WAIT_MS, else 5000 */
};

/*
 * Initialise @opts to the defaults (what passing NULL means): socket from the
 * environment, the program's name, no TTL, 15 s lock-delay, behavior release;
 * sets opts->sz to @sz. Called through local_session_opts_init(opts), which
 * passes sizeof(*opts) as the caller's header knows it.
 */
LOCAL_API void local_session_opts_init_sz(struct local_session_opts *opts, size_t sz);
#define local_session_opts_init(opts) local_session_opts_init_sz((opts), sizeof(*(opts)))

/*
 * Open a session with the broker. Blocks for one round trip on the broker's
 * socket; while nothing listens there (a broker restarting), retries with
 * backoff for opts->broker_wait_ms. On success *out holds a session to be
 * ended with local_session_close(). Without a socket_path (or
 * $SHMLOCK_SOCKET) it looks for the user's own broker, then the system one
 * (liblocal(3), FILES). Errors: no broker found, by what the paths tried
 * held: -LOCAL_ENOSOCKET, -LOCAL_EREFUSED (the two waited on),
 * -LOCAL_ENOTSOCK, -LOCAL_EACCESS, -LOCAL_EUNSAFE; -LOCAL_EBROKER (the
 * exchange failed), -LOCAL_EVERSION, -LOCAL_EMAXSESSIONS, -LOCAL_EDENIED
 * (refused by the broker), -EINVAL (bad options: lock_delay_ms over 60000,
 * unknown behavior or flags, sz unset), -E2BIG (opts from a newer header set
 * a field this library does not know), -ENOMEM.
 */
LOCAL_API int local_session_open(const struct local_session_opts *opts, local_session **out);

/*
 * End a session: release every hold (without lock-delay: this is voluntary),
 * leave every queue, free the handle. No other thread may be inside a call
 * on @s (a wait included): the handle is freed under it. To end a wait early,
 * end the session from outside (TTL, local_session_destroy()): the waiting
 * call returns -LOCAL_ESESSION; close once it has. Always frees @s, even when
 * the broker is unreachable (then the broker cleans up when this process
 * exits, or at TTL expiry) and returns -LOCAL_EBROKER. @s must not be used
 * afterwards.
 */
LOCAL_API int local_session_close(local_session *s);

/*
 * Bind @pid, a child of this process (not yet reaped), to the session too:
 * the broker then ends the session, and releases its holds, only once this
 * process AND @pid have exited. For a wrapper that runs a command under a
 * hold (shmlock lock): whichever process is killed first, the hold outlives
 * the one that supervises the command. One bound process per session; a
 * second call replaces the first. Kept by the running broker only (a broker
 * restart forgets it). Errors: -EINVAL (@pid not a child of this process, or
 * <= 0), -LOCAL_ESESSION, -LOCAL_EBROKER, -LOCAL_EDENIED.
 */
LOCAL_API int local_session_bind_process(local_session *s, pid_t pid);

/*
 * Renew the session's TTL: a store into shared memory, no system call.
 * Errors: -LOCAL_ESESSION when the session has already ended.
 */
LOCAL_API int local_session_renew(local_session *s);

/* The session's id: 32 lowercase hex characters. Valid until close. */
LOCAL_API const char *local_session_id(const local_session *s);

struct local_acquire_opts {
	size_t sz;	    /* sizeof(struct local_acquire_opts): LOCAL_OPTS() */
	int64_t timeout_ms; /* <0: forever, 0: try once, >0: wait at most */
	uint32_t lease_ms;  /* 0: no lease (see liblocal(3)) */
	const void *value;  /* attached to the hold (leader info); may be NULL */
	size_t value_len;
};

/*
 * Acquire @key (1..255 bytes, NUL-terminated, no NUL inside) as a lock.
 * NULL @opts waits forever with no value. Waiters are granted in strict FIFO
 * order per key. On success *token (if non-NULL) receives the fencing token:
 * strictly greater than every token granted before on this key (also after
 * the key was reclaimed and re-created, and across broker restarts), and
 * different from every token of every other key. Tokens are not ordered
 * across keys: a global order would make every grant write one cache line
 * shared by all processes, which caps throughput at one core.
 * Re-acquiring a lock the session already holds succeeds at once, keeps the
 * token and replaces the value (when @opts->value is non-NULL).
 * Errors: -EBUSY (try found it held or in lock-delay), -ETIMEDOUT,
 * -EINVAL (empty key; @opts->sz unset), -E2BIG (@opts from a newer header
 * sets a field this library does not know), -ENAMETOOLONG (key over 255 bytes), -LOCAL_EKIND,
 * -LOCAL_EVALUESIZE, -LOCAL_EMAXKEYS, -LOCAL_EMAXHOLDS, -LOCAL_EMAXWAITERS,
 * -LOCAL_ESESSION, -LOCAL_EFORKED, -LOCAL_ECORRUPT.
 */
LOCAL_API int local_lock(local_session *s, const char *key, const struct local_acquire_opts *opts,
			 uint64_t *token);

/*
 * Release the session's hold on @key and hand the key to the next waiter.
 * Never blocks on other holders. Errors: -LOCAL_ENOTHELD (not held, or lost
 * to an operator or to an expiry already reported), -LOCAL_EEXPIRED (the
 * hold's lease ran out first: reported once), -EINVAL, -ENAMETOOLONG,
 * -LOCAL_ESESSION.
 */
LOCAL_API int local_release(local_session *s, const char *key);

struct local_key_info {
	size_t sz; /* sizeof(struct local_key_info): LOCAL_OPTS() */
	int kind;  /* enum local_kind */
	uint32_t limit, holders, waiters;
	uint64_t token;	       /* the current (lock) holder's fencing token; 0 if free */
	uint64_t lock_index;   /* number of acquisitions of this key */
	uint64_t modify_index; /* number of changes of this key */
	uint64_t lock_delay_remaining_ms;
	char holder_session[LOCAL_SESSION_ID_LEN + 1]; /* "" when free */
	char holder_name[64];
	int32_t holder_pid; /* 0 when free or not bound to a process */
	size_t value_len;   /* the length of the value attached by the last holder */
	/* In: where to copy that value (NULL: not copied) and its room. At most
	 * value_buf_size bytes are copied; value_len > value_buf_size says the
	 * copy was cut short. Callbacks (local_keys(), ...) get no value. */
	void *value_buf;
	size_t value_buf_size;
};

/*
 * Describe @key, and copy its value to out->value_buf (if set). A key that
 * does not exist is reported with kind LOCAL_KIND_NONE and returns 0.
 * Errors: -EINVAL (also out->sz unset), -ENAMETOOLONG, -LOCAL_ESESSION,
 * -LOCAL_ECORRUPT.
 */
LOCAL_API int local_info(local_session *s, const char *key, struct local_key_info *out);

/* ---- semaphores, leases, two-phase acquire ------------------------------ */

/*
 * Acquire one of @limit slots of the semaphore @key (limit >= 1). At most
 * @limit sessions hold it at once, granted in FIFO order, each with a fencing
 * token as for locks (rising per key, unique across keys). A session holds at most one slot of
 * a key: asking again returns its token at once. Released with
 * local_release(). Every holder must agree on @limit: while the key exists
 * (an idle key until the broker's --gc-idle reclaims it), another limit fails
 * with -LOCAL_ELIMIT (local_info() shows the key's), a lock key with
 * -LOCAL_EKIND. Other errors as local_lock().
 */
LOCAL_API int local_sem_acquire(local_session *s, const char *key, uint32_t limit,
				const struct local_acquire_opts *opts, uint64_t *token);

/*
 * Extend the lease of the session's hold on @key to @lease_ms from now (0:
 * its original length). *remaining_ms (if non-NULL) receives the time left.
 * No system call. Errors: -LOCAL_EEXPIRED (the lease ran out and the broker
 * released the hold), -LOCAL_ENOTHELD, -EINVAL (a hold without a lease and
 * @lease_ms 0), -LOCAL_ESESSION.
 */
LOCAL_API int local_renew(local_session *s, const char *key, uint32_t lease_ms,
			  uint64_t *remaining_ms);

/*
 * Does the session still hold @key? 0 (with *token set if non-NULL),
 * -LOCAL_EEXPIRED (lost to lease expiry; asking again gives the same answer
 * until a renew, release or new grant of the key), -LOCAL_ENOTHELD (never
 * held, released, or taken by an operator), -LOCAL_ESESSION.
 */
LOCAL_API int local_held(local_session *s, const char *key, uint64_t *token);

/*
 * Two-phase acquire (dflockd's enqueue/wait). local_enqueue() joins the
 * key's queue without blocking: *granted = 1 (with *token) when the hold was
 * granted at once, 0 when queued. @limit 0 means a lock, >= 1 a semaphore.
 * local_wait() then blocks up to @timeout_ms (<0 forever) for the grant; on
 * timeout it leaves the queue and returns -ETIMEDOUT, unless the grant
 * landed in the same instant, which it returns. Errors: -LOCAL_EENQUEUED
 * (already queued or holding), -LOCAL_ENOTENQUEUED (wait without enqueue),
 * and those of local_lock().
 */
LOCAL_API int local_enqueue(local_session *s, const char *key, uint32_t limit,
			    const struct local_acquire_opts *opts, int *granted, uint64_t *token);
LOCAL_API int local_wait(local_session *s, const char *key, int64_t timeout_ms, uint64_t *token);

/* ---- key handles: a key resolved once ----------------------------------- */

/*
 * A key of one session, opened once by name, for a program that takes the
 * same key over and over: the calls below skip what the calls by name do on
 * every call to find the key (measuring, comparing or hashing the name).
 * They answer exactly as local_lock(), local_sem_acquire() and
 * local_release() do on the session and key the handle was opened with:
 * the same holds, tokens, waits and error codes. A handle is not a hold and
 * holds nothing: the key need not exist when the handle is opened (the first
 * acquire makes it), and may be reclaimed and made again, of either kind, or
 * its entry given to another key meanwhile; the handle then finds its key
 * again by name, and never acts on another key. Thread-safe as its session
 * is (any thread may use it, at once). It belongs to its session: close every
 * handle before local_session_close(); in a child after fork() every call on
 * it returns -LOCAL_EFORKED, as on its session.
 */
typedef struct local_key local_key;

/*
 * Open a handle on @key (1..255 bytes, NUL-terminated, no NUL inside) for
 * session @s; *out receives it, to be ended with local_key_close(). No
 * system call, no wait; the key is not made. Errors: -EINVAL (@s, @key or
 * @out NULL; empty key), -ENAMETOOLONG (key over 255 bytes), -LOCAL_EFORKED,
 * -ENOMEM. On error *out (when @out is not NULL) is set to NULL.
 */
LOCAL_API int local_key_open(local_session *s, const char *key, local_key **out);

/*
 * Free the handle @k. Releases nothing: a hold taken through it stays the
 * session's (local_release() or another handle ends it). No other thread may
 * be inside a call on @k. Returns 0; -EINVAL for NULL; in a child after
 * fork() it frees the child's copy and returns -LOCAL_EFORKED.
 *
 * A handle keeps the hold node of its last lock-free hold for the thread
 * that released it, so that its next lock takes no atomic claim: at most 16
 * per session, each counted against the broker's --max-holds until
 * local_key_close() or local_session_close() gives it back (liblocal(3)).
 */
LOCAL_API int local_key_close(local_key *k);

/* The key @k was opened on ("" for NULL). Valid until local_key_close(). */
LOCAL_API const char *local_key_name(const local_key *k);

/*
 * local_lock() on @k's session and key: @opts, *token and every outcome as
 * there (a try with @opts->timeout_ms 0, -EBUSY; a wait; a re-acquire keeps
 * the token; a value or lease attached). Errors: as local_lock(), and
 * -EINVAL for a NULL @k.
 */
LOCAL_API int local_key_lock(local_key *k, const struct local_acquire_opts *opts, uint64_t *token);

/*
 * local_sem_acquire() on @k's session and key, with @limit: every outcome
 * as there (-LOCAL_ELIMIT, -LOCAL_EKIND, -EINVAL for @limit 0). Errors: as
 * local_sem_acquire(), and -EINVAL for a NULL @k.
 */
LOCAL_API int local_key_sem_acquire(local_key *k, uint32_t limit,
				    const struct local_acquire_opts *opts, uint64_t *token);

/*
 * local_release() of @k's session's hold on @k's key, however it was taken
 * (by name or by any handle). Errors: as local_release() (-LOCAL_ENOTHELD,
 * -LOCAL_EEXPIRED, -LOCAL_ESESSION, -LOCAL_EFORKED), and -EINVAL for a NULL
 * @k.
 */
LOCAL_API int local_key_release(local_key *k);

/* ---- watches, sequencers ------------------------------------------------ */

/*
 * Block until @key's modify_index exceeds @after_index (any change: grant,
 * release, value, holder loss, key removal) or @timeout_ms (<0: forever)
 * passes, then fill @out with the current state. Returns 0 (changed, or the
 * index was already past @after_index), -ETIMEDOUT (with @out filled),
 * -LOCAL_ESESSION (the session ended meanwhile), -LOCAL_EMAXWAITERS (a watch
 * takes a slot of the waiter table), -LOCAL_EMAXKEYS, or the errors of
 * local_info(). Works on a key that does not exist yet (it is created, kind
 * none; a recycled key entry keeps counting its modify_index, so an
 * @after_index of 0 may return at once). Costs nothing while no one waits;
 * while someone does, the key's locks and releases take the slower path
 * through its mutex (the lock-free one does not touch modify_index). A
 * watcher also re-reads the index once a second: a process killed just
 * after changing the key, before its wake-up call, delays it that long.
 */
LOCAL_API int local_watch(local_session *s, const char *key, uint64_t after_index,
			  int64_t timeout_ms, struct local_key_info *out);

/*
 * Is @token a current hold of @key (by any session)? 0 if so, -LOCAL_ESTALE
 * otherwise: a protected resource rejects requests from a deposed holder.
 */
LOCAL_API int local_check_token(local_session *s, const char *key, uint64_t token);

/* ---- administration and inspection -------------------------------------- */

/* One holder of a key, as local_holders() reports it. */
struct local_holder {
	size_t sz; /* filled in by liblocal */
	char session[LOCAL_SESSION_ID_LEN + 1];
	char name[64];
	int32_t pid;
	uint64_t token;
	uint64_t lease_remaining_ms; /* 0: no lease */
};

/* Call @cb for each holder of @key (any kind); stop early if it returns
 * non-zero (that value is returned). */
LOCAL_API int local_holders(local_session *s, const char *key,
			    int (*cb)(const struct local_holder *h, void *arg), void *arg);

/* Call @cb for each existing key starting with @prefix (NULL or "": all),
 * with its name and a snapshot of its state (without the value: @ki->value_len
 * is its length; local_info() copies it). */
LOCAL_API int local_keys(local_session *s, const char *prefix,
			 int (*cb)(const char *key, const struct local_key_info *ki, void *arg),
			 void *arg);

struct local_session_info {
	size_t sz; /* filled in by liblocal */
	char id[LOCAL_SESSION_ID_LEN + 1];
	char name[64];
	int32_t pid; /* 0: no process check */
	uint32_t uid;
	uint32_t ttl_ms;
	uint64_t ttl_remaining_ms;
	uint32_t lock_delay_ms;
	int behavior;
	uint32_t holds;
	uint32_t waiting;
};

/* Call @cb for each live session. */
LOCAL_API int local_sessions(local_session *s,
			     int (*cb)(const struct local_session_info *si, void *arg), void *arg);

struct local_stats {
	size_t sz; /* sizeof(struct local_stats): LOCAL_OPTS() */
	uint32_t broker_pid;
	uint64_t uptime_ms; /* since the segment was created */
	uint32_t sessions, keys, holds, waiters;
	uint32_t max_sessions, max_keys, max_holds, max_waiters, max_value;
	uint64_t grants, timeouts, handoffs, lease_expiries, ttl_expiries;
	uint64_t crash_cleanups, repairs, quarantined, sessions_opened, sessions_closed;
};

LOCAL_API int local_stats(local_session *s, struct local_stats *out);

/*
 * Operator actions, carried out by the broker so that lock-delay applies and
 * successors are woken: release @key from the session @holder_id (NULL: from
 * every holder), and end any session by id. Errors: -LOCAL_ENOTHELD,
 * -LOCAL_ESESSION (no such session), -LOCAL_EBROKER.
 */
LOCAL_API int local_force_release(local_session *s, const char *key, const char *holder_id);
LOCAL_API int local_session_destroy(local_session *s, const char *session_id);

/* ---- operator calls without a session ------------------------------------ */

/*
 * The calls below ask the broker at @socket_path (NULL: $SHMLOCK_SOCKET,
 * then the default) to do the work itself: they open no session, so they
 * work with every table full (leaked sessions, say), and map nothing. The
 * broker serves the same peers as it opens sessions to (--allow-uid,
 * --allow-gid). Each is one or a few round trips on the socket (listings
 * come in pages, each a snapshot of its own); while nothing listens there
 * they retry for 5 s, as local_session_open() does.
 *
 * The broker never waits long for a key's mutex: a key whose mutex stays
 * held (a process stopped inside its critical section) is described from
 * its fields read without the mutex and flagged LOCAL_KEY_BUSY. A key entry
 * found damaged is quarantined (every call on it fails with LOCAL_ECORRUPT)
 * and reported with LOCAL_KEY_QUARANTINED until local_admin_reset().
 *
 * Errors of every call: -LOCAL_EBROKER, -LOCAL_EDENIED, -LOCAL_EVERSION,
 * -LOCAL_EPROTO (also: a broker too old for these requests), -EINVAL,
 * -ENAMETOOLONG, -ENOMEM.
 */
enum local_key_flags {
	LOCAL_KEY_QUARANTINED = 1u << 0, /* entry damaged and out of service */
	LOCAL_KEY_BUSY = 1u << 1,	 /* fields read without the key's mutex */
};

enum local_keys_flags {
	LOCAL_KEYS_QUARANTINED = 1u << 0, /* list the quarantined entries only */
};

/* local_stats() as the broker sees it; *quarantined_keys (if non-NULL):
 * entries quarantined now (out->quarantined counts quarantine events). */
LOCAL_API int local_admin_stats(const char *socket_path, struct local_stats *out,
				uint32_t *quarantined_keys);

/* Call @cb for each key starting with @prefix (NULL or "": all), quarantined
 * entries included (by the name they were created with), with @key_flags
 * (LOCAL_KEY_*), then @holder_cb (if non-NULL) for each of its holders. @ki
 * has no value (value_len is its length); see local_admin_info(). @flags:
 * LOCAL_KEYS_*. Stops early if a callback returns non-zero (that value is
 * returned). */
LOCAL_API int local_admin_keys(
	const char *socket_path, const char *prefix, unsigned flags,
	int (*cb)(const char *key, const struct local_key_info *ki, unsigned key_flags, void *arg),
	int (*holder_cb)(const char *key, const struct local_holder *h, void *arg), void *arg);

/* local_info() by the broker (the value included, as far as out->value_buf
 * has room), with *key_flags (if non-NULL) LOCAL_KEY_*.
 * A key that does not exist: kind LOCAL_KIND_NONE, and 0. */
LOCAL_API int local_admin_info(const char *socket_path, const char *key, struct local_key_info *out,
			       unsigned *key_flags);

/* local_holders() by the broker (from the node table: never blocked by a
 * stalled key), quarantined keys included. */
LOCAL_API int local_admin_holders(const char *socket_path, const char *key,
				  int (*cb)(const struct local_holder *h, void *arg), void *arg);

/* One queued request for a key, as local_admin_waiters() reports it. */
struct local_waiter {
	size_t sz; /* filled in by liblocal */
	char session[LOCAL_SESSION_ID_LEN + 1];
	char name[64];
	int32_t pid;
	uint32_t position;   /* 1: the next to be granted */
	uint64_t waiting_ms; /* how long it has been queued */
};

/* Call @cb for each request queued on @key, the next to be granted first
 * (a snapshot, read without the key's mutex). Errors: also -LOCAL_EPROTO
 * from a broker older than this call. */
LOCAL_API int local_admin_waiters(const char *socket_path, const char *key,
				  int (*cb)(const struct local_waiter *w, void *arg), void *arg);

/* local_sessions() by the broker. */
LOCAL_API int local_admin_sessions(const char *socket_path,
				   int (*cb)(const struct local_session_info *si, void *arg),
				   void *arg);

/* local_force_release() and local_session_destroy() without a session. */
LOCAL_API int local_admin_force_release(const char *socket_path, const char *key,
					const char *holder_id);
LOCAL_API int local_admin_session_destroy(const char *socket_path, const char *session_id);

/*
 * Bring quarantined @key back into service: the broker drops what its
 * damaged entry still had and frees it; the next use of the key creates it
 * afresh (tokens keep rising). Its holders lose their holds (their next
 * release, renew or local_held() says -LOCAL_ENOTHELD, as after a force
 * release); its queued requests are removed and their waiting calls return
 * (-LOCAL_ESESSION: the request is gone, the session lives on); its
 * watchers wake. No other key, session or hold is touched. Errors: -ENOENT
 * (no quarantined key of that name), -ETIMEDOUT (a mutex stayed held: try
 * again), -LOCAL_ECORRUPT (the entry's mutex is damaged too).
 */
LOCAL_API int local_admin_reset(const char *socket_path, const char *key);

/*
 * Text for any code these calls return (negative or positive, errno or
 * LOCAL_E*). Never NULL; the string is static.
 */
LOCAL_API const char *local_strerror(int err);

/*
 * The version of the liblocal a program runs with ("0.2.0"), which may be
 * later than the LOCAL_VERSION_MAJOR.LOCAL_VERSION_MINOR it was built with.
 * Never NULL; the string is static.
 */
LOCAL_API const char *local_version(void);

#ifdef __cplusplus
}
#endif

#endif /* LIBLOCAL_H */
