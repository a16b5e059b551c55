/* SPDX-License-Identifier: MIT */
/*
 * Connections to the control socket that have not sent their request yet:
 * bounded in time (CONN_REQUEST_TIMEOUT_MS), in number overall and per peer
 * uid, and an accept() that runs out of file descriptors backs off instead
 * of spinning. See conns.c and docs/security.md ("File descriptors").
 */
#ifndef SHMLOCKD_CONNS_H
#define SHMLOCKD_CONNS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct broker;

/* A connection that has not sent its request within this is closed. */
#define CONN_REQUEST_TIMEOUT_MS 3000
/* Hard ceiling on silent connections; below it, RLIMIT_NOFILE / 8. */
#define CONN_MAX 512
/* accept() calls per turn of the loop: requests of accepted connections
 * are read between two turns, so a flood cannot evict them unread. */
#define CONN_ACCEPTS_PER_TURN 32
/* Listener unwatched for this long when accept() finds no fd free. */
#define CONN_BACKOFF_MS 100

struct conns;

/* Watch the control socket's listener; @serve answers the request waiting on a
 * connection (loop.c), and closes it then. 0 or -errno. */
int conns_init(struct broker *b, void (*serve)(struct broker *b, int conn));
void conns_fini(struct broker *b);
/* Accept what waits on the listener (at most CONN_ACCEPTS_PER_TURN). */
void conns_accept(struct broker *b);
/* @fd is being answered or closed: it is no longer silent. */
void conns_forget(struct broker *b, int fd);
/* Close the connections past their deadline; summarise what was closed. */
void conns_expire(struct broker *b);
/* TIMER_LISTEN_REARM is due. */
void conns_rearm(struct broker *b);
/* Silent connections now (tests, logs). */
uint32_t conns_count(const struct broker *b);

/* The watch callback of an accepted connection (face.h): its request may be
 * there. */
void conns_request_ready(struct broker *b, int fd, uint32_t events, void *ctx);

#endif
