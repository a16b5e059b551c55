// SPDX-License-Identifier: MIT
/* Shared helpers of the network listener tests (net_fixture.h). */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <jansson.h>
#include <errno.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "net_fixture.h"

/* The kernel's range for the local ports of outgoing connections. */
static void ephemeral_range(int *lo, int *hi)
{
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");

	*lo = 32768;
	*hi = 60999;
	if (f) {
		if (fscanf(f, "%d %d", lo, hi) != 2) {
			*lo = 32768;
			*hi = 60999;
		}
		fclose(f);
	}
}

/* Can a listener bind 127.0.0.1:@port now? (No SO_REUSEADDR: a port with
 * connections in TIME_WAIT is passed over too.) */
static bool port_is_free(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool ok;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0)
		FAIL_AT("finding a free port: %s", strerror(errno));
	ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

/*
 * A port below the ephemeral range. A port the kernel picked for bind(0)
 * is one of the ephemeral ones, and between our close() and the server's
 * bind() any outgoing connection on the machine (curl, a broker talking to
 * etcd) may be given it as its local port: etcd then failed to start with
 * "address already in use" (make check, cluster/no_starvation). Below the
 * range only a listener can take a port. Consecutive ports from a start
 * drawn per process, so that one test never gets the same port twice and
 * the next test rarely meets this one's connections in TIME_WAIT.
 */
int free_port(void)
{
	static int next = -1;
	int lo, hi, base = 10000, span, i;

	ephemeral_range(&lo, &hi);
	span = lo - base;
	if (span < 1000) { /* an unusual range: the ports above it */
		base = hi + 1;
		span = 65536 - base;
	}
	if (span < 1000)
		FAIL_AT("no port range outside the ephemeral %d-%d", lo, hi);
	if (next < 0)
		next = (int)(((unsigned)getpid() * 2654435761u ^ (unsigned)now_ms()) %
			     (unsigned)span);
	for (i = 0; i < span; i++) {
		int port = base + next;

		next = (next + 1) % span;
		if (port_is_free(port))
			return port;
	}
	FAIL_AT("no free port in %d-%d", base, base + span - 1);
	return -1;
}

int tcp_listener(int *port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 64) ||
	    getsockname(fd, (struct sockaddr *)&sa, &len))
		FAIL_AT("listen on 127.0.0.1: %s", strerror(errno));
	*port = ntohs(sa.sin_port);
	return fd;
}

int tcp_try_connect(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), err;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		err = errno;
		close(fd);
		errno = err;
		return -1;
	}
	return fd;
}

int tcp_connect(int port)
{
	int fd = tcp_try_connect(port);

	if (fd < 0)
		FAIL_AT("connect 127.0.0.1:%d: %s", port, strerror(errno));
	return fd;
}

/* @path as a socket address; fails the test when too long for one. */
static struct sockaddr_un unix_addr(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	if (strlen(path) >= sizeof(sa.sun_path))
		FAIL_AT("socket path too long: %s", path);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	return sa;
}

int unix_try_connect(const char *path, int type)
{
	struct sockaddr_un sa = unix_addr(path);
	int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0), err;

	if (fd < 0)
		FAIL_AT("socket: %s", strerror(errno));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		err = errno;
		close(fd);
		errno = err;
		return -1;
	}
	return fd;
}

int unix_connect(const char *path, int type)
{
	int fd = unix_try_connect(path, type);

	if (fd < 0)
		FAIL_AT("connect %s: %s", path, strerror(errno));
	return fd;
}

bool unix_answers(const char *path, int type)
{
	int fd = unix_try_connect(path, type);

	if (fd < 0)
		return false;
	close(fd);
	return true;
}

int unix_listener(const char *path, int type, int backlog)
{
	struct sockaddr_un sa = unix_addr(path);
	int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, backlog))
		FAIL_AT("listen %s: %s", path, strerror(errno));
	return fd;
}

char *strf(const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0)
		FAIL_AT("out of memory");
	return s;
}

/* Append what libcurl hands us to a growing NUL-terminated buffer. */
struct growing {
	char **p;
	size_t *n;
};

static size_t append(char *data, size_t size, size_t nmemb, void *arg)
{
	struct growing *g = arg;
	size_t len = size * nmemb;
	char *p = realloc(*g->p, *g->n + len + 1);

	if (!p)
		return 0;
	memcpy(p + *g->n, data, len);
	*g->n += len;
	p[*g->n] = '\0';
	*g->p = p;
	return len;
}

static void curl_once(void)
{
	static bool inited;

	if (!inited) {
		if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
			FAIL_AT("curl_global_init failed");
		inited = true;
	}
}

int http_do(const struct http_req *req, struct http_reply *out)
{
	size_t hlen = 0;
	struct growing body = { &out->body, &out->len }, head = { &out->headers, &hlen };
	struct curl_slist *h = NULL;
	const char *const *line;
	CURLcode rc;
	CURL *c;

	memset(out, 0, sizeof(*out));
	curl_once();
	c = curl_easy_init();
	if (!c)
		FAIL_AT("curl_easy_init failed");
	curl_easy_setopt(c, CURLOPT_URL, req->url);
	if (req->unix_socket)
		curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, req->unix_socket);
	if (req->method)
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req->method);
	if (req->body) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, req->body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(req->body));
	}
	for (line = req->headers; line && *line; line++)
		h = curl_slist_append(h, *line);
	/* No "Expect: 100-continue" round trip before a body. */
	h = curl_slist_append(h, "Expect:");
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, append);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, append);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &head);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, req->timeout_ms ? req->timeout_ms : 30000L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	/* Every server of a test is local: no proxy of the environment. */
	curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
	rc = curl_easy_perform(c);
	if (rc == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	if (!out->body)
		out->body = calloc(1, 1);
	if (!out->headers)
		out->headers = calloc(1, 1);
	if (!out->body || !out->headers)
		FAIL_AT("out of memory");
	return (int)rc;
}

long http_fetch(const struct http_req *req, char *out, size_t size)
{
	struct http_reply r;
	long status;

	http_do(req, &r);
	status = r.status;
	snprintf(out, size, "%s", r.body);
	http_reply_free(&r);
	return status;
}

void http_reply_free(struct http_reply *r)
{
	free(r->body);
	free(r->headers);
	memset(r, 0, sizeof(*r));
}

bool http_reply_header(const struct http_reply *r, const char *name, char *buf, size_t size)
{
	size_t n = strlen(name);
	const char *line;

	for (line = r->headers; line && *line;
	     line += strcspn(line, "\n") + (line[strcspn(line, "\n")] != 0)) {
		size_t len = strcspn(line, "\r\n");
		const char *v = line + n + 1;

		if (len <= n || line[n] != ':' || strncasecmp(line, name, n))
			continue;
		while (*v == ' ' || *v == '\t')
			v++;
		snprintf(buf, size, "%.*s", (int)(len - (size_t)(v - line)), v);
		return true;
	}
	return false;
}

const char *http_error_text(int rc)
{
	return curl_easy_strerror((CURLcode)rc);
}

bool http_refused(int rc)
{
	return rc == CURLE_COULDNT_CONNECT;
}

/* ---- HTTP calls ------------------------------------------------------------ */

static CURL *sync_handle;
static CURLM *multi;
/* Calls in flight in the order they completed. */
static struct http_call **done_order;
static size_t ndone, cap_done;

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
	struct http_call *c = arg;
	size_t add = size * n;
	char *q = realloc(c->out, c->len + add + 1);

	if (!q)
		return 0;
	memcpy(q + c->len, p, add);
	c->len += add;
	q[c->len] = '\0';
	c->out = q;
	return add;
}

static void header_copy(const char *p, size_t len, const char *name, char *dst, size_t size)
{
	size_t nl = strlen(name);

	if (len < nl || strncasecmp(p, name, nl))
		return;
	p += nl;
	len -= nl;
	while (len && *p == ' ')
		p++, len--;
	while (len && (p[len - 1] == '\r' || p[len - 1] == '\n' || p[len - 1] == ' '))
		len--;
	if (len >= size)
		len = size - 1;
	memcpy(dst, p, len);
	dst[len] = '\0';
}

/* Note the socket of a call's connection (each call in flight has its own). */
static int on_socket(void *arg, curl_socket_t fd, curlsocktype purpose)
{
	struct http_call *c = arg;

	if (purpose == CURLSOCKTYPE_IPCXN)
		c->fd = fd;
	return CURL_SOCKOPT_OK;
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
	struct http_call *c = arg;
	size_t len = size * n;

	if (len > 5 && !strncmp(p, "HTTP/", 5)) { /* a new answer (100 Continue) */
		c->allow[0] = '\0';
		c->ctype[0] = '\0';
		c->acao[0] = '\0';
		c->acam[0] = '\0';
		c->www[0] = '\0';
		c->retry[0] = '\0';
	}
	header_copy(p, len, "WWW-Authenticate:", c->www, sizeof(c->www));
	header_copy(p, len, "Retry-After:", c->retry, sizeof(c->retry));
	header_copy(p, len, "Allow:", c->allow, sizeof(c->allow));
	header_copy(p, len, "Access-Control-Allow-Origin:", c->acao, sizeof(c->acao));
	header_copy(p, len, "Access-Control-Allow-Methods:", c->acam, sizeof(c->acam));
	header_copy(p, len, "Content-Type:", c->ctype, sizeof(c->ctype));
	return len;
}

/* Set up a call (on its own easy handle when @own) for METHOD @path. */
static struct http_call *call_setup(bool own, const struct http_api *a, const char *method,
				    const char *path, const char *hdr, const char *body)
{
	struct http_call *c = calloc(1, sizeof(*c));
	struct curl_slist *hdrs = NULL;
	CURL *e;

	if (!c)
		FAIL_AT("out of memory");
	curl_once();
	c->own = own;
	c->fd = -1;
	if (own) {
		c->e = curl_easy_init();
	} else {
		if (!sync_handle)
			sync_handle = curl_easy_init();
		c->e = sync_handle;
		curl_easy_reset(c->e); /* keeps its connections */
	}
	e = c->e;
	if (!e)
		FAIL_AT("curl_easy_init failed");
	snprintf(c->what, sizeof(c->what), "%s %.100s%s", method, path,
		 a->unix_path[0] ? " (unix)" : " (tcp)");
	curl_easy_setopt(e, CURLOPT_URL, strf("%s%s", a->base, path));
	if (a->unix_path[0])
		curl_easy_setopt(e, CURLOPT_UNIX_SOCKET_PATH, a->unix_path);
	hdrs = curl_slist_append(hdrs, "Expect:");
	if (hdr)
		hdrs = curl_slist_append(hdrs, hdr);
	if (a->authz)
		hdrs = curl_slist_append(hdrs, strf("Authorization: %s", a->authz));
	for (int i = 0; i < 3 && a->hdr[i]; i++)
		hdrs = curl_slist_append(hdrs, a->hdr[i]);
	if (body)
		hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
	c->hdrs = hdrs;
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
	if (!strcmp(method, "GET")) {
		curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
	} else if (!strcmp(method, "HEAD")) {
		curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
	} else {
		if (strcmp(method, "POST"))
			curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
		if (body || !strcmp(method, "POST")) {
			curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
					 (curl_off_t)(body ? strlen(body) : 0));
			curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, body ? body : "");
		}
	}
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, c);
	curl_easy_setopt(e, CURLOPT_PRIVATE, c);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	if (own) {
		/* A long poll: no client timeout, and a connection of its own that
		 * closes when the call ends or is dropped. */
		curl_easy_setopt(e, CURLOPT_FORBID_REUSE, 1L);
		curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L);
		curl_easy_setopt(e, CURLOPT_SOCKOPTFUNCTION, on_socket);
		curl_easy_setopt(e, CURLOPT_SOCKOPTDATA, c);
	} else {
		curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 20000L);
	}
	return c;
}

static void call_finish(struct http_call *c, CURLcode rc)
{
	c->rc = (int)rc;
	c->status = 0;
	if (rc == CURLE_OK)
		curl_easy_getinfo(c->e, CURLINFO_RESPONSE_CODE, &c->status);
	if (c->out && c->len && !strncmp(c->ctype, "application/json", 16))
		c->json = json_loadb(c->out, c->len, 0, NULL);
	c->done = true;
	c->done_ms = now_ms();
}

struct http_call *http_call(const struct http_api *a, const char *method, const char *path,
			    const char *hdr, const char *body)
{
	struct http_call *c = call_setup(false, a, method, path, hdr, body);

	call_finish(c, curl_easy_perform(c->e));
	return c;
}

void http_call_free(struct http_call *c)
{
	if (!c)
		return;
	if (c->own && c->e) {
		if (!c->done && multi)
			curl_multi_remove_handle(multi, c->e);
		curl_easy_cleanup(c->e);
	}
	curl_slist_free_all(c->hdrs);
	json_decref(c->json);
	free(c->out);
	free(c);
}

struct http_call *http_call_start(const struct http_api *a, const char *method, const char *path,
				  const char *hdr, const char *body)
{
	struct http_call *c = call_setup(true, a, method, path, hdr, body);

	if (!multi && !(multi = curl_multi_init()))
		FAIL_AT("curl_multi_init failed");
	if (curl_multi_add_handle(multi, c->e) != CURLM_OK)
		FAIL_AT("curl_multi_add_handle failed");
	return c;
}

void http_pump(int ms)
{
	CURLMsg *m;
	int running, left;

	if (!multi) {
		if (ms)
			usleep((useconds_t)ms * 1000);
		return;
	}
	curl_multi_perform(multi, &running);
	while ((m = curl_multi_info_read(multi, &left))) {
		CURL *e = m->easy_handle;
		CURLcode rc = m->data.result;
		struct http_call *c = NULL;

		if (m->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&c);
		curl_multi_remove_handle(multi, e);
		call_finish(c, rc);
		if (ndone == cap_done) {
			cap_done = cap_done ? 2 * cap_done : 64;
			done_order = realloc(done_order, cap_done * sizeof(*done_order));
			if (!done_order)
				FAIL_AT("out of memory");
		}
		done_order[ndone++] = c;
	}
	if (ms)
		curl_multi_poll(multi, NULL, 0, ms, NULL);
}

size_t http_done_count(void)
{
	return ndone;
}

struct http_call *http_done_at(size_t i)
{
	return i < ndone ? done_order[i] : NULL;
}

void http_done_reset(void)
{
	ndone = 0;
}

void http_hang_up(struct http_call *c)
{
	if (c->done)
		FAIL_AT("%s: answered before the hang-up (HTTP %ld: %s)", c->what, c->status,
			c->out ? c->out : "");
	curl_multi_remove_handle(multi, c->e);
	curl_easy_cleanup(c->e);
	c->e = NULL;
	c->done = true; /* nothing more will come */
}

void http_close_kept_alive(void)
{
	if (sync_handle) {
		curl_easy_cleanup(sync_handle);
		sync_handle = NULL;
	}
}

const char *http_call_error(const struct http_call *c)
{
	return c->rc == CURLE_OK ? "answered" : curl_easy_strerror((CURLcode)c->rc);
}

int tcp_connect_from(const char *src, int port)
{
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	struct sockaddr_in from = { .sin_family = AF_INET };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (src && (inet_pton(AF_INET, src, &from.sin_addr) != 1 ||
		    bind(fd, (struct sockaddr *)&from, sizeof(from)))) {
		close(fd);
		return -1;
	}
	if (connect(fd, (struct sockaddr *)&to, sizeof(to))) {
		close(fd);
		return -1;
	}
	return fd;
}

bool tcp_peer_closed(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN | POLLRDHUP };
	char c;

	if (poll(&p, 1, 0) != 1)
		return false;
	if (p.revents & (POLLHUP | POLLERR | POLLRDHUP))
		return true;
	return recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK) == 0;
}

void become_nobody(void)
{
	if (setgroups(0, NULL) || setgid(65534) || setuid(65534))
		_exit(99);
}
