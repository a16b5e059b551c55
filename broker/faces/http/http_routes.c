// SPDX-License-Identifier: MIT
/*
 * The route table of the HTTP API and path matching. The table is the one
 * list of what the server answers: the OpenAPI document is checked against
 * it by a test, so the two cannot drift apart silently.
 *
 * Paths arrive raw (percent-escapes intact: see the unescape callback in
 * http_server.c), so "/v1/locks/a%2Fb" is one segment and decodes to "a/b".
 */
#include <string.h>
#include <strings.h>

#include "http_int.h"

const struct route_def http_routes[] = {
	{ R_HEALTH, M_GET, "/health", true },
	{ R_READY, M_GET, "/ready", true },
	{ R_METRICS, M_GET, "/metrics", false },
	{ R_STATS, M_GET, "/v1/stats", false },
	{ R_OPENAPI, M_GET, "/v1/openapi.json", true },
	{ R_SESSIONS, M_POST, "/v1/sessions", false },
	{ R_SESSION, M_DELETE, "/v1/sessions/{id}", false },
	{ R_SESSION_PING, M_POST, "/v1/sessions/{id}/ping", false },
	{ R_LOCK, M_POST, "/v1/locks/{key}", false },
	{ R_LOCK_RELEASE, M_POST, "/v1/locks/{key}/release", false },
	{ R_LOCK_RENEW, M_POST, "/v1/locks/{key}/renew", false },
	{ R_LOCK_ENQUEUE, M_POST, "/v1/locks/{key}/enqueue", false },
	{ R_LOCK_WAIT, M_POST, "/v1/locks/{key}/wait", false },
	{ R_SEM, M_POST, "/v1/semaphores/{key}", false },
	{ R_SEM_RELEASE, M_POST, "/v1/semaphores/{key}/release", false },
	{ R_SEM_RENEW, M_POST, "/v1/semaphores/{key}/renew", false },
	{ R_SEM_ENQUEUE, M_POST, "/v1/semaphores/{key}/enqueue", false },
	{ R_SEM_WAIT, M_POST, "/v1/semaphores/{key}/wait", false },
	{ R_SIGNAL, M_POST, "/v1/signals/{channel}", false },
};
const size_t http_nroutes = sizeof(http_routes) / sizeof(http_routes[0]);

static const char *const method_names[M_COUNT] = { "GET", "POST", "DELETE", "OPTIONS", "OTHER" };

enum http_method http_method_of(const char *m)
{
	int i;

	if (!strcmp(m, "HEAD")) /* GET without the body (libmicrohttpd drops it) */
		return M_GET;
	for (i = 0; i < M_OTHER; i++)
		if (!strcmp(m, method_names[i]))
			return (enum http_method)i;
	return M_OTHER;
}

const char *http_method_name(enum http_method m)
{
	return m < M_COUNT ? method_names[m] : "OTHER";
}

const char *http_route_name(enum http_route r)
{
	size_t i;

	for (i = 0; i < http_nroutes; i++)
		if (http_routes[i].id == r)
			return http_routes[i].pattern;
	return "unmatched";
}

bool http_route_open(enum http_route r)
{
	size_t i;

	for (i = 0; i < http_nroutes; i++)
		if (http_routes[i].id == r)
			return http_routes[i].open;
	return false;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Percent-decode one path segment into @out: 0, or -1 when malformed (a bad
 * escape, a NUL, empty, or longer than a key may be; or, as dflockd has it,
 * with a blank: space, tab, CR or LF). */
static int decode_segment(const char *s, size_t n, char *out, size_t *out_len)
{
	size_t i, o = 0;

	for (i = 0; i < n; i++) {
		char c = s[i];

		if (c == '%') {
			int hi, lo;

			if (i + 2 >= n)
				return -1;
			hi = hexval(s[i + 1]);
			lo = hexval(s[i + 2]);
			if (hi < 0 || lo < 0)
				return -1;
			c = (char)(hi * 16 + lo);
			i += 2;
		}
		if (c == '\0' || c == ' ' || c == '\t' || c == '\r' || c == '\n' ||
		    o >= LOCAL_KEY_MAX)
			return -1;
		out[o++] = c;
	}
	if (!o)
		return -1;
	out[o] = '\0';
	*out_len = o;
	return 0;
}

/* Does @path match @pattern? The raw text of its parameter segment, if
 * any, goes to *param / *param_n. */
static bool path_matches(const char *path, const char *pattern, const char **param, size_t *param_n)
{
	*param = NULL;
	*param_n = 0;
	while (*pattern) {
		if (*pattern == '{') {
			size_t n = strcspn(path, "/");

			if (!n)
				return false;
			*param = path;
			*param_n = n;
			path += n;
			pattern = strchr(pattern, '}') + 1;
			continue;
		}
		if (*path != *pattern)
			return false;
		path++;
		pattern++;
	}
	return *path == '\0';
}

/* Add @m to the Allow list (a GET route answers HEAD too, as Go's
 * ServeMux, dflockd's), once: what snprintf() made of it, without it. */
static void allow_add(struct route_match *out, size_t *used, enum http_method m)
{
	const char *name = method_names[m];
	size_t n = strlen(name), u = *used;

	if (u + 16 >= sizeof(out->allow) || strstr(out->allow, name))
		return;
	if (u) {
		memcpy(out->allow + u, ", ", 2);
		u += 2;
	}
	memcpy(out->allow + u, name, n);
	u += n;
	if (m == M_GET) {
		memcpy(out->allow + u, ", HEAD", 6);
		u += 6;
	}
	out->allow[u] = '\0';
	*used = u;
}

void http_route_match(const char *path, enum http_method m, struct route_match *out)
{
	size_t i, used = 0;

	/* Every field but the whole of param[] (a string): this runs on every
	 * request. */
	out->id = R_NONE;
	out->path_known = out->bad_param = out->open_path = out->probe_path = false;
	out->allow[0] = out->param[0] = '\0';
	out->param_len = 0;
	for (i = 0; i < http_nroutes; i++) {
		const struct route_def *d = &http_routes[i];
		const char *param;
		size_t n;

		if (!path_matches(path, d->pattern, &param, &n))
			continue;
		out->path_known = true;
		/* dflockd exempts these by path, whatever the method. */
		out->open_path |= d->open;
		out->probe_path |= d->id == R_HEALTH || d->id == R_READY;
		allow_add(out, &used, d->method);
		if (d->method != m || out->id != R_NONE)
			continue;
		out->id = d->id;
		if (param && decode_segment(param, n, out->param, &out->param_len))
			out->bad_param = true;
	}
}
