// SPDX-License-Identifier: MIT
/*
 * The dflockd HTTP API as a face: its listeners (a client of the HTTP engine,
 * net/http_engine.c, which also serves the Consul API and the web view),
 * CORS preflight, dflockd's order of the network module's rate limit and
 * admission (net/), dispatch to the route handlers, and the face's hooks
 * (doorbell, timers, drain, stop).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <syslog.h>
#include <unistd.h>

#include "clock.h"
#include "http_int.h"
#include "net/http_engine.h"
#include "net/net.h"

extern const char openapi_json[];

/* ---- answers ------------------------------------------------------------- */

void hreq_local_error(struct hreq *r, int err)
{
	const char *why = local_strerror(err);

	switch (-err) {
	case EINVAL:
	case ENAMETOOLONG:
		hreq_error(r, 400, "bad_request", "%s", why);
		break;
	case LOCAL_ESESSION:
		hreq_error(r, 410, "session_gone", "%s", why);
		break;
	case LOCAL_EMAXKEYS:
	case LOCAL_EMAXHOLDS:
		hreq_error(r, 503, "max_locks", "%s", why);
		break;
	case LOCAL_EMAXWAITERS:
		hreq_error(r, 503, "max_waiters", "%s", why);
		break;
	case LOCAL_EMAXSESSIONS:
		hreq_error(r, 503, "max_sessions", "%s", why);
		break;
	case LOCAL_ELIMIT:
	case LOCAL_EKIND:
		hreq_error(r, 409, "limit_mismatch", "%s", why);
		break;
	case LOCAL_EENQUEUED:
		hreq_error(r, 409, "already_enqueued", "%s", why);
		break;
	case LOCAL_ENOTENQUEUED:
		hreq_error(r, 409, "not_enqueued", "%s", why);
		break;
	case LOCAL_EEXPIRED:
	case LOCAL_ECLUSTER: /* cluster keys: the host's cluster lock ended the hold */
		hreq_error(r, 409, "lease_expired", "%s", why);
		break;
	case LOCAL_ENOTHELD:
	case LOCAL_ESTALE:
		hreq_error(r, 404, "not_held", "%s", why);
		break;
	case ETIMEDOUT: /* from a key mutex, not from a wait */
		hreq_error(r, 500, "internal",
			   "the key is locked by a process stalled inside it; try again");
		break;
	case LOCAL_ECORRUPT: /* until an operator resets it (operator.c) */
		hreq_error(r, 500, "internal",
			   "the key's entry is quarantined as damaged; 'shmlock reset KEY' "
			   "brings it back");
		break;
	default:
		/* A quarantined key or a failed allocation: not in dflockd's
		 * table; the one code of shmlock's own. */
		hreq_error(r, 500, "internal", "%s", why);
	}
}

/* ---- dispatch ------------------------------------------------------------ */

static void serve_plain(struct hreq *r)
{
	switch (r->rt.id) {
	case R_HEALTH:
		hreq_reply_json(r, 200, json_pack("{s:s}", "status", "ok"));
		break;
	case R_READY:
		if (r->h->draining)
			hreq_reply_json(r, 503, json_pack("{s:s}", "status", "draining"));
		else
			hreq_reply_json(r, 200, json_pack("{s:s}", "status", "ok"));
		break;
	case R_OPENAPI:
		free(r->reply);
		r->reply = strdup(openapi_json);
		r->status = 200;
		r->answered = true;
		break;
	case R_STATS:
		http_stats(r);
		break;
	case R_METRICS:
		http_metrics(r);
		break;
	default:
		break;
	}
}

static void dispatch(struct hreq *r)
{
	struct http *h = r->h;
	const struct http_opts *o = &h->b->opts.http;

	if (r->method == M_OPTIONS && o->cors_origins[0] &&
	    MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
					"Access-Control-Request-Method")) {
		hreq_reply_json(r, 204, NULL); /* CORS preflight, any path (dflockd) */
		return;
	}
	/* dflockd's order: rate limit, then token, then route. */
	if (!r->rt.probe_path && !net_rate_allow(&h->rates, r->peer)) {
		hreq_error(r, 429, "rate_limited", "over %u requests a second from %s",
			   o->rate_per_ip, r->ip);
		return;
	}
	if (r->sub) { /* a path another face took (the web view checks its own token) */
		r->sub->dispatch(r);
		return;
	}
	if (!http_admit_bearer(r))
		return;
	if (r->rt.id == R_NONE) {
		if (r->rt.path_known)
			hreq_error(r, 405, "method_not_allowed",
				   "%.16s is not allowed here (Allow: %s)", r->verb, r->rt.allow);
		else
			hreq_error(r, 404, "not_found", "no such route");
		return;
	}
	if (r->rt.bad_param) {
		hreq_error(r, 400, "bad_request",
			   "malformed key: 1..%d bytes, one path segment, percent-encoded, no NUL",
			   LOCAL_KEY_MAX);
		return;
	}
	switch (r->rt.id) {
	case R_SESSIONS:
		http_sessions_create(r);
		break;
	case R_SESSION:
		http_sessions_delete(r);
		break;
	case R_SESSION_PING:
		http_sessions_ping(r);
		break;
	case R_SIGNAL:
		http_signal_publish(r);
		break;
	case R_HEALTH:
	case R_READY:
	case R_OPENAPI:
	case R_STATS:
	case R_METRICS:
		serve_plain(r);
		break;
	default:
		http_lock_op(r);
	}
}

/* The request is over: let go of what it held. */
static void api_request_done(struct hreq *r, bool completed)
{
	http_waiter_drop(r);
	if (r->grant_tok && !completed)
		http_grant_undelivered(r); /* before the session is let go */
	http_session_done(r);
}

/* A request of ours released something: our own waiters may have been
 * granted (without waiting for the doorbell thread). */
static void api_after_run(struct http *h)
{
	if (h->maybe_granted) {
		h->maybe_granted = false;
		http_waiters_poll(h);
	}
}

static void note_request(struct hreq *r, uint64_t ns)
{
	http_metrics_note(r->h, r->method, r->rt.id, r->status, ns);
}

static const struct http_client api_client = {
	.dispatch = dispatch,
	.request_done = api_request_done,
	.after_run = api_after_run,
	.shares_paths = true,
};

/* ---- listeners ----------------------------------------------------------- */

static int listen_unix(struct broker *b, const char *path)
{
	int fd = safe_bind_unix(b, path, SOCK_STREAM, "--http-socket"), err;

	if (fd >= 0 && listen(fd, 4096)) {
		err = -errno;
		blog(LOG_ERR, "cannot serve HTTP on %s: %s", path, strerror(-err));
		close(fd);
		return err;
	}
	return fd;
}

int http_start(struct broker *b)
{
	const struct http_opts *o = &b->opts.http;
	int act = activated_stream_fd("http"), fd, err;
	int cact = activated_stream_fd("consul"); /* the Consul API's listener */
	const char *clisten = b->opts.consul.listen;
	struct http *h;

	if (!http_enabled(o) && act < 0 && !clisten[0] && cact < 0)
		return 0;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	/* The engine's record: the Consul API (its face starts next) shares
	 * it, with the HTTP API's sessions cap and the network module's
	 * per-peer records. */
	b->http = h;
	http_engine_init(h, b, &http_face);
	h->note_request = note_request;
	http_token_key_init(h);
	err = hsessions_init(h);
	if (err)
		return err;
	if (act >= 0 &&
	    (err = http_engine_listen(h, act, &api_client, "a socket-activated socket")) < 0)
		return err;
	if (o->listen[0]) {
		fd = listen_tcp_spec(o->listen, "--http-listen", "HTTP");
		if (fd < 0)
			return fd;
		if ((err = http_engine_listen(h, fd, &api_client, o->listen)) < 0)
			return err;
	}
	if (o->unix_path[0]) {
		fd = listen_unix(b, o->unix_path);
		if (fd < 0)
			return fd;
		h->unlink_unix = true;
		if ((err = http_engine_listen(h, fd, &api_client, o->unix_path)) < 0)
			return err;
	}
	face_schedule(b, &http_face, mono_ns() + 250000000ull, TIMER_HTTP_TICK, 0, 0);
	if (http_enabled(o) || act >= 0) /* not when only the Consul API is on */
		blog(LOG_INFO, "HTTP API on%s%s%s%s%s", o->listen[0] ? " " : "", o->listen,
		     o->unix_path[0] ? " unix:" : "", o->unix_path,
		     act >= 0 ? " (socket-activated)" : "");
	if (!net_token(b)[0] && o->insecure_no_auth &&
	    (o->listen[0] || (act >= 0 && http_engine_is_tcp(act))))
		blog(LOG_WARNING, "HTTP API on TCP without a token (--http-insecure-no-auth): "
				  "every local user may take and release any lock");
	return 0;
}

void http_stop(struct broker *b)
{
	struct http *h = b->http;
	unsigned i;

	if (!h)
		return;
	http_admit_flush(h); /* refusals held back: answered now */
	http_waiters_end(h, NULL, 503, "draining");
	for (i = 0; i < h->nd; i++)
		MHD_run(h->d[i]); /* let resumed connections finish */
	http_sessions_close_all(h);
	http_engine_close(h); /* and the other clients' records */
	if (h->unlink_unix)
		unlink(b->opts.http.unix_path);
	hsessions_fini(h);
	net_rate_free(&h->rates); /* after the sessions that counted in it */
	free(h->waiters);
	free(h);
	b->http = NULL;
}

void http_doorbell(struct broker *b)
{
	if (b->http)
		http_waiters_poll(b->http);
}

void http_timer(struct broker *b, uint32_t kind, uint32_t a, uint32_t b2)
{
	struct http *h = b->http;
	uint64_t period = 250000000ull;

	if (!h)
		return;
	if (kind == TIMER_HTTP_DELAY) {
		http_admit_due(h, a, b2);
		return;
	}
	if (kind == TIMER_HTTP_WAIT) {
		http_waiter_due(h, a, b2);
		return;
	}
	if (kind == TIMER_HTTP_RUN) { /* none scheduled now: see run_soon() */
		h->run_pending = false;
		http_engine_run_all(h);
		return;
	}
	http_engine_tick(h); /* overdue heads, connection timeouts, idle peers */
	http_sessions_reap(h);
	face_schedule(b, &http_face, mono_ns() + period, TIMER_HTTP_TICK, 0, 0);
}

bool http_draining(struct broker *b)
{
	struct http *h = b->http;

	if (!h)
		return true;
	if (!h->draining)
		http_waiters_end(h, NULL, 503, "draining");
	return http_engine_drain(h);
}

static bool http_deferred(struct broker *b, bool run)
{
	return b->http && http_engine_deferred(b->http, run);
}

const struct face http_face = {
	.name = "http",
	.start = http_start,
	.stop = http_stop,
	.timer = http_timer,
	.session_ended = http_session_ended,
	.doorbell = http_doorbell,
	.deferred = http_deferred,
	.drained = http_draining,
};
