/* SPDX-License-Identifier: MIT */
/* The HTTP API's internal interfaces (faces/http/), and the request and
 * server records the HTTP engine (net/http_engine.c) and its other clients,
 * the Consul API and the web view, share. */
#ifndef SHMLOCKD_HTTP_INT_H
#define SHMLOCKD_HTTP_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <microhttpd.h>

#include "core/broker.h"
#include "http.h"
#include "net/dflockd.h"
#include "net/net.h"

#define HTTP_BODY_MAX (1u << 20)
/* --http-listen, --http-socket, socket-activated; + the Consul API's two */
#define HTTP_MAX_DAEMONS 5
/* The HTTP face's timer kinds (face_schedule(), http_timer()). */
enum http_timer_kind {
	TIMER_HTTP_TICK = 1,   /* periodic: run libmicrohttpd's timeouts, reap */
	TIMER_HTTP_WAIT = 2,   /* a = waiter slot, b = its generation */
	TIMER_HTTP_RUN = 3,    /* now: run libmicrohttpd (http_server.c run_soon()) */
	TIMER_HTTP_DELAY = 4,  /* a = delayed answer slot, b = its generation (http_admit.c) */
	TIMER_CONSUL_WAIT = 5, /* a Consul blocking query's wait ran out */
};

/* ---- routes (http_routes.c) --------------------------------------------- */

enum http_route {
	R_NONE = 0,
	R_HEALTH,
	R_READY,
	R_METRICS,
	R_STATS,
	R_OPENAPI,
	R_SESSIONS,
	R_SESSION,
	R_SESSION_PING,
	R_LOCK,
	R_LOCK_RELEASE,
	R_LOCK_RENEW,
	R_LOCK_ENQUEUE,
	R_LOCK_WAIT,
	R_SEM,
	R_SEM_RELEASE,
	R_SEM_RENEW,
	R_SEM_ENQUEUE,
	R_SEM_WAIT,
	R_SIGNAL,
	R_COUNT
};

enum http_method { M_GET, M_POST, M_DELETE, M_OPTIONS, M_OTHER, M_COUNT };

struct route_def {
	enum http_route id;
	enum http_method method;
	const char *pattern; /* "{key}" / "{id}": one path segment */
	bool open;	     /* no Authorization needed */
};
extern const struct route_def http_routes[];
extern const size_t http_nroutes;

struct route_match {
	enum http_route id;	       /* R_NONE: no route of this method */
	bool path_known;	       /* some route has this path (then 405) */
	char allow[64];		       /* methods of the routes with this path */
	char param[LOCAL_KEY_MAX + 1]; /* the decoded {key} or {id} */
	size_t param_len;
	bool bad_param;	 /* malformed key (400) */
	bool open_path;	 /* the path of an open route, any method: no token */
	bool probe_path; /* /health or /ready, any method: no rate limit */
};

enum http_method http_method_of(const char *m);
const char *http_method_name(enum http_method m);
void http_route_match(const char *path, enum http_method m, struct route_match *out);
const char *http_route_name(enum http_route r);
bool http_route_open(enum http_route r);

/* ---- per-request state (http_server.c) ---------------------------------- */

struct hsession;
struct http_client;

struct hreq {
	struct http *h;
	/* Its listener's client (net/http_engine.h), and a client that took
	 * its path on that listener (the web view's /ui), else NULL. */
	const struct http_client *client, *sub;
	struct MHD_Connection *conn;
	uint64_t start_ns;
	enum http_method method;
	char verb[17]; /* the method as sent */
	struct route_match rt;
	char *body;
	size_t body_len, body_cap;
	bool body_too_large;
	char ip[64];
	bool tcp;      /* came over TCP (Host is checked), not the Unix socket */
	char peer[64]; /* what rate limits and caps count by (struct net_peer.key) */
	bool uid_ok;   /* the kernel names a user the control socket admits */
	/* The answer, kept while the connection is suspended. */
	int status;
	char *reply;	   /* JSON text (malloc) or NULL */
	const char *allow; /* 405: the Allow header */
	bool suspended;
	bool answered;
	/* A session the request holds in flight (not reaped meanwhile). */
	struct hsession *sess;
	/* A waiting acquire: index in h->waiters, else -1. */
	int32_t waiter;
	/* A suspended answer that waits out a delay (a 401), else -1. */
	int32_t delayed;
	/* The token of a new grant of a queued request this answer carries,
	 * else 0: released if the answer never reaches the client
	 * (http_grant_undelivered()). */
	uint64_t grant_tok;
	/* The URL, kept for clients that want it (the Consul API, the web
	 * view), and the Consul API's request state (consul_server.c). */
	char *url;
	void *cx;
	/* The web view (ui_server.c): the answer's Content-Type when not
	 * JSON from the API, and a long poll of the view in flight. */
	const char *ctype;
	bool ui_waiting;
};

/* Fill @r's answer; the request is answered when the handler returns (or
 * when it is resumed, if it was suspended). */
void hreq_reply_json(struct hreq *r, int status, json_t *body /* stolen; NULL: no body */);
/* The same with the JSON text already made (@len bytes, copied). */
void hreq_reply_text(struct hreq *r, int status, const char *text, size_t len);
void hreq_error(struct hreq *r, int status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Map a liblocal error to the dflockd error table. */
void hreq_local_error(struct hreq *r, int err);
void hreq_suspend(struct hreq *r);
void hreq_resume(struct hreq *r);

/* POST /v1/signals/{channel} (http_signals.c). */
void http_signal_publish(struct hreq *r);

/* Parse the body as one JSON object (empty body: {}); 400 on failure
 * (http_json.c). */
json_t *hreq_json(struct hreq *r);

/* ---- bodies of the simplest form (http_body.c) ----------------------------- */

/* A field of a lock route's body: a non-negative integer, or a string. */
struct hbody_field {
	const char *name;
	bool string;
	bool seen; /* out: present */
	long long num;
	char str[64];
};

/*
 * 1: @body is a JSON object of the simplest form (see http_body.c) whose
 * members are among @f, each at most once: their values are in @f. 0: it
 * is not (it may still be valid JSON): parse it with jansson.
 */
int http_body_simple(const char *body, size_t len, struct hbody_field *f, unsigned nf);

/* ---- sessions (http_sessions.c) ----------------------------------------- */

/* An /enqueue of the session whose /wait has not come yet (dflockd's
 * two-phase record): its lease, and the token if granted at once. */
struct henq {
	char key[LOCAL_KEY_MAX + 1];
	uint32_t lease_s;
	uint64_t tok; /* 0: queued */
};

struct hsession {
	local_session *ls;
	struct henq *enqs;
	uint32_t nenqs;
	uint32_t slot, gen;
	uint64_t last_seen_ns;
	uint32_t inflight;
	uint32_t waiting; /* suspended waits */
	char ip[64];
};

int hsessions_init(struct http *h);
void hsessions_fini(struct http *h);
void http_sessions_create(struct hreq *r);
void http_sessions_delete(struct hreq *r);
void http_sessions_ping(struct hreq *r);
/* The session named by X-Dflockd-Session / X-Shmlock-Session, marked in
 * flight for @r; NULL after answering 400 or 410. */
struct hsession *http_session_of(struct hreq *r);
void http_session_done(struct hreq *r);
void http_sessions_reap(struct http *h);
/* Close every session (shutdown). */
void http_sessions_close_all(struct http *h);

/* ---- locks and semaphores (http_locks.c) -------------------------------- */

struct hwaiter {
	struct hreq *req; /* NULL: free */
	struct hsession *sess;
	uint32_t gen;
	int fd; /* the connection's socket, watched for hang-up */
	uint64_t deadline_ns;
	uint32_t lease_s;
	bool two_phase; /* a /wait: the lease restarts at the answer */
	bool sem;
	char key[LOCAL_KEY_MAX + 1];
	/* Its lock word and that word's value while it waits (NULL:
	 * unknown), so that a doorbell skips it with one load. */
	_Atomic uint64_t *word;
	uint64_t waiting;
};

void http_lock_op(struct hreq *r);
void http_waiters_poll(struct http *h);
void http_waiter_due(struct http *h, uint32_t slot, uint32_t gen);
void http_waiter_hangup(struct http *h, uint32_t slot);
/* End the waits of @sess (or of everyone, NULL) with @status / @code. */
void http_waiters_end(struct http *h, struct hsession *sess, int status, const char *code);
/* The request is over (answered or dropped): forget its wait if any. */
void http_waiter_drop(struct hreq *r);
/* @r's answer carried a grant that did not reach its client: release it. */
void http_grant_undelivered(struct hreq *r);
/* dflockd's token shape: 16 hex of fencing token, 16 of salt (tcp.h). */
void http_format_token(const struct http *h, const struct hsession *hs, uint64_t fence,
		       char out[33]);
void http_token_key_init(struct http *h);

/* ---- stats and metrics (http_stats.c) ----------------------------------- */

void http_stats(struct hreq *r);
void http_metrics(struct hreq *r);
void http_metrics_note(struct http *h, enum http_method m, enum http_route rt, int status,
		       uint64_t ns);

/* ---- the whole server --------------------------------------------------- */

#define HTTP_STATUS_SLOTS 13
struct http_counters {
	/* requests by method, route and status class index */
	uint64_t requests[M_COUNT][R_COUNT][HTTP_STATUS_SLOTS];
	uint64_t duration_bucket[R_COUNT][12];
	double duration_sum[R_COUNT];
	uint64_t duration_count[R_COUNT];
	uint64_t grants, timeouts, canceled, reaped;
};

struct http {
	struct broker *b;
	/* The engine (net/http_engine.c): daemons, their listeners and
	 * clients, and the client that takes paths on shared listeners. */
	struct MHD_Daemon *d[HTTP_MAX_DAEMONS];
	int listen_fd[HTTP_MAX_DAEMONS];
	const struct http_client *client[HTTP_MAX_DAEMONS];
	const struct http_client *path_client;
	/* Every answered request, for the HTTP API's counters. */
	void (*note_request)(struct hreq *r, uint64_t ns);
	/* The face that made this record: the engine's own timers (a held
	 * answer's, TIMER_HTTP_DELAY) are its, and it passes them back. */
	const struct face *face;
	bool unlink_unix;
	unsigned nd;
	bool draining;
	bool run_pending; /* run the daemons at the end of the loop's turn */
	uint64_t drain_deadline_ns;
	uint32_t connections;
	/* sessions, indexed by segment slot */
	struct hsession **by_slot;
	uint32_t nsessions;
	local_session *observer; /* for stats: no slot of its own */
	/* waiters */
	struct hwaiter *waiters;
	uint32_t nwaiters, cap_waiters, active_waiters;
	/* Answers held back (a refusal's delay, net/http_admit.c), and their
	 * generations. */
	struct hreq **delayed;
	uint32_t *delayed_gen;
	uint32_t ndelayed;
	/* Keys the token salts from (http_format_token()). */
	uint64_t token_key[2];
	/* A request of ours released something: our own waiters may have
	 * been granted (without waiting for the doorbell thread). */
	bool maybe_granted;
	/* Per-peer rate limits and session counts (broker/net/net_rate.c). */
	struct net_rates rates;
	/* Connection caps and head deadlines over all listeners (net_conns.c). */
	struct net_pool pool;
	struct http_counters c;
	struct consul *consul; /* consul_*.c; NULL when off */
	struct ui *ui;	       /* the web view's long polls (ui_server.c); NULL until used */
};

#endif
