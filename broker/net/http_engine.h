/* SPDX-License-Identifier: MIT */
/*
 * The HTTP engine every HTTP-speaking face uses (the dflockd HTTP API, the
 * Consul-compatible API, the web view): libmicrohttpd driven from the
 * broker's event loop, the network module's admission on every connection
 * (who the peer is, caps per peer, the deadline for a whole request head:
 * net.h), the Host and Origin checks, CORS headers, connection counting and
 * the drain, request bodies, answers and suspended requests; and who may
 * make a request, with refusals held back (http_admit.c).
 *
 * A face is a client of the engine: it gives the engine a listening socket
 * and a struct http_client, and the engine hands it the requests that arrive
 * there (after the Host and Origin checks), and tells it when each is over.
 * A client may also take a path on the listeners of another (the web view's
 * /ui on the HTTP API's). The engine never names a face.
 *
 * The request and server records (struct hreq, struct http) are still
 * defined in faces/http/http_int.h, which every client already includes.
 */
#ifndef SHMLOCKD_HTTP_ENGINE_H
#define SHMLOCKD_HTTP_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/face.h"
#include "faces/http/http_int.h"

struct http_client {
	/* Answer @r (hreq_reply_*(), hreq_error()) or suspend it. Called once
	 * its body is in, after the Host and Origin checks. */
	void (*dispatch)(struct hreq *r);
	/* Queue @r's answer: an enum MHD_Result. NULL: the engine's (JSON or
	 * r->ctype, CORS, Allow ...). */
	int (*send_answer)(struct hreq *r);
	/* @r is over: answered (@completed: sent in full) or its connection
	 * gone. NULL: nothing to forget. */
	void (*request_done)(struct hreq *r, bool completed);
	/* After a run of a daemon of this client: work its requests left for
	 * after the run. */
	void (*after_run)(struct http *h);
	/* For a client that takes a path on another's listeners: is @url its? */
	bool (*claims)(const char *url);
	/* After the daemons stopped (nothing refers to the client's requests
	 * any more): free what is left. */
	void (*free)(struct http *h);
	/* Its requests keep their URL (r->url); others have it only while
	 * routed. */
	bool wants_url;
	/* Other clients may take paths on its listeners (http_engine_path()). */
	bool shares_paths;
};

/* Make @h the engine's record of @b (zeroed by the caller): its caps and
 * rate limits from the HTTP options (--http-max-connections ...); its own
 * timers are @owner's, which passes them back (http_admit_due()). */
void http_engine_init(struct http *h, struct broker *b, const struct face *owner);
/* Serve @client on the listening socket @fd (ours to close from now): the
 * daemon's index, or -errno. A TCP listener off loopback without a token
 * is refused (-EPERM, logged naming @what) unless --http-insecure-no-auth:
 * nothing would name its peers. */
int http_engine_listen(struct http *h, int fd, const struct http_client *client, const char *what);
/* @client takes the URLs it claims on the listeners that share paths. */
void http_engine_path(struct http *h, const struct http_client *client);
/* Is @fd a TCP socket (not AF_UNIX)? */
bool http_engine_is_tcp(int fd);

/* End of the loop's turn (face.h, deferred): run the daemons asked to run
 * (true: they ran), or (@run false) say whether that is wanted. */
bool http_engine_deferred(struct http *h, bool run);
/* Run every daemon (connection timeouts, answers resumed). */
void http_engine_run_all(struct http *h);
/* The periodic tick: close connections whose request head is overdue, run
 * every daemon, forget idle peers' records. */
void http_engine_tick(struct http *h);
/* SIGTERM: stop taking new work (h->draining), and say whether every
 * connection is gone or the drain's bound passed. */
bool http_engine_drain(struct http *h);
/* Stop the daemons, close the listeners, and let the clients free. */
void http_engine_close(struct http *h);

/* Watch @r's connection for a hang-up (libmicrohttpd does not poll a
 * suspended connection): @fn(b, fd, events, @ctx). The fd watched, or -1
 * (none: the request's deadline still ends it). */
int http_engine_watch_hangup(struct hreq *r, loop_fn *fn, void *ctx);

/* Sessions the HTTP API and the Consul API may hold at once, each counting
 * its own (--http-max-sessions, else half the segment's session table). */
uint32_t http_engine_sessions_cap(const struct http *h);
/* The HTTP API's sessions open now: the network faces' share of the session
 * table that the TCP protocol's connections get what is left of. */
uint32_t http_engine_sessions_count(const struct http *h);

/* ---- who may make a request (http_admit.c) ----------------------------- */

/* dflockd's rule: the request may pass (an open route, Authorization:
 * Bearer with the token, a user the control socket admits, or no token
 * needed: docs/security.md); else it is answered 401 (after a delay) or 403,
 * and false. */
bool http_admit_bearer(struct hreq *r);
/* Admitted by uid alone (no token): refuse what a web page could have made
 * the user's browser send. True when @r may pass; else it is answered. */
bool http_admit_web_ok(struct hreq *r);
/* Hold @r's answer (already set) back: NET_AUTH_DELAY_NS, one per delay
 * per peer. */
void http_admit_delay(struct hreq *r);
/* The owner's TIMER_HTTP_DELAY (@slot, @gen) is due: answer. */
void http_admit_due(struct http *h, uint32_t slot, uint32_t gen);
/* Send every held answer now (shutdown). */
void http_admit_flush(struct http *h);
/* @r is over: forget its held answer, if any. */
void http_admit_forget(struct hreq *r);

#endif
