/* SPDX-License-Identifier: MIT */
/* liblocal's process-side state: sessions, mapped segments, broker calls. */
#ifndef SHMLOCK_CLIENT_H
#define SHMLOCK_CLIENT_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "keyops.h"
#include "paths.h"
#include "proto.h"

/* One mapping per segment per process, shared by its sessions; unmapped only
 * when the last of them closes (glibc bug 14485: never unmap a robust mutex
 * another thread of ours might still list). */
struct mapping {
	struct mapping *next;
	dev_t dev;
	ino_t ino;
	unsigned refs;
	struct segment seg;
};

/* A request queued by local_enqueue() and not yet waited for. */
struct pending {
	struct pending *next;
	uint32_t node, key_idx;
	size_t len;
	uint64_t queued_ns; /* metrics: when it queued (0: granted at once) */
	char key[LOCAL_KEY_MAX + 1];
};

struct local_session {
	struct mapping *map;
	struct segment *seg;
	struct owner who;
	uint8_t raw_id[16];
	char id[LOCAL_SESSION_ID_LEN + 1];
	char socket_path[108];
	uint64_t fork_gen;
	struct node_hints hints;
	pthread_mutex_t pending_lock;
	struct pending *pending;
	_Atomic uint32_t npending; /* entries in pending: read without the lock */
	/* metrics (api.c): holds granted after a wait, so that their
	 * release can time them; process memory, lock-free
	 * (whoever moves granted_ns owns the entry, see note_waited()). */
	struct waited_hold {
		_Atomic uint64_t granted_ns; /* 0: empty; 1: being written */
		_Atomic uint64_t token;
		_Atomic uint32_t key_idx; /* the entry, as the key hint names it */
	} waited[4];
	_Atomic uint32_t nwaited;
	/* The open key handles (api_handle.c), so that closing the session
	 * frees the hold nodes they keep (fastpath.c, "A handle's node"). */
	pthread_mutex_t handles_lock;
	struct local_key *handles;
	_Atomic uint32_t nkept; /* nodes its handles keep, at most LOCAL_KEPT_MAX */
};

/* Hold nodes the handles of one session keep between holds, at most (each
 * counts against --max-holds). */
#define LOCAL_KEPT_MAX 16

/* 0 when @s may be used by this process: -EINVAL, -LOCAL_EFORKED otherwise. */
int session_usable(const local_session *s);
/* Bumped in every child of fork(); fastpath.c reads it inline. */
extern _Atomic uint64_t fork_gen;

/* What one broker lookup found at each path it tried (for messages). */
struct lookup_try {
	char path[PATHS_LEN];
	int err; /* 0 (connected) or the -LOCAL_E* code of this path */
	char why[112];
};
struct lookup_report {
	unsigned n;
	bool given;  /* one path, given by the caller or $SHMLOCK_SOCKET */
	bool waited; /* nothing answered at first: it retried */
	struct lookup_try tries[PATHS_MAX];
};

/*
 * Connect to the broker at @path, or (@path NULL) at the first of
 * paths_candidates() that answers; @used (if non-NULL) receives the path.
 * While every path is missing or refused (a broker starting or restarting),
 * retries with backoff until @deadline_ns (0: try once). Returns the socket
 * or the most telling outcome: -LOCAL_EACCESS, -LOCAL_ENOTSOCK,
 * -LOCAL_EUNSAFE, -LOCAL_EREFUSED, -LOCAL_ENOSOCKET, -LOCAL_EBROKER.
 */
int broker_find(const char *path, char used[PATHS_LEN], uint64_t deadline_ns);
/* This thread's last lookup; and as text, "PATH: why; PATH: why". */
const struct lookup_report *broker_lookup_report(void);
int broker_lookup_text(char *buf, size_t size);
/* The wait for a broker when the caller sets none: $SHMLOCK_BROKER_WAIT_MS,
 * else 5000. */
int broker_wait_default_ms(void);
/*
 * Have a broker_find() that has waited @after_ms for a broker call @fn once,
 * with the path(s) it tries ("A" or "A, B"), while it goes on waiting; @fn
 * NULL: no notice (the default: the library prints nothing). For the CLI,
 * which tells a person at a terminal what it waits for. Process-wide; set it
 * before any thread looks for a broker.
 */
void broker_wait_notice(void (*fn)(const char *paths, int wait_ms), int after_ms);

/* broker_call() at broker_find(@path)'s broker, recorded in @used. */
int broker_call_find(const char *path, char used[PATHS_LEN], const void *req, size_t len,
		     struct proto_reply *rep, int *fd, uint64_t deadline_ns);

/*
 * One request/reply exchange with the broker at @path, the one an open
 * session found (a lookup's outcome there is -LOCAL_EBROKER: it went away). With @fd non-NULL, a
 * descriptor passed with the reply is returned there (else -1).
 * Returns 0 (then rep->status holds the broker's verdict), a broker_find()
 * error, or -LOCAL_EBROKER, -LOCAL_EVERSION, -LOCAL_EPROTO.
 */
int broker_call(const char *path, const void *req, size_t len, struct proto_reply *rep, int *fd,
		uint64_t deadline_ns);

/* api_op.c: MSG_OP_BROKER, the broker's own facts (shmlock status). An
 * older broker answers -LOCAL_EPROTO. */
int op_broker_info(const char *socket_path, struct proto_op_broker *out);
/* api_op.c: MSG_OP_LOCK_DELAY, who put @key in lock-delay: 0, or -ENOENT
 * when it is in none the broker knows of. */
int op_lock_delay(const char *socket_path, const char *key, struct proto_op_delay *out);

/* api_admin.c: the figures of MSG_OP_STATS, counted in @seg's mapping
 * (the broker's answer, /metrics and local_stats()); @r's fields zero
 * before, its record head left as it is. */
void api_seg_stats(const struct segment *seg, struct proto_op_stats *r);
/* api_admin.c: those figures as liblocal gives them (all of @out set). */
void api_stats_from_op(const struct proto_op_stats *r, struct local_stats *out);

/* api_admin.c: the MSG_FORCE_RELEASE (@holder_id NULL: every holder) and
 * MSG_DESTROY requests, as a session and the operator calls without one
 * send them; 0, or -EINVAL for an id that is not hex. */
int api_force_release_req(struct proto_force_release *req, const char *key, size_t len,
			  const char *holder_id);
int api_destroy_req(struct proto_session_id *req, const char *session_id);

/* keeper_proto.h: the segment's keeper (its protocol and client). */
#include "keeper_proto.h"

/* api_sem.c: a released hold ends the local_enqueue() request it came from. */
void api_drop_granted_pending(local_session *s, const char *key, size_t len, uint32_t key_idx);

/* api_sem.c: two-phase requests driven without blocking (the broker's HTTP
 * waiters). api_pending_arm(): 0 armed (the grant rings the broker's
 * doorbell), 1 granted already, or -LOCAL_ENOTENQUEUED. api_pending_poll():
 * as waiter_poll(); the request stays pending only on -EAGAIN. */
int api_pending_arm(local_session *s, const char *key);
int api_pending_poll(local_session *s, const char *key, bool cancel, uint64_t *token);
/* For the network faces (broker/faces/tcp/tcp_ops.c): api_pending_arm(), and the request's lock word and
 * its value while it still waits, so that a doorbell tells its rung waiters
 * from the others with one load each instead of a poll each. */
int api_pending_arm_word(local_session *s, const char *key, _Atomic uint64_t **word,
			 uint64_t *waiting);

/* client.c: a session object over a slot the broker opened for itself in
 * its own mapping (HTTP sessions): no socket, nothing to unmap. */
local_session *session_inproc_new(struct segment *seg, struct owner who, const uint8_t id[16]);
void session_inproc_free(local_session *s);

/* How long a call waits for a key's lock held by someone else (a process
 * stopped inside it, say): a try-acquire (then -EBUSY), and the calls that
 * only look (then -ETIMEDOUT). Timed acquires and watches wait until their
 * own deadline; release, renew and untimed acquires as long as it takes. */
#define API_TRY_LOCK_MS 100
#define API_INSPECT_LOCK_MS 1000

/* api.c: shared by the public calls in api_*.c. */
/* A deadline for waiting on a key's lock: @deadline_ns (0: none), but at
 * least API_TRY_LOCK_MS away, so that a short timeout does not fail on the
 * ordinary few microseconds someone else spends inside. */
uint64_t api_lock_deadline(uint64_t deadline_ns);
/* Find @key for a call that only looks, waiting API_INSPECT_LOCK_MS at most. */
int api_find_inspect(local_session *s, const char *key, size_t len, struct seg_key **out);
int api_enter(local_session *s, const char *key, size_t *len);
int api_acquire(local_session *s, const char *key, struct acquire_req *req, int64_t timeout_ms,
		uint64_t *token);
/* Why @s does not hold key @key_idx: -LOCAL_EEXPIRED (a lease ran out; with
 * @consume the record is used up), -LOCAL_ESESSION or -LOCAL_ENOTHELD. */
int api_not_held(local_session *s, uint32_t key_idx, bool consume);
/* A new grant of @key_idx: an older expiry of it is no longer news. */
void api_forget_expiry(local_session *s, uint32_t key_idx);
void api_fill_info_locked(struct segment *seg, struct seg_key *k, struct local_key_info *out);
/* Zero @out but for the caller's sz, value_buf and value_buf_size. */
void api_info_clear(struct local_key_info *out);
/* Metrics: a wait that began at @since ended with @err (0: granted
 * @tok; -ETIMEDOUT: given up); counted in the session's slot. */
void api_note_wait(local_session *s, const char *key, int err, uint64_t since, uint32_t key_idx,
		   uint64_t tok);

/*
 * A key handle (local_key_open(), api_handle.c). @cache names the entry the
 * key was last found in and that entry's fast_base then (HCACHE_*): while
 * the entry's fast word is clear of FAST_SLOW and its fast_base is still
 * that value, the entry still holds the key (fastpath.c, "Key handles").
 */
struct local_key {
	local_session *s;
	_Atomic uint64_t cache;
	/* The hold node kept between holds (IDX_NONE: none), whether it is
	 * the hold now, and the one thread that keeps it (0: none yet); only
	 * that thread changes them. fastpath.c, "A handle's node". */
	_Atomic uint32_t kept;
	bool kept_busy;
	_Atomic uintptr_t owner;
	struct local_key *prev, *next; /* in s->handles, under handles_lock */
	uint32_t hash;
	uint32_t len;
	char name[]; /* len bytes and a NUL */
};

/* The entry index (22 bits: CAP_KEYS_MAX is 1 << 22) above fast_base's seq
 * and held bits. FBASE_FOLDING is never set in a cached base: it marks the
 * cache empty, and no base read through the mask can equal it. */
#define HCACHE_BASE (FBASE_FOLDING | FBASE_HELD | FAST_SEQ_MASK)
#define HCACHE_IDX(c) ((uint32_t)((c) >> 42))
#define HCACHE_PACK(idx, base) (((uint64_t)(idx) << 42) | ((base) & (FBASE_HELD | FAST_SEQ_MASK)))
#define HCACHE_NONE FBASE_FOLDING

/* fastpath.c: local_key_lock(), local_key_sem_acquire() and
 * local_key_release() on a handle (non-NULL): lock-free by the cached entry,
 * else the calls by name with the handle's key. */
int fast_key_lock(local_key *h, const struct local_acquire_opts *opts, uint64_t *token);
int fast_key_sem_acquire(local_key *h, uint32_t limit, const struct local_acquire_opts *opts,
			 uint64_t *token);
int fast_key_release(local_key *h);
/* Free the node @h keeps, if any (its session usable by this process). */
void fast_key_unpark(local_key *h);
/* api_handle.c: fast_key_unpark() every open handle of @s. */
void api_handles_unpark(local_session *s);

void hex_encode(const uint8_t *in, size_t n, char *out);
int hex_decode(const char *in, uint8_t *out, size_t n);

#endif
