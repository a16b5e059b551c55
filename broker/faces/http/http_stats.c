// SPDX-License-Identifier: MIT
/*
 * GET /v1/stats (dflockd's snapshot; shmlock's own fields with
 * --http-extensions) and
 * GET /metrics (Prometheus text exposition), and the request counters
 * behind the latter. Both read the segment, so they show liblocal's holds
 * and waiters as well as HTTP's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_int.h"
#include "core/metrics_text.h"
#include "core/operator.h"
#include "net/http_engine.h"

/* Status codes the API answers with, in the order of the counters. */
static const int status_codes[HTTP_STATUS_SLOTS] = { 200, 204, 400, 401, 404, 405, 408,
						     409, 410, 421, 429, 500, 503 };
/* Upper bounds of the duration histogram, in seconds. */
static const double buckets[12] = { 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
				    0.01,   0.05,    0.1,    0.5,   1.0,    10.0 };

void http_metrics_note(struct http *h, enum http_method m, enum http_route rt, int status,
		       uint64_t ns)
{
	double s = (double)ns / 1e9;
	int i;

	for (i = 0; i < HTTP_STATUS_SLOTS; i++)
		if (status_codes[i] == status) {
			h->c.requests[m][rt][i]++;
			break;
		}
	for (i = 0; i < 12; i++)
		if (s <= buckets[i])
			h->c.duration_bucket[rt][i]++;
	h->c.duration_sum[rt] += s;
	h->c.duration_count[rt]++;
}

/* ---- /v1/stats ----------------------------------------------------------------- */

struct stats_walk {
	struct http *h;
	json_t *locks, *sems, *idle_locks, *idle_sems;
};

/*
 * A key as JSON text must be UTF-8; keys are any bytes but NUL. One that is
 * not valid UTF-8 is shown percent-encoded, as it would be written in a URL
 * path, and marked so ("key_encoding": "percent").
 */
static const char *printable_key(const char *key, char *buf, size_t size, bool *encoded)
{
	static const char hex[] = "0123456789ABCDEF";
	json_t *probe = json_string(key);
	size_t o = 0;

	*encoded = !probe;
	json_decref(probe);
	if (!*encoded)
		return key;
	for (; *key && o + 4 < size; key++) {
		unsigned char c = (unsigned char)*key;

		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		    c == '-' || c == '.' || c == '_' || c == '~') {
			buf[o++] = (char)c;
		} else {
			buf[o++] = '%';
			buf[o++] = hex[c >> 4];
			buf[o++] = hex[c & 15];
		}
	}
	buf[o] = '\0';
	return buf;
}

static void append_key(json_t *arr, json_t *entry, bool encoded)
{
	if (encoded)
		json_object_set_new(entry, "key_encoding", json_string("percent"));
	json_array_append_new(arr, entry);
}

/*
 * A session id is a capability: with it one can re-acquire (and so learn
 * the token of) a hold, release it, or close the session. What stats shows
 * (with --http-extensions, as "owner") is the holder's public id
 * "s<slot>g<generation>": it names the session as long as it lives, is never
 * reused for another (the generation moves on), and opens nothing. "" when
 * the holder is gone meanwhile.
 */
static void public_id(struct broker *b, const char *hex, char *out, size_t size)
{
	uint8_t id[16];
	uint32_t slot;

	out[0] = '\0';
	if (strlen(hex) != LOCAL_SESSION_ID_LEN || hex_decode(hex, id, sizeof(id)))
		return;
	slot = session_slot_of(b, id);
	if (slot == IDX_NONE || slot >= b->seg.caps.max_sessions || !b->by_slot[slot])
		return;
	session_public_id(slot, b->by_slot[slot]->gen, out, size);
}

/*
 * dflockd's owner_conn_id is a number: here the holder's public id as one,
 * generation * --max-sessions + slot + 1 (below 2^53, exact in any JSON
 * library); 0 when nobody holds the key or its holder is gone meanwhile.
 */
static json_int_t owner_number(struct broker *b, const char *hex)
{
	uint8_t id[16];
	uint32_t slot;

	if (strlen(hex) != LOCAL_SESSION_ID_LEN || hex_decode(hex, id, sizeof(id)))
		return 0;
	slot = session_slot_of(b, id);
	if (slot == IDX_NONE || slot >= b->seg.caps.max_sessions || !b->by_slot[slot])
		return 0;
	return (json_int_t)((uint64_t)b->by_slot[slot]->gen * b->seg.caps.max_sessions + slot + 1);
}

static int stats_key(const char *raw, const struct local_key_info *ki, void *arg)
{
	struct stats_walk *w = arg;
	char buf[3 * LOCAL_KEY_MAX + 1];
	bool enc, ext = w->h->b->opts.http.extensions;
	const char *key = printable_key(raw, buf, sizeof(buf), &enc);
	json_t *e;

	/* dflockd lists a key held or waited on, else as idle (idle_s: shmlock
	 * keeps no idle time per key, 0). */
	if (ki->kind == LOCAL_KIND_LOCK && (ki->holders || ki->waiters)) {
		struct first_holder f = { "", 0 };

		if (ki->holders)
			stats_first_holder(w->h->observer, raw, &f);
		e = json_pack("{s:s, s:I, s:f, s:i}", "key", key, "owner_conn_id",
			      owner_number(w->h->b, f.session), "lease_expires_in_s",
			      (double)f.lease_ms / 1000.0, "waiters", (json_int_t)ki->waiters);
		if (ext) {
			char pub[32];

			public_id(w->h->b, f.session, pub, sizeof(pub));
			json_object_set_new(e, "owner", json_string(pub));
		}
		append_key(w->locks, e, enc);
	} else if (ki->kind == LOCAL_KIND_LOCK) {
		append_key(w->idle_locks, json_pack("{s:s, s:f}", "key", key, "idle_s", 0.0), enc);
	} else if (ki->kind == LOCAL_KIND_SEMAPHORE && (ki->holders || ki->waiters)) {
		append_key(w->sems,
			   json_pack("{s:s, s:I, s:i, s:i}", "key", key, "limit",
				     (json_int_t)ki->limit, "holders", (json_int_t)ki->holders,
				     "waiters", (json_int_t)ki->waiters),
			   enc);
	} else if (ki->kind == LOCAL_KIND_SEMAPHORE) {
		e = json_pack("{s:s, s:f}", "key", key, "idle_s", 0.0);
		if (ext)
			json_object_set_new(e, "limit", json_integer((json_int_t)ki->limit));
		append_key(w->idle_sems, e, enc);
	}
	return 0;
}

/* Quarantined entries by name (operator.c): shown until `shmlock reset`. */
static int stats_quarantined(uint32_t idx, const char *name, size_t len, void *arg)
{
	char raw[LOCAL_KEY_MAX + 1], buf[3 * LOCAL_KEY_MAX + 1];
	bool enc;
	const char *key;

	(void)idx;
	memcpy(raw, name, len);
	raw[len] = '\0';
	key = printable_key(raw, buf, sizeof(buf), &enc);
	append_key(arg, json_pack("{s:s}", "key", key), enc);
	return 0;
}

void http_stats(struct hreq *r)
{
	struct http *h = r->h;
	struct stats_walk w = { h, json_array(), json_array(), json_array(), json_array() };
	LOCAL_OPTS(local_stats, st);
	json_t *j, *quarantined;

	/* "", not NULL: liblocal memcmp()s the prefix (UB with NULL, even for 0 bytes). */
	local_keys(h->observer, "", stats_key, &w);
	local_stats(h->observer, &st);
	j = json_pack("{s:i, s:o, s:o, s:o, s:o}", "connections", (json_int_t)st.sessions, "locks",
		      w.locks, "semaphores", w.sems, "idle_locks", w.idle_locks, "idle_semaphores",
		      w.idle_sems);
	if (!h->b->opts.http.extensions) { /* dflockd's fields, no more */
		hreq_reply_json(r, 200, j);
		return;
	}
	json_object_set_new(j, "sessions",
			    json_pack("{s:i, s:i, s:i}", "total", (json_int_t)st.sessions, "http",
				      (json_int_t)http_engine_sessions_count(h), "local",
				      (json_int_t)(st.sessions - http_engine_sessions_count(h))));
	json_object_set_new(
		j, "capacity",
		json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "keys",
			  (json_int_t)st.keys, "max_keys", (json_int_t)st.max_keys, "holds",
			  (json_int_t)st.holds, "max_holds", (json_int_t)st.max_holds, "waiters",
			  (json_int_t)st.waiters, "max_waiters", (json_int_t)st.max_waiters,
			  "sessions", (json_int_t)st.sessions, "max_sessions",
			  (json_int_t)st.max_sessions, "max_value", (json_int_t)st.max_value));
	json_object_set_new(
		j, "counters",
		json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "grants",
			  (json_int_t)st.grants, "timeouts", (json_int_t)st.timeouts, "handoffs",
			  (json_int_t)st.handoffs, "lease_expiries", (json_int_t)st.lease_expiries,
			  "ttl_expiries", (json_int_t)st.ttl_expiries, "crash_cleanups",
			  (json_int_t)st.crash_cleanups, "repairs", (json_int_t)st.repairs,
			  "quarantined", (json_int_t)st.quarantined));
	json_object_set_new(j, "http_connections", json_integer(h->connections));
	quarantined = json_array();
	operator_quarantined(&h->b->seg, stats_quarantined, quarantined);
	json_object_set_new(j, "quarantined_keys", quarantined);
	hreq_reply_json(r, 200, j);
}

/* ---- /metrics ------------------------------------------------------------------ */

static void requests(struct text *t, const struct http_counters *c)
{
	int m, rt, s, i;

	text_put(t, "# HELP shmlock_http_requests_total HTTP requests answered.\n"
		    "# TYPE shmlock_http_requests_total counter\n");
	for (m = 0; m < M_COUNT; m++)
		for (rt = 0; rt < R_COUNT; rt++)
			for (s = 0; s < HTTP_STATUS_SLOTS; s++)
				if (c->requests[m][rt][s])
					text_put(t,
						 "shmlock_http_requests_total{method=\"%s\",route="
						 "\"%s\","
						 "status=\"%d\"} %llu\n",
						 http_method_name((enum http_method)m),
						 http_route_name((enum http_route)rt),
						 status_codes[s],
						 (unsigned long long)c->requests[m][rt][s]);
	text_put(t, "# HELP shmlock_http_request_duration_seconds Time from request to answer.\n"
		    "# TYPE shmlock_http_request_duration_seconds histogram\n");
	for (rt = 0; rt < R_COUNT; rt++) {
		const char *name = http_route_name((enum http_route)rt);

		if (!c->duration_count[rt])
			continue;
		for (i = 0; i < 12; i++)
			text_put(t,
				 "shmlock_http_request_duration_seconds_bucket{route=\"%s\",le=\"%"
				 "g\"} "
				 "%llu\n",
				 name, buckets[i], (unsigned long long)c->duration_bucket[rt][i]);
		text_put(t,
			 "shmlock_http_request_duration_seconds_bucket{route=\"%s\",le=\"+Inf\"} "
			 "%llu\n"
			 "shmlock_http_request_duration_seconds_sum{route=\"%s\"} %.9f\n"
			 "shmlock_http_request_duration_seconds_count{route=\"%s\"} %llu\n",
			 name, (unsigned long long)c->duration_count[rt], name, c->duration_sum[rt],
			 name, (unsigned long long)c->duration_count[rt]);
	}
}

void http_metrics(struct hreq *r)
{
	struct http *h = r->h;
	struct text t = { NULL, 0, 0 };

	requests(&t, &h->c);
	/* The broker-wide part, as the metrics-only listener serves it. */
	metrics_render_broker(h->b, &t);
	text_gauge(&t, "shmlock_http_sessions", "Live HTTP sessions.",
		   http_engine_sessions_count(h));
	text_gauge(&t, "shmlock_http_connections", "Open HTTP connections.", h->connections);
	text_gauge(&t, "shmlock_http_waiting", "HTTP requests waiting for a grant.",
		   h->active_waiters);
	text_counter(&t, "shmlock_http_grants_total", "Grants answered over HTTP.", h->c.grants);
	text_counter(&t, "shmlock_http_timeouts_total", "HTTP acquires and waits that timed out.",
		     h->c.timeouts);
	text_counter(&t, "shmlock_http_canceled_total",
		     "HTTP waits ended by the client or shutdown.", h->c.canceled);
	text_counter(&t, "shmlock_http_sessions_reaped_total", "Idle HTTP sessions reaped.",
		     h->c.reaped);
	free(r->reply);
	r->reply = t.p;
	r->status = t.p ? 200 : 500;
	r->answered = true;
}
