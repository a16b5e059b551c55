// SPDX-License-Identifier: MIT
/*
 * dflockd's signals between the faces (signals.h): one list of
 * subscriptions in delivery order; within a queue group (same pattern, same
 * group name) each signal goes to the first member that takes it, which then
 * moves to the back of the list: round-robin. Signals are not stored: one
 * that reaches no one is gone, as in dflockd.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "broker.h"
#include "signals.h"

struct signal_sub {
	void *owner, *arg;
	signal_push_fn push;
	char *pattern, *group; /* group "": none */
};

struct signals {
	struct signal_sub *subs;
	uint32_t n, cap;
};

static struct signals *hub(struct broker *b)
{
	if (!b->signals)
		b->signals = calloc(1, sizeof(*b->signals));
	return b->signals;
}

/* No subscription left: nothing kept (so a broker that stops has nothing
 * of this to free, its connections having ended). */
static void hub_release(struct broker *b)
{
	struct signals *h = b->signals;

	if (h && !h->n) {
		free(h->subs);
		free(h);
		b->signals = NULL;
	}
}

static bool same_channel(const struct signal_sub *a, const char *pattern, const char *group)
{
	return !strcmp(a->pattern, pattern) && !strcmp(a->group, group);
}

int signals_listen(struct broker *b, void *owner, signal_push_fn push, void *arg,
		   const char *pattern, const char *group)
{
	struct signals *h = hub(b);
	struct signal_sub *s;
	uint32_t i, mine = 0;

	if (!h)
		return -ENOMEM;
	for (i = 0; i < h->n; i++)
		if (h->subs[i].owner == owner) {
			if (same_channel(&h->subs[i], pattern, group))
				return 0; /* already: once is enough */
			mine++;
		}
	if (mine >= SIGNAL_SUBS_MAX)
		return -ENOSPC;
	if (h->n == h->cap) {
		uint32_t cap = h->cap ? h->cap * 2 : 16;

		s = realloc(h->subs, cap * sizeof(*s));
		if (!s) {
			hub_release(b);
			return -ENOMEM;
		}
		h->subs = s;
		h->cap = cap;
	}
	s = &h->subs[h->n];
	s->owner = owner;
	s->arg = arg;
	s->push = push;
	s->pattern = strdup(pattern);
	s->group = strdup(group);
	if (!s->pattern || !s->group) {
		free(s->pattern);
		free(s->group);
		hub_release(b);
		return -ENOMEM;
	}
	h->n++;
	return 0;
}

static void sub_remove(struct signals *h, uint32_t i)
{
	free(h->subs[i].pattern);
	free(h->subs[i].group);
	memmove(&h->subs[i], &h->subs[i + 1], (h->n - i - 1) * sizeof(h->subs[0]));
	h->n--;
}

void signals_unlisten(struct broker *b, void *owner, const char *pattern, const char *group)
{
	struct signals *h = b->signals;
	uint32_t i;

	for (i = 0; h && i < h->n; i++)
		if (h->subs[i].owner == owner && same_channel(&h->subs[i], pattern, group)) {
			sub_remove(h, i);
			break;
		}
	hub_release(b);
}

void signals_owner_gone(struct broker *b, void *owner)
{
	struct signals *h = b->signals;
	uint32_t i = 0;

	while (h && i < h->n)
		if (h->subs[i].owner == owner)
			sub_remove(h, i);
		else
			i++;
	hub_release(b);
}

bool signals_match(const char *pattern, const char *channel)
{
	const char *p = pattern, *c = channel;

	for (;;) {
		size_t pl = strcspn(p, "."), cl = strcspn(c, ".");

		if (pl == 1 && *p == '>')
			return cl > 0; /* one or more tokens left */
		if (!cl)
			return false;
		if (!(pl == 1 && *p == '*') && (pl != cl || memcmp(p, c, pl)))
			return false;
		p += pl;
		c += cl;
		if (!*p || !*c)
			return !*p && !*c;
		p++;
		c++;
	}
}

/* Has a member of @s's queue group been picked among @picked[0..n)? */
static bool group_picked(const struct signals *h, const uint32_t *picked, uint32_t n,
			 const struct signal_sub *s)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		if (same_channel(&h->subs[picked[i]], s->pattern, s->group))
			return true;
	return false;
}

long signals_publish(struct broker *b, const char *channel, size_t chl, const char *payload,
		     size_t pl)
{
	struct signals *h = b->signals;
	uint32_t *picked, npicked = 0, i;
	long delivered = 0;

	if (!h || !h->n)
		return 0;
	picked = malloc(h->n * sizeof(*picked));
	if (!picked)
		return -ENOMEM;
	for (i = 0; i < h->n; i++) {
		struct signal_sub *s = &h->subs[i];

		if (!signals_match(s->pattern, channel))
			continue;
		if (s->group[0] && group_picked(h, picked, npicked, s))
			continue;
		if (!s->push(s->owner, s->arg, channel, chl, payload, pl))
			continue;
		if (s->group[0])
			picked[npicked++] = i;
		delivered++;
	}
	/* Picked members to the back, in the order they were picked: indices
	 * above one moved shift down by one. */
	for (i = 0; i < npicked; i++) {
		uint32_t at = picked[i], k;
		struct signal_sub s = h->subs[at];

		memmove(&h->subs[at], &h->subs[at + 1], (h->n - at - 1) * sizeof(s));
		h->subs[h->n - 1] = s;
		for (k = i + 1; k < npicked; k++)
			if (picked[k] > at)
				picked[k]--;
	}
	free(picked);
	return delivered;
}

json_t *signals_stats(struct broker *b)
{
	const struct signals *h = b->signals;
	json_t *a = json_array();
	uint32_t i, k;

	for (i = 0; a && h && i < h->n; i++) {
		const struct signal_sub *s = &h->subs[i];
		json_int_t n = 0;

		for (k = 0; k < i && !same_channel(&h->subs[k], s->pattern, s->group); k++)
			;
		if (k < i)
			continue; /* counted at its first entry */
		for (k = i; k < h->n; k++)
			n += same_channel(&h->subs[k], s->pattern, s->group);
		json_array_append_new(a, json_pack("{s:s, s:s, s:I}", "pattern", s->pattern,
						   "group", s->group, "listeners", n));
	}
	return a;
}
