// SPDX-License-Identifier: MIT
/*
 * 8. The HTTP API (dflockd-compatible): acquire+release over HTTP/1.1
 *    keep-alive connections on TCP to 127.0.0.1, against a broker of its
 *    own started with --http-listen on a free port.
 *
 * One op = POST /v1/locks/{key} {"acquire_timeout_s":T} (200, status "ok",
 * a token) then POST /v1/locks/{key}/release {"token":...} (204), timed
 * together. Each client is a thread with one connection and its own
 * session (POST /v1/sessions), with 1, 10, 50 and 200 clients, each on its
 * own key (T = 0: nothing contends in the lock table, what is measured is
 * the HTTP path of the broker, one event-loop thread, and the cost of the
 * client) and all on one key (T = NET_SHARED_WAIT_S: long polls handed
 * the key in FIFO order). The driver (threads, barrier, timing, CPU per
 * op) is netdrv.c, shared with section 11.
 *
 * The figures come from a minimal HTTP/1.1 client on a raw socket (one
 * write per request, a read of the status line, the headers and
 * Content-Length bytes), because on a machine with few CPUs every cycle
 * the clients spend is taken from the broker; the same runs with libcurl
 * (one easy handle per client, so one kept-alive connection) are printed
 * below them, with the CPU each kind of client used per op, to show how
 * much of a real client's time is its own.
 *
 * Broker CPU per op is utime+stime of the broker process (all threads,
 * /proc/PID/stat, clock-tick resolution) over the timed run.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/epoll.h>

#include <curl/curl.h>
#include <microhttpd.h>

#include "common.h"
#include "netdrv.h"

#define HTTP_RUN_NS (2 * NSEC_PER_SEC)	/* timed run of the raw client */
#define HTTP_CURL_RUN_NS (NSEC_PER_SEC) /* timed run of the libcurl client */
#define HTTP_CURL_MAX 50		/* libcurl rows: own keys, up to this many */

enum client_kind { KIND_RAW, KIND_CURL };

struct client {
	struct net_client c; /* first: the driver's part */
	enum client_kind kind;
	CURL *curl; /* CURL: one easy handle, so one kept-alive connection */
	struct curl_slist *headers;
	char key[64];
	char session[40];
	char acq[512], rel[512]; /* raw: whole requests; libcurl: the URLs */
	size_t acq_len, rel_prefix;
	char acq_body[48];
	char rel_body[64];
	char *body; /* into c.in[] */
	size_t body_len;
};

static struct broker hb;
static int http_port;

/* ---- the raw client ------------------------------------------------------ */

/* Send @req (one write) and read one answer into c->in; its status. */
static int raw_exchange(struct client *cl, const char *req, size_t len)
{
	struct net_client *c = &cl->c;
	char *end = NULL, *p;
	size_t head = 0, want = 0;
	ssize_t n;
	int status;

	if (net_send_all(c, req, len))
		return -1;
	c->in_len = 0;
	for (;;) {
		n = recv(c->fd, c->in + c->in_len, sizeof(c->in) - 1 - c->in_len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return net_fail(c, "recv: %s", n ? strerror(errno) : "connection closed");
		c->in_len += (size_t)n;
		c->in[c->in_len] = '\0';
		if (!end) {
			end = strstr(c->in, "\r\n\r\n");
			if (!end) {
				if (c->in_len == sizeof(c->in) - 1)
					return net_fail(c, "%s", "answer headers too long");
				continue;
			}
			head = (size_t)(end - c->in) + 4;
			p = strcasestr(c->in, "\r\nContent-Length:");
			want = p && p < end ? strtoul(p + 17, NULL, 10) : 0;
			if (head + want > sizeof(c->in) - 1)
				return net_fail(c, "%s", "answer too long");
		}
		if (c->in_len >= head + want)
			break;
	}
	if (c->in_len != head + want)
		return net_fail(c, "%s", "more bytes than one answer");
	if (sscanf(c->in, "HTTP/1.%*d %d", &status) != 1)
		return net_fail(c, "bad status line: %.40s", c->in);
	cl->body = c->in + head;
	cl->body_len = want;
	return status;
}

/* ---- the libcurl client -------------------------------------------------- */

static size_t curl_sink(char *data, size_t size, size_t nmemb, void *arg)
{
	struct net_client *c = arg;
	size_t n = size * nmemb;

	if (c->in_len + n > sizeof(c->in) - 1)
		return 0; /* an error for libcurl */
	memcpy(c->in + c->in_len, data, n);
	c->in_len += n;
	c->in[c->in_len] = '\0';
	return n;
}

static int curl_exchange(struct client *cl, const char *url, const char *body)
{
	struct net_client *c = &cl->c;
	long status = 0;
	CURLcode rc;

	c->in_len = 0;
	c->in[0] = '\0';
	curl_easy_setopt(cl->curl, CURLOPT_URL, url);
	curl_easy_setopt(cl->curl, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(cl->curl, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	rc = curl_easy_perform(cl->curl);
	if (rc != CURLE_OK)
		return net_fail(c, "libcurl: %s", curl_easy_strerror(rc));
	curl_easy_getinfo(cl->curl, CURLINFO_RESPONSE_CODE, &status);
	cl->body = c->in;
	cl->body_len = c->in_len;
	return (int)status;
}

static int curl_setup(struct client *cl)
{
	char h[96];

	cl->curl = curl_easy_init();
	if (!cl->curl)
		return net_fail(&cl->c, "%s", "curl_easy_init failed");
	curl_easy_setopt(cl->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(cl->curl, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(cl->curl, CURLOPT_TIMEOUT, (long)NET_IO_TIMEOUT_S + NET_SHARED_WAIT_S);
	curl_easy_setopt(cl->curl, CURLOPT_WRITEFUNCTION, curl_sink);
	curl_easy_setopt(cl->curl, CURLOPT_WRITEDATA, &cl->c);
	cl->headers = curl_slist_append(NULL, "Content-Type: application/json");
	if (cl->session[0]) {
		snprintf(h, sizeof(h), "X-Dflockd-Session: %s", cl->session);
		cl->headers = curl_slist_append(cl->headers, h);
	}
	curl_easy_setopt(cl->curl, CURLOPT_HTTPHEADER, cl->headers);
	return 0;
}

/* ---- one client ---------------------------------------------------------- */

/* A string field of the JSON answer (no escapes in what we read). */
static bool json_field(const char *body, const char *name, char *out, size_t size)
{
	char pat[48];
	const char *p, *q;

	snprintf(pat, sizeof(pat), "\"%s\":\"", name);
	p = strstr(body, pat);
	if (!p)
		return false;
	p += strlen(pat);
	q = strchr(p, '"');
	if (!q || (size_t)(q - p) >= size)
		return false;
	memcpy(out, p, (size_t)(q - p));
	out[q - p] = '\0';
	return true;
}

static int open_http_session(struct client *cl)
{
	static const char req[] = "POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
				  "Content-Length: 0\r\n\r\n";
	int status;

	if (cl->kind == KIND_RAW) {
		if (net_connect(&cl->c, http_port))
			return -1;
		status = raw_exchange(cl, req, sizeof(req) - 1);
	} else {
		char url[96];

		if (curl_setup(cl))
			return -1;
		snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/sessions", http_port);
		status = curl_exchange(cl, url, "");
	}
	if (status < 0)
		return -1;
	if (status != 200 || !json_field(cl->body, "session_id", cl->session, sizeof(cl->session)))
		return net_fail(&cl->c, "POST /v1/sessions: %.120s", cl->c.in);
	if (cl->kind == KIND_CURL) { /* now with the session header */
		curl_slist_free_all(cl->headers);
		cl->headers = NULL;
		curl_easy_cleanup(cl->curl);
		return curl_setup(cl);
	}
	return 0;
}

static void prepare_requests(struct client *cl)
{
	int n;

	net_key(&cl->c, "bench-http", cl->key, sizeof(cl->key));
	snprintf(cl->acq_body, sizeof(cl->acq_body), "{\"acquire_timeout_s\":%d}",
		 cl->c.shared ? NET_SHARED_WAIT_S : 0);
	if (cl->kind == KIND_CURL) {
		snprintf(cl->acq, sizeof(cl->acq), "http://127.0.0.1:%d/v1/locks/%s", http_port,
			 cl->key);
		snprintf(cl->rel, sizeof(cl->rel), "http://127.0.0.1:%d/v1/locks/%s/release",
			 http_port, cl->key);
		return;
	}
	n = snprintf(cl->acq, sizeof(cl->acq),
		     "POST /v1/locks/%s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
		     "X-Dflockd-Session: %s\r\nContent-Type: application/json\r\n"
		     "Content-Length: %zu\r\n\r\n%s",
		     cl->key, cl->session, strlen(cl->acq_body), cl->acq_body);
	cl->acq_len = (size_t)n;
	/* The release request up to its Content-Length; the rest per op. */
	n = snprintf(cl->rel, sizeof(cl->rel),
		     "POST /v1/locks/%s/release HTTP/1.1\r\nHost: 127.0.0.1\r\n"
		     "X-Dflockd-Session: %s\r\nContent-Type: application/json\r\n"
		     "Content-Length: ",
		     cl->key, cl->session);
	cl->rel_prefix = (size_t)n;
}

static int http_open(struct net_client *c)
{
	struct client *cl = (struct client *)c;

	if (open_http_session(cl))
		return -1;
	prepare_requests(cl);
	return 0;
}

/* One acquire+release. */
static int http_op(struct net_client *c)
{
	struct client *cl = (struct client *)c;
	char token[40];
	int status;

	status = cl->kind == KIND_RAW ? raw_exchange(cl, cl->acq, cl->acq_len)
				      : curl_exchange(cl, cl->acq, cl->acq_body);
	if (status < 0)
		return -1;
	if (status != 200 || !strstr(cl->body, "\"status\":\"ok\"") ||
	    !json_field(cl->body, "token", token, sizeof(token)))
		return net_fail(c, "acquire: %.160s", c->in);
	snprintf(cl->rel_body, sizeof(cl->rel_body), "{\"token\":\"%s\"}", token);
	if (cl->kind == KIND_RAW) {
		int n = snprintf(cl->rel + cl->rel_prefix, sizeof(cl->rel) - cl->rel_prefix,
				 "%zu\r\n\r\n%s", strlen(cl->rel_body), cl->rel_body);

		status = raw_exchange(cl, cl->rel, cl->rel_prefix + (size_t)n);
	} else {
		status = curl_exchange(cl, cl->rel, cl->rel_body);
	}
	if (status < 0)
		return -1;
	if (status != 204)
		return net_fail(c, "release: %.160s", c->in);
	return 0;
}

/* Close the session (DELETE, outside the timed run) and the handle. */
static void http_close(struct net_client *c)
{
	struct client *cl = (struct client *)c;
	char req[256], url[128];

	if (cl->session[0] && !c->err[0]) {
		if (cl->kind == KIND_RAW) {
			int n = snprintf(req, sizeof(req),
					 "DELETE /v1/sessions/%s HTTP/1.1\r\n"
					 "Host: 127.0.0.1\r\n\r\n",
					 cl->session);

			if (raw_exchange(cl, req, (size_t)n) != 204)
				fprintf(stderr, "shmlock-bench: note: DELETE session: %.80s\n",
					c->in);
		} else {
			snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/sessions/%s", http_port,
				 cl->session);
			curl_easy_setopt(cl->curl, CURLOPT_CUSTOMREQUEST, "DELETE");
			curl_easy_setopt(cl->curl, CURLOPT_POSTFIELDS, NULL);
			curl_easy_setopt(cl->curl, CURLOPT_HTTPGET, 1L);
			c->in_len = 0;
			curl_easy_setopt(cl->curl, CURLOPT_URL, url);
			curl_easy_perform(cl->curl);
		}
	}
	if (cl->curl)
		curl_easy_cleanup(cl->curl);
	curl_slist_free_all(cl->headers);
}

static int raw_open(struct net_client *c)
{
	((struct client *)c)->kind = KIND_RAW;
	return http_open(c);
}

static int curl_open(struct net_client *c)
{
	((struct client *)c)->kind = KIND_CURL;
	return http_open(c);
}

static const struct net_proto raw_proto = {
	.name = "HTTP (raw socket)",
	.client_size = sizeof(struct client),
	.warm_ops = 200,
	.open = raw_open,
	.op = http_op,
	.close = http_close,
};

static const struct net_proto curl_proto = {
	.name = "HTTP (libcurl)",
	.client_size = sizeof(struct client),
	.warm_ops = 200,
	.open = curl_open,
	.op = http_op,
	.close = http_close,
};

/* ---- the floor ----------------------------------------------------------- */

/*
 * The floor: libmicrohttpd as the broker runs it (the same daemon flags
 * and options, its epoll fd in an epoll of ours, MHD_run() until its
 * timeout is not 0) answering every request with a constant, without
 * doing anything: a session id to POST /v1/sessions, an acquire's answer
 * of the broker's size, 204 to a release. Its CPU per op is what the
 * kernel and libmicrohttpd (parsing, its per-request pool reset, the
 * answer's headers) cost any server on this traffic: what the broker adds
 * is the rest. On one shared key it keeps a holder and a FIFO of
 * suspended connections, resumed in turn, as the broker's long polls.
 */
struct fconn {
	struct MHD_Connection *c;
	bool acquire, waiting, granted, delete;
	struct fconn *next;
};

static int floor_fd;
static bool floor_shared, floor_run_again, floor_held;
static struct fconn *floor_head, **floor_tail = &floor_head;
static struct MHD_Response *floor_session, *floor_grant, *floor_none;

static enum MHD_Result floor_answer(struct MHD_Connection *c, struct fconn *f)
{
	if (!f->acquire || f->delete)
		return MHD_queue_response(c, 204, floor_none);
	return MHD_queue_response(c, 200, f->c ? floor_grant : floor_session);
}

static enum MHD_Result floor_request(void *cls, struct MHD_Connection *c, const char *url,
				     const char *method, const char *version, const char *upload,
				     size_t *upload_size, void **ctx)
{
	struct fconn *f = *ctx;
	size_t n = strlen(url);

	(void)cls, (void)version, (void)upload;
	if (!f) {
		if (!(f = calloc(1, sizeof(*f))))
			return MHD_NO;
		/* POST /v1/sessions (c NULL: its answer), /v1/locks/K, .../release */
		f->acquire = n < 8 || strcmp(url + n - 8, "/release");
		f->c = strncmp(url, "/v1/locks/", 10) ? NULL : c;
		f->delete = !strcmp(method, "DELETE"); /* a session's end: 204 */
		*ctx = f;
		return MHD_YES;
	}
	if (*upload_size) {
		*upload_size = 0; /* the body is not looked at */
		return MHD_YES;
	}
	if (f->waiting)
		return MHD_YES;
	if (f->granted) /* resumed: the key was handed to it */
		return floor_answer(c, f);
	if (f->acquire && f->c && floor_shared) {
		if (floor_held) {
			f->waiting = true;
			*floor_tail = f;
			floor_tail = &f->next;
			MHD_suspend_connection(c);
			return MHD_YES;
		}
		floor_held = true;
	} else if (!f->acquire && floor_shared) {
		struct fconn *next = floor_head;

		floor_held = next != NULL; /* handed on, or free */
		if (next) {
			floor_head = next->next;
			if (!floor_head)
				floor_tail = &floor_head;
			next->waiting = false;
			next->granted = true;
			MHD_resume_connection(next->c);
			floor_run_again = true;
		}
	}
	return floor_answer(c, f);
}

static void floor_completed(void *cls, struct MHD_Connection *c, void **ctx,
			    enum MHD_RequestTerminationCode why)
{
	(void)cls, (void)c, (void)why;
	free(*ctx);
	*ctx = NULL;
}

static void floor_connection(void *cls, struct MHD_Connection *c, void **socket_ctx,
			     enum MHD_ConnectionNotificationCode what)
{
	(void)cls, (void)c;
	/* The broker keeps the peer's address per connection. */
	if (what == MHD_CONNECTION_NOTIFY_STARTED)
		*socket_ctx = malloc(64);
	else
		free(*socket_ctx);
}

static size_t floor_unescape(void *cls, struct MHD_Connection *c, char *s)
{
	(void)cls, (void)c;
	return strlen(s);
}

static struct MHD_Response *floor_json(const char *text)
{
	struct MHD_Response *r =
		MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);

	if (r)
		MHD_add_response_header(r, "Content-Type", "application/json");
	return r;
}

static int floor_main(int idx)
{
	struct epoll_event ev = { .events = EPOLLIN }, evs[8];
	const union MHD_DaemonInfo *info;
	struct MHD_Daemon *d;
	int ep = epoll_create1(EPOLL_CLOEXEC);

	(void)idx;
	floor_session = floor_json("{\"session_id\":\"00000000000000000000000000000000\","
				   "\"idle_timeout_s\":20}");
	floor_grant = floor_json("{\"status\":\"ok\",\"token\":"
				 "\"00000000000000000000000000000000\",\"lease_ttl_s\":33}");
	floor_none = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
	d = MHD_start_daemon(MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG, 0, NULL,
			     NULL, floor_request, NULL, MHD_OPTION_LISTEN_SOCKET, floor_fd,
			     MHD_OPTION_NOTIFY_COMPLETED, floor_completed, NULL,
			     MHD_OPTION_NOTIFY_CONNECTION, floor_connection, NULL,
			     MHD_OPTION_UNESCAPE_CALLBACK, floor_unescape, NULL,
			     MHD_OPTION_CONNECTION_TIMEOUT, 60u, MHD_OPTION_CONNECTION_LIMIT, 4096u,
			     MHD_OPTION_PER_IP_CONNECTION_LIMIT, 2048u, MHD_OPTION_END);
	if (ep < 0 || !d || !floor_session || !floor_grant || !floor_none ||
	    !(info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_EPOLL_FD)))
		return -1;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, info->epoll_fd, &ev))
		return -1;
	for (;;) {
		MHD_UNSIGNED_LONG_LONG ms;
		int n = epoll_wait(ep, evs, 8, floor_run_again ? 0 : -1);

		floor_run_again = false;
		if (n < 0)
			continue;
		for (int k = 0; k < 32; k++) { /* as the broker's run_daemon() */
			MHD_run(d);
			if (MHD_get_timeout(d, &ms) != MHD_YES || ms)
				break;
		}
	}
}

/* The floor's runs (raw client, each key mode), against floor_main() in a child. */
static int run_floor(struct net_run *out)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int i, s, n = 0;
	pid_t pid;

	for (s = 0; s < 2; s++) {
		sa.sin_port = 0;
		floor_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (floor_fd < 0 || bind(floor_fd, (struct sockaddr *)&sa, sizeof(sa)) ||
		    getsockname(floor_fd, (struct sockaddr *)&sa, &len) || listen(floor_fd, 4096))
			fatal("floor server socket: %s", strerror(errno));
		http_port = ntohs(sa.sin_port);
		floor_shared = s;
		pid = spawn(floor_main, 0);
		close(floor_fd);
		for (i = 0; i < net_nclients; i++)
			if (net_wanted(net_clients[i], s))
				net_run_config(&raw_proto, pid, net_clients[i], s, HTTP_RUN_NS,
					       NULL, &out[n++]);
		kill(pid, SIGKILL);
		reap(pid, STEP_TIMEOUT_MS);
	}
	return n;
}

/* ---- the broker ---------------------------------------------------------- */

/* GET /health answers 200 (the HTTP API starts after the socket). */
static bool http_up(int port, char *err, size_t size)
{
	static const char req[] = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
	struct client cl;
	int status;

	memset(&cl, 0, sizeof(cl));
	cl.c.fd = -1;
	status = net_connect(&cl.c, port) ? -1 : raw_exchange(&cl, req, sizeof(req) - 1);
	if (cl.c.fd >= 0)
		close(cl.c.fd);
	snprintf(err, size, "%s", cl.c.err);
	return status == 200;
}

static void stop_with_log(void)
{
	broker_stop(&hb, true);
}

void bench_http(void)
{
	/* No token: the bench's own loopback broker, for the duration of the run. */
	const char *extra[4] = { "--http-listen", NULL, "--http-insecure-no-auth", NULL };
	struct net_run raw[2 * 8], curl[8], floor[2 * 8];
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int i, s, nraw = 0, ncurl = 0, nfloor;
	char listen[32];

	http_port = net_free_port();
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", http_port);
	extra[1] = listen;
	broker_start(&hb, "http", extra);
	net_wait_up(&hb, "HTTP API", http_port, http_up);
	if (curl_global_init(CURL_GLOBAL_DEFAULT))
		fatal("curl_global_init failed");
	for (s = 0; s < 2; s++)
		for (i = 0; i < net_nclients; i++)
			if (net_wanted(net_clients[i], s))
				net_run_config(&raw_proto, hb.pid, net_clients[i], s, HTTP_RUN_NS,
					       stop_with_log, &raw[nraw++]);
	for (i = 0; i < net_nclients && net_clients[i] <= HTTP_CURL_MAX; i++)
		if (net_wanted(net_clients[i], false))
			net_run_config(&curl_proto, hb.pid, net_clients[i], false, HTTP_CURL_RUN_NS,
				       stop_with_log, &curl[ncurl++]);
	broker_stop(&hb, false);
	curl_global_cleanup();
	nfloor = run_floor(floor);

	printf("\n8. HTTP API: acquire+release over keep-alive HTTP/1.1 on TCP 127.0.0.1\n");
	printf("   (own broker: --http-listen %s; one op = POST /v1/locks/{key}\n"
	       "   {\"acquire_timeout_s\":T} -> 200 \"ok\" + token, then POST .../release ->\n"
	       "   204; each client a thread with one connection and its own session; own\n"
	       "   keys: a key each, T = 0; 1 key: all on one key, T = %d (FIFO handoffs);\n"
	       "   after %d warm-up ops each (1 key: %d), %llu ms timed (libcurl: %llu ms);\n"
	       "   latency per op in us; brk CPU / cli CPU = us of CPU per op used by the\n"
	       "   broker process (utime+stime, all threads) / by the client threads;\n"
	       "   brk busy = broker CPU time / wall time, 100%% = one CPU)\n\n",
	       listen, NET_SHARED_WAIT_S, raw_proto.warm_ops, raw_proto.warm_ops / 10,
	       (unsigned long long)(HTTP_RUN_NS / NSEC_PER_MSEC),
	       (unsigned long long)(HTTP_CURL_RUN_NS / NSEC_PER_MSEC));
	net_print_header(true);
	for (i = 0; i < nraw; i++)
		net_print_row("raw", &raw[i], true);
	for (i = 0; i < ncurl; i++)
		net_print_row("libcurl", &curl[i], true);
	for (i = 0; i < nfloor; i++)
		net_print_row("floor", &floor[i], true);
	if (nfloor)
		printf("  (floor, raw client: libmicrohttpd as the broker runs it, answering\n"
		       "  constants without doing anything; on 1 key it keeps only a holder and\n"
		       "  a FIFO of suspended connections: the kernel's and libmicrohttpd's share\n"
		       "  of the broker's figure)\n");
	printf("\n  The raw-socket rows are the server's figures: a minimal client leaves\n"
	       "  more of the %ld CPUs (shared by broker and clients) to the broker; the\n"
	       "  libcurl rows show what a real client library costs on top. The one-\n"
	       "  client row varies by up to 2-3x from run to run: it is much faster when\n"
	       "  the scheduler keeps client and broker on one CPU, as waking a thread on\n"
	       "  another CPU is costly here (compare: taskset -c 0 shmlock-bench).\n",
	       ncpu);
	net_print_above_floor("HTTP", raw, nraw, floor, nfloor);
	printf("  dflockd v1.10 measured on this machine spends 26-67 us of\n"
	       "  server CPU per acquire+release over its TCP protocol; the target for\n"
	       "  HTTP here is <= 20 us of broker CPU per op. It counts the kernel's and\n"
	       "  libmicrohttpd's share (the floor rows): where the floor alone is above it\n"
	       "  (on the 2-CPU development VM it is), only the part above the floor is the\n"
	       "  broker's to cut (docs/architecture.md, \"Broker CPU per network op\").\n");
	net_cpu_targets("HTTP", raw, nraw, 20.0);
}
