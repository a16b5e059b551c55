// SPDX-License-Identifier: MIT
/*
 * The HTTP engine (http_engine.h): libmicrohttpd driven from the broker's
 * event loop (its epoll fd sits in ours, so every callback runs on the loop
 * thread and sees the same state as the socket protocol: no locks between
 * the two), the network module's admission of every connection (caps per
 * peer and the deadline for a whole request head, as nginx keeps them for
 * every protocol module: net_conns.c), the Host and Origin checks every
 * listener makes, request bodies, answers, including those of suspended
 * long polls, connection counting and the drain. What a request means is
 * its client's (a face).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <syslog.h>
#include <unistd.h>

#include "clock.h"
#include "http_engine.h"
#include "net.h"

void hreq_reply_json(struct hreq *r, int status, json_t *body)
{
	free(r->reply);
	/* 6 significant digits: 18.5, not 18.499999999999996. */
	r->reply = body ? json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
	json_decref(body);
	r->status = status;
	r->answered = true;
}

void hreq_reply_text(struct hreq *r, int status, const char *text, size_t len)
{
	char *copy = malloc(len + 1);

	free(r->reply);
	r->reply = copy;
	if (copy) {
		memcpy(copy, text, len);
		copy[len] = '\0';
	}
	r->status = status;
	r->answered = true;
}

void hreq_error(struct hreq *r, int status, const char *code, const char *fmt, ...)
{
	char detail[512], *p;
	va_list ap;
	json_t *j;

	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	j = json_pack("{s:s, s:s}", "error", code, "detail", detail);
	if (!j) {
		/* The detail quotes the request (a method, a key, a header),
		 * which need not be UTF-8; a JSON string must be. */
		for (p = detail; *p; p++)
			if ((unsigned char)*p >= 0x80)
				*p = '?';
		j = json_pack("{s:s, s:s}", "error", code, "detail", detail);
	}
	hreq_reply_json(r, status, j);
}

/*
 * Run the daemons from the loop soon: at the end of this turn of the loop
 * (the faces' deferred hook), which then polls its fds without sleeping.
 * libmicrohttpd takes up a resumed connection, or work its own epoll will
 * not signal again (see run_daemon()), only when it runs; in external
 * polling mode it has no channel of its own to wake the loop with. (A
 * timer due now did this before: a timerfd_settime(), a sleep until the
 * timer's interrupt and a read per long poll answered.)
 */
static void run_soon(struct http *h)
{
	h->run_pending = true;
}

void hreq_suspend(struct hreq *r)
{
	r->suspended = true;
	MHD_suspend_connection(r->conn);
}

void hreq_resume(struct hreq *r)
{
	if (!r->suspended)
		return;
	r->suspended = false;
	/* When the daemon next runs, it calls the access handler again,
	 * which sends the answer. Nothing wakes its epoll fd for that (no
	 * inter-thread channel in external polling mode): the loop must run
	 * it. */
	MHD_resume_connection(r->conn);
	run_soon(r->h);
}

static bool origin_allowed(const struct http_opts *o, const char *origin)
{
	return net_origin_in(o->cors_origins, origin, true);
}

static bool origin_listed(const struct http_opts *o, const char *origin)
{
	return net_origin_in(o->cors_origins, origin, false);
}

static void add_cors(struct hreq *r, struct MHD_Response *resp)
{
	const char *origin;

	if (!r->h->b->opts.http.cors_origins[0])
		return;
	origin = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin");
	if (!origin || !origin_allowed(&r->h->b->opts.http, origin))
		return;
	if (origin_listed(&r->h->b->opts.http, origin)) {
		MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin);
		MHD_add_response_header(resp, "Vary", "Origin");
	} else { /* allowed by "*": as dflockd, "*" (no credentials sent) */
		MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
	}
	/* On every answer to an allowed origin, as dflockd. */
	MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
	MHD_add_response_header(
		resp, "Access-Control-Allow-Headers",
		"Authorization, Content-Type, X-Dflockd-Session, X-Shmlock-Session");
	MHD_add_response_header(resp, "Access-Control-Max-Age", "300");
}

static enum MHD_Result send_answer(struct hreq *r)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;
	const char *type = "application/json";
	const char *text = r->reply;

	if (r->rt.id == R_METRICS && r->status == 200)
		type = "text/plain; version=0.0.4";
	if (r->ctype) /* the web view's pages and data (ui_server.c) */
		type = r->ctype;
	resp = text ? MHD_create_response_from_buffer(strlen(text), (void *)text,
						      MHD_RESPMEM_MUST_COPY)
		    : MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
	if (!resp)
		return MHD_NO;
	if (text)
		MHD_add_response_header(resp, "Content-Type", type);
	if (r->status == 405 && r->rt.allow[0])
		MHD_add_response_header(resp, "Allow", r->rt.allow);
	if (r->status == 401)
		MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
	if (r->status == 429) /* a token is back in the bucket within a second */
		MHD_add_response_header(resp, "Retry-After", "1");
	if (r->h->draining)
		MHD_add_response_header(resp, "Connection", "close");
	add_cors(r, resp);
	if (r->ctype) { /* the view runs only its own script, never cached */
		MHD_add_response_header(resp, "Cache-Control", "no-store");
		MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
		MHD_add_response_header(resp, "Content-Security-Policy",
					"default-src 'self'; frame-ancestors 'none'");
	}
	ret = MHD_queue_response(r->conn, (unsigned)r->status, resp);
	MHD_destroy_response(resp);
	return ret;
}

/*
 * DNS rebinding: a page from evil.example whose name is made to resolve to
 * 127.0.0.1 reaches the API with "Host: evil.example[:port]", same-origin
 * in the browser's eyes. On TCP only these Host names are served: localhost,
 * an IP literal that is the address connected to (or a loopback one), and
 * --http-allowed-hosts. No Host at all (HTTP/1.0) is no browser's request.
 */
static bool host_allowed(struct hreq *r)
{
	const char *host = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Host");
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);

	if (!r->tcp || !host)
		return true;
	return net_host_ok(host, ci ? ci->connect_fd : -1, r->h->b->opts.http.allowed_hosts);
}

/*
 * Cross-site requests: a web page can make a browser send a "simple" POST
 * (no preflight) to a loopback port, and without a token (with
 * --http-insecure-no-auth) that would take and release locks. Browsers mark
 * every such request with Origin; on TCP only the origins CORS allows are
 * served. Programs (curl, clients) send no Origin. No page reaches the Unix
 * socket.
 */
static bool origin_ok(struct hreq *r)
{
	const char *origin = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin");

	return !r->tcp || !origin || origin_allowed(&r->h->b->opts.http, origin);
}

/* The checks every listener makes, then the request is its client's. */
static void dispatch(struct hreq *r)
{
	if (!host_allowed(r)) {
		hreq_error(r, 421, "misdirected",
			   "this server does not answer for that Host (see --http-allowed-hosts)");
		return;
	}
	if (!origin_ok(r)) {
		hreq_error(r, 403, "forbidden_origin",
			   "requests from web pages of this origin are not served (see "
			   "--http-cors-allowed-origins)");
		return;
	}
	r->client->dispatch(r);
}

/* The client of the listener @c came through. */
static const struct http_client *client_of(struct http *h, struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_DAEMON);
	unsigned i;

	for (i = 0; ci && i < h->nd; i++)
		if (ci->daemon == h->d[i])
			return h->client[i];
	return h->client[0];
}

/* What a connection keeps across its requests (MHD's socket context). */
struct hconn {
	char ip[64];
	bool tcp;
	struct net_peer peer;
	struct net_conn nc; /* in h->pool: caps and the head's deadline */
};

static struct hconn *hconn_of(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return ci ? ci->socket_context : NULL;
}

static void client_ip(struct MHD_Connection *c, char *out, size_t size, bool *tcp)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	const struct sockaddr *sa = ci ? ci->client_addr : NULL;

	snprintf(out, size, "local");
	*tcp = sa && (sa->sa_family == AF_INET || sa->sa_family == AF_INET6);
	if (sa && sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out,
			  (socklen_t)size);
	else if (sa && sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out,
			  (socklen_t)size);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **ctx)
{
	struct http *h = cls;
	struct hreq *r = *ctx;
	struct hconn *k;

	(void)version;
	if (!r) {
		r = calloc(1, sizeof(*r));
		if (!r)
			return MHD_NO;
		r->h = h;
		r->conn = c;
		r->start_ns = mono_ns();
		r->waiter = -1;
		r->delayed = -1;
		r->method = http_method_of(method);
		{ /* snprintf("%s"), cut to fit, without its cost on every request */
			size_t n = strnlen(method, sizeof(r->verb) - 1);

			memcpy(r->verb, method, n);
			r->verb[n] = '\0';
		}
		http_route_match(url, r->method, &r->rt);
		k = hconn_of(c);
		if (k) {
			memcpy(r->ip, k->ip, sizeof(r->ip));
			r->tcp = k->tcp;
			memcpy(r->peer, k->peer.key, sizeof(r->peer));
			r->uid_ok = k->peer.uid_admitted;
			net_pool_ready(&h->pool, &k->nc); /* its head is in */
		} else {
			client_ip(c, r->ip, sizeof(r->ip), &r->tcp);
			memcpy(r->peer, r->ip, sizeof(r->peer));
		}
		r->client = client_of(h, c);
		if (r->client->shares_paths && h->path_client && h->path_client->claims(url))
			r->sub = h->path_client;
		if ((r->client->wants_url || r->sub) && !(r->url = strdup(url)))
			return MHD_NO;
		*ctx = r;
		return MHD_YES;
	}
	if (*upload_size) {
		size_t n = *upload_size;

		*upload_size = 0;
		if (r->body_too_large || r->body_len + n > HTTP_BODY_MAX) {
			r->body_too_large = true; /* read and drop the rest */
			return MHD_YES;
		}
		if (r->body_len + n > r->body_cap) {
			size_t cap = r->body_cap ? r->body_cap : 256;
			char *p;

			while (cap < r->body_len + n)
				cap *= 2;
			p = realloc(r->body, cap);
			if (!p)
				return MHD_NO;
			r->body = p;
			r->body_cap = cap;
		}
		memcpy(r->body + r->body_len, upload, n);
		r->body_len += n;
		return MHD_YES;
	}
	if (r->suspended)
		return MHD_YES;
	if (!r->answered)
		dispatch(r);
	if (r->suspended)
		return MHD_YES;
	if (!r->answered)
		hreq_error(r, 500, "internal", "no answer");
	if (r->client->send_answer)
		return (enum MHD_Result)r->client->send_answer(r);
	return send_answer(r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **ctx,
			 enum MHD_RequestTerminationCode why)
{
	struct http *h = cls;
	struct hreq *r = *ctx;
	struct hconn *k = hconn_of(c);

	if (k && why == MHD_REQUEST_TERMINATED_COMPLETED_OK)
		net_pool_pending(&h->pool, &k->nc, mono_ns()); /* the next head's deadline */
	if (!r)
		return;
	http_admit_forget(r);
	if (r->sub && r->sub->request_done)
		r->sub->request_done(r, why == MHD_REQUEST_TERMINATED_COMPLETED_OK);
	if (r->client->request_done)
		r->client->request_done(r, why == MHD_REQUEST_TERMINATED_COMPLETED_OK);
	free(r->url);
	if (r->answered && h->note_request)
		h->note_request(r, mono_ns() - r->start_ns);
	free(r->body);
	free(r->reply);
	free(r);
	*ctx = NULL;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_ctx,
			  enum MHD_ConnectionNotificationCode what)
{
	struct http *h = cls;

	if (what == MHD_CONNECTION_NOTIFY_STARTED) {
		struct hconn *hc = calloc(1, sizeof(*hc));
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
		struct net_conn *out;

		/* The peer, known once for the connection's requests (NULL:
		 * each request formats its address, and it has no cap). */
		if (hc && ci) {
			client_ip(c, hc->ip, sizeof(hc->ip), &hc->tcp);
			net_peer_of(h->b, ci->connect_fd, &hc->peer);
			hc->nc.fd = ci->connect_fd;
			hc->nc.owner = hc;
			/* Every Unix client has the same (no) address: no cap per peer. */
			if (hc->tcp)
				memcpy(hc->nc.key, hc->peer.key, sizeof(hc->nc.key));
			out = net_pool_add(&h->pool, &hc->nc, mono_ns());
			if (out) {
				blog(LOG_DEBUG, "http: %s %s (--http-max-connections%s)",
				     out == &hc->nc ? "refused"
						    : "evicted an unfinished request of",
				     out == &hc->nc ? hc->peer.key : out->key,
				     hc->tcp ? ", --http-max-connections-per-ip" : "");
				net_conn_doom(&h->pool, out);
			}
		}
		*socket_ctx = hc;
		h->connections++;
	} else {
		struct hconn *hc = *socket_ctx;

		if (hc && hc->nc.fd)
			net_pool_del(&h->pool, &hc->nc);
		free(hc);
		*socket_ctx = NULL;
		if (h->connections)
			h->connections--;
	}
}

/* Keep percent-escapes: a key's "%2F" must not split the path. */
static size_t keep_escapes(void *cls, struct MHD_Connection *c, char *s)
{
	(void)cls;
	(void)c;
	return strlen(s);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char line[512];

	(void)cls;
	vsnprintf(line, sizeof(line), fmt, ap);
	line[strcspn(line, "\n")] = '\0';
	blog(LOG_DEBUG, "http: %s", line);
}

/* Is @fd a TCP socket (not AF_UNIX)? */
bool http_engine_is_tcp(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	return !getsockname(fd, (struct sockaddr *)&ss, &len) &&
	       (ss.ss_family == AF_INET || ss.ss_family == AF_INET6);
}

/*
 * Connections cost an fd each and any local user may open them (before
 * any token is checked): at most --http-max-connections (default a quarter
 * of the fd limit) over all listeners, on TCP at most
 * --http-max-connections-per-ip from one peer (a local user, else an
 * address), and none dawdling over its request head longer than
 * --http-connection-timeout: the pool's (on_connection(), http_engine_tick()),
 * where one whose head is not in yet makes room for a new one. Suspended
 * long polls are not idle: their own deadline ends them.
 */
void http_engine_init(struct http *h, struct broker *b, const struct face *owner)
{
	const struct http_opts *o = &b->opts.http;

	h->b = b;
	h->face = owner;
	h->rates.rate = o->rate_per_ip;
	h->rates.burst = o->rate_burst;
	h->pool.max = listen_max_connections(o->max_connections);
	h->pool.max_per_peer =
		o->max_connections_per_ip ? o->max_connections_per_ip : (h->pool.max + 1) / 2;
	h->pool.deadline_ns = (uint64_t)o->connection_timeout_s * 1000000000ull;
}

/*
 * Who may use a TCP listener: with a token, whoever has it; without one,
 * on a loopback address, the users the control socket admits (the kernel
 * names a local peer's user: net_peer.c). Off loopback nothing names the
 * peer, so a listener there without a token hands every lock to whoever
 * reaches it: it takes --http-insecure-no-auth to say so.
 */
static int check_open(const struct http *h, int fd, const char *what)
{
	if (net_token(h->b)[0] || h->b->opts.http.insecure_no_auth || !http_engine_is_tcp(fd) ||
	    net_fd_loopback(fd))
		return 0;
	blog(LOG_ERR,
	     "refusing to serve HTTP on %s, not a loopback address, without --auth-token or "
	     "--auth-token-file: whoever reaches it could take and release any lock. "
	     "Listen on 127.0.0.1, or pass --http-insecure-no-auth to allow it",
	     what);
	return -EPERM;
}

static void daemon_ready(struct broker *b, int fd, uint32_t events, void *i);

int http_engine_listen(struct http *h, int fd, const struct http_client *client, const char *what)
{
	const struct http_opts *o = &h->b->opts.http;
	const union MHD_DaemonInfo *info;
	struct MHD_Daemon *d;
	/* The caps are the pool's (on_connection()); libmicrohttpd's own
	 * limit leaves room for connections doomed and not yet closed. */
	unsigned i = h->nd, max = h->pool.max + h->pool.max / 4 + 16;
	int err;

	if (i == HTTP_MAX_DAEMONS) {
		close(fd);
		return -ENOSPC;
	}
	err = check_open(h, fd, what);
	if (err) {
		close(fd);
		return err;
	}
	d = MHD_start_daemon(
		MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG, 0, NULL, NULL,
		on_request, h, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_NOTIFY_COMPLETED,
		on_completed, h, MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
		MHD_OPTION_UNESCAPE_CALLBACK, keep_escapes, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
		h, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->connection_timeout_s,
		MHD_OPTION_CONNECTION_LIMIT, max, MHD_OPTION_END);
	if (!d) {
		close(fd);
		return -EINVAL;
	}
	h->d[i] = d;
	h->listen_fd[i] = fd;
	h->client[i] = client;
	h->nd++;
	info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_EPOLL_FD);
	if (!info)
		return -EINVAL;
	err = loop_watch(h->b, info->epoll_fd, EPOLLIN, daemon_ready, (void *)(uintptr_t)i);
	return err ? err : (int)i;
}

/*
 * libmicrohttpd's own epoll is edge-triggered: a connection with work left
 * after a run (a pipelined request behind an answer, headers that filled
 * the pool) raises no new event on its fd, and MHD_get_timeout() says 0,
 * "run me again now". Run until nothing is ready; past a bound (a client
 * that keeps pipelining), come back through the timer heap, so the rest of
 * the loop is served meanwhile.
 */
#define RUNS_PER_EVENT 32

static void run_daemon(struct http *h, unsigned i)
{
	MHD_UNSIGNED_LONG_LONG ms;
	int n;

	for (n = 0; n < RUNS_PER_EVENT; n++) {
		MHD_run(h->d[i]);
		if (MHD_get_timeout(h->d[i], &ms) != MHD_YES || ms)
			return;
	}
	run_soon(h);
}

/* The clients' work left for after a run of their daemons. */
static void after_run(struct http *h, const struct http_client *c)
{
	if (c->after_run)
		c->after_run(h);
}

/* A daemon's epoll fd is ready: run it. */
static void daemon_ready(struct broker *b, int fd, uint32_t events, void *i)
{
	struct http *h = b->http;

	(void)fd;
	(void)events;
	if (!h)
		return;
	if ((uintptr_t)i < h->nd) {
		run_daemon(h, (unsigned)(uintptr_t)i);
		after_run(h, h->client[(uintptr_t)i]);
	}
}

int http_engine_watch_hangup(struct hreq *r, loop_fn *fn, void *ctx)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	int fd = ci ? ci->connect_fd : -1;

	if (fd >= 0 && loop_watch(r->h->b, fd, EPOLLRDHUP, fn, ctx))
		fd = -1;
	return fd;
}

void http_engine_run_all(struct http *h)
{
	unsigned i;

	for (i = 0; i < h->nd; i++)
		run_daemon(h, i);
	for (i = 0; i < h->nd; i++) /* as after an event */
		after_run(h, h->client[i]);
}

void http_engine_tick(struct http *h)
{
	struct net_conn *late;
	uint64_t now = mono_ns();

	/* Whole heads overdue: shut down, libmicrohttpd then closes them. */
	while ((late = net_pool_overdue(&h->pool, now))) {
		blog(LOG_DEBUG, "http: %s sent no whole request head in %us", late->key,
		     h->b->opts.http.connection_timeout_s);
		net_conn_doom(&h->pool, late);
	}
	http_engine_run_all(h); /* connection timeouts */
	net_rate_gc(&h->rates);
}

bool http_engine_deferred(struct http *h, bool run)
{
	if (!run || !h->run_pending)
		return h->run_pending;
	h->run_pending = false;
	http_engine_run_all(h);
	return true;
}

#define DRAIN_NS 1000000000ull

bool http_engine_drain(struct http *h)
{
	if (!h->draining) {
		h->draining = true;
		h->drain_deadline_ns = mono_ns() + DRAIN_NS;
		blog(LOG_INFO, "HTTP: draining (%u connection(s))", h->connections);
	}
	return h->connections == 0 || mono_ns() >= h->drain_deadline_ns;
}

void http_engine_path(struct http *h, const struct http_client *client)
{
	h->path_client = client;
}

void http_engine_close(struct http *h)
{
	const struct http_client *freed[HTTP_MAX_DAEMONS + 1] = { NULL };
	unsigned i, j, n = 0;

	for (i = 0; i < h->nd; i++) {
		MHD_stop_daemon(h->d[i]);
		close(h->listen_fd[i]);
	}
	/* Each client frees once, after every daemon stopped. */
	for (i = 0; i <= h->nd; i++) {
		const struct http_client *c = i < h->nd ? h->client[i] : h->path_client;

		for (j = 0; c && j < n && freed[j] != c; j++)
			;
		if (!c || j < n)
			continue;
		freed[n++] = c;
		if (c->free)
			c->free(h);
	}
	h->nd = 0;
}

uint32_t http_engine_sessions_count(const struct http *h)
{
	return h->nsessions;
}

uint32_t http_engine_sessions_cap(const struct http *h)
{
	uint32_t table = h->b->seg.caps.max_sessions;
	uint32_t cap = h->b->opts.http.max_sessions ? h->b->opts.http.max_sessions : table / 2;

	if (table > 1 && cap > table - 1)
		cap = table - 1;
	return cap ? cap : 1;
}
