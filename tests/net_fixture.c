// SPDX-License-Identifier: MIT
/* Shared helpers of the network listener tests (net_fixture.h). */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
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

int http_do(const struct http_req *req, struct http_reply *out)
{
	size_t hlen = 0;
	struct growing body = { &out->body, &out->len }, head = { &out->headers, &hlen };
	struct curl_slist *h = NULL;
	CURL *c = curl_easy_init();
	const char *const *line;
	CURLcode rc;

	memset(out, 0, sizeof(*out));
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

/* Kept here, beside the functions that need them. */
#include <grp.h>
#include <poll.h>

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
