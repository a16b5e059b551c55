// SPDX-License-Identifier: MIT
/*
 * A binary min-heap of deadlines (TTL ends, lock-delay ends). Entries are
 * never removed early: when one fires, its owner re-checks the state in the
 * segment (a renewed TTL just re-arms), so cancelling costs nothing. Each
 * carries its owner: the core (NULL) or the face that scheduled it.
 */
#include <errno.h>
#include <stdlib.h>
#include <syslog.h>

#include "broker.h"

static void swap(struct timer *a, struct timer *b)
{
	struct timer t = *a;

	*a = *b;
	*b = t;
}

int timer_add(struct timer_heap *h, uint64_t at_ns, const struct face *owner, uint32_t kind,
	      uint32_t a, uint32_t b)
{
	size_t i;

	if (h->n == h->cap) {
		size_t cap = h->cap ? 2 * h->cap : 64;
		struct timer *v = realloc(h->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		h->v = v;
		h->cap = cap;
	}
	i = h->n++;
	h->v[i] = (struct timer){ at_ns, owner, kind, a, b };
	while (i && h->v[(i - 1) / 2].at_ns > h->v[i].at_ns) {
		swap(&h->v[(i - 1) / 2], &h->v[i]);
		i = (i - 1) / 2;
	}
	return 0;
}

bool timer_peek(const struct timer_heap *h, struct timer *out)
{
	if (!h->n)
		return false;
	*out = h->v[0];
	return true;
}

void timer_pop(struct timer_heap *h)
{
	size_t i = 0;

	if (!h->n)
		return;
	h->v[0] = h->v[--h->n];
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;

		if (l < h->n && h->v[l].at_ns < h->v[m].at_ns)
			m = l;
		if (r < h->n && h->v[r].at_ns < h->v[m].at_ns)
			m = r;
		if (m == i)
			break;
		swap(&h->v[i], &h->v[m]);
		i = m;
	}
}

void timer_free(struct timer_heap *h)
{
	free(h->v);
	h->v = NULL;
	h->n = h->cap = 0;
}

static void schedule(struct broker *b, uint64_t at_ns, const struct face *owner, uint32_t kind,
		     uint32_t a, uint32_t b2)
{
	if (timer_add(&b->timers, at_ns, owner, kind, a, b2))
		blog(LOG_CRIT, "out of memory for a timer; a deadline may be missed");
}

void broker_schedule(struct broker *b, uint64_t at_ns, uint32_t kind, uint32_t a, uint32_t b2)
{
	schedule(b, at_ns, NULL, kind, a, b2);
}

void face_schedule(struct broker *b, const struct face *owner, uint64_t at_ns, uint32_t kind,
		   uint32_t a, uint32_t b2)
{
	schedule(b, at_ns, owner, kind, a, b2);
}
