// SPDX-License-Identifier: MIT
/*
 * Per-client-address records: open HTTP sessions (for
 * --http-max-sessions-per-ip) and a token bucket (for
 * --http-rate-limit-per-ip). Clients over the Unix socket share the address
 * "local". Records with nothing to remember are dropped by http_ips_gc(), so
 * the table grows with the addresses active in the last minute.
 */
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "http_int.h"

#define IP_IDLE_NS (60ull * 1000000000ull)

static unsigned bucket(const char *ip)
{
	unsigned hash = 2166136261u;

	while (*ip)
		hash = (hash ^ (unsigned char)*ip++) * 16777619u;
	return hash % 256;
}

static double burst_of(const struct http_opts *o)
{
	return o->rate_burst ? o->rate_burst : o->rate_per_ip;
}

struct ipstat *http_ip(struct http *h, const char *ip)
{
	struct ipstat **head = &h->ips[bucket(ip)], *s;

	for (s = *head; s; s = s->next)
		if (!strcmp(s->ip, ip))
			return s;
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	strncpy(s->ip, ip, sizeof(s->ip) - 1);
	s->tokens = burst_of(&h->b->opts.http);
	s->refill_ns = mono_ns();
	s->next = *head;
	*head = s;
	h->nips++;
	return s;
}

bool http_rate_allow(struct http *h, const char *ip)
{
	const struct http_opts *o = &h->b->opts.http;
	struct ipstat *s;
	uint64_t now;
	double burst = burst_of(o);

	if (!o->rate_per_ip)
		return true;
	s = http_ip(h, ip);
	if (!s)
		return false;
	now = mono_ns();
	s->tokens += (double)(now - s->refill_ns) * o->rate_per_ip / 1e9;
	if (s->tokens > burst)
		s->tokens = burst;
	s->refill_ns = now;
	if (s->tokens < 1.0)
		return false;
	s->tokens -= 1.0;
	return true;
}

void http_ips_gc(struct http *h)
{
	uint64_t now = mono_ns();
	unsigned i;

	for (i = 0; i < 256; i++) {
		struct ipstat **p = &h->ips[i], *s;

		while ((s = *p)) {
			if (!s->sessions && now - s->refill_ns > IP_IDLE_NS) {
				*p = s->next;
				free(s);
				h->nips--;
			} else {
				p = &s->next;
			}
		}
	}
}

void http_ips_free(struct http *h)
{
	unsigned i;

	for (i = 0; i < 256; i++)
		while (h->ips[i]) {
			struct ipstat *s = h->ips[i];

			h->ips[i] = s->next;
			free(s);
		}
	h->nips = 0;
}
