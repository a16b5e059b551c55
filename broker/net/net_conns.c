// SPDX-License-Identifier: MIT
/*
 * Connection caps and deadlines, as nginx keeps them for every protocol
 * module: at most so many connections overall and per peer, and a
 * deadline for the part a client controls the pace of — the whole request
 * head (HTTP) or the authentication (TCP), not just idleness, so that a
 * client trickling a byte a second is still closed on time.
 *
 * A peer is a user for a local client (any 127/8 source address of one
 * user is one peer) and an address otherwise (struct net_peer.key).
 * Connections that have not sent their head or authenticated yet
 * ("pending") never keep out one that has: at a cap, the oldest pending
 * connection is doomed to make room; only when none is pending is the new
 * one refused.
 */
#include <string.h>
#include <sys/socket.h>

#include "net.h"

uint32_t net_pool_count(const struct net_pool *p, const char *key)
{
	const struct net_conn *c;
	uint32_t n = 0;

	for (c = p->head; c; c = c->next)
		n += !c->doomed && !strcmp(c->key, key);
	return n;
}

/* Pending connections (of @key when not NULL). */
static uint32_t pending_count(const struct net_pool *p, const char *key)
{
	const struct net_conn *c;
	uint32_t n = 0;

	for (c = p->head; c; c = c->next)
		n += !c->doomed && c->pending && (!key || !strcmp(c->key, key));
	return n;
}

/* The oldest pending, not doomed connection (of @key when not NULL). */
static struct net_conn *oldest_pending(const struct net_pool *p, const char *key,
				       const struct net_conn *but)
{
	struct net_conn *c;

	for (c = p->head; c; c = c->next)
		if (c != but && !c->doomed && c->pending && (!key || !strcmp(c->key, key)))
			return c;
	return NULL;
}

static void link_tail(struct net_pool *p, struct net_conn *c)
{
	c->next = NULL;
	c->prev = p->tail;
	if (p->tail)
		p->tail->next = c;
	else
		p->head = c;
	p->tail = c;
}

static void unlink_conn(struct net_pool *p, struct net_conn *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		p->head = c->next;
	if (c->next)
		c->next->prev = c->prev;
	else
		p->tail = c->prev;
	c->prev = c->next = NULL;
}

struct net_conn *net_pool_add(struct net_pool *p, struct net_conn *c, uint64_t now_ns)
{
	struct net_conn *victim = NULL;

	c->since_ns = now_ns;
	c->pending = true;
	c->doomed = false;
	if (p->max_per_peer && c->key[0] && net_pool_count(p, c->key) >= p->max_per_peer)
		victim = oldest_pending(p, c->key, NULL);
	else if (p->max_pending_per_peer && c->key[0] &&
		 pending_count(p, c->key) >= p->max_pending_per_peer)
		victim = oldest_pending(p, c->key, NULL);
	else if (p->max && p->live >= p->max)
		victim = oldest_pending(p, NULL, NULL);
	else if (p->max_pending && pending_count(p, NULL) >= p->max_pending)
		victim = oldest_pending(p, NULL, NULL);
	else
		goto fits;
	if (!victim) {
		c->doomed = true; /* refused: in no list, counted nowhere */
		return c;
	}
	victim->doomed = true;
	p->live--;
fits:
	link_tail(p, c);
	p->live++;
	return victim;
}

void net_pool_del(struct net_pool *p, struct net_conn *c)
{
	if (!c->prev && p->head != c)
		return; /* refused at net_pool_add(): never linked */
	if (!c->doomed)
		p->live--;
	unlink_conn(p, c);
}

void net_pool_ready(struct net_pool *p, struct net_conn *c)
{
	(void)p;
	c->pending = false;
}

void net_pool_pending(struct net_pool *p, struct net_conn *c, uint64_t now_ns)
{
	if (c->doomed)
		return;
	/* To the tail: the list stays oldest first. */
	unlink_conn(p, c);
	link_tail(p, c);
	c->pending = true;
	c->since_ns = now_ns;
}

struct net_conn *net_pool_overdue(struct net_pool *p, uint64_t now_ns)
{
	struct net_conn *c;

	if (!p->deadline_ns)
		return NULL;
	for (c = p->head; c; c = c->next)
		if (!c->doomed && c->pending && now_ns - c->since_ns >= p->deadline_ns) {
			c->doomed = true;
			p->live--;
			return c;
		}
	return NULL;
}

void net_conn_doom(struct net_pool *p, struct net_conn *c)
{
	if (!c->doomed) {
		c->doomed = true;
		p->live--;
	}
	if (c->fd >= 0)
		shutdown(c->fd, SHUT_RDWR);
}
