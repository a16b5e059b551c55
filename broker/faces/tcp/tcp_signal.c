// SPDX-License-Identifier: MIT
/*
 * dflockd's signals over the TCP protocol (docs/tcp-protocol.md): a
 * connection subscribes with `listen PATTERN [GROUP]` and is pushed
 * "sig CHANNEL PAYLOAD" lines; `signal CHANNEL PAYLOAD` answers "ok N", N the
 * listeners it reached. Within a queue group (same pattern, same group name)
 * each signal goes to one member, round-robin. Signals are not stored: a
 * signal nobody listens to is gone, as in dflockd. They live in this face
 * only (no segment state), so they reach TCP listeners of this broker.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tcp_int.h"

static bool same_sub(const struct tcp_sub *s, const struct tconn *c, const char *pattern,
		     const char *group)
{
	return s->c == c && !strcmp(s->pattern, pattern) && !strcmp(s->group, group);
}

static void sub_free(struct tcp_sub *s)
{
	free(s->pattern);
	free(s->group);
}

void tcp_sig_listen(struct tcp *t, struct tconn *c, const struct tcp_req *r)
{
	struct tcp_sub *s;
	uint32_t i;

	for (i = 0; i < t->nsubs; i++)
		if (same_sub(&t->subs[i], c, r->key, r->arg)) {
			tcp_reply(c, "ok"); /* already: once is enough */
			return;
		}
	if (c->nsubs >= TCP_SUBS_MAX) {
		tcp_reply(c, "error_max_listeners");
		return;
	}
	if (t->nsubs == t->cap_subs) {
		uint32_t cap = t->cap_subs ? t->cap_subs * 2 : 16;

		s = realloc(t->subs, cap * sizeof(*s));
		if (!s) {
			tcp_reply(c, "error");
			return;
		}
		t->subs = s;
		t->cap_subs = cap;
	}
	s = &t->subs[t->nsubs];
	s->c = c;
	s->pattern = strdup(r->key);
	s->group = strdup(r->arg);
	if (!s->pattern || !s->group) {
		sub_free(s);
		tcp_reply(c, "error");
		return;
	}
	t->nsubs++;
	c->nsubs++;
	tcp_reply(c, "ok");
}

static void sub_remove(struct tcp *t, uint32_t i)
{
	t->subs[i].c->nsubs--;
	sub_free(&t->subs[i]);
	memmove(&t->subs[i], &t->subs[i + 1], (t->nsubs - i - 1) * sizeof(t->subs[0]));
	t->nsubs--;
}

void tcp_sig_unlisten(struct tcp *t, struct tconn *c, const struct tcp_req *r)
{
	uint32_t i;

	for (i = 0; i < t->nsubs; i++)
		if (same_sub(&t->subs[i], c, r->key, r->arg)) {
			sub_remove(t, i);
			break;
		}
	tcp_reply(c, "ok"); /* not subscribed: nothing to undo */
}

void tcp_sig_conn_gone(struct tcp *t, struct tconn *c)
{
	uint32_t i = 0;

	while (c->nsubs && i < t->nsubs)
		if (t->subs[i].c == c)
			sub_remove(t, i);
		else
			i++;
}

/* Push one signal to @s's connection; false when it cannot take it. */
static bool push(struct tcp *t, const struct tcp_sub *s, const char *channel, size_t chl,
		 const char *payload, size_t pl)
{
	struct tconn *l = s->c;
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
	tcp_conn_update(t, l); /* write it when the socket takes it */
	return true;
}

/* Has a member of @s's queue group been picked among @picked[0..n)? */
static bool group_picked(const struct tcp *t, const uint32_t *picked, uint32_t n,
			 const struct tcp_sub *s)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		if (!strcmp(t->subs[picked[i]].group, s->group) &&
		    !strcmp(t->subs[picked[i]].pattern, s->pattern))
			return true;
	return false;
}

void tcp_sig_publish(struct tcp *t, struct tconn *c, const struct tcp_req *r)
{
	uint32_t *picked = NULL, npicked = 0, i;
	unsigned long delivered = 0;

	if (t->nsubs) {
		picked = malloc(t->nsubs * sizeof(*picked));
		if (!picked) {
			tcp_reply(c, "error");
			return;
		}
	}
	for (i = 0; i < t->nsubs; i++) {
		struct tcp_sub *s = &t->subs[i];

		if (!tcp_pattern_match(s->pattern, r->key))
			continue;
		if (s->group[0]) {
			/* The group's first member in the list that can take it;
			 * it then goes to the back of the list (round-robin). */
			if (group_picked(t, picked, npicked, s) ||
			    !push(t, s, r->key, r->key_len, r->payload, r->payload_len))
				continue;
			picked[npicked++] = i;
			delivered++;
		} else if (push(t, s, r->key, r->key_len, r->payload, r->payload_len)) {
			delivered++;
		}
	}
	/* Picked members to the back, in the order they were picked: indices
	 * above one moved shift down by one. */
	for (i = 0; i < npicked; i++) {
		uint32_t at = picked[i], k;
		struct tcp_sub s = t->subs[at];

		memmove(&t->subs[at], &t->subs[at + 1], (t->nsubs - at - 1) * sizeof(s));
		t->subs[t->nsubs - 1] = s;
		for (k = i + 1; k < npicked; k++)
			if (picked[k] > at)
				picked[k]--;
	}
	free(picked);
	tcp_reply(c, "ok %lu", delivered);
}

static bool same_channel(const struct tcp_sub *a, const struct tcp_sub *b)
{
	return !strcmp(a->pattern, b->pattern) && !strcmp(a->group, b->group);
}

json_t *tcp_sig_stats(struct tcp *t)
{
	json_t *a = json_array();
	uint32_t i, k;

	for (i = 0; a && i < t->nsubs; i++) {
		const struct tcp_sub *s = &t->subs[i];
		json_int_t n = 0;

		for (k = 0; k < i && !same_channel(&t->subs[k], s); k++)
			;
		if (k < i)
			continue; /* counted at its first entry */
		for (k = i; k < t->nsubs; k++)
			n += same_channel(&t->subs[k], s);
		json_array_append_new(a, json_pack("{s:s, s:s, s:I}", "pattern", s->pattern,
						   "group", s->group, "listeners", n));
	}
	return a;
}
