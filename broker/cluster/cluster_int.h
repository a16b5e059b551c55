/* SPDX-License-Identifier: MIT */
/* Cluster keys: the parts' internal interfaces (cluster_etcd.c, cluster_lock.c,
 * cluster_main.c). */
#ifndef SHMLOCKD_CLUSTER_INT_H
#define SHMLOCKD_CLUSTER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include <curl/curl.h>
#include <jansson.h>

#include "cluster.h"
#include "keyops.h"
#include "liblocal.h"

/* ---- etcd v3 JSON gateway client (cluster_etcd.c) ------------------------ */

/* One per thread: a curl handle and the auth token it got. */
struct etcd {
	const struct cluster_opts *o;
	CURL *h;
	CURLM *m;     /* drives h when the request can be cancelled (cancel_poll()) */
	uint32_t cur; /* the endpoint that answered last */
	char token[512];
};

int etcd_init(struct etcd *e, const struct cluster_opts *o);
void etcd_fini(struct etcd *e);
/*
 * POST @body (taken over) to @path ("/v3/kv/range") and parse the answer into
 * *@out (NULL: dropped). Tries the endpoints in turn until one answers or
 * @timeout_ms passes. Returns 0, -ETIMEDOUT (nobody answered in time),
 * -ECANCELED (*@cancel became true), -EIO (an error answer; logged at debug).
 */
int etcd_post(struct etcd *e, const char *path, json_t *body, json_t **out, uint32_t timeout_ms,
	      _Atomic bool *cancel);
/*
 * Watch the etcd key @key_b64 (base64, as etcd returns it) from revision
 * @from_rev for its deletion: 0 deleted, -EAGAIN nothing within @timeout_ms
 * or the watch was cancelled by etcd (look again), -ECANCELED, -EIO.
 */
int etcd_watch_delete(struct etcd *e, const char *key_b64, int64_t from_rev, uint32_t timeout_ms,
		      _Atomic bool *cancel);
/*
 * A long watch: @req is the whole request ({"create_request": ...}, taken
 * over); every message etcd streams goes to @cb, which returns non-zero to
 * end the watch. 0 (@cb ended it), -EAGAIN (nothing more within @timeout_ms,
 * or the stream ended: watch again from the last revision seen),
 * -ECANCELED, -EIO.
 */
int etcd_watch_stream(struct etcd *e, json_t *req, uint32_t timeout_ms, _Atomic bool *cancel,
		      int (*cb)(json_t *msg, void *arg), void *arg);
/* Base64 decoding; the length, or -1. @out: room for 3 * strlen(in) / 4. */
ssize_t etcd_unb64(const char *in, void *out);
/* Base64 of @len bytes into @out (size >= 4 * ((len + 2) / 3) + 1). */
void etcd_b64(const void *in, size_t len, char *out);
/* An int64 field that the gateway writes as a string (or a number); 0 if absent. */
int64_t etcd_i64(const json_t *obj, const char *name);

/*
 * Guarded writes (no delete by name): a compare that etcd key @k64 exists
 * under @lease, and the nested op that deletes @k64 only so (for the success
 * list of a txn). NULL when out of memory.
 */
json_t *etcd_cmp_lease(const char *k64, int64_t lease);
json_t *etcd_op_del_if_lease(const char *k64, int64_t lease);
/* Delete @k64 if it is under @lease (one txn): 0 deleted or not ours, or
 * an error of etcd_post(). */
int etcd_del_if_lease(struct etcd *e, const char *k64, int64_t lease, uint32_t timeout_ms,
		      _Atomic bool *cancel);

/* ---- the lock recipe for one key (cluster_lock.c) ------------------------ */

struct cworker {
	struct cluster *c;
	pthread_t thread;
	char dir[640];	/* namespace + hex(key) + "/" */
	char ekey[680]; /* dir + lease id in hex */
	int64_t lease;
	uint64_t epoch;
	_Atomic bool cancel;
	_Atomic bool done;
	bool adopt; /* re-adoption: our key must exist and hold the lock already */
	int err;    /* when done: 0 acquired */
	char name[LOCAL_KEY_MAX + 1]; /* the key */
	size_t len;
	uint32_t delay_ms; /* when acquired: lock-delay left by a host lost holding it */
	int64_t rev;	   /* when acquired: the create revision of ekey */
};

/* The etcd key of @name's record of kind @what ('v': the holder's value,
 * under its host's lease; 'd': a lock-delay owed if that host is lost). */
void cluster_rec_key(const struct cluster_opts *o, char what, const char *name, size_t len,
		     char *out, size_t size);

/* Start the recipe for key @name under @lease (a thread). */
int cworker_start(struct cluster *c, struct cworker *w, const char *name, size_t len, int64_t lease,
		  uint64_t epoch, bool adopt);
/* Join a finished (or cancelled) worker. */
void cworker_join(struct cworker *w);
/* The etcd key directory of key @name. */
void cluster_dir(const struct cluster_opts *o, const char *name, size_t len, char *out,
		 size_t size);

/* ---- the broker's state (cluster_main.c) --------------------------------- */

enum ckey_state {
	CK_IDLE = 0, /* no cluster lock, none asked for */
	CK_ACQ,	     /* a worker runs the lock recipe */
	CK_HELD,     /* this host holds the cluster lock; the gate may be open */
	CK_REL,	     /* given up locally; deleting our etcd key failed: retried */
	CK_ADOPT,    /* open when a restarted broker found it: checking etcd */
	CK_SEM,	     /* a semaphore: slots held or asked for (cluster_sem.c) */
};

#define CSEM_MAX CLUSTER_SEM_MAX /* slots of one cluster semaphore (keyops.h) */
#define CSEM_BATCH 16		 /* slots asked for at once */

/* A worker taking slots of a cluster semaphore (cluster_sem.c). */
struct csworker {
	struct cluster *c;
	pthread_t thread;
	char name[LOCAL_KEY_MAX + 1];
	size_t len;
	int64_t lease;
	uint32_t limit, want;
	_Atomic bool cancel;
	_Atomic bool done;
	int err;
	uint8_t mine[CSEM_MAX]; /* slots the manager knows it holds */
	uint32_t got, idx[CSEM_MAX];
	int64_t rev; /* of the last slot taken */
	bool queued; /* when done: our waiter key is left in etcd (still wanting) */
};

struct ckey {
	uint32_t state;
	uint32_t len;
	char name[LOCAL_KEY_MAX + 1];
	struct cworker *w; /* CK_ACQ */
	char ekey[680];	   /* CK_HELD: our etcd key */
	uint64_t epoch;	   /* the lease generation it was taken under */
	int64_t lease;	   /* CK_HELD, CK_SEM: the etcd lease it was taken under */
	/* Open under a lease that ended, and its mutex busy since
	 * unclosed_ns: retried at every tick, logged at unclosed_log_ns. */
	uint64_t unclosed_ns, unclosed_log_ns;
	int64_t rev;	   /* CK_HELD: its create revision */
	uint64_t batch_ns; /* CK_HELD: when the current batch began */
	uint64_t batch_l0; /* ... and the key's lock_index then */
	uint64_t retry_ns; /* CK_IDLE: after a failed attempt, not before */
	bool yielding;	   /* CK_HELD: closed for other hosts; give up once free */
	uint64_t idle_ns;  /* CK_HELD: first seen idle (0: in use) ... */
	uint64_t idle_l;   /* ... with this lock_index */
	/* CK_HELD, CK_SEM: etcd said another host waits, during this idle
	 * spell (the manager's; cleared when the key is seen in use). */
	bool waited;
	/* Another host queued for this key's lock since we last asked etcd:
	 * set by the watch thread (cluster_values.c), cleared by the manager
	 * before it asks. A hint: a batch ends with a count query only when
	 * set, and an idle key skips its linger when set. */
	_Atomic uint32_t others;
	/* CK_SEM (cluster_sem.c) */
	uint32_t limit, nslots;
	uint32_t *slots; /* CSEM_MAX, allocated at the first use */
	struct csworker *sw;
	bool sem_queued; /* our waiter key may be in etcd: deleted when no more is wanted */
	/* Slots being given back to hosts waiting in etcd at a batch end
	 * (seg_key.cluster_slots is nslots - yield meanwhile: their releases
	 * hand nothing on); batch_ns 0: the batch starts at the next look. */
	uint32_t yield;
	/* CK_HELD: what was last published in etcd (cluster_values.c). */
	bool pub_valid;
	uint64_t pub_tok, pub_vw;
	uint64_t seen_tok, seen_vw, seen_ns; /* the state now, since when */
};

/* A snapshot of a held key's holder and value, to publish (cluster_values.c). */
struct cpub {
	bool held;
	uint64_t token;
	uint8_t sid[16];
	char hname[64];
	int32_t pid, kind;
	uint32_t limit, delay_ms;
	void *value;
	size_t vlen;
};

/* The holder of a cluster key on another host, as its record says. */
struct cremote {
	char name[LOCAL_KEY_MAX + 1];
	uint32_t len;
	uint8_t sid[16];
	char hname[64];
	int32_t pid, kind;
	uint32_t limit;
	uint64_t token;
	int64_t lease;
};

struct cluster {
	struct broker *b;
	struct segment *seg; /* &view */
	/* Our own view of the segment: struct segment also holds the event
	 * loop's per-turn patience with busy locks (lock_budget_ns), which is
	 * the loop's alone; the threads here have BROKER_LOCK_MS per wait. */
	struct segment view;
	const struct cluster_opts *o;
	struct etcd etcd;  /* the manager thread's */
	struct ckey *keys; /* per key entry */
	pthread_t mgr, lease_thr;
	bool mgr_running, lease_running;
	_Atomic bool stop;
	pthread_mutex_t mu; /* stop_cv */
	pthread_cond_t stop_cv;
	/* The host's lease, written by the lease thread. */
	_Atomic int64_t lease_id;     /* 0: none (jeopardy, or not yet granted) */
	_Atomic uint64_t epoch;	      /* +1 at every new lease */
	_Atomic uint64_t deadline_ns; /* local holds end at this CLOCK_MONOTONIC time */
	/* CLOCK_MONOTONIC: the lease thread last learnt the state of the
	 * lease (a renewal sent then was answered, a new lease, or jeopardy).
	 * The manager, after a pause, acts on nothing before this passes the
	 * time it woke (lease_check_ns: asked for). */
	_Atomic uint64_t lease_seen_ns, lease_check_ns;
	uint32_t margin_ms;
	int64_t adopt_id; /* the lease of the broker before us, to re-adopt */
	/* manager: the earliest time a key asked to be looked at again before
	 * the next tick (0: none; look_again_at()). */
	uint64_t soon_ns;
	/* manager: most key entries are in use (a full scan counts them):
	 * cached keys, whose entries are not reclaimed while open, are given
	 * up after --cluster-linger rather than --cluster-idle. */
	bool table_tight;
	uint32_t *active, nactive; /* manager: entries not CK_IDLE (scan()) */
	/* Other hosts' holders (cluster_values.c): the watch thread writes,
	 * the event loop reads (cluster_remote_fill()). */
	pthread_mutex_t rmu;
	struct cremote *remote;
	uint32_t nremote, capremote;
	pthread_t rw_thr;
	bool rw_running;
};

/* A count read without the key mutex, as a hint (re-checked under it). */
static inline uint32_t peek_waiters_of(const struct seg_key *k)
{
	return __atomic_load_n(&k->waiters, __ATOMIC_RELAXED);
}

/* Holders and waiters, a hint read without the mutex, as above. */
static inline uint32_t peek_waiters_and_holders(const struct seg_key *k)
{
	return __atomic_load_n(&k->waiters, __ATOMIC_RELAXED) +
	       __atomic_load_n(&k->holders, __ATOMIC_RELAXED);
}

/* Neither held nor waited for? A hint read without the mutex, as above. */
static inline bool peek_waiters_idle(const struct seg_key *k)
{
	return !__atomic_load_n(&k->waiters, __ATOMIC_RELAXED) &&
	       !__atomic_load_n(&k->holders, __ATOMIC_RELAXED);
}

/* Is entry @k still the key @ck names? */
static inline bool key_is_entry(const struct seg_key *k, const struct ckey *ck)
{
	return atomic_load(&k->state) == KEY_USED && k->key_len == ck->len &&
	       !memcmp(k->key, ck->name, ck->len);
}

/* The manager looks at the keys again at @at_ns, if that is before its
 * next tick (an idle key's linger ends, a holder to publish settles). */
static inline void look_again_at(struct cluster *c, uint64_t at_ns)
{
	if (!c->soon_ns || at_ns < c->soon_ns)
		c->soon_ns = at_ns;
}

/*
 * How long a held key that nobody here uses (a semaphore's slots that no
 * local demand needs) is kept, in ns: --cluster-idle while no other host is
 * known to wait (a distributed lock manager's lock caching: the next local
 * use costs no etcd write), --cluster-linger when one waits (@others) or
 * the key table is nearly full; the shorter of the two if --cluster-idle is.
 */
static inline uint64_t cluster_keep_ns(const struct cluster *c, bool others)
{
	uint32_t ms = c->o->idle_ms;

	if ((others || c->table_tight) && c->o->linger_ms < ms)
		ms = c->o->linger_ms;
	return (uint64_t)ms * 1000000ull;
}

/* ---- semaphores across hosts (cluster_sem.c) ------------------------------ */

/* Start taking slots for semaphore @ck (name and limit set): false if not. */
bool sem_begin(struct cluster *c, struct ckey *ck, int64_t lease);
/* Delete the slots of @ck held under @lease (a re-adopted lease). */
void sem_drop_own(struct cluster *c, struct ckey *ck, int64_t lease);
/* The manager's look at a CK_SEM key. */
void sem_tick(struct cluster *c, uint32_t i, struct ckey *ck, uint64_t now);

/* ---- values, leaders and watches across hosts (cluster_values.c) --------- */

/* Under @k's mutex: fill @p if what etcd shows for @ck is out of date. */
bool cvalue_snapshot_locked(struct cluster *c, struct seg_key *k, struct ckey *ck, struct cpub *p);
/* Publish @p (frees its value). */
void cvalue_publish(struct cluster *c, struct ckey *ck, struct cpub *p);
/* The delete of a release: our lock key and our records, in one txn. */
int cvalue_release(struct cluster *c, struct ckey *ck);
/* The thread that watches the other hosts' records. */
int cvalue_start(struct cluster *c);
void cvalue_stop(struct cluster *c);

#endif
