/* SPDX-License-Identifier: MIT */
/*
 * The network module every listener shares (HTTP, Consul, TCP, metrics and
 * the web view): who a peer is and whether it is admitted, the one token
 * check, connection caps overall and per peer with deadlines for a request
 * head or an authentication, the delay after a failed authentication, rate
 * limits, and the checks that keep web pages out (Origin, Host, requests a
 * page could send without a CORS preflight). The rules are in
 * docs/security.md. Everything here runs on the event loop thread.
 */
#ifndef SHMLOCKD_NET_H
#define SHMLOCKD_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct broker;

/* A failed authentication is answered this long after it came (the answer
 * is held by a timer; the loop goes on serving others). */
#define NET_AUTH_DELAY_NS 250000000ull

/* ---- the token (net_token.c) -------------------------------------------- */

/* The configured token (--auth-token, --auth-token-file); "" when none. The
 * one place any face reads it. */
const char *net_token(const struct broker *b);
/* @got equals the configured token, in time that depends only on the
 * token's length. False when no token is configured. */
bool net_token_ok(const struct broker *b, const char *got, size_t got_len);
/* An "Authorization: Bearer TOKEN" value carries the token (the scheme in
 * any case, blanks around the credential dropped, as RFC 7235 and dflockd). */
bool net_bearer_ok(const struct broker *b, const char *header);
/* The comparison itself: @a (@alen bytes) equals @want, constant time in
 * strlen(@want). */
bool net_const_eq(const char *want, const char *a, size_t alen);

/* ---- peers (net_peer.c) ------------------------------------------------- */

struct net_peer {
	bool tcp;	   /* AF_INET/AF_INET6 (else a Unix socket) */
	bool loopback;	   /* 127/8, ::1 or ::ffff:127/104 */
	bool uid_known;	   /* the kernel said who owns the peer's socket */
	bool uid_admitted; /* ... and the Unix socket would admit that user */
	uid_t uid;
	char addr[64]; /* the address as text; "local" on a Unix socket */
	/* What caps and rate limits count by: "uid:N" for a local peer whose
	 * owner is known (any 127/8 source is the same peer), else the
	 * address. */
	char key[64];
};

/* Who is at the other end of the connected socket @fd: the address, and
 * for a loopback TCP peer the owner of its socket (NETLINK_SOCK_DIAG,
 * matched on the exact 4-tuple), for a Unix peer SO_PEERCRED; and whether
 * the control socket would admit that user (net_uid_admits()). */
void net_peer_of(const struct broker *b, int fd, struct net_peer *p);
/* The owner's uid of the TCP socket at @peer connected to @local (both
 * AF_INET or AF_INET6), from the kernel. 0 or a negative errno. */
int net_sock_uid(const void *peer, const void *local, uid_t *uid);
/* Would the control socket admit user @uid: may it search the directories
 * on the socket's path and write the socket file (root always), then
 * --allow-uid / --allow-gid (access.c)? */
bool net_uid_admits(const struct broker *b, uid_t uid);
/* Is the socket @fd bound to a loopback address (a listener only local
 * users reach)? */
bool net_fd_loopback(int fd);

/* ---- caps and deadlines (net_conns.c) ----------------------------------- */

struct net_conn {
	struct net_conn *prev, *next;
	int fd;
	uint64_t since_ns; /* since when its head (or authentication) is awaited */
	bool pending;	   /* head incomplete / not authenticated yet */
	bool doomed;	   /* shut down, waiting for its owner to close it */
	char key[64];	   /* its peer (struct net_peer.key); "": no cap per peer */
	void *owner;	   /* the face's own record of it */
};

struct net_pool {
	struct net_conn *head, *tail;  /* oldest first */
	uint32_t live;		       /* not doomed */
	uint32_t max, max_per_peer;    /* 0: no cap */
	uint32_t max_pending;	       /* pending at once; 0: no cap of its own */
	uint32_t max_pending_per_peer; /* ... from one peer; 0: no cap of its own */
	uint64_t deadline_ns;	       /* for a pending one; 0: none */
};

/*
 * Take @c (its fd, key and owner set, pending) into @p. When a cap is
 * reached — overall, for its peer, or for pending connections (overall or
 * of its peer) — the oldest pending connection that counts against that
 * cap is doomed to make room:
 * pending connections never keep out one that has sent its request or
 * authenticated. Returns the doomed connection (the caller ends it; it
 * stays in the pool until net_pool_del()), @c itself when nothing could be
 * doomed (refuse it), or NULL when @c fits.
 */
struct net_conn *net_pool_add(struct net_pool *p, struct net_conn *c, uint64_t now_ns);
void net_pool_del(struct net_pool *p, struct net_conn *c);
/* @c's head came (or it authenticated): no deadline, not evictable. */
void net_pool_ready(struct net_pool *p, struct net_conn *c);
/* @c waits for a new head (a kept-alive HTTP connection between requests). */
void net_pool_pending(struct net_pool *p, struct net_conn *c, uint64_t now_ns);
/* The oldest pending connection past the deadline (it is doomed), or NULL. */
struct net_conn *net_pool_overdue(struct net_pool *p, uint64_t now_ns);
/* Connections from @key that are not doomed. */
uint32_t net_pool_count(const struct net_pool *p, const char *key);
/* Doom @c: shut its socket down both ways, so that its owner sees the end. */
void net_conn_doom(struct net_pool *p, struct net_conn *c);

/* ---- rate limits and per-peer records (net_rate.c) ---------------------- */

struct net_ipstat {
	char ip[64];
	uint32_t sessions; /* open HTTP / Consul sessions of this peer */
	double tokens;
	uint64_t refill_ns;
	uint64_t fail_next_ns; /* its next failed authentication is answered then */
	struct net_ipstat *next;
};

struct net_rates {
	struct net_ipstat *b[256];
	uint32_t n;
	uint32_t rate;	/* requests a second per peer; 0: none */
	uint32_t burst; /* 0: the rate */
};

/* The record of @key, created on demand; NULL when out of memory. */
struct net_ipstat *net_rate_peer(struct net_rates *t, const char *key);
/* A request from @key may proceed (a token was taken from its bucket). */
bool net_rate_allow(struct net_rates *t, const char *key);
/* When to answer a failed authentication of @key that came at @now_ns:
 * NET_AUTH_DELAY_NS after it, and after the one before it from the same
 * peer, so that a peer guessing over many connections at once still gets
 * one answer per delay. */
uint64_t net_auth_fail_at(struct net_rates *t, const char *key, uint64_t now_ns);
/* Drop the records with nothing to remember (idle for a minute). */
void net_rate_gc(struct net_rates *t);
void net_rate_free(struct net_rates *t);

/* ---- web pages (net_web.c) ---------------------------------------------- */

/* @origin is in the comma-separated @list; "*" matches only when @any. */
bool net_origin_in(const char *list, const char *origin, bool any);
/*
 * Could a web page make a browser send this request without a CORS
 * preflight, and does it change state? A "simple" request (Fetch standard):
 * method POST with no Content-Type or a CORS-safelisted one
 * (application/x-www-form-urlencoded, multipart/form-data, text/plain,
 * parameters ignored). GET and HEAD are simple too but read only; every
 * other method (PUT, DELETE, ...) is preflighted.
 */
bool net_simple_write(const char *method, const char *content_type);
/* Is @host (a Host header: name[:port] or [v6]:port) one served on TCP:
 * localhost, a loopback literal, the address @fd is connected to, or one
 * of the comma-separated @allowed names? */
bool net_host_ok(const char *host, int fd, const char *allowed);

/* ---- listeners (net_listen.c) ---- */

/* 1 when every address [HOST:]PORT @spec binds to is a loopback one. */
int listen_spec_loopback(const char *spec);
/* A listening, non-blocking TCP socket on [HOST:]PORT. */
int listen_tcp_spec(const char *spec, const char *flag, const char *what);
/* The socket-activated stream socket named @name ("http", "tcp"), made
 * non-blocking, or -1. */
int activated_stream_fd(const char *name);
/* A listener's connection cap: @configured, or when 0 a quarter of the fd
 * limit in force, kept within 16..16384. */
unsigned listen_max_connections(unsigned configured);

#endif
