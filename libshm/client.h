/* SPDX-License-Identifier: MIT */
/* liblocal's process-side state: sessions, mapped segments, broker calls. */
#ifndef SHMLOCK_CLIENT_H
#define SHMLOCK_CLIENT_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "keyops.h"
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
};

/* 0 when @s may be used by this process: -EINVAL, -LOCAL_EFORKED otherwise. */
int session_usable(const local_session *s);
/* Bumped in every child of fork(); fastpath.c reads it inline (J1, issue 13). */
extern _Atomic uint64_t fork_gen;

/*
 * One request/reply exchange with the broker at @path. With @fd non-NULL, a
 * descriptor passed with the reply is returned there (else -1).
 * Returns 0 (then rep->status holds the broker's verdict) or -LOCAL_EBROKER,
 * -LOCAL_EDENIED, -LOCAL_EVERSION, -LOCAL_EPROTO.
 */
int broker_call(const char *path, const void *req, size_t len, struct proto_reply *rep, int *fd,
		uint64_t deadline_ns);

/* api_sem.c: a released hold ends the local_enqueue() request it came from. */
void api_drop_granted_pending(local_session *s, const char *key, size_t len, uint32_t key_idx);

/* api_sem.c: two-phase requests driven without blocking (the broker's HTTP
 * waiters). api_pending_arm(): 0 armed (the grant rings the broker's
 * doorbell), 1 granted already, or -LOCAL_ENOTENQUEUED. api_pending_poll():
 * as waiter_poll(); the request stays pending only on -EAGAIN. */
int api_pending_arm(local_session *s, const char *key);
int api_pending_poll(local_session *s, const char *key, bool cancel, uint64_t *token);

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
int api_acquire(local_session *s, const char *key, const struct acquire_req *req,
		int64_t timeout_ms, uint64_t *token);
/* Why @s does not hold key @key_idx: -LOCAL_EEXPIRED (a lease ran out; with
 * @consume the record is used up), -LOCAL_ESESSION or -LOCAL_ENOTHELD. */
int api_not_held(local_session *s, uint32_t key_idx, bool consume);
/* A new grant of @key_idx: an older expiry of it is no longer news. */
void api_forget_expiry(local_session *s, uint32_t key_idx);
void api_fill_info_locked(struct segment *seg, struct seg_key *k, struct local_key_info *out);

void hex_encode(const uint8_t *in, size_t n, char *out);
int hex_decode(const char *in, uint8_t *out, size_t n);

#endif
