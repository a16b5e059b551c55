// SPDX-License-Identifier: MIT
/*
 * Silent connections to the control socket, and the listener under fd
 * pressure.
 *
 * Each connection carries one request and one reply, and liblocal sends its
 * request as soon as it connects, so a connection is accepted and, most
 * often, answered in the same turn of the loop. One that has sent nothing
 * costs an fd until it does; any user who can connect could otherwise hold
 * every fd the broker has. So:
 *
 *  - a connection that has not sent its request within
 *    CONN_REQUEST_TIMEOUT_MS is closed;
 *  - silent connections are capped overall (RLIMIT_NOFILE / 8, at most
 *    CONN_MAX) and per peer uid (a quarter of that): a new connection over a
 *    cap closes the oldest silent connection of its uid, else the oldest of
 *    all, so a flood from one user evicts its own connections first and a
 *    client that sends its request at once is never kept waiting;
 *  - accept() failing with EMFILE or ENFILE first closes the oldest silent
 *    connection and tries again; with none to close, the listener is left
 *    out of the epoll set for CONN_BACKOFF_MS (a level-triggered listener
 *    whose accept fails would otherwise wake the loop at once, forever),
 *    and clients wait in the backlog meanwhile;
 *  - what was closed is summarised in one log line a second at most.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <syslog.h>
#include <unistd.h>

#include "broker.h"
#include "clock.h"
#include "conns.h"

struct silent {
	int fd;
	uid_t uid;
	uint64_t at_ns; /* accepted */
};

struct conns {
	struct silent *v; /* unordered; n used */
	uint32_t n, cap, per_uid;
	bool listener_off;
	void (*serve)(struct broker *b, int conn); /* answer its request */
	/* Closed since the last summary, and why. */
	uint32_t timed_out, evicted, emfile;
};

/* Caps from the fd limit in force (which prlimit(1) may change while we
 * run): silent connections never take more than an eighth of it. */
static void set_caps(struct conns *c)
{
	struct rlimit rl;
	uint64_t nofile = 1024;

	/* Sessions hold a pidfd each: the unit raises the limit
	 * (LimitNOFILE=); by hand, ulimit -n does. */
	if (!getrlimit(RLIMIT_NOFILE, &rl))
		nofile = rl.rlim_cur;
	c->cap = (uint32_t)(nofile / 8 < CONN_MAX ? nofile / 8 : CONN_MAX);
	if (c->cap < 4)
		c->cap = 4;
	c->per_uid = c->cap / 4 ? c->cap / 4 : 1;
}

static void listener_ready(struct broker *b, int fd, uint32_t events, void *ctx)
{
	(void)fd;
	(void)events;
	(void)ctx;
	conns_accept(b);
}

void conns_request_ready(struct broker *b, int fd, uint32_t events, void *ctx)
{
	(void)events;
	(void)ctx;
	b->conns->serve(b, fd);
}

int conns_init(struct broker *b, void (*serve)(struct broker *b, int conn))
{
	struct conns *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->serve = serve;
	c->v = calloc(CONN_MAX, sizeof(*c->v));
	if (!c->v) {
		free(c);
		return -ENOMEM;
	}
	set_caps(c);
	b->conns = c;
	blog(LOG_DEBUG, "at most %u silent connections, %u per uid", c->cap, c->per_uid);
	return loop_watch(b, b->listen_fd, EPOLLIN, listener_ready, NULL);
}

void conns_fini(struct broker *b)
{
	struct conns *c = b->conns;
	uint32_t i;

	if (!c)
		return;
	for (i = 0; i < c->n; i++) {
		loop_unwatch(b, c->v[i].fd);
		close(c->v[i].fd);
	}
	free(c->v);
	free(c);
	b->conns = NULL;
}

uint32_t conns_count(const struct broker *b)
{
	return b->conns ? b->conns->n : 0;
}

static void drop_at(struct broker *b, uint32_t i)
{
	struct conns *c = b->conns;

	loop_unwatch(b, c->v[i].fd);
	close(c->v[i].fd);
	c->v[i] = c->v[--c->n];
}

void conns_forget(struct broker *b, int fd)
{
	struct conns *c = b->conns;
	uint32_t i;

	if (!c)
		return;
	for (i = 0; i < c->n; i++)
		if (c->v[i].fd == fd) {
			c->v[i] = c->v[--c->n];
			return;
		}
}

/* The oldest silent connection (of @uid unless @any), or UINT32_MAX. */
static uint32_t oldest(const struct conns *c, bool any, uid_t uid, uint32_t *of_uid)
{
	uint32_t i, best = UINT32_MAX;

	*of_uid = 0;
	for (i = 0; i < c->n; i++) {
		if (!any && c->v[i].uid != uid)
			continue;
		(*of_uid)++;
		if (best == UINT32_MAX || c->v[i].at_ns < c->v[best].at_ns)
			best = i;
	}
	return best;
}

/* Make room for one more silent connection from @uid. */
static void make_room(struct broker *b, uid_t uid)
{
	struct conns *c = b->conns;
	uint32_t n, i = oldest(c, false, uid, &n);

	if (n < c->per_uid)
		i = c->n < c->cap ? UINT32_MAX : oldest(c, true, 0, &n);
	if (i != UINT32_MAX) {
		drop_at(b, i);
		c->evicted++;
	}
}

/*
 * accept() ran out of fds: the limit may have been lowered under us, so
 * take the caps afresh and close the oldest silent connections down to
 * them (true: some fds were freed, try again), or, with none to close,
 * stop watching the listener for a while.
 */
static bool fd_pressure(struct broker *b, int err)
{
	struct conns *c = b->conns;
	uint32_t n, i;
	bool freed = false;

	c->emfile++;
	set_caps(c);
	while (c->n && (c->n >= c->cap || !freed)) {
		i = oldest(c, true, 0, &n);
		drop_at(b, i);
		c->evicted++;
		freed = true;
	}
	if (freed)
		return true;
	if (!c->listener_off) {
		c->listener_off = true;
		loop_unwatch(b, b->listen_fd);
		broker_schedule(b, mono_ns() + CONN_BACKOFF_MS * 1000000ull, TIMER_LISTEN_REARM, 0,
				0);
		blog(LOG_WARNING, "accept: %s; not accepting for %u ms", strerror(err),
		     CONN_BACKOFF_MS);
	}
	return false;
}

void conns_rearm(struct broker *b)
{
	struct conns *c = b->conns;

	if (!c || !c->listener_off)
		return;
	c->listener_off = false;
	if (!b->stopping)
		loop_watch(b, b->listen_fd, EPOLLIN, listener_ready, NULL);
}

void conns_accept(struct broker *b)
{
	struct conns *c = b->conns;
	int k, retried = 0;

	for (k = 0; k < CONN_ACCEPTS_PER_TURN; k++) {
		int conn = accept4(b->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct ucred cred = { .uid = (uid_t)-1 };
		socklen_t len = sizeof(cred);

		if (conn < 0) {
			if (errno == EMFILE || errno == ENFILE) {
				if (fd_pressure(b, errno) && !retried++)
					continue;
			} else if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
				blog(LOG_WARNING, "accept: %s", strerror(errno));
			}
			return;
		}
		getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len);
		make_room(b, cred.uid);
		if (loop_watch(b, conn, EPOLLIN, conns_request_ready, NULL)) {
			close(conn);
			continue;
		}
		c->v[c->n++] = (struct silent){ conn, cred.uid, mono_ns() };
		/* Most requests are already there: answer now, before the
		 * next accept could evict this one. */
		c->serve(b, conn);
	}
}

void conns_expire(struct broker *b)
{
	struct conns *c = b->conns;
	uint64_t now = mono_ns(), limit = CONN_REQUEST_TIMEOUT_MS * 1000000ull;
	uint32_t i = 0;

	if (!c)
		return;
	while (i < c->n) {
		if (now - c->v[i].at_ns >= limit) {
			drop_at(b, i);
			c->timed_out++;
		} else {
			i++;
		}
	}
	if (c->timed_out || c->evicted)
		blog(LOG_WARNING,
		     "closed %u connection(s) that sent no request within %u ms and %u over "
		     "the caps (%u silent at most, %u per uid); %u accept(s) out of fds",
		     c->timed_out, CONN_REQUEST_TIMEOUT_MS, c->evicted, c->cap, c->per_uid,
		     c->emfile);
	c->timed_out = c->evicted = c->emfile = 0;
}
