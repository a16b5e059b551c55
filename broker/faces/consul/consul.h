/* SPDX-License-Identifier: MIT */
/*
 * The opt-in Consul-compatible HTTP API (docs/consul-api.md): sessions, KV
 * with acquire/release locks, blocking queries. It is one more listener of
 * the HTTP server (broker/faces/http/http_server.c): same libmicrohttpd setup, token,
 * rate limits, connection limits and drain; what differs is routed here.
 */
#ifndef SHMLOCKD_CONSUL_H
#define SHMLOCKD_CONSUL_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

struct consul_opts {
	char listen[128];   /* HOST:PORT or :PORT; "" when off */
	uint32_t ttl_min_s; /* Consul's session_ttl_min (default 10) */
	char node[64];	    /* the node name sessions report; "" hostname */
};

enum {
	OPT_CONSUL_FIRST = 640,
	OPT_CONSUL_LISTEN = OPT_CONSUL_FIRST,
	OPT_CONSUL_TTL_MIN,
	OPT_CONSUL_NODE,
	OPT_CONSUL_LAST,
};
#define CONSUL_NOPTS (OPT_CONSUL_LAST - OPT_CONSUL_FIRST)
extern const struct option consul_long_opts[CONSUL_NOPTS];
extern const char consul_usage_text[];

void consul_opts_default(struct consul_opts *o);
int consul_opt_parse(struct consul_opts *o, int opt, const char *arg);

/* Hooks of the HTTP server (http_server.c, http_sessions.c): the Consul
 * listener is one of its libmicrohttpd daemons. */
struct http;
struct hreq;
struct broker;
struct MHD_Connection;
/* The listener in h->d[@daemon] serves the Consul API: 0 or -errno. */
int consul_start(struct http *h, unsigned daemon);
void consul_stop(struct http *h); /* end waits, sessions, data */
void consul_free(struct http *h); /* after the daemons stopped */
/* Does connection @conn belong to the Consul listener? */
bool consul_conn(struct http *h, struct MHD_Connection *conn);
/* Route, authenticate and answer a Consul request (after the Host and
 * Origin checks every listener makes). */
void consul_dispatch(struct hreq *r);
int consul_send_answer(struct hreq *r); /* an enum MHD_Result */
void consul_request_done(struct hreq *r);
void consul_doorbell(struct http *h);
void consul_timer(struct http *h, uint32_t a, uint32_t b);
void consul_drain(struct http *h);
/* TAG_HTTP_HUP values with this bit: the client of blocking query (value
 * & 0xffffffff) hung up. */
#define CONSUL_HUP (1ull << 40)
void consul_hangup(struct http *h, uint32_t slot);
void consul_session_ended(struct broker *b, uint32_t slot);

#endif
