/* SPDX-License-Identifier: MIT */
/*
 * The HTTP engine every HTTP-speaking face uses (the dflockd HTTP API, the
 * Consul-compatible API, the web view): libmicrohttpd driven from the
 * broker's event loop, the Host and Origin checks, CORS headers, connection
 * counting and the drain, request bodies, answers and suspended requests.
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

/* Serve @client on the listening socket @fd (ours to close from now): the
 * daemon's index, or -errno. Connection caps and timeouts are the HTTP
 * options' (--http-max-connections ...). */
int http_engine_listen(struct http *h, int fd, const struct http_client *client);
/* @client takes the URLs it claims on the listeners that share paths. */
void http_engine_path(struct http *h, const struct http_client *client);
/* Is @fd a TCP socket (not AF_UNIX)? */
bool http_engine_is_tcp(int fd);

/* End of the loop's turn (face.h, deferred): run the daemons asked to run
 * (true: they ran), or (@run false) say whether that is wanted. */
bool http_engine_deferred(struct http *h, bool run);
/* Run every daemon (connection timeouts, answers resumed). */
void http_engine_run_all(struct http *h);
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

/* Authorization: Bearer @token, as dflockd checks it: constant time in the
 * token's length. */
bool http_bearer_ok(const char *header, const char *token);

#endif
