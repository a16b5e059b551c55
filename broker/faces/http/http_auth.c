// SPDX-License-Identifier: MIT
/*
 * The bearer token of --auth-token, as dflockd checks it, and answers held
 * back for a while.
 *
 * The scheme name is case-insensitive (RFC 7235: "bearer x" is "Bearer x")
 * and blanks around the credential are dropped; the credential itself is
 * compared exactly, in constant time. A wrong or missing token is answered
 * 401 with "WWW-Authenticate: Bearer", after AUTH_DELAY_NS: as dflockd makes
 * a failed TCP "auth" wait before it answers, so that guessing costs time.
 * The delay suspends the connection (the loop goes on serving others) and a
 * broker timer resumes it.
 */
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "http_int.h"
#include "net/http_engine.h"

#define AUTH_DELAY_NS 100000000ull /* 100 ms */

/* Hold @r's answer (already set) back until @at. */
static void delay_answer(struct hreq *r, uint64_t at)
{
	struct http *h = r->h;
	uint32_t i;

	for (i = 0; i < h->ndelayed && h->delayed[i]; i++)
		;
	if (i == h->ndelayed) {
		uint32_t n = h->ndelayed ? h->ndelayed * 2 : 16;
		struct hreq **d = realloc(h->delayed, n * sizeof(*d));
		uint32_t *g;

		if (!d)
			return; /* out of memory: answer at once */
		h->delayed = d;
		g = realloc(h->delayed_gen, n * sizeof(*g));
		if (!g)
			return;
		h->delayed_gen = g;
		memset(d + h->ndelayed, 0, (n - h->ndelayed) * sizeof(*d));
		memset(g + h->ndelayed, 0, (n - h->ndelayed) * sizeof(*g));
		h->ndelayed = n;
	}
	h->delayed[i] = r;
	r->delayed = (int32_t)i;
	face_schedule(h->b, &http_face, at, TIMER_HTTP_DELAY, i, h->delayed_gen[i]);
	hreq_suspend(r);
}

bool http_auth_check(struct hreq *r)
{
	const char *token = r->h->b->opts.http.auth_token;

	if (!token[0] || r->rt.open_path ||
	    http_bearer_ok(MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization"),
			   token))
		return true;
	hreq_error(r, 401, "unauthorized", "missing or wrong Authorization: Bearer token");
	delay_answer(r, mono_ns() + AUTH_DELAY_NS);
	return false;
}

static void release(struct http *h, uint32_t slot)
{
	struct hreq *r = h->delayed[slot];

	h->delayed[slot] = NULL;
	h->delayed_gen[slot]++;
	r->delayed = -1;
	hreq_resume(r);
}

void http_delayed_due(struct http *h, uint32_t slot, uint32_t gen)
{
	if (slot < h->ndelayed && h->delayed[slot] && h->delayed_gen[slot] == gen)
		release(h, slot);
}

void http_delayed_flush(struct http *h)
{
	uint32_t i;

	for (i = 0; i < h->ndelayed; i++)
		if (h->delayed[i])
			release(h, i);
	free(h->delayed);
	free(h->delayed_gen);
	h->delayed = NULL;
	h->delayed_gen = NULL;
	h->ndelayed = 0;
}

void http_delayed_forget(struct hreq *r)
{
	struct http *h = r->h;

	if (r->delayed >= 0 && (uint32_t)r->delayed < h->ndelayed && h->delayed[r->delayed] == r) {
		h->delayed[r->delayed] = NULL;
		h->delayed_gen[r->delayed]++;
	}
	r->delayed = -1;
}
