// SPDX-License-Identifier: MIT
/*
 * The TCP listener and its connections on the broker's event loop (fds
 * watched through core/face.h's loop_watch()): accept (who is admitted, caps
 * and the deadline for "auth" are broker/net/'s: over --tcp-max-connections
 * a connection is closed at once, as dflockd does, unless one not
 * authenticated yet makes room), non-blocking reads into a per-connection
 * buffer, requests served strictly in order, replies written without blocking (the rest waits for
 * EPOLLOUT), a read timeout per line, and a connection that waits watched
 * only for its hang-up (EPOLLRDHUP) until its wait ends.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <syslog.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "clock.h"
#include "tcp_int.h"
#include "net/net.h"

#define TICK_NS 1000000000ull
#define GEN_MASK 0xffffffu

/* What a connection's watch carries: its slot and generation. */
static void *conn_tag(const struct tconn *c)
{
	return (void *)(uintptr_t)((uint64_t)(c->gen & GEN_MASK) << 32 | c->slot);
}

static void listener_ready(struct broker *b, int fd, uint32_t events, void *i);
static void conn_ready(struct broker *b, int fd, uint32_t events, void *tag);

int tcp_start(struct broker *b)
{
	const struct tcp_opts *o = &b->opts.tcp;
	static const uint8_t no_id[16];
	int act = activated_stream_fd("tcp"), fd, err;
	struct tcp *t;

	if (!o->listen[0] && act < 0)
		return 0;
	if (!o->tls_cert[0] != !o->tls_key[0]) {
		blog(LOG_ERR, "--tcp-tls-cert and --tcp-tls-key go together");
		if (act >= 0)
			close(act);
		return -EINVAL;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	b->tcp = t;
	t->b = b;
	t->pool.max = listen_max_connections(o->max_connections);
	t->pool.deadline_ns = (uint64_t)o->auth_timeout_s * 1000000000ull;
	/* One peer (a local user, else an address) may keep at most half of
	 * them waiting to authenticate; authenticated ones are dflockd's:
	 * no cap per peer. */
	t->pool.max_pending_per_peer = (t->pool.max + 1) / 2;
	t->next_id = 1;
	t->observer = session_inproc_new(&b->seg, (struct owner){ IDX_NONE, 0 }, no_id);
	if (act >= 0)
		t->listen_fd[t->nl++] = act; /* ours to close from here on */
	if (!t->observer)
		return -ENOMEM;
	err = tcp_tls_init(t);
	if (err)
		return err;
	if (o->listen[0]) {
		fd = listen_tcp_spec(o->listen, "--tcp-listen", "TCP");
		if (fd < 0)
			return fd;
		t->listen_fd[t->nl++] = fd;
	}
	for (unsigned i = 0; i < t->nl; i++) {
		/* Off loopback nothing names the peer: a token, or a flag that
		 * says everyone who reaches it may use it. */
		if (!net_token(b)[0] && !o->insecure_no_auth && !net_fd_loopback(t->listen_fd[i])) {
			blog(LOG_ERR,
			     "refusing to serve the TCP protocol on %s, not a loopback address, "
			     "without --auth-token or --auth-token-file: whoever reaches it could "
			     "take and release any lock. Listen on 127.0.0.1, or pass "
			     "--tcp-insecure-no-auth to allow it",
			     o->listen[0] ? o->listen : "a socket-activated socket");
			return -EPERM;
		}
		err = loop_watch(b, t->listen_fd[i], EPOLLIN, listener_ready, (void *)(uintptr_t)i);
		if (err)
			return err;
	}
	face_schedule(b, &tcp_face, mono_ns() + TICK_NS, TIMER_TCP_TICK, 0, 0);
	blog(LOG_INFO, "TCP protocol on %s%s%s", o->listen[0] ? o->listen : "",
	     act >= 0 ? " (socket-activated)" : "", t->tls_ctx ? " with TLS" : "");
	if (!net_token(b)[0] && o->insecure_no_auth)
		blog(LOG_WARNING, "TCP protocol without a token (--tcp-insecure-no-auth): "
				  "every local user may take and release any lock");
	return 0;
}

static int flush(struct tconn *c);
static void conn_settle(struct tcp *t, struct tconn *c);

static void conn_close(struct tcp *t, struct tconn *c)
{
	char drain[512];

	flush(c); /* what is owed, if the socket takes it now */
	if (c->waiting)
		tcp_wait_cancel(t, c);
	tcp_conn_release(t, c);
	tcp_sig_conn_gone(t, c);
	net_pool_del(&t->pool, &c->nc);
	loop_unwatch(t->b, c->fd);
	/* Unread input would turn the close into a reset that can destroy
	 * the reply just written: read it away first. */
	shutdown(c->fd, SHUT_WR);
	tcp_tls_detach(c);
	while (read(c->fd, drain, sizeof(drain)) > 0)
		;
	close(c->fd);
	free(c->out);
	free(c->holds);
	free(c->enqs);
	t->conns[c->slot] = NULL;
	t->live--;
	free(c);
}

void tcp_stop(struct broker *b)
{
	struct tcp *t = b->tcp;
	uint32_t i;

	if (!t)
		return;
	for (i = 0; i < t->nconns; i++)
		if (t->conns[i]) {
			if (t->conns[i]->waiting) {
				tcp_wait_cancel(t, t->conns[i]);
				tcp_reply(t->conns[i], "error");
			}
			conn_close(t, t->conns[i]);
		}
	for (i = 0; i < t->nl; i++) {
		loop_unwatch(b, t->listen_fd[i]);
		close(t->listen_fd[i]);
	}
	session_inproc_free(t->observer);
	net_rate_free(&t->rates);
	tcp_tls_fini(t);
	free(t->conns);
	free(t->waitv);
	free(t);
	b->tcp = NULL;
}

/* ---- output ------------------------------------------------------------------ */

static int flush(struct tconn *c)
{
	while (c->out_len) {
		long n = tcp_io_send(c, c->out, c->out_len);

		if (n == -EAGAIN)
			return 0;
		if (n <= 0)
			return -1;
		memmove(c->out, c->out + n, c->out_len - (size_t)n);
		c->out_len -= (size_t)n;
	}
	return 0;
}

void tcp_reply_text(struct tconn *c, const char *text, size_t len)
{
	if (c->out_len + len + 1 > c->out_cap) {
		size_t cap = c->out_cap ? c->out_cap : 256;
		char *p;

		while (cap < c->out_len + len + 1)
			cap *= 2;
		p = realloc(c->out, cap);
		if (!p) {
			c->closing = true;
			return;
		}
		c->out = p;
		c->out_cap = cap;
	}
	if (!c->out_len)
		c->out_since_ns = mono_ns();
	memcpy(c->out + c->out_len, text, len);
	c->out[c->out_len + len] = '\n';
	c->out_len += len + 1;
}

void tcp_reply(struct tconn *c, const char *fmt, ...)
{
	char line[256];
	va_list ap;
	int n;

	if (!strchr(fmt, '%')) { /* "ok", "timeout", ...: no vsnprintf() */
		tcp_reply_text(c, fmt, strlen(fmt));
		return;
	}
	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n > 0)
		tcp_reply_text(c, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

void tcp_conn_update(struct tcp *t, struct tconn *c)
{
	struct epoll_event ev = { .events = EPOLLRDHUP };

	/* A wait leaves EPOLLIN on: most clients send nothing until it is
	 * answered, and two epoll_ctl() per wait are what it would cost to
	 * switch it off and on. Only input that comes meanwhile turns it off
	 * (tcp_event()), until the wait ends. */
	if ((!c->waiting || ((c->events & EPOLLIN) && !c->wait_input)) && !c->eof && !c->closing &&
	    !c->held && c->out_len < TCP_OUT_HIGH)
		ev.events |= EPOLLIN;
	if (c->out_len || c->tls_want_write)
		ev.events |= EPOLLOUT;
	if (ev.events == c->events)
		return;
	c->events = ev.events;
	loop_modify(t->b, c->fd, ev.events);
}

/* ---- input ------------------------------------------------------------------- */

/*
 * A failed authentication: its "error_auth" is written when its time comes
 * (net_auth_fail_at(): one a delay per peer), by a broker timer; until
 * then nothing more is read from it.
 */
static void hold_failure(struct tcp *t, struct tconn *c)
{
	uint64_t at = net_auth_fail_at(&t->rates, c->nc.key, mono_ns());

	blog(LOG_NOTICE, "TCP %s: authentication failed", c->peer);
	c->held = true;
	c->in_len = 0;
	face_schedule(t->b, &tcp_face, at, TIMER_TCP_WAIT, c->slot, c->gen);
}

static void release_failure(struct tcp *t, struct tconn *c);

/* Serve the complete requests buffered, in order, until one waits. */
static void serve_buffered(struct tcp *t, struct tconn *c)
{
	while (!c->waiting && !c->closing && !c->held && c->out_len < TCP_OUT_HIGH) {
		const char *lines[3];
		size_t lens[3];
		struct tcp_req r;
		enum tcp_perr e;
		long n = tcp_frame(c->in, c->in_len, lines, lens);

		if (n == -2 && c->authed) {
			/* The rest of the payload cannot be told from requests. */
			blog(LOG_DEBUG, "TCP %s: signal payload too long", c->peer);
			tcp_reply(c, "error_payload_too_large");
			c->closing = true;
			return;
		}
		if (n < 0) {
			blog(LOG_DEBUG, "TCP %s: line too long", c->peer);
			tcp_reply(c, c->authed ? "error" : "error_auth");
			c->closing = true;
			return;
		}
		if (!n)
			return;
		e = tcp_parse(lines, lens, &r);
		memmove(c->in, c->in + n, c->in_len - (size_t)n);
		c->in_len -= (size_t)n;
		c->line_since_ns = mono_ns();
		if (c->uid_first) {
			/* A client given the token sends it first; its user is
			 * admitted anyway, whatever it sends. */
			c->uid_first = false;
			if (!e && r.cmd == TC_AUTH && net_token(t->b)[0]) {
				tcp_reply(c, "ok");
				continue;
			}
		}
		if (!c->authed) {
			/* The first request must be an auth with the token. */
			if (e || r.cmd != TC_AUTH || !net_token_ok(t->b, r.arg, strlen(r.arg))) {
				hold_failure(t, c);
				return;
			}
			c->authed = true;
			net_pool_ready(&t->pool, &c->nc);
			tcp_reply(c, "ok");
			continue;
		}
		if (e) {
			blog(LOG_DEBUG, "TCP %s: bad request (code %d)", c->peer, (int)e);
			tcp_reply(c, "error");
			continue;
		}
		tcp_serve(t, c, &r);
	}
}

static void release_failure(struct tcp *t, struct tconn *c)
{
	c->held = false;
	tcp_reply(c, "error_auth");
	c->closing = true;
	conn_settle(t, c);
}

/* Finish a turn on @c: write, close when done, watch what is needed. */
static void conn_settle(struct tcp *t, struct tconn *c)
{
	if (flush(c) || ((c->closing || (c->eof && !c->waiting)) && !c->out_len)) {
		conn_close(t, c);
		return;
	}
	if (c->closing && c->out_len) {
		/* Give the last reply its chance once; no more input. */
		conn_close(t, c);
		return;
	}
	tcp_conn_update(t, c);
}

static void conn_read(struct tcp *t, struct tconn *c)
{
	bool short_read;

	while (!c->waiting && !c->eof && !c->closing && !c->held) {
		long n;

		if (c->in_len == sizeof(c->in))
			break; /* a request waits to be served first */
		n = tcp_io_recv(c, c->in + c->in_len, sizeof(c->in) - c->in_len);
		if (n == -EAGAIN)
			break;
		if (n <= 0) {
			c->eof = true;
			break;
		}
		if (memchr(c->in + c->in_len, '\n', (size_t)n))
			c->line_since_ns = mono_ns();
		short_read = !c->ssl && (size_t)n < sizeof(c->in) - c->in_len;
		c->in_len += (size_t)n;
		serve_buffered(t, c);
		/* A short read on a plain socket took all there was: no second
		 * recv() just to hear EAGAIN (the epoll is level-triggered, so
		 * what comes later is reported again). TLS may hold records. */
		if (short_read || c->waiting || c->closing || c->out_len >= TCP_OUT_HIGH)
			break;
	}
	serve_buffered(t, c);
}

void tcp_resume(struct tcp *t, struct tconn *c)
{
	c->line_since_ns = mono_ns();
	/* What came meanwhile: on a plain socket only if an event said so
	 * (EPOLLIN stayed on otherwise, and is level-triggered); TLS may hold
	 * records decrypted already. */
	if (c->wait_input || c->ssl)
		conn_read(t, c);
	else
		serve_buffered(t, c);
	c->wait_input = false;
	conn_settle(t, c);
}

int tcp_wait_add(struct tcp *t, struct tconn *c)
{
	if (t->waiting == t->cap_waitv) {
		uint32_t cap = t->cap_waitv ? t->cap_waitv * 2 : 64;
		struct tconn **v = realloc(t->waitv, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		t->waitv = v;
		t->cap_waitv = cap;
	}
	c->widx = t->waiting;
	t->waitv[t->waiting++] = c;
	return 0;
}

void tcp_wait_del(struct tcp *t, struct tconn *c)
{
	struct tconn *last = t->waitv[--t->waiting];

	t->waitv[c->widx] = last;
	last->widx = c->widx;
}

static int32_t free_slot(struct tcp *t)
{
	uint32_t i;

	if (t->live < t->nconns)
		for (i = 0; i < t->nconns; i++)
			if (!t->conns[i])
				return (int32_t)i;
	if (t->nconns == t->cap_conns) {
		uint32_t cap = t->cap_conns ? t->cap_conns * 2 : 64;
		struct tconn **v = realloc(t->conns, cap * sizeof(*v));

		if (!v)
			return -1;
		t->conns = v;
		t->cap_conns = cap;
	}
	t->conns[t->nconns] = NULL;
	return (int32_t)t->nconns++;
}

/* Who @c's peer is, and what that admits (docs/security.md): the token's
 * "auth", or nothing more when the kernel names a user the control socket
 * admits, or when no token is needed at all. */
static bool admit(struct tcp *t, struct tconn *c, int fd)
{
	const struct broker *b = t->b;
	struct net_peer p;

	net_peer_of(b, fd, &p);
	snprintf(c->nc.key, sizeof(c->nc.key), "%s", p.key);
	c->authed = p.uid_admitted || (!net_token(b)[0] && b->opts.tcp.insecure_no_auth);
	c->uid_first = p.uid_admitted;
	/* Without a token nothing else could admit it. */
	return c->authed || net_token(b)[0];
}

static void conn_accept(struct tcp *t, int lfd)
{
	static uint32_t gens;
	int k;

	for (k = 0; k < 32; k++) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct net_conn *evict;
		struct tconn *c;
		char host[INET6_ADDRSTRLEN] = "?";
		int32_t slot;
		int one = 1;

		if (fd < 0)
			return;
		if (t->draining || !(c = calloc(1, sizeof(*c)))) {
			close(fd);
			continue;
		}
		if (!admit(t, c, fd)) {
			blog(LOG_DEBUG,
			     "TCP: %s is no user the control socket admits, and no "
			     "token is set: closed",
			     c->nc.key);
			free(c);
			close(fd);
			continue;
		}
		c->nc.fd = fd;
		c->nc.owner = c;
		evict = net_pool_add(&t->pool, &c->nc, mono_ns());
		if (evict == &c->nc) {
			blog(LOG_DEBUG, "TCP: connection refused (%u open, --tcp-max-connections)",
			     t->live);
			free(c);
			close(fd);
			continue;
		}
		if (c->authed)
			net_pool_ready(&t->pool, &c->nc);
		if (evict) { /* one not authenticated made room */
			struct tconn *old = evict->owner;

			blog(LOG_DEBUG, "TCP %s: closed, not authenticated, to make room",
			     old->peer);
			old->closing = true;
			conn_settle(t, old);
		}
		slot = free_slot(t);
		if (slot < 0) {
			free(c);
			close(fd);
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (ss.ss_family == AF_INET)
			inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, host,
				  sizeof(host));
		else if (ss.ss_family == AF_INET6)
			inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, host,
				  sizeof(host));
		snprintf(c->peer, sizeof(c->peer), "%s", host);
		c->fd = fd;
		c->slot = (uint32_t)slot;
		c->gen = ++gens;
		c->id = t->next_id++;
		c->line_since_ns = mono_ns();
		c->events = EPOLLIN | EPOLLRDHUP;
		if (loop_watch(t->b, fd, c->events, conn_ready, conn_tag(c))) {
			net_pool_del(&t->pool, &c->nc);
			free(c);
			close(fd);
			continue;
		}
		t->conns[slot] = c;
		t->live++;
		if (tcp_tls_attach(t, c)) {
			c->closing = true;
			conn_settle(t, c);
		}
	}
}

/* A release of ours may have granted a waiter of ours, or of HTTP's: poll
 * them once at the end of the loop's turn (loop.c, local_rings()), not
 * after each request, so that a turn serving many connections polls once. */
static void after_turn(struct tcp *t)
{
	if (!t->maybe_granted)
		return;
	t->maybe_granted = false;
	t->b->seg.rung_local = true;
}

static void listener_ready(struct broker *b, int fd, uint32_t events, void *i)
{
	struct tcp *t = b->tcp;

	(void)fd;
	(void)events;
	if (t && (uintptr_t)i < t->nl)
		conn_accept(t, t->listen_fd[(uintptr_t)i]);
}

static void conn_ready(struct broker *b, int fd, uint32_t events, void *tag)
{
	struct tcp *t = b->tcp;
	uint32_t slot = (uint32_t)((uintptr_t)tag & 0xffffffffu);
	uint32_t gen = (uint32_t)((uint64_t)(uintptr_t)tag >> 32);
	struct tconn *c;

	(void)fd;
	if (!t)
		return;
	if (slot >= t->nconns || !(c = t->conns[slot]) || (c->gen & GEN_MASK) != gen)
		return;
	if (c->held && (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))) {
		conn_close(t, c); /* gone before its failure was answered */
		return;
	}
	if (c->waiting && (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))) {
		/* Gone while waiting: leave the queue, and end. */
		tcp_wait_cancel(t, c);
		conn_close(t, c);
		after_turn(t);
		return;
	}
	/* Input during a wait (EPOLLIN stays on while waiting): it is read
	 * when the wait ends; until then, stop hearing of it (conn_settle()
	 * below, which also writes what is owed). */
	if (c->waiting && (events & EPOLLIN))
		c->wait_input = true;
	/* Read whatever the event: TLS may have plaintext decrypted already,
	 * or a read may have waited for the socket to take a write. */
	conn_read(t, c);
	if (events & EPOLLERR)
		c->eof = true;
	conn_settle(t, c);
	after_turn(t);
}

void tcp_doorbell(struct broker *b)
{
	struct tcp *t = b->tcp;
	uint32_t i;

	if (!t)
		return;
	/* Only the connections that wait, and of those only the ones whose
	 * lock word moved: one load each. A resumed one leaves waitv (the
	 * last takes its place, so i stays) and may start a new wait (at the
	 * end, still queued: skipped). */
	for (i = 0; i < t->waiting;) {
		struct tconn *c = t->waitv[i];

		if (c->wword && atomic_load(c->wword) == c->wwaiting) {
			i++;
			continue;
		}
		if (tcp_wait_poll(t, c, false))
			tcp_resume(t, c);
		else
			i++;
	}
	/* A grant to another face's waiter: the core rings every face again. */
	after_turn(t);
}

static void tick(struct tcp *t)
{
	uint64_t now = mono_ns(), limit = (uint64_t)t->b->opts.tcp.read_timeout_s * 1000000000ull;
	struct net_conn *late;
	uint32_t i;

	while ((late = net_pool_overdue(&t->pool, now))) {
		struct tconn *c = late->owner;

		if (c->held)
			continue; /* its answer is on its way */
		blog(LOG_DEBUG, "TCP %s: not authenticated in %us (--tcp-auth-timeout)", c->peer,
		     t->b->opts.tcp.auth_timeout_s);
		tcp_reply(c, "error_auth");
		c->closing = true;
		conn_settle(t, c);
	}

	for (i = 0; i < t->nconns; i++) {
		struct tconn *c = t->conns[i];

		if (!c)
			continue;
		if (c->out_len && now - c->out_since_ns >= limit) {
			conn_close(t, c); /* not reading its replies */
		} else if (!c->waiting && !c->out_len && now - c->line_since_ns >= limit) {
			blog(LOG_DEBUG, "TCP %s: read timeout", c->peer);
			tcp_reply(c, c->authed ? "error" : "error_auth");
			c->closing = true;
			conn_settle(t, c);
		}
	}
	after_turn(t);
}

static void tcp_timer(struct broker *b, uint32_t kind, uint32_t a, uint32_t b2)
{
	struct tcp *t = b->tcp;
	struct tconn *c;

	if (!t)
		return;
	if (kind == TIMER_TCP_TICK) {
		tick(t);
		face_schedule(b, &tcp_face, mono_ns() + TICK_NS, TIMER_TCP_TICK, 0, 0);
		return;
	}
	if (a < t->nconns && (c = t->conns[a]) && c->held && c->gen == b2) {
		release_failure(t, c);
		return;
	}
	if (a >= t->nconns || !(c = t->conns[a]) || !c->waiting || c->wgen != b2)
		return;
	if (tcp_wait_poll(t, c, true))
		tcp_resume(t, c);
	else /* its key's mutex is held by a stalled process: try again */
		face_schedule(b, &tcp_face, mono_ns() + 100000000ull, TIMER_TCP_WAIT, a, b2);
	after_turn(t);
}

const struct face tcp_face = {
	.name = "tcp",
	.start = tcp_start,
	.stop = tcp_stop,
	.timer = tcp_timer,
	.doorbell = tcp_doorbell,
};
