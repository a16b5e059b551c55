// SPDX-License-Identifier: MIT
/*
 * The web view's routes (docs/web-view.md) on the HTTP listener:
 *
 *   GET /ui, /ui/            the page (ui/index.html)       open
 *   GET /ui/app.js, app.css  its script and style            open
 *   GET /ui/api/state?...    the snapshot (ui_state.c)        token, as the API
 *
 * The assets are compiled in (scripts/embed.sh): nothing to install, no
 * build step that needs the network. They carry no data, so they are open;
 * the data is the API's, and asks for its token (Authorization: Bearer,
 * which the page sends from the token given after '#' in its address, a
 * part of the URL a browser never sends).
 *
 * Live: with since=STAMP, an answer whose stamp is STAMP is held back (a
 * suspended connection, as the API's waits) until ui_stamp() moves, or for
 * UI_POLL_S. ui_poll() looks at the stamp when the doorbell rings and on the
 * HTTP tick (4 times a second), and only while a view waits: lock-free
 * acquires and releases ring no doorbell (the uncontended path writes
 * nothing shared), so the tick is what sees them. One stamp serves every
 * waiting view; a browser sends a request per change, not per interval.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "net/http_engine.h"
#include "ui.h"

#define UI_POLL_S 25
#define UI_WAITS_MAX 256
#define UI_PAGE_MAX 500

extern const char ui_index_html[], ui_app_js[], ui_app_css[];

bool ui_path(const char *url)
{
	return !strncmp(url, "/ui", 3) && (!url[3] || url[3] == '/' || url[3] == '?');
}

static int hexval(char c)
{
	return c >= '0' && c <= '9'   ? c - '0'
	       : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10
				      : -1;
}

/* Query arguments come raw (http_server.c keeps escapes): decode into @out. */
static void arg(struct hreq *r, const char *name, char *out, size_t size)
{
	const char *v = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
	size_t o = 0;

	out[0] = '\0';
	if (!v)
		return;
	for (; *v && o + 1 < size; v++) {
		char c = *v;

		if (c == '+')
			c = ' ';
		else if (c == '%' && hexval(v[1]) >= 0 && hexval(v[2]) >= 0) {
			c = (char)(hexval(v[1]) * 16 + hexval(v[2]));
			v += 2;
		}
		if (!c)
			break;
		out[o++] = c;
	}
	out[o] = '\0';
}

static uint32_t arg_u32(struct hreq *r, const char *name, uint32_t def, uint32_t max)
{
	char buf[16], *end;
	unsigned long v;

	arg(r, name, buf, sizeof(buf));
	if (!buf[0])
		return def;
	v = strtoul(buf, &end, 10);
	return *end ? def : v > max ? max : (uint32_t)v;
}

static void parse_query(struct hreq *r, struct ui_query *q)
{
	static const char *const sorts[] = { "key", "holders", "waiters", "delay", "grants" };
	char dir[8];
	size_t i;

	memset(q, 0, sizeof(*q));
	arg(r, "q", q->q, sizeof(q->q));
	arg(r, "sort", q->sort, sizeof(q->sort));
	for (i = 0; i < sizeof(sorts) / sizeof(sorts[0]); i++)
		if (!strcmp(q->sort, sorts[i]))
			break;
	if (i == sizeof(sorts) / sizeof(sorts[0])) {
		memset(q->sort, 0, sizeof(q->sort)); /* compared whole (answer()) */
		snprintf(q->sort, sizeof(q->sort), "key");
	}
	arg(r, "dir", dir, sizeof(dir));
	q->desc = !strcmp(dir, "desc");
	q->offset = arg_u32(r, "offset", 0, UINT32_MAX);
	q->limit = arg_u32(r, "limit", 50, UI_PAGE_MAX);
	if (!q->limit)
		q->limit = 50;
}

static void reply_text(struct hreq *r, const char *text, const char *type)
{
	free(r->reply);
	r->reply = strdup(text);
	r->ctype = type;
	r->status = r->reply ? 200 : 500;
	r->answered = true;
}

static void reply_state(struct hreq *r, const struct ui_query *q, uint64_t stamp)
{
	json_t *j = ui_snapshot(r->h, q, stamp);

	if (!j)
		hreq_error(r, 500, "internal", "out of memory");
	else
		hreq_reply_json(r, 200, j);
	r->ctype = "application/json"; /* with the view's headers (no-store, CSP) */
}

static struct ui *ui_of(struct http *h)
{
	if (!h->ui)
		h->ui = calloc(1, sizeof(*h->ui));
	return h->ui;
}

static void state(struct hreq *r)
{
	struct http *h = r->h;
	struct ui *u = ui_of(h);
	struct ui_query q;
	char since_s[24], *end;
	uint64_t stamp, since;
	struct ui_wait *w;

	if (!u) {
		hreq_error(r, 500, "internal", "out of memory");
		return;
	}
	parse_query(r, &q);
	stamp = ui_stamp(h);
	arg(r, "since", since_s, sizeof(since_s));
	since = strtoull(since_s, &end, 16);
	if (!since_s[0] || *end || since != stamp || h->draining || u->nwaits >= UI_WAITS_MAX) {
		reply_state(r, &q, stamp);
		return;
	}
	if (u->nwaits == u->cap) {
		uint32_t cap = u->cap ? u->cap * 2 : 8;
		struct ui_wait *p = realloc(u->waits, cap * sizeof(*p));

		if (!p) {
			reply_state(r, &q, stamp);
			return;
		}
		u->waits = p;
		u->cap = cap;
	}
	w = &u->waits[u->nwaits++];
	w->r = r;
	w->since = since;
	w->deadline_ns = mono_ns() + UI_POLL_S * 1000000000ull;
	w->q = q;
	r->ui_waiting = true;
	hreq_suspend(r);
}

void ui_dispatch(struct hreq *r)
{
	const char *p = r->url + 3;
	size_t n = strcspn(p, "?");

	if (r->method != M_GET) {
		snprintf(r->rt.allow, sizeof(r->rt.allow), "GET, HEAD");
		hreq_error(r, 405, "method_not_allowed", "the web view answers GET only");
		return;
	}
	if (!n || (n == 1 && *p == '/') || (n == 11 && !strncmp(p, "/index.html", 11)))
		reply_text(r, ui_index_html, "text/html; charset=utf-8");
	else if (n == 7 && !strncmp(p, "/app.js", 7))
		reply_text(r, ui_app_js, "text/javascript; charset=utf-8");
	else if (n == 8 && !strncmp(p, "/app.css", 8))
		reply_text(r, ui_app_css, "text/css; charset=utf-8");
	else if (n == 10 && !strncmp(p, "/api/state", 10)) {
		if (http_admit_bearer(r)) /* else answered 401 (after its delay) */
			state(r);
	} else
		hreq_error(r, 404, "not_found", "no such page of the web view");
}

static void forget(struct ui *u, uint32_t i)
{
	u->waits[i].r->ui_waiting = false;
	u->waits[i] = u->waits[--u->nwaits];
}

void ui_request_done(struct hreq *r)
{
	struct ui *u = r->h->ui;
	uint32_t i;

	if (!r->ui_waiting || !u)
		return;
	for (i = 0; i < u->nwaits; i++)
		if (u->waits[i].r == r) {
			forget(u, i);
			return;
		}
}

/* The views answered in one round that ask the same question get the same
 * text: one snapshot per question and change, not per view. */
struct round {
	struct ui_query q;
	const struct hreq *r; /* whose reply has it; NULL: none yet */
};

static void answer(struct ui *u, uint32_t i, uint64_t stamp, struct round *rd)
{
	struct hreq *r = u->waits[i].r;
	struct ui_query q = u->waits[i].q;

	forget(u, i);
	if (rd->r && !memcmp(&rd->q, &q, sizeof(q)) && rd->r->status == 200 && rd->r->reply &&
	    (r->reply = strdup(rd->r->reply))) {
		r->status = 200;
		r->answered = true;
		r->ctype = rd->r->ctype;
	} else {
		reply_state(r, &q, stamp);
		rd->q = q;
		rd->r = r;
	}
	u->polls_answered++;
	hreq_resume(r);
}

void ui_poll(struct http *h, bool tick)
{
	struct ui *u = h->ui;
	uint64_t stamp, now = mono_ns();
	uint32_t i;

	struct round rd = { .r = NULL };

	if (tick && (u || (u = ui_of(h))))
		ui_watch(h);
	if (!u || !u->nwaits)
		return;
	stamp = ui_stamp(h);
	for (i = 0; i < u->nwaits;) {
		if (u->waits[i].since != stamp || now >= u->waits[i].deadline_ns || h->draining)
			answer(u, i, stamp, &rd); /* moves the last one into i */
		else
			i++;
	}
}

void ui_end_all(struct http *h)
{
	struct ui *u = h->ui;

	if (!u || !u->nwaits)
		return;
	{
		uint64_t stamp = ui_stamp(h);
		struct round rd = { .r = NULL };

		while (u->nwaits)
			answer(u, 0, stamp, &rd);
	}
}

void ui_free(struct http *h)
{
	if (!h->ui)
		return;
	free(h->ui->waits);
	free(h->ui->seen);
	free(h->ui);
	h->ui = NULL;
}

/* ---- the face ------------------------------------------------------------------ */

#define UI_TICK_NS 250000000ull /* lock-free changes ring no doorbell */

static void request_done(struct hreq *r, bool completed)
{
	(void)completed;
	ui_request_done(r);
}

/* A client of the HTTP engine: /ui on the HTTP API's listeners. */
static const struct http_client ui_client = {
	.dispatch = ui_dispatch,
	.request_done = request_done,
	.claims = ui_path,
	.free = ui_free,
};

static int face_start(struct broker *b)
{
	if (b->http) {
		http_engine_path(b->http, &ui_client);
		face_schedule(b, &ui_face, mono_ns() + UI_TICK_NS, 0, 0, 0);
	}
	return 0;
}

static void face_stop(struct broker *b)
{
	if (b->http)
		ui_end_all(b->http); /* its records go when the engine closes */
}

static void face_timer(struct broker *b, uint32_t kind, uint32_t a, uint32_t b2)
{
	(void)kind;
	(void)a;
	(void)b2;
	if (!b->http)
		return;
	ui_poll(b->http, true);
	face_schedule(b, &ui_face, mono_ns() + UI_TICK_NS, 0, 0, 0);
}

static void face_doorbell(struct broker *b)
{
	if (b->http)
		ui_poll(b->http, false);
}

static bool face_drained(struct broker *b)
{
	if (b->http)
		ui_end_all(b->http);
	return true;
}

const struct face ui_face = {
	.name = "ui",
	.start = face_start,
	.stop = face_stop,
	.timer = face_timer,
	.doorbell = face_doorbell,
	.drained = face_drained,
};
