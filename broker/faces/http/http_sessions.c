// SPDX-License-Identifier: MIT
/*
 * HTTP sessions: dflockd's server-side identities, each a real session in
 * the segment (so HTTP holders and waiters sit in the same queues as
 * liblocal's) that the broker itself acts for.
 *
 * A session is opened in the broker's own name (its pid and start time, no
 * pidfd): if the broker dies, the next one finds that process gone and
 * cleans the session up like any other whose process died. Lock-delay is 0,
 * as dflockd has none. A session is reaped when idle for twice
 * --http-session-idle-timeout, unless one of its requests is in flight.
 *
 * An hsession may outlive its segment session while requests still point at
 * it (they hold it "in flight"): it is detached at once and freed when the
 * last of them completes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "clock.h"
#include "http_int.h"
#include "net/http_engine.h"
#include "procinfo.h"
#include "segment.h"

static uint64_t broker_start_time;

int hsessions_init(struct http *h)
{
	static const uint8_t no_id[16];

	h->by_slot = calloc(h->b->seg.caps.max_sessions, sizeof(*h->by_slot));
	h->observer = session_inproc_new(&h->b->seg, (struct owner){ IDX_NONE, 0 }, no_id);
	proc_start_time(getpid(), &broker_start_time);
	return h->by_slot && h->observer ? 0 : -ENOMEM;
}

static void detach(struct http *h, struct hsession *hs)
{
	struct net_ipstat *ip = net_rate_peer(&h->rates, hs->ip);

	if (h->by_slot[hs->slot] == hs) {
		h->by_slot[hs->slot] = NULL;
		h->nsessions--;
		if (ip && ip->sessions)
			ip->sessions--;
	}
	if (!hs->inflight) {
		session_inproc_free(hs->ls);
		free(hs->enqs);
		free(hs);
	}
}

void hsessions_fini(struct http *h)
{
	uint32_t i;

	for (i = 0; h->by_slot && i < h->b->seg.caps.max_sessions; i++)
		if (h->by_slot[i]) {
			h->by_slot[i]->inflight = 0;
			detach(h, h->by_slot[i]);
		}
	free(h->by_slot);
	session_inproc_free(h->observer);
}

/*
 * The segment's session table (--max-sessions) is shared with liblocal: any
 * local user who can reach the API must not be able to fill it. HTTP
 * sessions get at most --http-max-sessions (default half the table), and
 * never the whole table.
 */
void http_sessions_create(struct hreq *r)
{
	struct http *h = r->h;
	const struct http_opts *o = &h->b->opts.http;
	struct net_ipstat *ip = net_rate_peer(&h->rates, r->peer);
	struct proto_open req;
	struct proto_reply rep;
	struct hsession *hs;
	char id[LOCAL_SESSION_ID_LEN + 1];
	int err;

	/* The body, if any, is not read: dflockd ignores it. */
	if (h->draining) {
		hreq_error(r, 503, "draining", "the broker is shutting down");
		return;
	}
	if (h->nsessions >= http_engine_sessions_cap(h)) {
		/* dflockd's code for its HTTP session cap; shmlock's own name
		 * with --http-extensions. */
		hreq_error(r, 503, o->extensions ? "max_http_sessions" : "max_sessions",
			   "%u HTTP sessions open: HTTP's share of the session table "
			   "(--http-max-sessions)",
			   h->nsessions);
		return;
	}
	if (!ip || (o->max_sessions_per_ip && ip->sessions >= o->max_sessions_per_ip)) {
		hreq_error(r, 503, "max_sessions_per_ip",
			   "%s has %u sessions open (--http-max-sessions-per-ip)", r->ip,
			   ip ? ip->sessions : 0);
		return;
	}
	hs = calloc(1, sizeof(*hs));
	if (!hs) {
		hreq_local_error(r, -ENOMEM);
		return;
	}
	memset(&req, 0, sizeof(req));
	memset(&rep, 0, sizeof(rep));
	snprintf(req.name, sizeof(req.name), "http:%.48s", r->ip);
	req.flags = SESS_FLAG_HTTP;
	req.start_time = broker_start_time;
	err = session_open(h->b, &req, -1, getpid(), getuid(), broker_start_time, &rep);
	if (!err && !(hs->ls = session_inproc_new(&h->b->seg, (struct owner){ rep.slot, rep.gen },
						  rep.id))) {
		session_end_slot(h->b, rep.slot, false, "closed (out of memory)");
		err = -ENOMEM;
	}
	if (err) {
		free(hs);
		hreq_local_error(r, err);
		return;
	}
	hs->slot = rep.slot;
	hs->gen = rep.gen;
	hs->last_seen_ns = mono_ns();
	snprintf(hs->ip, sizeof(hs->ip), "%s", r->peer);
	h->by_slot[hs->slot] = hs;
	h->nsessions++;
	ip->sessions++;
	hex_encode(rep.id, sizeof(rep.id), id);
	hreq_reply_json(r, 200,
			json_pack("{s:s, s:i}", "session_id", id, "idle_timeout_s",
				  (json_int_t)o->idle_timeout_s));
}

/* The live HTTP session named by @text (32 hex digits), or NULL. */
static struct hsession *lookup(struct http *h, const char *text, bool *malformed)
{
	uint8_t id[16];
	uint32_t slot;
	struct hsession *hs;

	*malformed = strlen(text) != LOCAL_SESSION_ID_LEN || hex_decode(text, id, sizeof(id));
	if (*malformed)
		return NULL;
	slot = session_slot_of(h->b, id);
	if (slot == IDX_NONE || !(hs = h->by_slot[slot]) ||
	    !session_is(&h->b->seg, (struct owner){ hs->slot, hs->gen }))
		return NULL;
	return hs;
}

static struct hsession *by_param(struct hreq *r)
{
	bool malformed;
	struct hsession *hs = lookup(r->h, r->rt.param, &malformed);

	if (!hs && malformed)
		hreq_error(r, 400, "bad_request", "a session id is 32 hex digits");
	else if (!hs)
		hreq_error(r, 410, "session_gone", "no live HTTP session %s", r->rt.param);
	return hs;
}

void http_sessions_delete(struct hreq *r)
{
	struct hsession *hs = by_param(r);

	if (!hs)
		return;
	/* Synchronous: everything held is released before the answer. */
	session_end_slot(r->h->b, hs->slot, false, "closed over HTTP");
	r->h->maybe_granted = true;
	hreq_reply_json(r, 204, NULL);
}

void http_sessions_ping(struct hreq *r)
{
	struct hsession *hs = by_param(r);

	if (!hs)
		return;
	hs->last_seen_ns = mono_ns();
	hreq_reply_json(r, 204, NULL);
}

struct hsession *http_session_of(struct hreq *r)
{
	const char *text =
		MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Dflockd-Session");
	struct hsession *hs;
	bool malformed;

	if (!text)
		text = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Shmlock-Session");
	if (!text || !*text) {
		hreq_error(r, 400, "bad_request", "missing X-Dflockd-Session header");
		return NULL;
	}
	/* A malformed id in the header names no session: 410, as dflockd
	 * (in the path it is 400, as there). */
	hs = lookup(r->h, text, &malformed);
	if (!hs) {
		hreq_error(r, 410, "session_gone", "no live HTTP session %.40s", text);
		return NULL;
	}
	hs->inflight++;
	hs->last_seen_ns = mono_ns();
	r->sess = hs;
	return hs;
}

void http_session_done(struct hreq *r)
{
	struct hsession *hs = r->sess;

	if (!hs)
		return;
	r->sess = NULL;
	hs->inflight--;
	hs->last_seen_ns = mono_ns();
	if (!hs->inflight && r->h->by_slot[hs->slot] != hs) {
		session_inproc_free(hs->ls); /* ended while in flight */
		free(hs->enqs);
		free(hs);
	}
}

void http_session_ended(struct broker *b, uint32_t slot)
{
	struct http *h = b->http;
	struct hsession *hs;

	if (!h || slot >= b->seg.caps.max_sessions || !(hs = h->by_slot[slot]))
		return;
	http_waiters_end(h, hs, 410, "session_gone");
	detach(h, hs);
}

void http_sessions_reap(struct http *h)
{
	uint64_t now = mono_ns(), idle = 2ull * h->b->opts.http.idle_timeout_s * 1000000000ull;
	uint32_t i;

	for (i = 0; i < h->b->seg.caps.max_sessions; i++) {
		struct hsession *hs = h->by_slot[i];

		if (!hs || hs->inflight || now - hs->last_seen_ns < idle)
			continue;
		h->c.reaped++;
		session_end_slot(h->b, i, true, "reaped (HTTP session idle)");
	}
}

void http_sessions_close_all(struct http *h)
{
	uint32_t i;

	for (i = 0; i < h->b->seg.caps.max_sessions; i++)
		if (h->by_slot[i])
			session_end_slot(h->b, i, false, "closed (broker shutdown)");
}
