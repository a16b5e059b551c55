/* SPDX-License-Identifier: MIT */
/*
 * Helpers the tests of the network listeners share (HTTP, Consul, TCP,
 * metrics, `shmlock status`): a free loopback port for a broker to listen
 * on, formatted strings for URLs, bodies and flags, and one HTTP client.
 */
#ifndef SHMLOCK_TEST_NET_FIXTURE_H
#define SHMLOCK_TEST_NET_FIXTURE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "harness.h"

/* A free loopback TCP port below the kernel's ephemeral range (so that no
 * outgoing connection takes it before the server binds it), a different one
 * at each call. Fails the test when none can be had. */
int free_port(void);

/* ---- TCP on loopback ---------------------------------------------------- */

/* A listening socket on 127.0.0.1 (a port the kernel picks, in *@port), as
 * a service manager holds one for a socket-activated server. Fails the
 * test when it cannot be had. */
int tcp_listener(int *port);
/* A connection to 127.0.0.1:@port: -1 (errno set) when refused. */
int tcp_try_connect(int port);
/* The same, failing the test when it cannot connect. */
int tcp_connect(int port);

/* ---- Unix sockets --------------------------------------------------------- */

/* A connection of @type (SOCK_SEQPACKET or SOCK_STREAM, with SOCK_NONBLOCK
 * if asked; close-on-exec always) to the socket at @path: -1 (errno set)
 * when refused. A path too long for a socket fails the test. */
int unix_try_connect(const char *path, int type);
/* The same, failing the test when it cannot connect. */
int unix_connect(const char *path, int type);
/* Does something accept connections of @type at @path now? */
bool unix_answers(const char *path, int type);
/* A socket of @type bound at @path, listening with @backlog, as a service
 * manager holds one; fails the test when it cannot be had. */
int unix_listener(const char *path, int type, int backlog);

/* A formatted string on the heap (tests are short-lived children: callers
 * may leave it). Fails the test when out of memory. */
char *strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- an HTTP client (libcurl) ------------------------------------------- */

struct http_req {
	const char *method;	    /* NULL: GET */
	const char *url;	    /* http://127.0.0.1:PORT/... or http://localhost/... */
	const char *unix_socket;    /* connect there instead of TCP; NULL: TCP */
	const char *const *headers; /* "Name: value" lines, NULL-terminated; NULL: none */
	const char *body;	    /* NULL: none */
	long timeout_ms;	    /* 0: 30 s */
};

struct http_reply {
	long status; /* 0 when nothing answered */
	char *body;  /* NUL-terminated (also when empty), malloc'ed */
	size_t len;
	char *headers; /* the header lines as received, malloc'ed */
};

/* Send @req and fill @out (free it with http_reply_free()). Returns the
 * CURLcode: 0 when an answer came (whatever its status). Fails the test
 * only when out of memory. Safe on several threads once one call has
 * returned (libcurl's global set-up is done by the first). */
int http_do(const struct http_req *req, struct http_reply *out);
void http_reply_free(struct http_reply *r);
/* Send @req; its body into @out (@size bytes, cut there; empty when none
 * came). Returns the HTTP status, 0 when nothing answered. */
long http_fetch(const struct http_req *req, char *out, size_t size);
/* Header @name's value in @r (case-insensitive name, without the line's
 * CR LF) into @buf; false when absent. */
bool http_reply_header(const struct http_reply *r, const char *name, char *buf, size_t size);
/* What http_do()'s result @rc means, in words; and whether it says that
 * nothing listens there (yet). */
const char *http_error_text(int rc);
bool http_refused(int rc);

/* ---- HTTP calls: one at a time, or many in flight at once --------------- */

/* Where an API answers: a Unix socket (unix_path set) or TCP. */
struct http_api {
	char unix_path[128];
	char base[64];	    /* URL prefix: http://localhost or http://127.0.0.1:PORT */
	const char *authz;  /* Authorization header value, or NULL */
	const char *hdr[3]; /* more request headers ("Name: value"), or NULL */
};

/* One request and, once done, its answer. */
struct http_call {
	void *e;  /* its libcurl easy handle */
	bool own; /* e is this call's (in flight); else the shared synchronous handle */
	void *hdrs;
	char what[160]; /* "METHOD path (unix|tcp)", for messages */
	char *out;	/* the body, NUL-terminated, or NULL */
	size_t len;
	char allow[128];
	char ctype[128];
	char acao[128]; /* Access-Control-Allow-Origin */
	char acam[128]; /* Access-Control-Allow-Methods */
	char www[128];	/* WWW-Authenticate */
	char retry[32]; /* Retry-After */
	long status;	/* 0: no answer (connection failed) */
	int rc;		/* the CURLcode */
	json_t *json;	/* the body, when it is JSON */
	bool done;
	int id; /* the test's */
	uint64_t done_ms;
	int fd; /* its socket (calls in flight only), -1 before it connects */
};

/* METHOD @path at @a with the extra header line @hdr (NULL: none) and
 * @body (JSON; NULL: none), on one kept-alive connection shared by these
 * calls (20 s timeout); done when it returns. */
struct http_call *http_call(const struct http_api *a, const char *method, const char *path,
			    const char *hdr, const char *body);
/* The same started on a connection of its own with no timeout (a long
 * poll); http_pump() drives it. */
struct http_call *http_call_start(const struct http_api *a, const char *method, const char *path,
				  const char *hdr, const char *body);
/* Free @c (NULL: nothing), abandoning it if still in flight. */
void http_call_free(struct http_call *c);
/* The client goes away: @c's transfer is abandoned and its connection
 * closed; fails the test if it was answered already. */
void http_hang_up(struct http_call *c);
/* Close the shared kept-alive connection (it counts as a connection of
 * the server's, and holds a draining server open). */
void http_close_kept_alive(void);
/* Run the calls in flight once, then wait up to @ms for socket activity. */
void http_pump(int ms);
/* The calls in flight that completed since http_done_reset(), in the order
 * they completed. */
size_t http_done_count(void);
struct http_call *http_done_at(size_t i);
void http_done_reset(void);
/* What became of @c: "answered", or libcurl's words for the failure. */
const char *http_call_error(const struct http_call *c);

/* Drive the calls in flight until @cond holds or @timeout_ms passes. */
#define HTTP_PUMP_UNTIL(cond, timeout_ms) WAIT_FOR((http_pump(1), (cond)), (timeout_ms))

/* ---- peers for the network module's tests (it_net_*.c) ------------------ */

/* A TCP connection to 127.0.0.1:@port from the loopback address @src
 * ("127.0.0.2"; NULL: any), blocking; -1 when refused. */
int tcp_connect_from(const char *src, int port);
/* Has the peer closed @fd (EOF or reset seen now, without waiting)? */
bool tcp_peer_closed(int fd);
/* In a forked child: become user and group nobody (65534), with no
 * supplementary groups; _exit(99) when that fails. */
void become_nobody(void);

#endif
