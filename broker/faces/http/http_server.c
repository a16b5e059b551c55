// SPDX-License-Identifier: MIT
/*
 * The HTTP server: libmicrohttpd driven from the broker's event loop (its
 * epoll fd sits in ours, so every callback runs on the loop thread and sees
 * the same state as the socket protocol: no locks between the two), request
 * bodies, authentication, CORS, per-address rate limits, dispatch to the
 * route handlers, and answers, including those of suspended long polls.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <syslog.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "clock.h"
#include "faces/consul/consul_int.h"
#include "http_int.h"
#include "faces/ui/ui.h"

extern const char openapi_json[];

/* ---- answers ------------------------------------------------------------- */

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
	case LOCAL_ECLUSTER: /* issue 16: the host's cluster lock ended the hold */
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

json_t *hreq_json(struct hreq *r)
{
	json_error_t e;
	json_t *j, *v;
	const char *name;
	void *tmp;
	bool strict;

	if (r->body_too_large) {
		hreq_error(r, 400, "bad_request", "request body over %u bytes", HTTP_BODY_MAX);
		return NULL;
	}
	if (!r->body_len)
		return json_object();
	/* dflockd (Go's decoder) takes the last of duplicate members, and
	 * null as absent; shmlock refuses both with --http-extensions. */
	strict = r->h->b->opts.http.extensions;
	j = json_loadb(r->body, r->body_len, strict ? JSON_REJECT_DUPLICATES : 0, &e);
	if (!j) {
		hreq_error(r, 400, "bad_request", "malformed JSON: %s", e.text);
		return NULL;
	}
	if (!json_is_object(j)) {
		json_decref(j);
		hreq_error(r, 400, "bad_request", "the body must be a JSON object");
		return NULL;
	}
	if (!strict)
		json_object_foreach_safe(j, tmp, name, v) if (json_is_null(v))
			json_object_del(j, name);
	return j;
}

/*
 * Run the daemons from the loop soon: at the end of this turn of the loop
 * (http_run_due(), from loop.c), which then polls its fds without sleeping.
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
	if (r->ctype) /* K4: the web view's pages and data (ui_server.c) */
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
	if (r->ctype) { /* K4: the view runs only its own script, never cached */
		MHD_add_response_header(resp, "Cache-Control", "no-store");
		MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
		MHD_add_response_header(resp, "Content-Security-Policy",
					"default-src 'self'; frame-ancestors 'none'");
	}
	ret = MHD_queue_response(r->conn, (unsigned)r->status, resp);
	MHD_destroy_response(resp);
	return ret;
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

static void dispatch(struct hreq *r)
{
	struct http *h = r->h;
	const struct http_opts *o = &h->b->opts.http;

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
	if (r->consul) { /* its own routes, token headers and answers */
		consul_dispatch(r);
		return;
	}

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
	if (r->url && !r->consul) { /* K4: the web view; its data checks the token */
		ui_dispatch(r);
		return;
	}
	if (!http_auth_check(r))
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
		if ((r->consul = consul_conn(h, c)) && !(r->url = strdup(url)))
			return MHD_NO;
		if (!r->consul && ui_path(url) && !(r->url = strdup(url))) /* K4 */
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
	return r->cx ? (enum MHD_Result)consul_send_answer(r) : send_answer(r);
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
	http_waiter_drop(r);
	http_delayed_forget(r);
	ui_request_done(r); /* K4 */
	if (r->grant_tok && why != MHD_REQUEST_TERMINATED_COMPLETED_OK)
		http_grant_undelivered(r); /* before the session is let go */
	http_session_done(r);
	if (r->consul)
		consul_request_done(r);
	free(r->url);
	if (r->answered)
		http_metrics_note(h, r->method, r->rt.id, r->status, mono_ns() - r->start_ns);
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

/* Is @fd a TCP socket (not AF_UNIX)? */
static bool is_tcp(int fd)
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
 * --http-max-connections-per-ip from one address, and none idle or
 * dawdling over its request longer than --http-connection-timeout.
 * Suspended long polls are not idle: their own deadline ends them.
 */
static int start_daemon(struct http *h, int fd)
{
	const struct http_opts *o = &h->b->opts.http;
	const union MHD_DaemonInfo *info;
	struct MHD_Daemon *d;
	unsigned i = h->nd, max = h->pool.max;

	/* The caps are the pool's (on_connection()); libmicrohttpd's own
	 * limit leaves room for connections doomed and not yet closed. */
	max += max / 4 + 16;
	d = MHD_start_daemon(
		MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG, 0, NULL, NULL,
		on_request, h, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_NOTIFY_COMPLETED,
		on_completed, h, MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
		MHD_OPTION_UNESCAPE_CALLBACK, keep_escapes, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
		h, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->connection_timeout_s,
		MHD_OPTION_CONNECTION_LIMIT, max, MHD_OPTION_END);
	if (!d)
		return -EINVAL;
	h->d[i] = d;
	h->listen_fd[i] = fd;
	h->nd++;
	info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_EPOLL_FD);
	if (!info)
		return -EINVAL;
	return loop_watch_fd(h->b, info->epoll_fd, TAG_HTTP | i);
}

/*
 * Who may use a TCP listener: with a token, whoever has it; without one,
 * on a loopback address, the users the control socket admits (the kernel
 * names a local peer's user: broker/net/net_peer.c). Off loopback nothing
 * names the peer, so a listener there without a token hands every lock to
 * whoever reaches it: it takes --http-insecure-no-auth to say so.
 */
static int check_auth_default(const struct http *h, int fd, const char *what)
{
	const struct http_opts *o = &h->b->opts.http;

	if (net_token(h->b)[0] || o->insecure_no_auth || !is_tcp(fd) || net_fd_loopback(fd))
		return 0;
	blog(LOG_ERR,
	     "refusing to serve HTTP on %s, not a loopback address, without --auth-token or "
	     "--auth-token-file: whoever reaches it could take and release any lock. "
	     "Listen on 127.0.0.1, or pass --http-insecure-no-auth to allow it",
	     what);
	return -EPERM;
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
	b->http = h;
	h->b = b;
	h->rates.rate = o->rate_per_ip;
	h->rates.burst = o->rate_burst;
	h->pool.max = listen_max_connections(o->max_connections);
	h->pool.max_per_peer =
		o->max_connections_per_ip ? o->max_connections_per_ip : (h->pool.max + 1) / 2;
	h->pool.deadline_ns = (uint64_t)o->connection_timeout_s * 1000000000ull;
	http_token_key_init(h);
	err = hsessions_init(h);
	if (err)
		return err;
	if (act >= 0 && ((err = check_auth_default(h, act, "a socket-activated socket")) ||
			 (err = start_daemon(h, act))))
		return err;
	if (o->listen[0]) {
		fd = listen_tcp_spec(o->listen, "--http-listen", "HTTP");
		if (fd < 0)
			return fd;
		if ((err = check_auth_default(h, fd, o->listen)) || (err = start_daemon(h, fd)))
			return err;
	}
	if (o->unix_path[0]) {
		fd = listen_unix(b, o->unix_path);
		if (fd < 0)
			return fd;
		h->unlink_unix = true;
		if ((err = start_daemon(h, fd)))
			return err;
	}
	if (clisten[0] || cact >= 0) { /* the Consul API: one more daemon */
		fd = cact >= 0 ? cact : listen_tcp_spec(clisten, "--consul-listen", "Consul API");
		if (fd < 0)
			return fd;
		if ((err = check_auth_default(h, fd, clisten[0] ? clisten : "the Consul socket")) ||
		    (err = start_daemon(h, fd)) || (err = consul_start(h, h->nd - 1)))
			return err;
	}
	broker_schedule(b, mono_ns() + 250000000ull, TIMER_HTTP_TICK, 0, 0);
	if (http_enabled(o) || act >= 0) /* not when only the Consul API is on */
		blog(LOG_INFO, "HTTP API on%s%s%s%s%s", o->listen[0] ? " " : "", o->listen,
		     o->unix_path[0] ? " unix:" : "", o->unix_path,
		     act >= 0 ? " (socket-activated)" : "");
	if (!net_token(b)[0] && o->insecure_no_auth && (o->listen[0] || (act >= 0 && is_tcp(act))))
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
	http_delayed_flush(h); /* 401s held back: answered now */
	http_waiters_end(h, NULL, 503, "draining");
	ui_end_all(h); /* K4 */
	consul_stop(h);
	for (i = 0; i < h->nd; i++)
		MHD_run(h->d[i]); /* let resumed connections finish */
	http_sessions_close_all(h);
	for (i = 0; i < h->nd; i++) {
		MHD_stop_daemon(h->d[i]);
		close(h->listen_fd[i]);
	}
	if (h->unlink_unix)
		unlink(b->opts.http.unix_path);
	consul_free(h);
	ui_free(h); /* K4 */
	hsessions_fini(h);
	net_rate_free(&h->rates);
	free(h->waiters);
	free(h);
	b->http = NULL;
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

void http_event(struct broker *b, uint64_t tag)
{
	struct http *h = b->http;

	if (!h)
		return;
	if (TAG_KIND(tag) == TAG_HTTP_HUP && (TAG_VALUE(tag) & CONSUL_HUP))
		consul_hangup(h, (uint32_t)TAG_VALUE(tag)); /* a blocking query's client */
	else if (TAG_KIND(tag) == TAG_HTTP_HUP)
		http_waiter_hangup(h, (uint32_t)TAG_VALUE(tag));
	else if (TAG_VALUE(tag) < h->nd)
		run_daemon(h, (unsigned)TAG_VALUE(tag));
	if (h->maybe_granted) {
		h->maybe_granted = false;
		http_waiters_poll(h);
	}
}

static void run_all(struct http *h)
{
	unsigned i;

	for (i = 0; i < h->nd; i++)
		run_daemon(h, i);
	if (h->maybe_granted) { /* as after an event */
		h->maybe_granted = false;
		http_waiters_poll(h);
	}
}

bool http_run_due(struct broker *b)
{
	struct http *h = b->http;

	if (!h || !h->run_pending)
		return false;
	h->run_pending = false;
	run_all(h);
	return true;
}

bool http_run_pending(struct broker *b)
{
	return b->http && b->http->run_pending;
}

void http_doorbell(struct broker *b)
{
	if (b->http) {
		http_waiters_poll(b->http);
		consul_doorbell(b->http);
		ui_poll(b->http, false); /* K4: the web view's long polls */
	}
}

void http_timer(struct broker *b, uint32_t kind, uint32_t a, uint32_t b2)
{
	struct http *h = b->http;
	uint64_t period = 250000000ull;
	unsigned i;

	if (!h)
		return;
	if (kind == TIMER_HTTP_DELAY) {
		http_delayed_due(h, a, b2);
		return;
	}
	if (kind == TIMER_HTTP_WAIT) {
		http_waiter_due(h, a, b2);
		return;
	}
	if (kind == TIMER_CONSUL_WAIT) {
		consul_timer(h, a, b2);
		return;
	}
	if (kind == TIMER_HTTP_RUN) { /* none scheduled now: see run_soon() */
		h->run_pending = false;
		run_all(h);
		return;
	}
	{ /* whole heads overdue: shut down, libmicrohttpd then closes them */
		struct net_conn *late;
		uint64_t now = mono_ns();

		while ((late = net_pool_overdue(&h->pool, now))) {
			blog(LOG_DEBUG, "http: %s sent no whole request head in %us", late->key,
			     h->b->opts.http.connection_timeout_s);
			net_conn_doom(&h->pool, late);
		}
	}
	for (i = 0; i < h->nd; i++)
		run_daemon(h, i); /* connection timeouts */
	http_sessions_reap(h);
	net_rate_gc(&h->rates);
	ui_poll(h, true); /* K4: lock-free changes ring no doorbell */
	broker_schedule(b, mono_ns() + period, TIMER_HTTP_TICK, 0, 0);
}

#define DRAIN_NS 1000000000ull

bool http_draining(struct broker *b)
{
	struct http *h = b->http;

	if (!h)
		return true;
	if (!h->draining) {
		h->draining = true;
		h->drain_deadline_ns = mono_ns() + DRAIN_NS;
		http_waiters_end(h, NULL, 503, "draining");
		consul_drain(h);
		ui_end_all(h); /* K4 */
		blog(LOG_INFO, "HTTP: draining (%u connection(s))", h->connections);
	}
	return h->connections == 0 || mono_ns() >= h->drain_deadline_ns;
}
