/* SPDX-License-Identifier: MIT */
/*
 * dflockd's TCP line protocol (docs/tcp-protocol.md), opt-in: --tcp-listen
 * or a socket-activated fd named "tcp". Everything runs on the broker's
 * event loop: sockets are non-blocking, a wait suspends its connection and
 * is completed through the segment's doorbell, as HTTP long polls are.
 */
#ifndef SHMLOCKD_TCP_H
#define SHMLOCKD_TCP_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net/dflockd.h" /* the token's text, shared with the HTTP API */

struct broker;

struct tcp_opts {
	char listen[128];	  /* [HOST:]PORT; "" when off */
	uint32_t max_connections; /* 0: from the fd limit */
	uint32_t read_timeout_s;  /* a line not received within this: error, close */
	uint32_t auth_timeout_s;  /* not authenticated within this: error_auth, close */
	bool insecure_no_auth;	  /* serve without --auth-token */
	char tls_cert[256];	  /* PEM chain; with tls_key: TLS on every connection */
	char tls_key[256];
};

enum {
	OPT_TCP_FIRST = 768,
	OPT_TCP_LISTEN = OPT_TCP_FIRST,
	OPT_TCP_MAX_CONNS,
	OPT_TCP_READ_TIMEOUT,
	OPT_TCP_INSECURE,
	OPT_TCP_TLS_CERT,
	OPT_TCP_TLS_KEY,
	OPT_TCP_AUTH_TIMEOUT,
	OPT_TCP_LAST,
};
#define TCP_NOPTS (OPT_TCP_LAST - OPT_TCP_FIRST)
extern const struct option tcp_long_opts[TCP_NOPTS];
extern const char tcp_usage_text[];

void tcp_opts_default(struct tcp_opts *o);
/* Parse one TCP option; 0 or -1 (message printed). */
int tcp_opt_parse(struct tcp_opts *o, int opt, const char *arg);

/* Start the listener (bound, or the socket-activated fd named "tcp"). */
int tcp_start(struct broker *b);
/* Close every connection (ending its session) and the listener. */
void tcp_stop(struct broker *b);
/* The face the core knows (core/face.h); its hooks follow. */
struct face;
extern const struct face tcp_face;
void tcp_doorbell(struct broker *b);

/* ---- the line protocol (tcp_parse.c: no broker state, fuzzed) ------------ */

/* Longest line content (before '\n', '\r' included), as dflockd. */
#define TCP_LINE_MAX 256
/* Longest signal payload (the third line of `signal`): dflockd takes up to
 * 64 KiB, we take what fits a connection's input buffer with the other two
 * lines; a longer one is answered error_payload_too_large. The same as
 * core/signals.h's SIGNAL_PAYLOAD_MAX (checked in tcp_signal.c). */
#define TCP_PAYLOAD_MAX 3072
/* Timeouts and leases in seconds, bounded so that their milliseconds fit
 * liblocal's types; a longer timeout waits this long. */
#define TCP_TIMEOUT_MAX_S (INT32_MAX / 1000)
#define TCP_LEASE_MAX_S (UINT32_MAX / 1000)

enum tcp_cmd {
	TC_NONE = 0,
	TC_L,
	TC_R,
	TC_N,
	TC_E,
	TC_W,
	TC_SL,
	TC_SR,
	TC_SN,
	TC_SE,
	TC_SW,
	TC_AUTH,
	TC_STATS,
	TC_PING,
	TC_LISTEN,
	TC_UNLISTEN,
	TC_SIGNAL,
	TC_LAST = TC_SIGNAL,
};

/* dflockd's internal error codes (logged, never sent: the reply is "error"). */
enum tcp_perr {
	TE_OK = 0,
	TE_COMMAND = 3,
	TE_INTEGER = 4,
	TE_KEY = 5,
	TE_TIMEOUT = 6,
	TE_TOKEN = 7,
	TE_FIELDS = 8,
	TE_LEASE = 9,
	TE_LIMIT = 13,
};

struct tcp_req {
	enum tcp_cmd cmd;
	char key[TCP_LINE_MAX + 1];
	size_t key_len;
	int64_t timeout_s;		   /* l, sl, w, sw */
	int64_t lease_s;		   /* 0: the default */
	int64_t limit;			   /* sl, se; 1 otherwise */
	char arg[TCP_LINE_MAX + 1];	   /* r, n: the token text; auth: the secret;
				     * listen, unlisten: the queue group ("": none) */
	char payload[TCP_PAYLOAD_MAX + 1]; /* signal */
	size_t payload_len;
};

/*
 * Find one request (three '\n'-terminated lines) at the start of @buf.
 * Returns the bytes it takes (> 0), 0 when more must be read, -1 when a
 * line is longer than TCP_LINE_MAX, or -2 when the payload of a `signal` is
 * longer than TCP_PAYLOAD_MAX. @lines / @lens: each line, trailing '\r's
 * stripped.
 */
long tcp_frame(const char *buf, size_t len, const char *lines[3], size_t lens[3]);
/* Validate a framed request: TE_OK, or the reason it is answered "error". */
enum tcp_perr tcp_parse(const char *const lines[3], const size_t lens[3], struct tcp_req *out);
const char *tcp_cmd_name(enum tcp_cmd c);
/* A NATS-style pattern: tokens split at '.'; '*' stands for one token and a
 * final '>' for one or more (matched by core/signals.c). */
bool tcp_pattern_valid(const char *p, size_t n);

#endif
