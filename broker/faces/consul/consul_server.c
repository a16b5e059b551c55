// SPDX-License-Identifier: MIT
/*
 * The Consul-compatible API's front: a client of the HTTP engine on a
 * listener of its own (net/http_engine.c runs it, admits its connections,
 * checks Host and Origin, counts its connections and drains it), whose
 * requests come here: who may make them (Consul's X-Consul-Token, ?token=
 * or Authorization: Bearer against --auth-token, or a user the control
 * socket admits: the network module's checks), the network module's
 * per-peer rate limit, routing, Consul's answers and headers, and blocking
 * queries.
 *
 * A blocking query (?index=N&wait=D) is a suspended connection, answered
 * again from scratch when the index of what it reads passes N: changes made
 * through this API call consul_changed(), changes made in the segment by
 * anyone else (liblocal, the CLI, the other APIs) ring the broker's doorbell
 * through the watcher thread (consul_watch.c). Nothing polls.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "consul_int.h"
#include "net/http_engine.h"
#include "net/net.h"

static struct creq *cx(struct hreq *r)
{
	return r->cx;
}

/* ---- answers ------------------------------------------------------------- */

/* The marker of such a number: a string no request can contain, since it
 * holds a random nonce of this process. */
static char u64_nonce[17];

static void nonce_init(void)
{
	uint64_t n = 0;

	if (!u64_nonce[0]) {
		if (getrandom(&n, sizeof(n), 0) != sizeof(n))
			n = (uint64_t)mono_ns() * 0x9e3779b97f4a7c15ull;
		snprintf(u64_nonce, sizeof(u64_nonce), "%016" PRIx64, n);
	}
}

json_t *consul_u64(uint64_t v)
{
	char text[64];

	if (v <= (uint64_t)INT64_MAX)
		return json_integer((json_int_t)v);
	nonce_init();
	snprintf(text, sizeof(text), "\x01%s:%" PRIu64, u64_nonce, v);
	return json_string(text);
}

/* "\u0001NONCE:DIGITS" (as json_dumps() writes the marker) -> DIGITS. */
static void unquote_u64(char *s)
{
	char mark_json[40], *p, *end;
	size_t mark;

	if (!u64_nonce[0])
		return;
	snprintf(mark_json, sizeof(mark_json), "\"\\u0001%s:", u64_nonce);
	mark = strlen(mark_json);
	while (s && (p = strstr(s, mark_json)) && (end = strchr(p + mark, '"'))) {
		size_t n = (size_t)(end - (p + mark));

		memmove(p, p + mark, n);
		memmove(p + n, end + 1, strlen(end + 1) + 1);
		s = p + n;
	}
}

void consul_reply(struct hreq *r, int status, json_t *body)
{
	free(r->reply);
	r->reply = body ? json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
	unquote_u64(r->reply);
	json_decref(body);
	cx(r)->reply_len = r->reply ? strlen(r->reply) : 0;
	cx(r)->ctype = "application/json";
	r->status = status;
	r->answered = true;
}

void consul_reply_text(struct hreq *r, int status, const char *fmt, ...)
{
	char text[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	free(r->reply);
	r->reply = strdup(text);
	cx(r)->reply_len = r->reply ? strlen(r->reply) : 0;
	cx(r)->ctype = "text/plain; charset=utf-8";
	r->status = status;
	r->answered = true;
}

void consul_reply_raw(struct hreq *r, const char *data, size_t len)
{
	free(r->reply);
	r->reply = malloc(len + 1);
	if (!r->reply) {
		consul_reply_text(r, 500, "out of memory");
		return;
	}
	memcpy(r->reply, data, len);
	r->reply[len] = '\0';
	cx(r)->reply_len = len;
	cx(r)->ctype = "application/octet-stream";
	r->status = 200;
	r->answered = true;
}

void consul_set_index(struct hreq *r, uint64_t index)
{
	cx(r)->index = index ? index : 1; /* Consul never says 0 */
	cx(r)->index_set = true;
}

int consul_send_answer(struct hreq *r)
{
	struct creq *q = cx(r);
	struct MHD_Response *resp;
	enum MHD_Result ret;
	char idx[24];

	resp = MHD_create_response_from_buffer(q ? q->reply_len : 0, r->reply,
					       MHD_RESPMEM_MUST_COPY);
	if (!resp)
		return MHD_NO;
	if (q && r->reply)
		MHD_add_response_header(resp, "Content-Type", q->ctype);
	if (q && q->index_set) {
		snprintf(idx, sizeof(idx), "%" PRIu64, q->index);
		MHD_add_response_header(resp, "X-Consul-Index", idx);
		MHD_add_response_header(resp, "X-Consul-KnownLeader", "true");
		MHD_add_response_header(resp, "X-Consul-LastContact", "0");
	}
	MHD_add_response_header(resp, "X-Consul-Default-Acl-Policy", "deny");
	if (r->h->draining)
		MHD_add_response_header(resp, "Connection", "close");
	ret = MHD_queue_response(r->conn, (unsigned)r->status, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* ---- indices --------------------------------------------------------------- */

uint64_t consul_bump(struct consul *c)
{
	return ++c->index;
}

void consul_changed(struct consul *c)
{
	if (c->eval_pending || !c->active_waits)
		return;
	c->eval_pending = true;
	face_schedule(c->b, &consul_face, mono_ns(), TIMER_CONSUL_WAIT, CONSUL_TIMER_EVAL, 0);
}

/* ---- query parameters ---------------------------------------------------- */

static int hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

int consul_unescape(const char *in, size_t n, char *out, size_t size, size_t *out_len, bool plus)
{
	size_t i, o = 0;

	for (i = 0; i < n; i++) {
		char ch = in[i];

		if (ch == '%') {
			int hi, lo;

			if (i + 2 >= n)
				return -1;
			hi = hexval(in[i + 1]);
			lo = hexval(in[i + 2]);
			if (hi < 0 || lo < 0)
				return -1;
			ch = (char)(hi * 16 + lo);
			i += 2;
		} else if (ch == '+' && plus) {
			ch = ' ';
		}
		if (ch == '\0' || o + 1 >= size)
			return -1;
		out[o++] = ch;
	}
	out[o] = '\0';
	if (out_len)
		*out_len = o;
	return 0;
}

bool consul_arg(struct hreq *r, const char *name, char *buf, size_t size)
{
	const char *v = NULL;
	size_t vlen = 0;

	if (MHD_lookup_connection_value_n(r->conn, MHD_GET_ARGUMENT_KIND, name, strlen(name), &v,
					  &vlen) != MHD_YES)
		return false;
	if (!v || consul_unescape(v, vlen, buf, size, NULL, true))
		buf[0] = '\0';
	return true;
}

/* ---- blocking queries ---------------------------------------------------- */

static int32_t wait_slot(struct consul *c)
{
	uint32_t i;

	for (i = 0; i < c->nwaits; i++)
		if (!c->waits[i].r)
			return (int32_t)i;
	if (c->nwaits == c->cap_waits) {
		uint32_t cap = c->cap_waits ? c->cap_waits * 2 : 32;
		struct cwait *w = realloc(c->waits, cap * sizeof(*w));

		if (!w)
			return -1;
		memset(w + c->cap_waits, 0, (cap - c->cap_waits) * sizeof(*w));
		c->waits = w;
		c->cap_waits = cap;
	}
	return (int32_t)c->nwaits++;
}

/* libmicrohttpd does not poll suspended connections: watch the socket for
 * a hang-up (EPOLLRDHUP only), as the HTTP API's long polls do. */
static void hung_up(struct broker *b, int fd, uint32_t events, void *slot)
{
	(void)fd;
	(void)events;
	if (b->http)
		consul_hangup(b->http, (uint32_t)(uintptr_t)slot);
}

static void watch_hangup(struct consul *c, struct hreq *r, uint32_t slot)
{
	/* -1: its deadline still ends it. */
	c->waits[slot].fd = http_engine_watch_hangup(r, hung_up, (void *)(uintptr_t)slot);
}

static void unwatch_hangup(struct consul *c, struct cwait *w)
{
	if (w->fd >= 0)
		loop_unwatch(c->b, w->fd);
	w->fd = -1;
}

bool consul_block(struct hreq *r, enum cw_kind kind, const char *key, uint64_t view)
{
	struct consul *c = r->h->consul;
	char buf[64], *end;
	uint64_t want, wait_ms = CONSUL_WAIT_DEFAULT_MS;
	struct cwait *w;
	int32_t slot;

	if (cx(r)->woke || cx(r)->waiter >= 0 || r->h->draining ||
	    !consul_arg(r, "index", buf, sizeof(buf)))
		return false;
	errno = 0;
	want = strtoull(buf, &end, 10);
	if (errno || *end || !want || view > want)
		return false;
	if (consul_arg(r, "wait", buf, sizeof(buf)) && buf[0]) {
		const char *why;
		int64_t ns;

		/* Go's durations, and bare seconds as documented; what does not
		 * parse, overflows or is negative gets Consul's answer. */
		if (duration_parse_or_seconds(buf, &ns, &why) || ns < 0) {
			consul_reply_text(r, 400, "Invalid wait time");
			return true;
		}
		wait_ms = (uint64_t)duration_ms(ns);
	}
	if (wait_ms > CONSUL_WAIT_MAX_MS)
		wait_ms = CONSUL_WAIT_MAX_MS;
	/* Consul adds up to wait/16 of jitter; a deadline of exactly the
	 * wait is within what clients expect. */
	slot = wait_slot(c);
	if (slot < 0)
		return false; /* answer now: a spurious wake-up is allowed */
	w = &c->waits[slot];
	w->r = r;
	w->kind = kind;
	w->index = want;
	snprintf(w->key, sizeof(w->key), "%s", key ? key : "");
	cx(r)->waiter = slot;
	c->active_waits++;
	watch_hangup(c, r, (uint32_t)slot);
	face_schedule(c->b, &consul_face, mono_ns() + wait_ms * 1000000ull, TIMER_CONSUL_WAIT,
		      (uint32_t)slot, w->gen);
	hreq_suspend(r);
	consul_watch_update(c);
	return true;
}

static void route(struct hreq *r);

/* End waiter @slot: answer its request again with what is there now. */
static void wake(struct consul *c, uint32_t slot)
{
	struct cwait *w = &c->waits[slot];
	struct hreq *r = w->r;

	unwatch_hangup(c, w);
	w->r = NULL;
	w->gen++;
	c->active_waits--;
	cx(r)->waiter = -1;
	cx(r)->woke = true;
	r->answered = false;
	route(r);
	if (!r->answered)
		consul_reply_text(r, 500, "no answer");
	hreq_resume(r);
}

static uint64_t view_of(struct consul *c, const struct cwait *w)
{
	return w->kind == CW_SESSIONS ? consul_sessions_view(c)
				      : consul_kv_view(c, w->kind, w->key);
}

static void evaluate(struct consul *c)
{
	uint32_t i;
	bool any = false;

	c->eval_pending = false;
	for (i = 0; i < c->nwaits && c->active_waits; i++)
		if (c->waits[i].r && view_of(c, &c->waits[i]) > c->waits[i].index) {
			wake(c, i);
			any = true;
		}
	if (any)
		consul_watch_update(c);
}

void consul_timer(struct http *h, uint32_t a, uint32_t gen)
{
	struct consul *c = h->consul;

	if (!c)
		return;
	if (a == CONSUL_TIMER_EVAL) {
		evaluate(c);
		return;
	}
	if (a < c->nwaits && c->waits[a].r && c->waits[a].gen == gen) {
		wake(c, a);
		consul_watch_update(c);
	}
}

void consul_doorbell(struct http *h)
{
	struct consul *c = h->consul;

	if (c && c->active_waits && consul_kv_sync_all(c))
		consul_changed(c);
}

void consul_hangup(struct http *h, uint32_t slot)
{
	struct consul *c = h->consul;

	/* Answered into a closed socket: libmicrohttpd then closes it, and
	 * the connection no longer counts against the limits. */
	if (c && slot < c->nwaits && c->waits[slot].r) {
		wake(c, slot);
		consul_watch_update(c);
	}
}

void consul_drain(struct http *h)
{
	struct consul *c = h->consul;
	uint32_t i;

	/* Blocking queries end now, answered with what is there. */
	for (i = 0; c && i < c->nwaits; i++)
		if (c->waits[i].r)
			wake(c, i);
}

void consul_request_done(struct hreq *r)
{
	struct consul *c = r->h->consul;
	struct creq *q = cx(r);

	if (!q)
		return;
	if (c && q->waiter >= 0 && (uint32_t)q->waiter < c->nwaits && c->waits[q->waiter].r == r) {
		unwatch_hangup(c, &c->waits[q->waiter]);
		c->waits[q->waiter].r = NULL;
		c->waits[q->waiter].gen++;
		c->active_waits--;
		consul_watch_update(c);
	}
	free(q);
	r->cx = NULL;
}

/* ---- dispatch -------------------------------------------------------------- */

/*
 * A request passes with the token (X-Consul-Token, Authorization: Bearer
 * or ?token=), or from a user the control socket admits when it is nothing
 * a web page could have sent (broker/net/, docs/security.md): a local
 * client that sends no token — as python3-consul does — is served as the
 * Unix socket would serve its user. Without a token configured,
 * --http-insecure-no-auth lets everyone through.
 */
enum admitted { REFUSED, BY_TOKEN, BY_UID };

static enum admitted authorized(struct hreq *r)
{
	const struct broker *b = r->h->b;
	const char *t;
	char arg[300];

	if (!net_token(b)[0] && (!r->tcp || b->opts.http.insecure_no_auth))
		return BY_TOKEN; /* none needed */
	t = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Consul-Token");
	if (t && net_token_ok(b, t, strlen(t)))
		return BY_TOKEN;
	t = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization");
	if (t && net_bearer_ok(b, t))
		return BY_TOKEN;
	if (consul_arg(r, "token", arg, sizeof(arg)) && net_token_ok(b, arg, strlen(arg)))
		return BY_TOKEN;
	return r->uid_ok ? BY_UID : REFUSED;
}

static bool is_verb(struct hreq *r, const char *v)
{
	return !strcmp(r->verb, v);
}

static void status_route(struct hreq *r, const char *rest)
{
	if (!is_verb(r, "GET")) {
		consul_reply_text(r, 405, "method %s not allowed", r->verb);
	} else if (!strcmp(rest, "leader")) {
		consul_reply(r, 200, json_string("127.0.0.1:8300"));
	} else if (!strcmp(rest, "peers")) {
		consul_reply(r, 200, json_pack("[s]", "127.0.0.1:8300"));
	} else {
		consul_reply_text(r, 404, "Not Found");
	}
}

static void agent_route(struct hreq *r, const char *rest)
{
	struct consul *c = r->h->consul;

	if (!is_verb(r, "GET")) {
		consul_reply_text(r, 405, "method %s not allowed", r->verb);
	} else if (!strcmp(rest, "self")) {
		char waits[16], watched[16], sessions[16];

		/* Stats: as Consul's, strings; tests wait on blocking_queries. */
		snprintf(waits, sizeof(waits), "%u", c->active_waits);
		snprintf(watched, sizeof(watched), "%u", c->nwatch);
		snprintf(sessions, sizeof(sessions), "%u", c->nsessions);
		consul_reply(r, 200,
			     json_pack("{s:{s:s, s:s, s:s, s:b, s:s}, s:{s:s, s:s, s:i, s:i},"
				       " s:{s:{s:s, s:s, s:s}}}",
				       "Config", "Datacenter", "dc1", "NodeName", c->node,
				       "Version", SHMLOCK_VERSION, "Server", 1, "Revision",
				       "shmlock", "Member", "Name", c->node, "Addr", "127.0.0.1",
				       "Port", 8301, "Status", 1, "Stats", "shmlock",
				       "blocking_queries", waits, "watched_keys", watched,
				       "sessions", sessions));
	} else {
		consul_reply_text(r, 404, "Not Found");
	}
}

static void route(struct hreq *r)
{
	const char *path = cx(r)->path;

	if (!strncmp(path, "/v1/kv/", 7))
		consul_kv_route(r, path + 7);
	else if (!strcmp(path, "/v1/kv"))
		consul_kv_route(r, "");
	else if (!strncmp(path, "/v1/session/", 12))
		consul_session_route(r, path + 12);
	else if (!strncmp(path, "/v1/status/", 11))
		status_route(r, path + 11);
	else if (!strncmp(path, "/v1/agent/", 10))
		agent_route(r, path + 10);
	else
		consul_reply_text(r, 404, "Not Found");
}

void consul_dispatch(struct hreq *r)
{
	struct creq *q = calloc(1, sizeof(*q));

	if (!q) {
		hreq_error(r, 500, "internal", "out of memory");
		return;
	}
	q->waiter = -1;
	r->cx = q;
	snprintf(q->path, sizeof(q->path), "%s", r->url ? r->url : "");
	q->path[strcspn(q->path, "?")] = '\0';
	switch (authorized(r)) {
	case REFUSED:
		consul_reply_text(r, 403, "Permission denied");
		http_admit_delay(r);
		return;
	case BY_UID:
		if (!http_admit_web_ok(r)) { /* a web page's request: Consul's words */
			consul_reply_text(r, 403,
					  "Permission denied: a request a web page "
					  "could send needs the token");
			return;
		}
		break;
	case BY_TOKEN:
		break;
	}
	if (!net_rate_allow(&r->h->rates, r->peer)) {
		consul_reply_text(r, 429,
				  "Your IP is issuing too many concurrent connections, "
				  "please rate limit your calls");
		return;
	}
	if (r->body_too_large) {
		consul_reply_text(r, 413, "Request body too large");
		return;
	}
	route(r);
}

/* ---- start and stop ------------------------------------------------------ */

/*
 * The first index: the time in microseconds since the epoch. A restart
 * forgets the KV store, and a client blocking with an index from before must
 * see the index move at once, not wait out its wait (clients also reset on an
 * index that goes backwards, but only once they have an answer). No broker
 * makes a change per microsecond for long; and in microseconds the index
 * stays below 2^53, exact in JavaScript clients.
 */
static uint64_t start_index(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

int consul_start(struct http *h, unsigned daemon)
{
	struct consul *c = calloc(1, sizeof(*c));
	int err;

	if (!c)
		return -ENOMEM;
	h->consul = c;
	c->h = h;
	c->b = h->b;
	c->daemon = (int)daemon;
	c->index = start_index();
	c->kv_index = c->kv_del_index = c->sess_index = c->index; /* the tables' */
	if (h->b->opts.consul.node[0])
		snprintf(c->node, sizeof(c->node), "%s", h->b->opts.consul.node);
	else if (gethostname(c->node, sizeof(c->node) - 1))
		snprintf(c->node, sizeof(c->node), "localhost");
	err = csessions_init(c);
	if (!err)
		err = consul_watch_start(c);
	if (!err)
		blog(LOG_INFO, "Consul-compatible API on %s (node %s)",
		     h->b->opts.consul.listen[0] ? h->b->opts.consul.listen : "socket-activated",
		     c->node);
	return err;
}

void consul_stop(struct http *h)
{
	struct consul *c = h->consul;
	uint32_t i;

	if (!c)
		return;
	consul_watch_stop(c);
	for (i = 0; i < c->nwaits; i++)
		if (c->waits[i].r)
			wake(c, i);
	consul_sessions_close_all(c);
	consul_kv_free(c);
	csessions_fini(c);
	free(c->waits);
	c->waits = NULL;
	c->nwaits = 0;
}

void consul_free(struct http *h)
{
	free(h->consul);
	h->consul = NULL;
}

/* ---- the face ------------------------------------------------------------------ */

static void request_done(struct hreq *r, bool completed)
{
	(void)completed;
	consul_request_done(r);
}

/* A client of the HTTP engine, on a listener of its own. */
static const struct http_client consul_client = {
	.dispatch = consul_dispatch,
	.send_answer = consul_send_answer,
	.request_done = request_done,
	.free = consul_free,
	.wants_url = true,
};

static int face_start(struct broker *b)
{
	const char *spec = b->opts.consul.listen;
	int act = activated_stream_fd("consul"), fd, i;

	if (!spec[0] && act < 0)
		return 0;
	if (!b->http) /* the HTTP face starts the engine for this API too */
		return -EINVAL;
	fd = act >= 0 ? act : listen_tcp_spec(spec, "--consul-listen", "Consul API");
	if (fd < 0)
		return fd;
	i = http_engine_listen(b->http, fd, &consul_client,
			       spec[0] ? spec : "the socket-activated Consul socket");
	return i < 0 ? i : consul_start(b->http, (unsigned)i);
}

static void face_stop(struct broker *b)
{
	if (b->http)
		consul_stop(b->http); /* its records go when the engine closes */
}

static void face_timer(struct broker *b, uint32_t kind, uint32_t a, uint32_t b2)
{
	(void)kind;
	if (b->http)
		consul_timer(b->http, a, b2);
}

static void face_doorbell(struct broker *b)
{
	if (b->http)
		consul_doorbell(b->http);
}

static bool face_drained(struct broker *b)
{
	if (b->http)
		consul_drain(b->http); /* the engine counts the connections left */
	return true;
}

const struct face consul_face = {
	.name = "consul",
	.start = face_start,
	.stop = face_stop,
	.timer = face_timer,
	.session_ended = consul_session_ended,
	.doorbell = face_doorbell,
	.drained = face_drained,
};
