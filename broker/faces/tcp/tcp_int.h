/* SPDX-License-Identifier: MIT */
/* The TCP protocol's internal interfaces, shared by broker/tcp_*.c only. */
#ifndef SHMLOCKD_TCP_INT_H
#define SHMLOCKD_TCP_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/broker.h"
#include "net/net.h"
#include "tcp.h"

/* The TCP face's timer kinds (face_schedule()). */
enum tcp_timer_kind {
	TIMER_TCP_TICK = 1, /* periodic: read timeouts */
	TIMER_TCP_WAIT = 2, /* a = connection slot, b = its generation */
};

/* Input kept per connection: a whole request (3 lines of TCP_LINE_MAX)
 * and what a client pipelined behind it. */
#define TCP_IN_CAP 4096
/* Past this much unsent output, stop reading the connection. */
#define TCP_OUT_HIGH (64u * 1024)

/* A hold granted over TCP: its token is the fencing token and this salt. */
struct tcp_hold {
	char key[LOCAL_KEY_MAX + 1];
	uint64_t fence, salt;
};

/* The connection's outstanding e/se for a key (dflockd's two-phase record). */
struct tcp_enq {
	char key[LOCAL_KEY_MAX + 1];
	bool acquired; /* granted at once: fence/salt are its token */
	uint64_t fence, salt;
	uint32_t lease_s;
};

struct tconn {
	int fd;
	uint32_t slot, gen; /* index in tcp->conns, bumped on each reuse */
	uint64_t id;	    /* dflockd's connection id (stats) */
	char peer[64];
	char in[TCP_IN_CAP];
	size_t in_len;
	char *out;
	size_t out_len, out_cap;
	bool eof;     /* the peer shut its side: answer what came, then close */
	bool closing; /* close once the output is written */
	bool authed;
	bool held;		/* a failed auth's answer waits for its time */
	bool uid_first;		/* admitted by uid; no request served yet */
	struct net_conn nc;	/* in tcp->pool: the cap, the auth deadline */
	uint32_t events;	/* what epoll watches now */
	uint64_t line_since_ns; /* since when a line is awaited */
	uint64_t out_since_ns;	/* since when output is pending */
	/* The session the connection acts through, opened on first use. */
	local_session *ls;
	uint32_t sslot, sgen;
	/* A suspended wait (l, sl with a timeout; w, sw). */
	bool waiting;
	uint32_t wgen;
	bool wtwo_phase; /* a w/sw (reply "ok" either way, but lease reset) */
	bool wait_input; /* bytes came while waiting: EPOLLIN is off until it ends */
	uint32_t widx;	 /* in tcp->waitv */
	/* The waiter's lock word and its value while it waits (NULL: unknown,
	 * poll): a doorbell skips the waiters still queued with one load. */
	_Atomic uint64_t *wword;
	uint64_t wwaiting;
	uint32_t wlease_s;
	char wkey[LOCAL_KEY_MAX + 1];
	struct tcp_hold *holds;
	uint32_t nholds, cap_holds;
	struct tcp_enq *enqs;
	uint32_t nenqs, cap_enqs;
	void *ssl;	     /* SSL *: TLS is on */
	bool tls_want_write; /* the library must write before it can go on */
};

struct tcp {
	struct broker *b;
	int listen_fd[2];
	unsigned nl;
	struct tconn **conns;
	uint32_t nconns, cap_conns, live;
	struct net_pool pool;	/* broker/net/: caps, the auth deadline */
	struct net_rates rates; /* per-peer delays of failed authentications */
	uint64_t next_id;
	uint32_t waiting;     /* connections in a wait: waitv[0..waiting) */
	struct tconn **waitv; /* so that a doorbell visits only those */
	uint32_t cap_waitv;
	local_session *observer; /* stats */
	bool maybe_granted;	 /* we released something: poll our waiters */
	bool draining;
	void *tls_ctx; /* SSL_CTX *: --tcp-tls-cert given */
};

/* tcp_server.c */
void tcp_reply(struct tconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tcp_reply_text(struct tconn *c, const char *text, size_t len);
void tcp_conn_update(struct tcp *t, struct tconn *c);
/* @c starts / ends a wait (tcp_ops.c sets c->waiting around these). */
int tcp_wait_add(struct tcp *t, struct tconn *c);
void tcp_wait_del(struct tcp *t, struct tconn *c);
/* @c's wait is over (answered): serve what it sent meanwhile. */
void tcp_resume(struct tcp *t, struct tconn *c);

/* tcp_tls.c: TLS (or plain TCP when off) under the connection's I/O.
 * recv/send: bytes (> 0), 0 at the end (recv), -EAGAIN, -EIO. */
int tcp_tls_init(struct tcp *t);
void tcp_tls_fini(struct tcp *t);
int tcp_tls_attach(struct tcp *t, struct tconn *c);
void tcp_tls_detach(struct tconn *c);
long tcp_io_recv(struct tconn *c, void *buf, size_t n);
long tcp_io_send(struct tconn *c, const void *buf, size_t n);

/* tcp_ops.c */
void tcp_serve(struct tcp *t, struct tconn *c, const struct tcp_req *r);
/* The suspended wait of @c: take its outcome if any (@cancel: it is due). */
bool tcp_wait_poll(struct tcp *t, struct tconn *c, bool cancel);
/* Leave the queue (hang-up, shutdown); no reply. */
void tcp_wait_cancel(struct tcp *t, struct tconn *c);
/* The connection ends: its session (holds, waits) with it. */
void tcp_conn_release(struct tcp *t, struct tconn *c);
void tcp_stats(struct tcp *t, struct tconn *c);

/* tcp_signal.c: dflockd's pub/sub (listen, unlisten, signal). */
void tcp_sig_listen(struct tcp *t, struct tconn *c, const struct tcp_req *r);
void tcp_sig_unlisten(struct tcp *t, struct tconn *c, const struct tcp_req *r);
void tcp_sig_publish(struct tcp *t, struct tconn *c, const struct tcp_req *r);
/* @c ends: its subscriptions go. */
void tcp_sig_conn_gone(struct tcp *t, struct tconn *c);

#endif
