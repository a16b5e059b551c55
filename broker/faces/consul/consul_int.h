/* SPDX-License-Identifier: MIT */
/*
 * The Consul-compatible API's internal interfaces, shared by
 * broker/consul_*.c only (docs/consul-api.md, docs/architecture.md
 * "Consul-compatible API").
 */
#ifndef SHMLOCKD_CONSUL_INT_H
#define SHMLOCKD_CONSUL_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "consul.h"
#include "duration.h"
#include "faces/http/http_int.h"
#include "net/http_engine.h"

/* Timer kind of the Consul API: a = waiter slot, b = its generation;
 * a = CONSUL_TIMER_EVAL: re-evaluate the blocking queries now. */
#define CONSUL_TIMER_EVAL UINT32_MAX
#define CONSUL_VALUE_MAX (512u * 1024u) /* Consul's kv_max_value_size */
#define CONSUL_UUID_LEN 36
/* Segment keys watched for changes made outside this API (one futex_waitv
 * call: 128 words, one of them the watcher's own control word). */
#define CONSUL_WATCH_MAX 127
#define CONSUL_WAIT_DEFAULT_MS (5u * 60u * 1000u)
#define CONSUL_WAIT_MAX_MS (10u * 60u * 1000u)

/* A session of this API: a real segment session the broker opened. */
struct csession {
	local_session *ls;
	uint32_t slot, gen;
	char id[CONSUL_UUID_LEN + 1];
	char *name;
	uint64_t ttl_ms; /* 0: none */
	uint64_t lock_delay_ns;
	bool behavior_delete;
	json_t *node_checks, *service_checks; /* as given (Consul's lists) */
	uint64_t create_index, modify_index;
	char ip[64];
};

/* What a session entry shows (this API's sessions and others'). */
struct csession_view {
	const char *id, *name;
	json_t *node_checks, *service_checks;
	uint64_t lock_delay_ns, ttl_ns, create_index, modify_index;
	bool behavior_delete;
};

/* A session from elsewhere (liblocal, the CLI, the other faces) as this API
 * last saw it in a slot: its indexes are given when first seen. */
struct cforeign {
	uint32_t gen;
	uint64_t index; /* 0: none seen in this slot */
};

/* A KV entry (plain data or a lock: both live here, the lock's hold in the
 * segment). */
struct kv {
	char key[LOCAL_KEY_MAX + 1];
	size_t key_len;
	char *val;
	size_t len;
	uint64_t flags, create, modify, lock_index;
	struct csession *owner; /* the session of this API holding it */
	char foreign[32];	/* a holder from elsewhere (public id), "" none */
	/* Made for a hold from elsewhere, never written here: it goes when the
	 * hold goes (a PUT makes it a plain entry). */
	bool held_only;
	uint64_t seg_modify; /* the segment key's modify_index when its hold's
			      * value was last copied here */
};

enum cw_kind { CW_KEY, CW_PREFIX, CW_SESSIONS };

/* A blocking query: a suspended request answered when its view's index
 * passes @index or at its deadline. */
struct cwait {
	struct hreq *r; /* NULL: free */
	uint32_t gen;
	enum cw_kind kind;
	uint64_t index;
	int fd;			     /* the client's socket, watched for a hang-up; -1: not */
	char key[LOCAL_KEY_MAX + 1]; /* the key or prefix */
};

/* A segment key watched for outside changes (consul_watch.c). */
struct cwatch {
	char key[LOCAL_KEY_MAX + 1];
	struct seg_key *k;
	uint32_t node;	 /* our NODE_WATCHING node */
	uint32_t expect; /* the watcher thread's last seen change word */
	bool want;	 /* mark while recomputing the set */
};

/* Per-request state (hreq->cx). */
struct creq {
	int32_t waiter; /* in c->waits, else -1 */
	const char *ctype;
	size_t reply_len; /* reply may be raw bytes (?raw) */
	uint64_t index;	  /* X-Consul-Index; 0: none */
	bool index_set;
	bool woke; /* answered again after a blocking wait: do not block */
	char path[1024];
};

struct consul {
	struct http *h;
	struct broker *b;
	int daemon; /* index in h->d[], -1: none yet */
	char node[64];
	/* indices: one counter as Consul's Raft index */
	uint64_t index, kv_index, kv_del_index, sess_index;
	/* sessions by segment slot */
	struct csession **by_slot;
	uint32_t nsessions;
	/* sessions from elsewhere by segment slot (consul_foreign.c) */
	struct cforeign *foreign;
	/* the broker's own session: watches and inspection */
	local_session *self;
	uint32_t self_slot;
	/* KV, sorted by key */
	struct kv **ents;
	size_t nents, cap_ents;
	/* blocking queries */
	struct cwait *waits;
	uint32_t nwaits, cap_waits, active_waits;
	bool eval_pending;
	/* watches (consul_watch.c) */
	pthread_mutex_t wlock;
	struct cwatch watch[CONSUL_WATCH_MAX];
	uint32_t nwatch;
	_Atomic uint32_t ctl; /* bumped: the set changed, or stop */
	_Atomic bool wstop;
	pthread_t wthread;
	bool wthread_running;
};

/* consul_server.c */
void consul_reply(struct hreq *r, int status, json_t *body /* stolen */);
void consul_reply_text(struct hreq *r, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void consul_reply_raw(struct hreq *r, const char *data, size_t len);
void consul_set_index(struct hreq *r, uint64_t index);
/* A JSON number for any uint64_t (Flags: `consul lock` uses values past
 * INT64_MAX, which jansson's integers cannot hold): consul_reply() writes
 * it unquoted. */
json_t *consul_u64(uint64_t v);
uint64_t consul_bump(struct consul *c);
/* Something changed: evaluate the blocking queries once this turn is over. */
void consul_changed(struct consul *c);
/* The query parameter @name: true if present; *val its decoded value ("" if
 * none) in @buf. */
bool consul_arg(struct hreq *r, const char *name, char *buf, size_t size);
/* Percent-decode @in (n bytes) into @out (size); -1 if malformed. @plus: a
 * query string's '+' is a space (a path's is a '+'). */
int consul_unescape(const char *in, size_t n, char *out, size_t size, size_t *out_len, bool plus);
/* Start a blocking query if ?index= asks for one and the view is not past
 * it: true when @r was suspended (answered later). */
bool consul_block(struct hreq *r, enum cw_kind kind, const char *key, uint64_t view_index);

/* consul_sessions.c */
int csessions_init(struct consul *c);
void csessions_fini(struct consul *c);
void consul_session_route(struct hreq *r, const char *rest);
struct csession *consul_session_find(struct consul *c, const char *uuid);
/* The csession of the segment session with raw id @hex (32 digits), or NULL;
 * *live false when no live session has that id. */
struct csession *consul_session_of_hex(struct consul *c, const char *hex, bool *live,
				       uint32_t *slot);
void consul_sessions_close_all(struct consul *c);
uint64_t consul_sessions_view(struct consul *c);
json_t *consul_session_list_json(struct consul *c, const char *node);

json_t *consul_session_json(struct consul *c, const struct csession_view *v);

/* consul_foreign.c: sessions of liblocal, the CLI and the other faces */
/* Give sessions from elsewhere that appeared since last time their indexes,
 * and move the session lists' index if any came or went. */
void consul_foreign_scan(struct consul *c);
/* The public id ("s3g7") of the live session from elsewhere in @slot; false
 * if there is none (free, this API's own, the broker's watcher). */
bool consul_foreign_id(struct consul *c, uint32_t slot, char *out, size_t size);
/* The entry of the session from elsewhere in @slot, or NULL. */
json_t *consul_foreign_json(struct consul *c, uint32_t slot);
/* The entry of the session from elsewhere named @id ("s3g7"), or NULL. */
json_t *consul_foreign_find_json(struct consul *c, const char *id);

/* consul_kv.c */
void consul_kv_route(struct hreq *r, const char *rest);
/* Re-read the lock state of entries from the segment; true if any changed. */
bool consul_kv_sync_all(struct consul *c);
uint64_t consul_kv_view(struct consul *c, enum cw_kind kind, const char *key);
/* Answer a KV GET (again, for a blocking query that woke). */
void consul_kv_get(struct hreq *r, const char *key, bool from_wait);
void consul_kv_session_ended(struct consul *c, struct csession *cs);
void consul_kv_free(struct consul *c);
void consul_kv_prefix_keys(struct consul *c, const char *prefix,
			   void (*cb)(struct consul *c, const char *key));

/* consul_watch.c */
int consul_watch_start(struct consul *c);
void consul_watch_stop(struct consul *c);
/* Recompute the watched keys from the blocking queries. */
void consul_watch_update(struct consul *c);

/* ---- the face's hooks (consul_server.c, consul_sessions.c) ------------------ */

struct MHD_Connection;
/* The listener in h->d[@daemon] serves the Consul API: 0 or -errno. */
int consul_start(struct http *h, unsigned daemon);
void consul_stop(struct http *h); /* end waits, sessions, data */
void consul_free(struct http *h); /* after the daemons stopped */
/* Route, authenticate and answer a Consul request (after the Host and
 * Origin checks every listener makes). */
void consul_dispatch(struct hreq *r);
int consul_send_answer(struct hreq *r); /* an enum MHD_Result */
void consul_request_done(struct hreq *r);
void consul_doorbell(struct http *h);
void consul_timer(struct http *h, uint32_t a, uint32_t b);
void consul_drain(struct http *h);
/* The client of the blocking query in @slot hung up. */
void consul_hangup(struct http *h, uint32_t slot);
void consul_session_ended(struct broker *b, uint32_t slot);

#endif
