/* SPDX-License-Identifier: MIT */
/*
 * The opt-in Consul-compatible HTTP API (docs/consul-api.md): sessions, KV
 * with acquire/release locks, blocking queries. Its listener is served by
 * the HTTP engine (net/http_engine.c) as the HTTP API's are: same
 * libmicrohttpd setup, Host and Origin checks, connection limits and drain;
 * what a request means is routed here.
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

/* The face the core knows (core/face.h): a client of the HTTP engine
 * (net/http_engine.c) on a listener of its own. */
struct face;
extern const struct face consul_face;

#endif
