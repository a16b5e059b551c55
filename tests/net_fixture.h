/* SPDX-License-Identifier: MIT */
/*
 * Helpers the tests of the network listeners share (HTTP, Consul, TCP,
 * metrics, `shmlock status`): a free loopback port for a broker to listen
 * on, formatted strings for URLs, bodies and flags, and one HTTP client.
 */
#ifndef SHMLOCK_TEST_NET_FIXTURE_H
#define SHMLOCK_TEST_NET_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>

/* A free loopback TCP port below the kernel's ephemeral range (so that no
 * outgoing connection takes it before the server binds it), a different one
 * at each call. Fails the test when none can be had. */
int free_port(void);

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
 * only when out of memory. */
int http_do(const struct http_req *req, struct http_reply *out);
void http_reply_free(struct http_reply *r);
/* Header @name's value in @r (case-insensitive name, without the line's
 * CR LF) into @buf; false when absent. */
bool http_reply_header(const struct http_reply *r, const char *name, char *buf, size_t size);

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
