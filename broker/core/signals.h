/* SPDX-License-Identifier: MIT */
/*
 * dflockd's signals (pub/sub), between the faces that speak them: the TCP
 * protocol's listeners subscribe here, its `signal` and the HTTP API's
 * POST /v1/signals/{channel} publish here (docs/tcp-protocol.md, "Signals").
 * A listener is an owner (a connection) with a function that pushes to it;
 * nothing is stored in the segment, and nothing is kept once the last
 * subscription ends (owners end theirs when they go).
 */
#ifndef SHMLOCKD_SIGNALS_H
#define SHMLOCKD_SIGNALS_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

struct broker;

/* Longest payload: what a TCP connection's input buffer takes with the
 * request's other two lines (dflockd takes 64 KiB). */
#define SIGNAL_PAYLOAD_MAX 3072
/* Subscriptions one owner may hold. */
#define SIGNAL_SUBS_MAX 64

/* Push one signal to @owner; false when it cannot take it now (not counted
 * as delivered). */
typedef bool (*signal_push_fn)(void *owner, void *arg, const char *channel, size_t chl,
			       const char *payload, size_t pl);

/* Subscribe @owner to @pattern (NATS-style, valid) in queue group @group
 * ("": none). 0 (also when it already is), -ENOSPC (SIGNAL_SUBS_MAX), -ENOMEM. */
int signals_listen(struct broker *b, void *owner, signal_push_fn push, void *arg,
		   const char *pattern, const char *group);
/* Undo that listen, if any. */
void signals_unlisten(struct broker *b, void *owner, const char *pattern, const char *group);
/* @owner ends: its subscriptions go. */
void signals_owner_gone(struct broker *b, void *owner);
/* Deliver @payload on the literal @channel: every matching subscription
 * without a group, and one member of each matching group, round-robin.
 * Returns how many were pushed, or -ENOMEM. */
long signals_publish(struct broker *b, const char *channel, size_t chl, const char *payload,
		     size_t pl);
/* dflockd's stats signal_channels: [{pattern, group, listeners}] (new reference). */
json_t *signals_stats(struct broker *b);

/* Does the literal @channel match @pattern ('*' one token, final '>' one or more)? */
bool signals_match(const char *pattern, const char *channel);

#endif
