// SPDX-License-Identifier: MIT
/*
 * The loop's fd watches (broker/core/watch.c, linked into the tests): a
 * callback gets its own fd, events and context; a modified watch reports
 * what it is watched for now; and an event epoll reported before its fd was
 * unwatched, closed and its number reused never reaches the new owner.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "core/broker.h"
#include "harness.h"

struct seen {
	int calls, fd;
	uint32_t events;
	void *ctx;
};

static void note(struct broker *b, int fd, uint32_t events, void *ctx)
{
	struct seen *s = ctx;

	(void)b;
	s->calls++;
	s->fd = fd;
	s->events = events;
	s->ctx = ctx;
}

static void other(struct broker *b, int fd, uint32_t events, void *ctx)
{
	(void)b;
	(void)fd;
	(void)events;
	(void)ctx;
}

static int wait_one(struct broker *b, struct epoll_event *ev)
{
	return epoll_wait(b->epfd, ev, 1, 1000);
}

TEST(loop_watch, callback_gets_its_fd_events_and_context, 10)
{
	struct broker b;
	struct epoll_event ev;
	struct seen s = { 0 };
	int p[2];

	memset(&b, 0, sizeof(b));
	b.epfd = epoll_create1(EPOLL_CLOEXEC);
	CHECK(b.epfd >= 0 && !pipe(p));
	CHECK(loop_watch(&b, p[0], EPOLLIN, note, &s) == 0);
	CHECK(write(p[1], "x", 1) == 1);
	CHECK(wait_one(&b, &ev) == 1);
	CHECK(loop_dispatch(&b, &ev, NULL));
	CHECK(s.calls == 1 && s.fd == p[0] && (s.events & EPOLLIN) && s.ctx == &s);
	/* Another callback than the one asked for: not run. */
	CHECK(!loop_dispatch(&b, &ev, other));
	CHECK(s.calls == 1);
	/* The write end, modified from nothing to EPOLLOUT. */
	CHECK(loop_watch(&b, p[1], 0, note, &s) == 0);
	CHECK(loop_modify(&b, p[1], EPOLLOUT) == 0);
	loop_unwatch(&b, p[0]);
	CHECK(wait_one(&b, &ev) == 1);
	CHECK(loop_dispatch(&b, &ev, NULL));
	CHECK(s.calls == 2 && s.fd == p[1] && (s.events & EPOLLOUT));
	CHECK(loop_modify(&b, p[0], EPOLLIN) == -ENOENT); /* unwatched */
	loop_unwatch(&b, p[1]);
	close(p[0]);
	close(p[1]);
	loop_watches_free(&b);
	close(b.epfd);
}

TEST(loop_watch, stale_event_of_a_reused_fd_is_dropped, 10)
{
	struct broker b;
	struct epoll_event ev;
	struct seen old = { 0 }, now = { 0 };
	int p[2], q[2];

	memset(&b, 0, sizeof(b));
	b.epfd = epoll_create1(EPOLL_CLOEXEC);
	CHECK(b.epfd >= 0 && !pipe(p));
	CHECK(loop_watch(&b, p[0], EPOLLIN, note, &old) == 0);
	CHECK(write(p[1], "x", 1) == 1);
	CHECK(wait_one(&b, &ev) == 1); /* reported, not yet handled */
	/* Its owner lets it go in the same turn; the number is taken again. */
	loop_unwatch(&b, p[0]);
	close(p[0]);
	close(p[1]);
	CHECK(!pipe(q));
	CHECK(q[0] == p[0]);
	CHECK(loop_watch(&b, q[0], EPOLLIN, note, &now) == 0);
	CHECK(!loop_dispatch(&b, &ev, NULL));
	CHECK(old.calls == 0 && now.calls == 0);
	/* Its own events do reach it. */
	CHECK(write(q[1], "y", 1) == 1);
	CHECK(wait_one(&b, &ev) == 1);
	CHECK(loop_dispatch(&b, &ev, NULL));
	CHECK(now.calls == 1 && now.fd == q[0]);
	loop_unwatch(&b, q[0]);
	close(q[0]);
	close(q[1]);
	loop_watches_free(&b);
	close(b.epfd);
}
