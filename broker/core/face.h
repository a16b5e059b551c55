/* SPDX-License-Identifier: MIT */
/*
 * How the core meets a face: the one registration interface (see
 * docs/architecture.md, "The core and its faces").
 *
 * A face (the dflockd HTTP API, the TCP protocol, the metrics listener, ...)
 * is a struct face of callbacks, registered in main.c before the loop runs.
 * The core calls a face only through it: start and stop, the timers it
 * scheduled, a session's end, the doorbell, the end of a loop turn, the
 * drain at SIGTERM. A face gives the loop its fds as watchers with callbacks
 * (as libuv's uv__io_t), never touching the loop's epoll fd, and its
 * deadlines as timers it owns. A face never calls another face: what two
 * faces share lives in a module both use (broker/net/).
 *
 * Everything here runs on the event loop's thread.
 */
#ifndef SHMLOCKD_FACE_H
#define SHMLOCKD_FACE_H

#include <stdbool.h>
#include <stdint.h>

struct broker;

/* ---- fds ------------------------------------------------------------------ */

/* @events: what epoll reported (EPOLLIN, EPOLLOUT, EPOLLRDHUP, EPOLLHUP ...). */
typedef void loop_fn(struct broker *b, int fd, uint32_t events, void *ctx);

/*
 * Watch @fd for @events (epoll's; EPOLLIN for a listener): @fn(b, fd, events,
 * @ctx) runs on the loop thread when one is ready. 0 or -errno (-ENOMEM, the
 * kernel's epoll limits). An fd is watched once: watch it again only after
 * loop_unwatch().
 */
int loop_watch(struct broker *b, int fd, uint32_t events, loop_fn *fn, void *ctx);
/* Change what @fd is watched for: 0 or -errno. */
int loop_modify(struct broker *b, int fd, uint32_t events);
/* Stop watching @fd (before closing it): none of its events that epoll
 * reported in this turn reaches its callback any more. */
void loop_unwatch(struct broker *b, int fd);

/* ---- faces ------------------------------------------------------------------ */

struct face {
	const char *name;
	/* Open what is configured (nothing, when the face is off): 0, or
	 * -errno after logging why (the broker then exits). */
	int (*start)(struct broker *b);
	/* Close everything at once: idempotent, and also called after a
	 * start that failed half-way. */
	void (*stop)(struct broker *b);
	/* The rest may be NULL. */
	/* A timer this face scheduled (face_schedule()) is due; @kind, @a
	 * and @b2 are the face's own. */
	void (*timer)(struct broker *b, uint32_t kind, uint32_t a, uint32_t b2);
	/* Session @slot ended (closed, expired, its process died, destroyed
	 * by an operator): end what the face does on its behalf. */
	void (*session_ended)(struct broker *b, uint32_t slot);
	/* The segment's doorbell rang (a grant to a waiter the broker armed,
	 * a lease taken by an in-process session): poll the waits. */
	void (*doorbell)(struct broker *b);
	/* End of the loop's turn: run the work deferred to it (true: some
	 * ran); @run false: only say whether some is pending (then the loop
	 * polls without sleeping). */
	bool (*deferred)(struct broker *b, bool run);
	/* SIGTERM: start draining (first call) and say whether nothing is left
	 * in flight; the loop stops once every face says so. */
	bool (*drained)(struct broker *b);
};

/* At most this many faces. */
#define FACES_MAX 8

/* Register @f (main.c, before loop_run()): 0, or -ENOSPC past FACES_MAX.
 * Faces are started in registration order and stopped in reverse. */
int face_register(struct broker *b, const struct face *f);

/* At @at_ns (CLOCK_MONOTONIC), call @owner->timer(b, @kind, @a, @b2). A timer
 * is never cancelled: when it fires, its owner checks whether it still
 * matters (a generation in @a or @b2). */
void face_schedule(struct broker *b, const struct face *owner, uint64_t at_ns, uint32_t kind,
		   uint32_t a, uint32_t b2);

/* ---- the core's side (faces.c) ----------------------------------------------- */

int faces_start(struct broker *b);
void faces_stop(struct broker *b);
void faces_timer(struct broker *b, const struct face *owner, uint32_t kind, uint32_t a,
		 uint32_t b2);
void faces_session_ended(struct broker *b, uint32_t slot);
void faces_doorbell(struct broker *b);
/* Every face's deferred work run (@run) or asked about: true when any. */
bool faces_deferred(struct broker *b, bool run);
/* Every face asked (each starts draining); true when all are drained. */
bool faces_drained(struct broker *b);

#endif
