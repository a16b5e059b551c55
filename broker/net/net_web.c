// SPDX-License-Identifier: MIT
/*
 * What keeps web pages out of a local listener. A browser runs as its
 * user, on the same host: a page it shows can make it send requests to
 * 127.0.0.1, and a name made to resolve to 127.0.0.1 makes the page
 * same-origin with the API (DNS rebinding). So the HTTP listeners serve
 * only Host names that are local or listed, refuse Origins they were not
 * told of, and — when the kernel's word on the user is all that admits a
 * request — refuse the writes a page can send without asking the server
 * first (a CORS "simple" request: no preflight).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "net.h"

bool net_origin_in(const char *list, const char *origin, bool any)
{
	const char *p = list;
	size_t n = strlen(origin);

	while (*p) {
		size_t len = strcspn(p, ",");

		while (len && *p == ' ')
			p++, len--;
		if ((any && len == 1 && *p == '*') || (len == n && !strncmp(p, origin, n)))
			return true;
		p += len;
		p += *p == ',';
	}
	return false;
}

/* The media type of @ctype (parameters and blanks dropped) is @want. */
static bool media_is(const char *ctype, const char *want)
{
	size_t n = strlen(want);

	while (*ctype == ' ' || *ctype == '\t')
		ctype++;
	return !strncasecmp(ctype, want, n) &&
	       (!ctype[n] || ctype[n] == ';' || ctype[n] == ' ' || ctype[n] == '\t');
}

bool net_simple_write(const char *method, const char *content_type)
{
	if (strcmp(method, "POST")) /* GET, HEAD read; others are preflighted */
		return false;
	return !content_type || !content_type[0] ||
	       media_is(content_type, "application/x-www-form-urlencoded") ||
	       media_is(content_type, "multipart/form-data") ||
	       media_is(content_type, "text/plain");
}

/* @name (no port) is one of the comma-separated @list, ignoring case. */
static bool name_listed(const char *list, const char *name, size_t n)
{
	while (*list) {
		size_t len;

		while (*list == ' ' || *list == ',')
			list++;
		len = strcspn(list, ", ");
		if (len && len == n && !strncasecmp(list, name, n))
			return true;
		list += len;
	}
	return false;
}

/* Is the IP literal @host the local address of @fd, or a loopback one? */
static bool local_literal(int fd, const char *host)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct in6_addr a6;
	struct in_addr a4;

	if (inet_pton(AF_INET, host, &a4) == 1) {
		if ((ntohl(a4.s_addr) >> 24) == 127)
			return true;
		return fd >= 0 && !getsockname(fd, (struct sockaddr *)&ss, &len) &&
		       ss.ss_family == AF_INET &&
		       ((struct sockaddr_in *)&ss)->sin_addr.s_addr == a4.s_addr;
	}
	if (inet_pton(AF_INET6, host, &a6) == 1) {
		if (IN6_IS_ADDR_LOOPBACK(&a6))
			return true;
		return fd >= 0 && !getsockname(fd, (struct sockaddr *)&ss, &len) &&
		       ss.ss_family == AF_INET6 &&
		       !memcmp(&((struct sockaddr_in6 *)&ss)->sin6_addr, &a6, sizeof(a6));
	}
	return false;
}

bool net_host_ok(const char *host, int fd, const char *allowed)
{
	char name[256];
	size_t n;

	if (host[0] == '[') { /* [v6]:port */
		const char *end = strchr(host, ']');

		if (!end)
			return false;
		n = (size_t)(end - host - 1);
		host++;
	} else {
		const char *colon = strchr(host, ':');

		n = colon ? (size_t)(colon - host) : strlen(host);
	}
	if (!n || n >= sizeof(name))
		return false;
	memcpy(name, host, n);
	name[n] = '\0';
	if (n && name[n - 1] == '.') /* "localhost." is the same name */
		name[--n] = '\0';
	return !strcasecmp(name, "localhost") || local_literal(fd, name) ||
	       name_listed(allowed, name, n);
}
