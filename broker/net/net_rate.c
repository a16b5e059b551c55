// SPDX-License-Identifier: MIT
/*
 * Per-peer records of the HTTP and Consul APIs: a token bucket (for
 * --http-rate-limit-per-ip, which Consul's listener obeys too) and the
 * count of open sessions (for --http-max-sessions-per-ip). A peer is a key
 * of struct net_peer: a local user, whatever 127/8 address it sends from,
 * or an address. Records with nothing to remember are dropped by
 * net_rate_gc(), so the table grows with the peers active in the last
 * minute.
 */
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "net.h"

#define IDLE_NS (60ull * 1000000000ull)

static unsigned bucket(const char *key)
{
	unsigned hash = 2166136261u;

	while (*key)
		hash = (hash ^ (unsigned char)*key++) * 16777619u;
	return hash % 256;
}

static double burst_of(const struct net_rates *t)
{
	return t->burst ? t->burst : t->rate;
}

struct net_ipstat *net_rate_peer(struct net_rates *t, const char *key)
{
	struct net_ipstat **head = &t->b[bucket(key)], *s;

	for (s = *head; s; s = s->next)
		if (!strcmp(s->ip, key))
			return s;
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	strncpy(s->ip, key, sizeof(s->ip) - 1);
	s->tokens = burst_of(t);
	s->refill_ns = mono_ns();
	s->next = *head;
	*head = s;
	t->n++;
	return s;
}

bool net_rate_allow(struct net_rates *t, const char *key)
{
	struct net_ipstat *s;
	uint64_t now;
	double burst = burst_of(t);

	if (!t->rate)
		return true;
	s = net_rate_peer(t, key);
	if (!s)
		return false;
	now = mono_ns();
	s->tokens += (double)(now - s->refill_ns) * t->rate / 1e9;
	if (s->tokens > burst)
		s->tokens = burst;
	s->refill_ns = now;
	if (s->tokens < 1.0)
		return false;
	s->tokens -= 1.0;
	return true;
}

uint64_t net_auth_fail_at(struct net_rates *t, const char *key, uint64_t now_ns)
{
	struct net_ipstat *s = net_rate_peer(t, key);
	uint64_t at = now_ns + NET_AUTH_DELAY_NS;

	if (!s)
		return at;
	if (s->fail_next_ns > now_ns)
		at = s->fail_next_ns + NET_AUTH_DELAY_NS;
	s->fail_next_ns = at;
	return at;
}

void net_rate_gc(struct net_rates *t)
{
	uint64_t now = mono_ns();
	unsigned i;

	for (i = 0; i < 256; i++) {
		struct net_ipstat **p = &t->b[i], *s;

		while ((s = *p)) {
			if (!s->sessions && now - s->refill_ns > IDLE_NS && now > s->fail_next_ns) {
				*p = s->next;
				free(s);
				t->n--;
			} else {
				p = &s->next;
			}
		}
	}
}

void net_rate_free(struct net_rates *t)
{
	unsigned i;

	for (i = 0; i < 256; i++)
		while (t->b[i]) {
			struct net_ipstat *s = t->b[i];

			t->b[i] = s->next;
			free(s);
		}
	t->n = 0;
}
