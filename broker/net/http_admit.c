// SPDX-License-Identifier: MIT
/*
 * Who may make a request of an HTTP-speaking face (the rules:
 * docs/security.md), and answers held back for a while: the HTTP engine's
 * part of the network module, which the dflockd HTTP API, the web view and
 * the Consul API share rather than borrow from one another.
 *
 * A request passes with the bearer token of --auth-token (checked by
 * net_token.c), or when the kernel names its sender as a user the control
 * socket admits (a loopback or Unix peer, net_peer.c) and it is nothing a
 * web page could have made that user's browser send. Without a token
 * configured, the Unix socket and --http-insecure-no-auth let everyone
 * through. A refused request is answered after NET_AUTH_DELAY_NS (and one
 * per delay per peer, net_auth_fail_at()), as dflockd makes a failed TCP
 * "auth" wait, so that guessing costs time. The delay suspends the
 * connection (the loop goes on serving others) and a timer of the face that
 * made the engine's record resumes it.
 */
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "http_engine.h"

void http_admit_delay(struct hreq *r)
{
	struct http *h = r->h;
	uint64_t at = net_auth_fail_at(&h->rates, r->peer, mono_ns());
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
	face_schedule(h->b, h->face, at, TIMER_HTTP_DELAY, i, h->delayed_gen[i]);
	hreq_suspend(r);
}

bool http_admit_web_ok(struct hreq *r)
{
	const char *origin = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin");
	const char *ctype = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Type");

	if (!r->tcp) /* no web page reaches a Unix socket */
		return true;
	if (origin && !net_origin_in(r->h->b->opts.http.cors_origins, origin, false)) {
		hreq_error(r, 403, "forbidden_origin",
			   "a web page's request is served only with the token, or from an "
			   "origin named in --http-cors-allowed-origins");
		return false;
	}
	if (!origin && net_simple_write(r->verb, ctype)) {
		hreq_error(r, 403, "forbidden_simple_request",
			   "a %s a web page could send without a CORS preflight needs the token "
			   "(send Content-Type: application/json)",
			   r->verb);
		return false;
	}
	return true;
}

bool http_admit_bearer(struct hreq *r)
{
	const struct broker *b = r->h->b;
	const char *token = net_token(b);

	if (r->rt.open_path)
		return true;
	if (token[0] && net_bearer_ok(b, MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
								     "Authorization")))
		return true;
	if (!token[0] && (!r->tcp || b->opts.http.insecure_no_auth))
		return true;
	if (r->uid_ok)
		return http_admit_web_ok(r);
	hreq_error(r, 401, "unauthorized",
		   token[0] ? "missing or wrong Authorization: Bearer token"
			    : "served only to the users the broker's socket admits (see "
			      "--allow-uid), or with a token (--auth-token)");
	http_admit_delay(r);
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

void http_admit_due(struct http *h, uint32_t slot, uint32_t gen)
{
	if (slot < h->ndelayed && h->delayed[slot] && h->delayed_gen[slot] == gen)
		release(h, slot);
}

void http_admit_flush(struct http *h)
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

void http_admit_forget(struct hreq *r)
{
	struct http *h = r->h;

	if (r->delayed >= 0 && (uint32_t)r->delayed < h->ndelayed && h->delayed[r->delayed] == r) {
		h->delayed[r->delayed] = NULL;
		h->delayed_gen[r->delayed]++;
	}
	r->delayed = -1;
}
