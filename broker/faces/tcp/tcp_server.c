// SPDX-License-Identifier: MIT
/*
 * The TCP listener and its connections on the broker's event loop: accept
 * (over --tcp-max-connections a connection is closed at once, as dflockd
 * does), non-blocking reads into a per-connection buffer, requests served
 * strictly in order, replies written without blocking (the rest waits for
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
	if (!b->opts.http.auth_token[0] && !o->insecure_no_auth) {
		blog(LOG_ERR,
		     "refusing to serve the TCP protocol (%s) without --auth-token or "
		     "--auth-token-file: every local user could take and release any lock. "
		     "Pass --tcp-insecure-no-auth to allow it",
		     o->listen[0] ? o->listen : "socket-activated");
		if (act >= 0)
			close(act);
		return -EPERM;
	}
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
	t->max_conns = listen_max_connections(o->max_connections);
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
		err = loop_watch(b, t->listen_fd[i], EPOLLIN, listener_ready, (void *)(uintptr_t)i);
		if (err)
			return err;
	}
	face_schedule(b, &tcp_face, mono_ns() + TICK_NS, TIMER_TCP_TICK, 0, 0);
	blog(LOG_INFO, "TCP protocol on %s%s%s", o->listen[0] ? o->listen : "",
	     act >= 0 ? " (socket-activated)" : "", t->tls_ctx ? " with TLS" : "");
	if (!b->opts.http.auth_token[0])
		blog(LOG_WARNING, "TCP protocol without a token (--tcp-insecure-no-auth): "
				  "every local user may take and release any lock");
	return 0;
}

static int flush(struct tconn *c);

static void conn_close(struct tcp *t, struct tconn *c)
{
	char drain[512];

	flush(c); /* what is owed, if the socket takes it now */
	if (c->waiting)
		tcp_wait_cancel(t, c);
	tcp_conn_release(t, c);
	tcp_sig_conn_gone(t, c);
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
	    c->out_len < TCP_OUT_HIGH)
		ev.events |= EPOLLIN;
	if (c->out_len || c->tls_want_write)
		ev.events |= EPOLLOUT;
	if (ev.events == c->events)
		return;
	c->events = ev.events;
	loop_modify(t->b, c->fd, ev.events);
}

/* ---- input ------------------------------------------------------------------- */

/* Serve the complete requests buffered, in order, until one waits. */
static void serve_buffered(struct tcp *t, struct tconn *c)
{
	while (!c->waiting && !c->closing && c->out_len < TCP_OUT_HIGH) {
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
		if (!c->authed) {
			/* With a token, the first request must be a matching auth. */
			const char *tok = t->b->opts.http.auth_token;
			size_t i, tl = strlen(tok), al = strlen(r.arg);
			unsigned diff = tl != al;

			for (i = 0; !e && r.cmd == TC_AUTH && i < tl; i++)
				diff |= (unsigned)(tok[i] ^ (i < al ? r.arg[i] : 0));
			if (e || r.cmd != TC_AUTH || diff) {
				blog(LOG_NOTICE, "TCP %s: authentication failed", c->peer);
				tcp_reply(c, "error_auth");
				c->closing = true;
				return;
			}
			c->authed = true;
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

	while (!c->waiting && !c->eof && !c->closing) {
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

static void conn_accept(struct tcp *t, int lfd)
{
	static uint32_t gens;
	int k;

	for (k = 0; k < 32; k++) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct tconn *c;
		char host[INET6_ADDRSTRLEN] = "?";
		int32_t slot;
		int one = 1;

		if (fd < 0)
			return;
		if (t->live >= t->max_conns || t->draining || !(c = calloc(1, sizeof(*c)))) {
			blog(LOG_DEBUG, "TCP: connection refused (%u open, --tcp-max-connections)",
			     t->live);
			close(fd);
			continue;
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
		c->authed = !t->b->opts.http.auth_token[0];
		c->line_since_ns = mono_ns();
		c->events = EPOLLIN | EPOLLRDHUP;
		if (loop_watch(t->b, fd, c->events, conn_ready, conn_tag(c))) {
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
	uint32_t i;

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
