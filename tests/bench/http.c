// SPDX-License-Identifier: MIT
/*
 * 8. The HTTP API (dflockd-compatible): acquire+release over HTTP/1.1
 *    keep-alive connections on TCP to 127.0.0.1, against a broker of its
 *    own started with --http-listen on a free port.
 *
 * One op = POST /v1/locks/{key} {"acquire_timeout_s":0} (200, status "ok",
 * a token) then POST /v1/locks/{key}/release {"token":...} (204), timed
 * together. Each client is a thread with one connection, its own session
 * (POST /v1/sessions) and its own key, so nothing contends in the lock
 * table: what is measured is the HTTP path of the broker (one event-loop
 * thread) and the cost of the client.
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
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <curl/curl.h>

#include "common.h"

#define HTTP_MAX_CLIENTS 50
#define HTTP_RUN_NS (2 * NSEC_PER_SEC)	 /* timed run of the raw client */
#define HTTP_CURL_RUN_NS (NSEC_PER_SEC) /* timed run of the libcurl client */
#define HTTP_WARM_OPS 200		 /* per client, before the barrier */
#define HTTP_IO_TIMEOUT_S 5		 /* a request that takes longer is an error */

static const int http_clients[] = { 1, 10, 50 };
#define HTTP_NCONFIGS ((int)(sizeof(http_clients) / sizeof(http_clients[0])))

enum client_kind { KIND_RAW, KIND_CURL };

struct client {
	pthread_t thread;
	int idx;
	enum client_kind kind;
	int fd;	    /* raw: the kept-alive connection */
	CURL *curl; /* CURL: one easy handle, so one kept-alive connection */
	struct curl_slist *headers;
	char session[40];
	char acq[512], rel[512]; /* raw: whole requests; libcurl: the URLs */
	size_t acq_len, rel_prefix;
	char rel_body[64];
	char in[4096]; /* the last answer (raw: with its headers) */
	size_t in_len;
	char *body; /* into in[] */
	size_t body_len;
	double *lat; /* us per op, timed ops only */
	size_t nlat, cap;
	uint64_t last_end;
	char err[200];
};

struct http_run {
	enum client_kind kind;
	int n;
	uint64_t ns;
	double ops_s, p50, p99, max;
	double broker_us, broker_pct, client_us;
	uint64_t ops;
};

static struct broker hb;
static int http_port;
static _Atomic uint32_t h_ready, h_start, h_stop;

/* ---- the raw client ------------------------------------------------------ */

static int __attribute__((format(printf, 2, 3))) fail(struct client *c, const char *fmt, ...)
{
	va_list ap;

	if (!c->err[0]) {
		va_start(ap, fmt);
		vsnprintf(c->err, sizeof(c->err), fmt, ap);
		va_end(ap);
	}
	return -1;
}

static int raw_connect(struct client *c)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)http_port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct timeval tv = { .tv_sec = HTTP_IO_TIMEOUT_S };
	int one = 1;

	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return fail(c, "socket: %s", strerror(errno));
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)))
		return fail(c, "connect: %s", strerror(errno));
	return 0;
}

/* Send @req (one write) and read one answer into c->in; its status. */
static int raw_exchange(struct client *c, const char *req, size_t len)
{
	char *end = NULL, *p;
	size_t head = 0, want = 0;
	ssize_t n;
	int status;

	while (len) {
		n = send(c->fd, req, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return fail(c, "send: %s", n ? strerror(errno) : "closed");
		req += n;
		len -= (size_t)n;
	}
	c->in_len = 0;
	for (;;) {
		n = recv(c->fd, c->in + c->in_len, sizeof(c->in) - 1 - c->in_len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return fail(c, "recv: %s", n ? strerror(errno) : "connection closed");
		c->in_len += (size_t)n;
		c->in[c->in_len] = '\0';
		if (!end) {
			end = strstr(c->in, "\r\n\r\n");
			if (!end) {
				if (c->in_len == sizeof(c->in) - 1)
					return fail(c, "%s", "answer headers too long");
				continue;
			}
			head = (size_t)(end - c->in) + 4;
			p = strcasestr(c->in, "\r\nContent-Length:");
			want = p && p < end ? strtoul(p + 17, NULL, 10) : 0;
			if (head + want > sizeof(c->in) - 1)
				return fail(c, "%s", "answer too long");
		}
		if (c->in_len >= head + want)
			break;
	}
	if (c->in_len != head + want)
		return fail(c, "%s", "more bytes than one answer");
	if (sscanf(c->in, "HTTP/1.%*d %d", &status) != 1)
		return fail(c, "bad status line: %.40s", c->in);
	c->body = c->in + head;
	c->body_len = want;
	return status;
}

/* ---- the libcurl client -------------------------------------------------- */

static size_t curl_sink(char *data, size_t size, size_t nmemb, void *arg)
{
	struct client *c = arg;
	size_t n = size * nmemb;

	if (c->in_len + n > sizeof(c->in) - 1)
		return 0; /* an error for libcurl */
	memcpy(c->in + c->in_len, data, n);
	c->in_len += n;
	c->in[c->in_len] = '\0';
	return n;
}

static int curl_exchange(struct client *c, const char *url, const char *body)
{
	long status = 0;
	CURLcode rc;

	c->in_len = 0;
	c->in[0] = '\0';
	curl_easy_setopt(c->curl, CURLOPT_URL, url);
	curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c->curl, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	rc = curl_easy_perform(c->curl);
	if (rc != CURLE_OK)
		return fail(c, "libcurl: %s", curl_easy_strerror(rc));
	curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &status);
	c->body = c->in;
	c->body_len = c->in_len;
	return (int)status;
}

static int curl_setup(struct client *c)
{
	char h[96];

	c->curl = curl_easy_init();
	if (!c->curl)
		return fail(c, "%s", "curl_easy_init failed");
	curl_easy_setopt(c->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c->curl, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(c->curl, CURLOPT_TIMEOUT, (long)HTTP_IO_TIMEOUT_S);
	curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, curl_sink);
	curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, c);
	c->headers = curl_slist_append(NULL, "Content-Type: application/json");
	if (c->session[0]) {
		snprintf(h, sizeof(h), "X-Dflockd-Session: %s", c->session);
		c->headers = curl_slist_append(c->headers, h);
	}
	curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, c->headers);
	return 0;
}

/* ---- one client ---------------------------------------------------------- */

#define ACQ_BODY "{\"acquire_timeout_s\":0}"

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

static int open_http_session(struct client *c)
{
	static const char req[] = "POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
				  "Content-Length: 0\r\n\r\n";
	int status;

	if (c->kind == KIND_RAW) {
		if (raw_connect(c))
			return -1;
		status = raw_exchange(c, req, sizeof(req) - 1);
	} else {
		char url[96];

		if (curl_setup(c))
			return -1;
		snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/sessions", http_port);
		status = curl_exchange(c, url, "");
	}
	if (status < 0)
		return -1;
	if (status != 200 || !json_field(c->body, "session_id", c->session, sizeof(c->session)))
		return fail(c, "POST /v1/sessions: %.120s", c->in);
	if (c->kind == KIND_CURL) { /* now with the session header */
		curl_slist_free_all(c->headers);
		c->headers = NULL;
		curl_easy_cleanup(c->curl);
		return curl_setup(c);
	}
	return 0;
}

static void prepare_requests(struct client *c)
{
	int n;

	if (c->kind == KIND_CURL) {
		snprintf(c->acq, sizeof(c->acq), "http://127.0.0.1:%d/v1/locks/bench-http-%d",
			 http_port, c->idx);
		snprintf(c->rel, sizeof(c->rel),
			 "http://127.0.0.1:%d/v1/locks/bench-http-%d/release", http_port, c->idx);
		return;
	}
	n = snprintf(c->acq, sizeof(c->acq),
		     "POST /v1/locks/bench-http-%d HTTP/1.1\r\nHost: 127.0.0.1\r\n"
		     "X-Dflockd-Session: %s\r\nContent-Type: application/json\r\n"
		     "Content-Length: %zu\r\n\r\n" ACQ_BODY,
		     c->idx, c->session, sizeof(ACQ_BODY) - 1);
	c->acq_len = (size_t)n;
	/* The release request up to its Content-Length; the rest per op. */
	n = snprintf(c->rel, sizeof(c->rel),
		     "POST /v1/locks/bench-http-%d/release HTTP/1.1\r\nHost: 127.0.0.1\r\n"
		     "X-Dflockd-Session: %s\r\nContent-Type: application/json\r\n"
		     "Content-Length: ",
		     c->idx, c->session);
	c->rel_prefix = (size_t)n;
}

/* One acquire+release. */
static int one_op(struct client *c)
{
	char token[32];
	int status;

	status = c->kind == KIND_RAW ? raw_exchange(c, c->acq, c->acq_len)
				: curl_exchange(c, c->acq, ACQ_BODY);
	if (status < 0)
		return -1;
	if (status != 200 || !strstr(c->body, "\"status\":\"ok\"") ||
	    !json_field(c->body, "token", token, sizeof(token)))
		return fail(c, "acquire: %.160s", c->in);
	snprintf(c->rel_body, sizeof(c->rel_body), "{\"token\":\"%s\"}", token);
	if (c->kind == KIND_RAW) {
		int n = snprintf(c->rel + c->rel_prefix, sizeof(c->rel) - c->rel_prefix,
				 "%zu\r\n\r\n%s", strlen(c->rel_body), c->rel_body);

		status = raw_exchange(c, c->rel, c->rel_prefix + (size_t)n);
	} else {
		status = curl_exchange(c, c->rel, c->rel_body);
	}
	if (status < 0)
		return -1;
	if (status != 204)
		return fail(c, "release: %.160s", c->in);
	return 0;
}

static void *client_main(void *arg)
{
	struct client *c = arg;
	int i;

	if (open_http_session(c))
		goto out;
	prepare_requests(c);
	for (i = 0; i < HTTP_WARM_OPS; i++)
		if (one_op(c))
			goto out;
	atomic_fetch_add(&h_ready, 1);
	while (!atomic_load(&h_start))
		futex_wait(&h_start, 0, 100 * NSEC_PER_MSEC);
	while (!atomic_load_explicit(&h_stop, memory_order_relaxed)) {
		uint64_t t0 = now_ns(), t1;

		if (one_op(c))
			break;
		t1 = now_ns();
		if (c->nlat == c->cap) {
			size_t cap = c->cap ? c->cap * 2 : 4096;
			double *v = realloc(c->lat, cap * sizeof(*v));

			if (!v) {
				fail(c, "%s", "out of memory");
				break;
			}
			c->lat = v;
			c->cap = cap;
		}
		c->lat[c->nlat++] = (double)(t1 - t0) / (double)NSEC_PER_USEC;
		c->last_end = t1;
	}
out:
	if (c->err[0])
		atomic_fetch_add(&h_ready, 1); /* do not keep the barrier waiting */
	return NULL;
}

/* Close the session (DELETE, outside the timed run) and the connection. */
static void client_close(struct client *c)
{
	char req[256], url[128];

	if (c->session[0] && !c->err[0]) {
		if (c->kind == KIND_RAW) {
			int n = snprintf(req, sizeof(req),
					 "DELETE /v1/sessions/%s HTTP/1.1\r\n"
					 "Host: 127.0.0.1\r\n\r\n",
					 c->session);

			if (raw_exchange(c, req, (size_t)n) != 204)
				fprintf(stderr, "shmlock-bench: note: DELETE session: %.80s\n",
					c->in);
		} else {
			snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/sessions/%s", http_port,
				 c->session);
			curl_easy_setopt(c->curl, CURLOPT_CUSTOMREQUEST, "DELETE");
			curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, NULL);
			curl_easy_setopt(c->curl, CURLOPT_HTTPGET, 1L);
			c->in_len = 0;
			curl_easy_setopt(c->curl, CURLOPT_URL, url);
			curl_easy_perform(c->curl);
		}
	}
	if (c->kind == KIND_RAW && c->fd >= 0)
		close(c->fd);
	if (c->curl)
		curl_easy_cleanup(c->curl);
	curl_slist_free_all(c->headers);
	free(c->lat);
}

/* ---- the broker ---------------------------------------------------------- */

static double self_cpu_us(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

static int free_tcp_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    getsockname(fd, (struct sockaddr *)&sa, &len))
		fatal("finding a free TCP port: %s", strerror(errno));
	close(fd);
	return ntohs(sa.sin_port);
}

/* Until GET /health answers 200 (the HTTP API starts after the socket). */
static void wait_http_up(void)
{
	static const char req[] = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
	uint64_t deadline = now_ns() + STEP_TIMEOUT_MS * NSEC_PER_MSEC;
	struct client c;
	int status;

	for (;;) {
		memset(&c, 0, sizeof(c));
		status = raw_connect(&c) ? -1 : raw_exchange(&c, req, sizeof(req) - 1);
		if (c.fd > 0)
			close(c.fd);
		if (status == 200)
			return;
		if (waitpid(hb.pid, &status, WNOHANG) == hb.pid) {
			hb.pid = 0;
			broker_stop(&hb, true);
			fatal("HTTP broker exited at start (status 0x%x)", status);
		}
		if (now_ns() > deadline)
			fatal("HTTP API on 127.0.0.1:%d did not answer in %d ms: %s", http_port,
			      STEP_TIMEOUT_MS, c.err);
		sleep_ns(2 * NSEC_PER_MSEC);
	}
}

/* ---- a run --------------------------------------------------------------- */

static void run_config(enum client_kind kind, int n, uint64_t run_ns, struct http_run *r)
{
	struct client *cl = calloc((size_t)n, sizeof(*cl));
	double broker0, self0, *all;
	size_t total = 0, k;
	uint64_t t0, t_end = 0, deadline;
	int i;

	if (!cl)
		fatal("out of memory");
	atomic_store(&h_ready, 0);
	atomic_store(&h_start, 0);
	atomic_store(&h_stop, 0);
	for (i = 0; i < n; i++) {
		cl[i].idx = i;
		cl[i].kind = kind;
		cl[i].fd = -1;
		if (pthread_create(&cl[i].thread, NULL, client_main, &cl[i]))
			fatal("pthread_create: %s", strerror(errno));
	}
	deadline = now_ns() + END_TIMEOUT_MS * NSEC_PER_MSEC;
	while (atomic_load(&h_ready) < (uint32_t)n && now_ns() < deadline)
		sleep_ns(200 * NSEC_PER_USEC);
	broker0 = proc_cpu_ms(hb.pid) * 1000.0;
	self0 = self_cpu_us();
	t0 = now_ns();
	atomic_store(&h_start, 1);
	futex_wake(&h_start, n);
	sleep_until_ns(t0 + run_ns);
	atomic_store(&h_stop, 1);
	for (i = 0; i < n; i++)
		pthread_join(cl[i].thread, NULL);
	r->broker_us = proc_cpu_ms(hb.pid) * 1000.0 - broker0;
	r->client_us = self_cpu_us() - self0;
	for (i = 0; i < n; i++) {
		if (cl[i].err[0]) {
			broker_stop(&hb, true);
			fatal("HTTP client %d (%s, %d clients): %s", i,
			      kind == KIND_RAW ? "raw socket" : "libcurl", n, cl[i].err);
		}
		total += cl[i].nlat;
		if (cl[i].last_end > t_end)
			t_end = cl[i].last_end;
	}
	if (!total)
		fatal("HTTP: no op completed in %llu ms",
		      (unsigned long long)(run_ns / NSEC_PER_MSEC));
	all = malloc(total * sizeof(*all));
	if (!all)
		fatal("out of memory");
	for (i = 0, k = 0; i < n; i++) {
		memcpy(all + k, cl[i].lat, cl[i].nlat * sizeof(*all));
		k += cl[i].nlat;
	}
	r->kind = kind;
	r->n = n;
	r->ops = total;
	r->ns = t_end - t0;
	r->ops_s = (double)total * (double)NSEC_PER_SEC / (double)r->ns;
	r->p50 = percentile(all, (int)total, 50);
	r->p99 = percentile(all, (int)total, 99);
	r->max = all[total - 1];
	r->broker_pct = r->broker_us * 100.0 * 1000.0 / (double)r->ns;
	r->broker_us /= (double)total;
	r->client_us /= (double)total;
	free(all);
	for (i = 0; i < n; i++)
		client_close(&cl[i]);
	free(cl);
}

static void print_run(const struct http_run *r)
{
	char name[48];

	snprintf(name, sizeof(name), "%s, %d client%s",
		 r->kind == KIND_RAW ? "raw socket" : "libcurl", r->n, r->n > 1 ? "s" : "");
	printf("  %-22s %9.0f %8.1f %8.1f %8.0f %8.1f %7.0f%% %8.1f\n", name, r->ops_s, r->p50,
	       r->p99, r->max, r->broker_us, r->broker_pct, r->client_us);
}

void bench_http(void)
{
	/* No token: the bench's own loopback broker, for the duration of the run. */
	const char *extra[4] = { "--http-listen", NULL, "--http-insecure-no-auth", NULL };
	struct http_run raw[HTTP_NCONFIGS], curl[HTTP_NCONFIGS];
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	char listen[32];
	int i;

	http_port = free_tcp_port();
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", http_port);
	extra[1] = listen;
	broker_start(&hb, "http", extra);
	wait_http_up();
	if (curl_global_init(CURL_GLOBAL_DEFAULT))
		fatal("curl_global_init failed");
	for (i = 0; i < HTTP_NCONFIGS; i++)
		run_config(KIND_RAW, http_clients[i], HTTP_RUN_NS, &raw[i]);
	for (i = 0; i < HTTP_NCONFIGS; i++)
		run_config(KIND_CURL, http_clients[i], HTTP_CURL_RUN_NS, &curl[i]);
	broker_stop(&hb, false);
	curl_global_cleanup();

	printf("\n8. HTTP API: acquire+release over keep-alive HTTP/1.1 on TCP 127.0.0.1\n");
	printf("   (own broker: --http-listen %s; one op = POST /v1/locks/{key}\n"
	       "   {\"acquire_timeout_s\":0} -> 200 \"ok\" + token, then POST .../release -> 204;\n"
	       "   each client a thread with one connection, its own session and its own\n"
	       "   key; after %d warm-up ops each, %llu ms timed (libcurl: %llu ms);\n"
	       "   latency per op in us; brk CPU / cli CPU = us of CPU per op used by the\n"
	       "   broker process (utime+stime, all threads) / by the client threads;\n"
	       "   brk busy = broker CPU time / wall time, 100%% = one CPU)\n\n",
	       listen, HTTP_WARM_OPS, (unsigned long long)(HTTP_RUN_NS / NSEC_PER_MSEC),
	       (unsigned long long)(HTTP_CURL_RUN_NS / NSEC_PER_MSEC));
	printf("  %-22s %9s %8s %8s %8s %8s %8s %8s\n", "client", "ops/s", "p50 us", "p99 us",
	       "max us", "brk CPU", "brk busy", "cli CPU");
	for (i = 0; i < HTTP_NCONFIGS; i++)
		print_run(&raw[i]);
	for (i = 0; i < HTTP_NCONFIGS; i++)
		print_run(&curl[i]);
	printf("\n  The raw-socket rows are the server's figures: a minimal client leaves\n"
	       "  more of the %ld CPUs (shared by broker and clients) to the broker; the\n"
	       "  libcurl rows show what a real client library costs on top. The one-\n"
	       "  client row varies by up to 2-3x from run to run: it is much faster when\n"
	       "  the scheduler keeps client and broker on one CPU, as waking a thread on\n"
	       "  another CPU is costly here (compare: taskset -c 0 shmlock-bench).\n",
	       ncpu);
	printf("  dflockd's published figures: ~13k ops/s for one client and ~90k ops/s at\n"
	       "  200 clients, over its own TCP protocol on an Apple M1. Here: %.1fk ops/s\n"
	       "  for one client, %.1fk at %d, on a different machine (%ld CPUs, shared\n"
	       "  with the clients) and over a different protocol (HTTP/1.1 with JSON,\n"
	       "  two requests per op): not a like-for-like comparison.\n",
	       raw[0].ops_s / 1000.0, raw[HTTP_NCONFIGS - 1].ops_s / 1000.0,
	       raw[HTTP_NCONFIGS - 1].n, ncpu);
}
