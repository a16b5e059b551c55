// SPDX-License-Identifier: MIT
/*
 * What the web view shows (docs/web-view.md), read from the segment without
 * any key mutex, as the operator's node-table listings are (operator.c):
 * the event loop never waits on a client stalled in a critical section, and
 * a torn read is corrected by the next change's snapshot. Keys are filtered,
 * sorted and paged here, so a page of 10 000 keys costs the browser one
 * page of rows; only that page's keys get their holders and queues.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "clock.h"
#include "hist.h"
#include "keyops.h"
#include "keyreset.h"
#include "core/operator.h"
#include "ui.h"

#define UI_LIST_MAX 200	  /* sessions, leases, quarantined keys shown */
#define UI_ROW_HOLDERS 16 /* holders listed per key (the count is exact) */
#define UI_ROW_WAITERS 32 /* queued requests listed per key */

static uint64_t mix(uint64_t h, uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
	return h * 0xff51afd7ed558ccdull;
}

static int seen_cmp(const void *a, const void *b)
{
	const struct ui_seen *x = a, *y = b;

	return x->token < y->token ? -1 : x->token > y->token;
}

static const struct ui_seen *seen_of(const struct ui *u, uint64_t token)
{
	struct ui_seen key = { token, 0, false };

	if (!u || !u->nseen)
		return NULL;
	return bsearch(&key, u->seen, u->nseen, sizeof(key), seen_cmp);
}

uint64_t ui_stamp(struct http *h)
{
	struct segment *seg = &h->b->seg;
	const struct seg_stats *st = &seg->hdr->stats;
	struct ui *u = h->ui;
	uint64_t s = 1, now = mono_ns(), li, mi;
	struct ui_seen *seen = NULL;
	uint32_t i, j, n = 0, cap = 0;

	for (i = 0; i < seg->caps.max_keys; i++) {
		struct seg_key *k = &seg->keys[i];
		uint32_t state = atomic_load(&k->state);

		if (state != KEY_USED && state != KEY_QUARANTINED)
			continue;
		key_counts_peek(k, &li, &mi);
		s = mix(s, i);
		s = mix(s, state);
		for (j = 0; j < SEG_KEY_SLOTS; j++)
			s = mix(s, seg_key_slot_load(k, j));
		s = mix(s, mi);
		s = mix(s, k->holders ^ ((uint64_t)k->waiters << 32));
		s = mix(s, k->delay_until_ns > now);
	}
	for (i = 0; i < seg->nnodes; i++) {
		const struct seg_node *nd = &seg->nodes[i];
		uint64_t w = atomic_load(&nd->word);

		if (!w || NODE_STATE(w) == NODE_WATCHING)
			continue;
		s = mix(s, i);
		s = mix(s, w);
		s = mix(s, nd->token);
		s = mix(s, nd->lease_until_ns);
		if (!u || !seg_node_is_hold(seg, i, w))
			continue;
		if (n == cap) {
			struct ui_seen *p = realloc(seen, (cap ? cap * 2 : 64) * sizeof(*p));

			if (!p)
				continue;
			seen = p;
			cap = cap ? cap * 2 : 64;
		}
		{
			const struct ui_seen *was = seen_of(u, nd->token);

			seen[n].token = nd->token;
			seen[n].since_ns = was ? was->since_ns : now;
			seen[n].before = was ? was->before : !u || !u->scans;
		}
		n++;
	}
	for (i = 0; i < seg->caps.max_sessions; i++)
		s = mix(s, atomic_load(&seg->sessions[i].state_gen));
	s = mix(s, atomic_load(&st->quarantined));
	if (u) {
		if (n)
			qsort(seen, n, sizeof(*seen), seen_cmp);
		free(u->seen);
		u->seen = seen;
		u->nseen = n;
		u->scans++;
		u->scanned_ns = now;
	} else {
		free(seen);
	}
	return s;
}

/* A JSON string of @len bytes of @s, which need not be UTF-8 (a key is any
 * bytes): bytes that do not make UTF-8 become '?'. */
static json_t *str_n(const char *s, size_t len)
{
	json_t *j = json_stringn(s, len);
	char *c;
	size_t i;

	if (j)
		return j;
	c = malloc(len + 1);
	if (!c)
		return NULL;
	for (i = 0; i < len; i++)
		c[i] = (unsigned char)s[i] >= 0x80 || !s[i] ? '?' : s[i];
	j = json_stringn(c, len);
	free(c);
	return j;
}

static json_t *str0(const char *s, size_t max)
{
	return str_n(s, strnlen(s, max));
}

/* Tokens as decimal strings: they pass 2^53, past which a JS number is
 * not exact. */
static json_t *tok_str(uint64_t t)
{
	char b[24];

	snprintf(b, sizeof(b), "%llu", (unsigned long long)t);
	return json_string(b);
}

static const char *kind_name(uint32_t kind)
{
	return kind == LOCAL_KIND_LOCK	      ? "lock"
	       : kind == LOCAL_KIND_SEMAPHORE ? "semaphore"
					      : "none";
}

static uint64_t ms_left(uint64_t until, uint64_t now)
{
	return until > now ? (until - now + 999999) / 1000000 : 0;
}

/* ---- the key table ----------------------------------------------------------- */

struct krow {
	uint64_t p0, p1; /* the name's first 16 bytes, big-endian, zero-padded */
	uint64_t delay_ms, grants;
	uint32_t idx;
	uint32_t holders, waiters;
	const char *name;
	size_t len;
};

enum ui_sort { S_KEY, S_HOLDERS, S_WAITERS, S_DELAY, S_GRANTS };

/* qsort() has no argument for these: the loop thread is the only caller. */
static enum ui_sort cmp_by;
static bool cmp_desc;

/* Sorting 10 000 names is most of a snapshot's cost: compare the prefix
 * kept in the row (no trip to the key's line in the segment) and the rest
 * only on a tie. */
static uint64_t be_prefix(const char *s, size_t len, size_t from)
{
	uint64_t v = 0;
	size_t i;

	for (i = 0; i < 8; i++)
		v = v << 8 | (from + i < len ? (unsigned char)s[from + i] : 0);
	return v;
}

static int u64_cmp(uint64_t a, uint64_t b)
{
	return a < b ? -1 : a > b;
}

static int name_cmp(const struct krow *a, const struct krow *b)
{
	size_t n = a->len < b->len ? a->len : b->len;
	int c = u64_cmp(a->p0, b->p0);

	if (!c)
		c = u64_cmp(a->p1, b->p1);
	if (!c && n > 16)
		c = memcmp(a->name + 16, b->name + 16, n - 16);
	return c ? c : a->len < b->len ? -1 : a->len > b->len;
}

static int row_cmp(const void *pa, const void *pb)
{
	const struct krow *a = pa, *b = pb;
	int c = 0;

	switch (cmp_by) {
	case S_HOLDERS:
		c = u64_cmp(a->holders, b->holders);
		break;
	case S_WAITERS:
		c = u64_cmp(a->waiters, b->waiters);
		break;
	case S_DELAY:
		c = u64_cmp(a->delay_ms, b->delay_ms);
		break;
	case S_GRANTS:
		c = u64_cmp(a->grants, b->grants);
		break;
	case S_KEY:
		return cmp_desc ? -name_cmp(a, b) : name_cmp(a, b);
	}
	if (cmp_desc)
		c = -c;
	return c ? c : name_cmp(a, b);
}

static enum ui_sort sort_of(const char *s)
{
	return !strcmp(s, "holders")   ? S_HOLDERS
	       : !strcmp(s, "waiters") ? S_WAITERS
	       : !strcmp(s, "delay")   ? S_DELAY
	       : !strcmp(s, "grants")  ? S_GRANTS
				       : S_KEY;
}

static json_t *session_ref(const struct segment *seg, uint64_t w)
{
	const struct seg_session *s = seg_session_at(seg, NODE_SESSION(w));
	char id[33] = "";

	if (!s)
		return json_pack("{s:s, s:s, s:i}", "session", "", "name", "", "pid", 0);
	hex_encode(s->id, sizeof(s->id), id);
	return json_pack("{s:s, s:o, s:i}", "session", id, "name", str0(s->name, sizeof(s->name)),
			 "pid", (json_int_t)s->pid);
}

/* qsort() has no argument for these: the loop thread is the only caller. */
static const struct seg_node *cmp_nodes;

/* Queued requests in arrival order (seq), as the FIFO grants them. */
static int wait_cmp(const void *pa, const void *pb)
{
	const uint32_t *a = pa, *b = pb;

	return u64_cmp(cmp_nodes[*a].seq, cmp_nodes[*b].seq);
}

/* The rows of the page: their holders and queues from one pass over the
 * nodes. */
static json_t *page_rows(struct http *h, struct krow *rows, uint32_t n)
{
	struct segment *seg = &h->b->seg;
	uint64_t now = mono_ns();
	uint32_t now_ms = (uint32_t)(now / 1000000), i, j;
	int32_t *pos = malloc(seg->caps.max_keys * sizeof(*pos));
	uint32_t(*hold)[UI_ROW_HOLDERS] = calloc(n ? n : 1, sizeof(*hold));
	uint32_t(*wait)[UI_ROW_WAITERS] = calloc(n ? n : 1, sizeof(*wait));
	uint32_t *nh = calloc(n ? n : 1, sizeof(*nh)), *nw = calloc(n ? n : 1, sizeof(*nw));
	json_t *out = json_array();

	if (!pos || !hold || !wait || !nh || !nw || !out)
		goto done;
	memset(pos, 0xff, seg->caps.max_keys * sizeof(*pos));
	for (i = 0; i < n; i++)
		pos[rows[i].idx] = (int32_t)i;
	for (i = 0; i < seg->nnodes; i++) {
		uint64_t w = atomic_load(&seg->nodes[i].word);
		uint32_t key = NODE_KEY(w);
		int32_t p;

		if (!w || key >= seg->caps.max_keys || (p = pos[key]) < 0)
			continue;
		if (seg_node_is_hold(seg, i, w) && nh[p] < UI_ROW_HOLDERS)
			hold[p][nh[p]++] = i;
		else if (NODE_STATE(w) == NODE_WAITING && nw[p] < UI_ROW_WAITERS)
			wait[p][nw[p]++] = i;
	}
	cmp_nodes = seg->nodes;
	for (i = 0; i < n; i++) {
		const struct seg_key *k = &seg->keys[rows[i].idx];
		bool quar = atomic_load(&k->state) == KEY_QUARANTINED;
		json_t *row, *hs = json_array(), *ws = json_array();
		struct proto_op_delay d;

		qsort(wait[i], nw[i], sizeof(uint32_t), wait_cmp);
		for (j = 0; j < nh[i]; j++) {
			const struct seg_node *nd = &seg->nodes[hold[i][j]];
			json_t *x = session_ref(seg, atomic_load(&nd->word));
			const struct ui_seen *f = seen_of(h->ui, nd->token);
			uint64_t since = f ? f->since_ns : 0;

			json_object_set_new(x, "token", tok_str(nd->token));
			json_object_set_new(
				x, "held_ms",
				json_integer(since && since < now
						     ? (json_int_t)((now - since) / 1000000)
						     : 0));
			/* Held since before the broker first looked: held_ms
			 * is a lower bound. */
			json_object_set_new(x, "held_at_least", json_boolean(f && f->before));
			json_object_set_new(
				x, "lease_ms",
				json_integer(nd->lease_until_ns
						     ? (json_int_t)ms_left(nd->lease_until_ns, now)
						     : 0));
			json_array_append_new(hs, x);
		}
		for (j = 0; j < nw[i]; j++) {
			const struct seg_node *nd = &seg->nodes[wait[i][j]];
			json_t *x = session_ref(seg, atomic_load(&nd->word));

			json_object_set_new(
				x, "waiting_ms",
				json_integer((json_int_t)(uint32_t)(now_ms - nd->queued_ms)));
			json_array_append_new(ws, x);
		}
		row = json_pack("{s:o, s:s, s:i, s:b, s:i, s:i, s:I, s:I, s:o, s:o}", "key",
				str_n(rows[i].name, rows[i].len), "kind", kind_name(k->kind),
				"limit", (json_int_t)k->limit, "quarantined", quar, "holders",
				(json_int_t)rows[i].holders, "waiters", (json_int_t)rows[i].waiters,
				"grants", (json_int_t)rows[i].grants, "delay_ms",
				(json_int_t)rows[i].delay_ms, "holding", hs, "queue", ws);
		if (row && rows[i].delay_ms && !delay_note_get(rows[i].name, rows[i].len, &d))
			json_object_set_new(
				row, "delay_by",
				json_pack("{s:o, s:i, s:b, s:b}", "name",
					  str0(d.name, sizeof(d.name)), "pid", (json_int_t)d.pid,
					  "died", (d.how & PROTO_DELAY_DIED) != 0, "session_end",
					  (d.how & PROTO_DELAY_SESSION) != 0));
		json_array_append_new(out, row);
	}
done:
	free(pos);
	free(hold);
	free(wait);
	free(nh);
	free(nw);
	return out;
}

static json_t *key_table(struct http *h, const struct ui_query *q)
{
	struct segment *seg = &h->b->seg;
	struct krow *rows = malloc((seg->caps.max_keys ? seg->caps.max_keys : 1) * sizeof(*rows));
	uint64_t now = mono_ns(), li, mi;
	size_t qlen = strlen(q->q);
	uint32_t i, n = 0, all = 0, off, cnt, sl;
	json_t *j;

	if (!rows)
		return NULL;
	for (i = 0; i < seg->caps.max_keys; i++) {
		const struct seg_key *k = &seg->keys[i];
		uint32_t state = atomic_load(&k->state);
		struct krow *r = &rows[n];

		if (state != KEY_USED && state != KEY_QUARANTINED)
			continue;
		all++;
		r->name = key_entry_name(k, &r->len);
		if (qlen && !memmem(r->name, r->len, q->q, qlen))
			continue;
		r->idx = i;
		r->holders = k->holders;
		r->waiters = k->waiters;
		/* Lock-free holders are in the slots, not yet in holders. */
		if (!r->holders)
			for (sl = 0; sl < SEG_KEY_SLOTS; sl++)
				r->holders += FAST_HOLDER(seg_key_slot_load(k, sl)) != 0;
		r->delay_ms = ms_left(k->delay_until_ns, now);
		r->p0 = be_prefix(r->name, r->len, 0);
		r->p1 = be_prefix(r->name, r->len, 8);
		key_counts_peek(k, &li, &mi);
		r->grants = li;
		n++;
	}
	cmp_by = sort_of(q->sort);
	cmp_desc = q->desc;
	qsort(rows, n, sizeof(*rows), row_cmp);
	off = q->offset < n ? q->offset : n;
	cnt = n - off < q->limit ? n - off : q->limit;
	j = json_pack("{s:i, s:i, s:i, s:i, s:s, s:b, s:o}", "total", (json_int_t)n, "all",
		      (json_int_t)all, "offset", (json_int_t)off, "limit", (json_int_t)q->limit,
		      "sort", q->sort, "desc", q->desc, "rows", page_rows(h, rows + off, cnt));
	free(rows);
	return j;
}

/* ---- sessions, leases, quarantine, counters -------------------------------------- */

static json_t *sessions(struct http *h)
{
	struct segment *seg = &h->b->seg;
	uint32_t(*counts)[2] = operator_session_counts(seg), i, total = 0;
	uint64_t now = mono_ns();
	json_t *rows = json_array();

	if (!counts)
		return NULL;
	for (i = 0; i < seg->caps.max_sessions; i++) {
		const struct seg_session *s = &seg->sessions[i];
		char id[33];

		if (SESS_STATE(atomic_load(&s->state_gen)) != SESS_ACTIVE)
			continue;
		if (total++ >= UI_LIST_MAX)
			continue;
		hex_encode(s->id, sizeof(s->id), id);
		json_array_append_new(
			rows,
			json_pack("{s:s, s:o, s:i, s:i, s:i, s:I, s:i, s:i, s:i}", "session", id,
				  "name", str0(s->name, sizeof(s->name)), "pid", (json_int_t)s->pid,
				  "uid", (json_int_t)s->uid, "ttl_ms", (json_int_t)s->ttl_ms,
				  "ttl_remaining_ms",
				  (json_int_t)(s->ttl_ms ? ms_left(atomic_load(&s->renewed_ns) +
									   s->ttl_ms * 1000000ull,
								   now)
							 : 0),
				  "lock_delay_ms", (json_int_t)s->lock_delay_ms, "holds",
				  (json_int_t)counts[i][0], "waiting", (json_int_t)counts[i][1]));
	}
	free(counts);
	return json_pack("{s:i, s:o}", "total", (json_int_t)total, "rows", rows);
}

static json_t *leases(struct http *h)
{
	struct segment *seg = &h->b->seg;
	uint64_t now = mono_ns();
	uint32_t i, total = 0;
	json_t *rows = json_array();

	for (i = 0; i < seg->nnodes; i++) {
		const struct seg_node *nd = &seg->nodes[i];
		uint64_t w = atomic_load(&nd->word), until = nd->lease_until_ns;
		const struct seg_key *k;
		size_t len;
		const char *name;
		json_t *x;

		if (!w || !until || NODE_KEY(w) >= seg->caps.max_keys ||
		    !seg_node_is_hold(seg, i, w))
			continue;
		if (total++ >= UI_LIST_MAX)
			continue;
		k = &seg->keys[NODE_KEY(w)];
		name = key_entry_name(k, &len);
		x = session_ref(seg, w);
		json_object_set_new(x, "key", str_n(name, len));
		json_object_set_new(x, "token", tok_str(nd->token));
		json_object_set_new(x, "remaining_ms",
				    json_integer((json_int_t)ms_left(until, now)));
		json_array_append_new(rows, x);
	}
	return json_pack("{s:i, s:o}", "total", (json_int_t)total, "rows", rows);
}

static int quar_one(uint32_t idx, const char *name, size_t len, void *arg)
{
	json_t *a = arg;

	(void)idx;
	json_array_append_new(a, str_n(name, len));
	return json_array_size(a) >= UI_LIST_MAX;
}

static json_t *counters(struct http *h)
{
	struct proto_op_stats s;

	memset(&s, 0, sizeof(s));
	operator_stats(h->b, &s);
	return json_pack(
		"{s:i, s:I, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:I, s:I, s:I,"
		" s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:s}",
		"broker_pid", (json_int_t)s.broker_pid, "uptime_ms", (json_int_t)s.uptime_ms,
		"sessions", (json_int_t)s.sessions, "keys", (json_int_t)s.keys, "holds",
		(json_int_t)s.holds, "waiters", (json_int_t)s.waiters, "max_sessions",
		(json_int_t)s.max_sessions, "max_keys", (json_int_t)s.max_keys, "max_holds",
		(json_int_t)s.max_holds, "max_waiters", (json_int_t)s.max_waiters,
		"quarantined_keys", (json_int_t)s.quarantined_keys, "grants", (json_int_t)s.grants,
		"timeouts", (json_int_t)s.timeouts, "handoffs", (json_int_t)s.handoffs,
		"lease_expiries", (json_int_t)s.lease_expiries, "ttl_expiries",
		(json_int_t)s.ttl_expiries, "crash_cleanups", (json_int_t)s.crash_cleanups,
		"repairs", (json_int_t)s.repairs, "sessions_opened", (json_int_t)s.sessions_opened,
		"sessions_closed", (json_int_t)s.sessions_closed, "quarantine_events",
		(json_int_t)s.quarantined, "version", SHMLOCK_VERSION);
}

/* One histogram of the sessions' slots (wait or hold time), as the metrics'
 * shmlock_wait_seconds / shmlock_hold_seconds: per bucket, not cumulative;
 * "over" counts those past the last bound. */
static json_t *histogram(struct http *h, bool hold)
{
	const struct segment *seg = &h->b->seg;
	uint64_t count = 0, in = 0, b[SEG_HIST_BUCKETS] = { 0 };
	json_t *bounds = json_array(), *buckets = json_array();
	uint32_t i, k;

	for (i = 0; i < seg->caps.max_sessions; i++) {
		struct seg_hist *x =
			hold ? &seg->sessions[i].hold_hist : &seg->sessions[i].wait_hist;

		count += atomic_load_explicit(&x->count, memory_order_acquire);
		for (k = 0; k < SEG_HIST_BUCKETS; k++)
			b[k] += atomic_load_explicit(&x->bucket[k], memory_order_relaxed);
	}
	for (k = 0; k < SEG_HIST_BUCKETS; k++) {
		json_array_append_new(bounds, json_integer((json_int_t)hist_bounds_us[k]));
		json_array_append_new(buckets, json_integer((json_int_t)b[k]));
		in += b[k];
	}
	return json_pack("{s:o, s:o, s:I}", "bounds_us", bounds, "buckets", buckets, "over",
			 (json_int_t)(count > in ? count - in : 0));
}

/* The grants counter's samples, oldest first, and how far apart they are. */
static json_t *grants_over_time(struct http *h)
{
	const struct ui *u = h->ui;
	json_t *a = json_array();
	struct proto_op_stats s;
	uint32_t i;

	for (i = 0; u && i < u->ngrants; i++)
		json_array_append_new(
			a, json_integer((json_int_t)u->grants[(u->grant_at + UI_GRANTS_SAMPLES -
							       u->ngrants + i) %
							      UI_GRANTS_SAMPLES]));
	memset(&s, 0, sizeof(s));
	operator_stats(h->b, &s);
	/* And the counter now, so a page has a rate before the second sample. */
	return json_pack("{s:i, s:o, s:I, s:I}", "every_s", UI_GRANTS_EVERY_S, "samples", a, "now",
			 (json_int_t)s.grants, "now_after_ms",
			 (json_int_t)(u && u->ngrants ? (mono_ns() - u->granted_ns) / 1000000 : 0));
}

void ui_watch(struct http *h)
{
	struct ui *u = h->ui;
	uint64_t now = mono_ns();
	struct proto_op_stats s;

	if (!u)
		return;
	/* Pages waiting: their polls scan at every change and tick already. */
	if (!u->nwaits && now - u->scanned_ns >= 1000000000ull)
		ui_stamp(h);
	if (u->ngrants && now - u->granted_ns < UI_GRANTS_EVERY_S * 1000000000ull)
		return;
	memset(&s, 0, sizeof(s));
	operator_stats(h->b, &s);
	u->grants[u->grant_at] = s.grants;
	u->grant_at = (u->grant_at + 1) % UI_GRANTS_SAMPLES;
	if (u->ngrants < UI_GRANTS_SAMPLES)
		u->ngrants++;
	u->granted_ns = now;
}

json_t *ui_snapshot(struct http *h, const struct ui_query *q, uint64_t stamp)
{
	json_t *quar = json_array(), *j;
	char st[17];

	operator_quarantined(&h->b->seg, quar_one, quar);
	snprintf(st, sizeof(st), "%016llx", (unsigned long long)stamp);
	j = json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:i, s:{s:o, s:o, s:o}}", "stamp", st, "keys",
		      key_table(h, q), "sessions", sessions(h), "leases", leases(h), "quarantined",
		      quar, "counters", counters(h), "views_waiting",
		      (json_int_t)(h->ui ? h->ui->nwaits : 0), "charts", "wait",
		      histogram(h, false), "hold", histogram(h, true), "grants",
		      grants_over_time(h));
	return j;
}
