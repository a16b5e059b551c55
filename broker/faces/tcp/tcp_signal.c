// SPDX-License-Identifier: MIT
/*
 * dflockd's signals over the TCP protocol (docs/tcp-protocol.md): a
 * connection subscribes with `listen PATTERN [GROUP]` and is pushed
 * "sig CHANNEL PAYLOAD" lines; `signal CHANNEL PAYLOAD` answers "ok N", N the
 * listeners it reached. The subscriptions and the delivery rules are the
 * core's (core/signals.c), shared with the HTTP API's publish; this file
 * answers the commands and pushes the lines.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/signals.h"
#include "tcp_int.h"

/* A listener whose unsent output passed this misses signals (not counted
 * as delivered) until it reads: a deaf listener costs bounded memory. */
#define TCP_SIG_OUT_MAX (4u * TCP_OUT_HIGH)

_Static_assert(TCP_PAYLOAD_MAX == SIGNAL_PAYLOAD_MAX, "one payload limit for every face");

static bool push(void *owner, void *arg, const char *channel, size_t chl, const char *payload,
		 size_t pl)
{
	struct tconn *l = owner;
	char *line;

	if (l->closing || l->out_len > TCP_SIG_OUT_MAX)
		return false;
	line = malloc(4 + chl + 1 + pl);
	if (!line)
		return false;
	memcpy(line, "sig ", 4);
	memcpy(line + 4, channel, chl);
	line[4 + chl] = ' ';
	memcpy(line + 5 + chl, payload, pl);
	tcp_reply_text(l, line, 5 + chl + pl);
	free(line);
	if (l->closing) /* out of memory for its output */
		return false;
	tcp_conn_update(arg, l); /* write it when the socket takes it */
	return true;
}

void tcp_sig_listen(struct tcp *t, struct tconn *c, const struct tcp_req *r)
{
	int err = signals_listen(t->b, c, push, t, r->key, r->arg);

	tcp_reply(c, err == -ENOSPC ? "error_max_listeners" : err ? "error" : "ok");
}

void tcp_sig_unlisten(struct tcp *t, struct tconn *c, const struct tcp_req *r)
{
	signals_unlisten(t->b, c, r->key, r->arg);
	tcp_reply(c, "ok"); /* not subscribed: nothing to undo */
}

void tcp_sig_conn_gone(struct tcp *t, struct tconn *c)
{
	signals_owner_gone(t->b, c);
}

void tcp_sig_publish(struct tcp *t, struct tconn *c, const struct tcp_req *r)
{
	long n = signals_publish(t->b, r->key, r->key_len, r->payload, r->payload_len);

	if (n < 0)
		tcp_reply(c, "error");
	else
		tcp_reply(c, "ok %ld", n);
}
