/* SPDX-License-Identifier: MIT */
/*
 * The opt-in HTTP API (dflockd's REST contract), as the rest of the broker
 * sees it. Everything runs on the broker's event loop thread: libmicrohttpd
 * is driven through its epoll fd, long polls are suspended connections, and
 * a grant to an HTTP waiter rings the segment's doorbell (see http_locks.c).
 */
#ifndef SHMLOCKD_HTTP_H
#define SHMLOCKD_HTTP_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct broker;

struct http_opts {
	char listen[128];	      /* HOST:PORT or :PORT; "" when off */
	char unix_path[108];	      /* HTTP over a Unix socket; "" when off */
	uint32_t idle_timeout_s;      /* sessions reaped after 2x this idle */
	uint32_t default_lease_s;     /* lease_ttl_s omitted or 0 */
	char auth_token[256];	      /* "" when off */
	uint32_t max_sessions;	      /* 0: only the segment's capacity */
	uint32_t max_sessions_per_ip; /* 0: no limit */
	uint32_t rate_per_ip;	      /* requests a second; 0: no limit */
	uint32_t rate_burst;
	char cors_origins[512]; /* comma-separated; "*" any; "" off */
	/* Safe defaults (docs/http-api.md, "Who can reach the API"). */
	bool insecure_no_auth;		 /* TCP without a token is allowed */
	char allowed_hosts[512];	 /* more Host names accepted on TCP */
	uint32_t max_connections;	 /* 0: from the fd limit */
	uint32_t max_connections_per_ip; /* 0: half of max_connections (TCP) */
	uint32_t connection_timeout_s;	 /* idle or unfinished request */
	/* shmlock's own answers where they say more than dflockd's (stats
	 * extras, 409 lease_expired/limit_mismatch on release and renew,
	 * strict bodies); off: dflockd's exactly. */
	bool extensions;
	/* Admit network clients by the token only, never by the uid the
	 * kernel names (broker/net/net_peer.c). */
	bool token_only;
};

/* Option ids for getopt_long: main.c appends http_long_opts to its table. */
enum {
	OPT_HTTP_FIRST = 512,
	OPT_HTTP_LISTEN = OPT_HTTP_FIRST,
	OPT_HTTP_SOCKET,
	OPT_HTTP_IDLE,
	OPT_HTTP_LEASE,
	OPT_HTTP_AUTH,
	OPT_HTTP_AUTH_FILE,
	OPT_HTTP_MAX_SESSIONS,
	OPT_HTTP_MAX_PER_IP,
	OPT_HTTP_RATE,
	OPT_HTTP_BURST,
	OPT_HTTP_CORS,
	OPT_HTTP_INSECURE,
	OPT_HTTP_HOSTS,
	OPT_HTTP_MAX_CONNS,
	OPT_HTTP_MAX_CONNS_PER_IP,
	OPT_HTTP_CONN_TIMEOUT,
	OPT_HTTP_EXTENSIONS,
	OPT_HTTP_TOKEN_ONLY,
	OPT_HTTP_LAST,
};
#define HTTP_NOPTS (OPT_HTTP_LAST - OPT_HTTP_FIRST)
extern const struct option http_long_opts[HTTP_NOPTS];
extern const char http_usage_text[];

void http_opts_default(struct http_opts *o);
/* Parse one HTTP option; 0 or -1 (message printed). */
int http_opt_parse(struct http_opts *o, int opt, const char *arg);
bool http_enabled(const struct http_opts *o);

/* Start the listeners (bound, or the socket-activated fd named "http"). */
int http_start(struct broker *b);
/* Stop at once: close every HTTP session, free everything. */
void http_stop(struct broker *b);

/* The face the core knows (core/face.h); its hooks follow. */
struct face;
extern const struct face http_face;
void http_doorbell(struct broker *b); /* the doorbell rang: poll the waiters */
void http_timer(struct broker *b, uint32_t kind, uint32_t a, uint32_t b2);
/* Session @slot ended (closed, destroyed by an operator): end its requests. */
void http_session_ended(struct broker *b, uint32_t slot);
/* SIGTERM: /ready turns 503, new sessions are refused, waits end. Returns
 * true once nothing is left in flight (the loop may stop). */
bool http_draining(struct broker *b);

#endif
