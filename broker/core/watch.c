// SPDX-License-Identifier: MIT
/*
 * The loop's fds as watchers with callbacks (face.h): a table indexed by
 * fd, and epoll's data carrying the fd and the generation of its watch, so
 * that an event reported before an fd was unwatched (and perhaps reused)
 * never reaches the callback of whoever watches it now.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "broker.h"

struct watch {
	loop_fn *fn;
	void *ctx;
	uint32_t gen;
	bool on;
};

static uint64_t watch_data(const struct watch *w, int fd)
{
	return (uint64_t)w->gen << 32 | (uint32_t)fd;
}

static int grow(struct broker *b, int fd)
{
	int n = b->nwatches ? b->nwatches : 64;
	struct watch *v;

	while (n <= fd)
		n *= 2;
	v = realloc(b->watches, (size_t)n * sizeof(*v));
	if (!v)
		return -ENOMEM;
	memset(v + b->nwatches, 0, (size_t)(n - b->nwatches) * sizeof(*v));
	b->watches = v;
	b->nwatches = n;
	return 0;
}

int loop_watch(struct broker *b, int fd, uint32_t events, loop_fn *fn, void *ctx)
{
	struct epoll_event ev = { .events = events };
	struct watch *w;
	int err;

	if (fd < 0)
		return -EBADF;
	if (fd >= b->nwatches && (err = grow(b, fd)))
		return err;
	w = &b->watches[fd];
	/* Still marked watched: the fd was closed without loop_unwatch() (the
	 * kernel dropped it from epoll) and its number is reused. */
	if (w->on)
		epoll_ctl(b->epfd, EPOLL_CTL_DEL, fd, NULL);
	w->on = false;
	w->gen++;
	ev.data.u64 = watch_data(w, fd);
	if (epoll_ctl(b->epfd, EPOLL_CTL_ADD, fd, &ev))
		return -errno;
	w->fn = fn;
	w->ctx = ctx;
	w->on = true;
	return 0;
}

int loop_modify(struct broker *b, int fd, uint32_t events)
{
	struct epoll_event ev = { .events = events };

	if (fd < 0 || fd >= b->nwatches || !b->watches[fd].on)
		return -ENOENT;
	ev.data.u64 = watch_data(&b->watches[fd], fd);
	return epoll_ctl(b->epfd, EPOLL_CTL_MOD, fd, &ev) ? -errno : 0;
}

void loop_unwatch(struct broker *b, int fd)
{
	struct watch *w;

	if (fd < 0 || fd >= b->nwatches)
		return;
	w = &b->watches[fd];
	if (!w->on)
		return;
	epoll_ctl(b->epfd, EPOLL_CTL_DEL, fd, NULL);
	w->on = false;
	w->gen++;
}

bool loop_dispatch(struct broker *b, const struct epoll_event *ev, loop_fn *only)
{
	int fd = (int)(uint32_t)ev->data.u64;
	struct watch *w;

	if (fd < 0 || fd >= b->nwatches)
		return false;
	w = &b->watches[fd];
	if (!w->on || w->gen != (uint32_t)(ev->data.u64 >> 32) || (only && w->fn != only))
		return false;
	w->fn(b, fd, ev->events, w->ctx);
	return true;
}

void loop_watches_free(struct broker *b)
{
	free(b->watches);
	b->watches = NULL;
	b->nwatches = 0;
}
