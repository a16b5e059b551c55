// SPDX-License-Identifier: MIT
/*
 * docs/openapi.json against the broker's route table (broker/faces/http/http_routes.c,
 * linked into the tests): every route is documented with its method, every
 * documented operation is a route, the routes that need no token say
 * `security: []` and the others inherit the bearer requirement, and every
 * {param} of a path is declared. The document is what GET /v1/openapi.json
 * serves, so a route added or dropped without it fails here.
 *
 * The document is found under $SHMLOCK_SRCDIR, else the current directory
 * (make test runs at the root of the tree), else above the test binary
 * (build/X/tests/shmlock-tests): the same search as it_cli.c's.
 */
#include <ctype.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <jansson.h>

/* The route table's declarations. Quoted includes are searched for first
 * in the including file's directory, so this needs no -Ibroker: broker.h
 * and http.h come from broker/, the rest from -Ilibshm and the system. */
#include "faces/http/http_int.h"
#include "harness.h"

#define DOC "docs/openapi.json"

static const char *const oas_methods[] = { "get",     "put",  "post",  "delete",
					   "options", "head", "patch", "trace" };

static bool exists(const char *path)
{
	return access(path, R_OK) == 0;
}

static const char *doc_path(void)
{
	static char path[4200];
	const char *src = getenv("SHMLOCK_SRCDIR");
	char bin[4096], *slash;
	ssize_t n;

	if (src && *src) {
		snprintf(path, sizeof(path), "%s/%s", src, DOC);
		if (exists(path))
			return path;
		FAIL_AT("SHMLOCK_SRCDIR=%s but %s is not readable", src, path);
	}
	if (exists(DOC))
		return DOC;
	n = readlink("/proc/self/exe", bin, sizeof(bin) - 1);
	if (n > 0) {
		bin[n] = '\0';
		slash = strrchr(bin, '/');
		if (slash) {
			*slash = '\0';
			/* build/X/tests/shmlock-tests, then build/tests/... */
			snprintf(path, sizeof(path), "%s/../../../%s", bin, DOC);
			if (exists(path))
				return path;
			snprintf(path, sizeof(path), "%s/../../%s", bin, DOC);
			if (exists(path))
				return path;
		}
	}
	FAIL_AT("cannot find %s (set SHMLOCK_SRCDIR to the source tree)", DOC);
}

static json_t *load_doc(void)
{
	const char *path = doc_path();
	json_error_t e;
	json_t *doc = json_load_file(path, JSON_REJECT_DUPLICATES, &e);
	const char *version;

	if (!doc)
		FAIL_AT("%s:%d:%d: %s", path, e.line, e.column, e.text);
	if (!json_is_object(doc))
		FAIL_AT("%s: not a JSON object", path);
	version = json_string_value(json_object_get(doc, "openapi"));
	if (!version || strncmp(version, "3.1.", 4))
		FAIL_AT("%s: \"openapi\" is %s, expected 3.1.x (dflockd's)", path,
			version ? version : "missing");
	if (!json_is_object(json_object_get(doc, "paths")))
		FAIL_AT("%s: no \"paths\" object", path);
	return doc;
}

static void lower(const char *in, char *out, size_t size)
{
	size_t i;

	for (i = 0; in[i] && i + 1 < size; i++)
		out[i] = (char)tolower((unsigned char)in[i]);
	out[i] = '\0';
}

static bool is_oas_method(const char *name)
{
	size_t i;

	for (i = 0; i < sizeof(oas_methods) / sizeof(oas_methods[0]); i++)
		if (!strcmp(name, oas_methods[i]))
			return true;
	return false;
}

/* The operation documented for route @d, or NULL. */
static json_t *operation_of(json_t *doc, const struct route_def *d)
{
	char m[16];

	lower(http_method_name(d->method), m, sizeof(m));
	return json_object_get(json_object_get(json_object_get(doc, "paths"), d->pattern), m);
}

/* Follow a local "$ref" ("#/components/..."); @node itself if it has none. */
static json_t *deref(json_t *doc, json_t *node)
{
	const char *ref = json_string_value(json_object_get(node, "$ref"));
	char buf[256], *save = NULL, *part;

	if (!ref)
		return node;
	if (strncmp(ref, "#/", 2) || strlen(ref) >= sizeof(buf))
		return NULL;
	snprintf(buf, sizeof(buf), "%s", ref + 2);
	node = doc;
	for (part = strtok_r(buf, "/", &save); part && node; part = strtok_r(NULL, "/", &save))
		node = json_object_get(node, part);
	return node;
}

TEST(openapi, every_route_is_documented, 10)
{
	json_t *doc = load_doc();
	size_t i;
	int bad = 0;

	CHECK(http_nroutes > 0);
	for (i = 0; i < http_nroutes; i++) {
		const struct route_def *d = &http_routes[i];

		if (!json_is_object(json_object_get(json_object_get(doc, "paths"), d->pattern))) {
			fprintf(stderr, "    route %s %s: path missing from %s\n",
				http_method_name(d->method), d->pattern, DOC);
			bad++;
		} else if (!json_is_object(operation_of(doc, d))) {
			fprintf(stderr, "    route %s %s: the path has no such method in %s\n",
				http_method_name(d->method), d->pattern, DOC);
			bad++;
		}
	}
	json_decref(doc);
	CHECK_EQ(bad, 0);
}

TEST(openapi, every_documented_operation_is_a_route, 10)
{
	json_t *doc = load_doc(), *item;
	const char *path;
	int bad = 0, ops = 0;

	json_object_foreach(json_object_get(doc, "paths"), path, item)
	{
		const char *key;
		json_t *op;

		json_object_foreach(item, key, op)
		{
			char upper[16];
			size_t i, j;
			bool found = false;

			(void)op;
			if (!is_oas_method(key))
				continue; /* parameters, summary, ... */
			ops++;
			for (j = 0; key[j] && j + 1 < sizeof(upper); j++)
				upper[j] = (char)toupper((unsigned char)key[j]);
			upper[j] = '\0';
			for (i = 0; i < http_nroutes && !found; i++)
				found = !strcmp(http_routes[i].pattern, path) &&
					!strcmp(http_method_name(http_routes[i].method), upper);
			if (!found) {
				fprintf(stderr, "    %s documents %s %s: not in http_routes[]\n",
					DOC, upper, path);
				bad++;
			}
		}
	}
	json_decref(doc);
	CHECK_EQ(bad, 0);
	CHECK_EQ(ops, http_nroutes);
}

TEST(openapi, open_routes_and_only_they_skip_the_token, 10)
{
	json_t *doc = load_doc(), *global = json_object_get(doc, "security");
	json_t *schemes = json_object_get(json_object_get(doc, "components"), "securitySchemes");
	json_t *req, *scheme;
	const char *name;
	size_t i, k;
	int bad = 0;

	/* Global: a bearer scheme that is declared. */
	CHECK(json_is_array(global) && json_array_size(global) > 0);
	json_array_foreach(global, k, req)
	{
		CHECK(json_is_object(req) && json_object_size(req) > 0);
		json_object_foreach(req, name, scheme)
		{
			json_t *s = json_object_get(schemes, name);
			const char *type = json_string_value(json_object_get(s, "type"));
			const char *how = json_string_value(json_object_get(s, "scheme"));

			(void)scheme;
			if (!type || strcmp(type, "http") || !how || strcasecmp(how, "bearer"))
				FAIL_AT("security scheme %s: not a declared http bearer scheme",
					name);
		}
	}
	for (i = 0; i < http_nroutes; i++) {
		const struct route_def *d = &http_routes[i];
		json_t *op = operation_of(doc, d), *sec, *resp;
		bool empty;

		if (!op)
			continue; /* every_route_is_documented reports it */
		sec = json_object_get(op, "security");
		empty = json_is_array(sec) && json_array_size(sec) == 0;
		resp = json_object_get(json_object_get(op, "responses"), "401");
		if (d->open && !empty) {
			fprintf(stderr, "    %s %s needs no token: it must say \"security\": []\n",
				http_method_name(d->method), d->pattern);
			bad++;
		} else if (!d->open && sec && (!json_is_array(sec) || empty)) {
			fprintf(stderr,
				"    %s %s needs the token: it must not override "
				"\"security\" with none\n",
				http_method_name(d->method), d->pattern);
			bad++;
		}
		if (d->open == (resp != NULL)) {
			fprintf(stderr, "    %s %s: a 401 answer is %s\n",
				http_method_name(d->method), d->pattern,
				d->open ? "documented but impossible" : "not documented");
			bad++;
		}
	}
	json_decref(doc);
	CHECK_EQ(bad, 0);
}

TEST(openapi, path_parameters_are_declared, 10)
{
	json_t *doc = load_doc();
	size_t i;
	int bad = 0;

	for (i = 0; i < http_nroutes; i++) {
		const struct route_def *d = &http_routes[i];
		json_t *op = operation_of(doc, d), *item, *lists[2];
		const char *p = d->pattern;

		if (!op)
			continue;
		item = json_object_get(json_object_get(doc, "paths"), d->pattern);
		lists[0] = json_object_get(item, "parameters");
		lists[1] = json_object_get(op, "parameters");
		while ((p = strchr(p, '{'))) {
			const char *end = strchr(p, '}');
			char name[32];
			bool found = false;
			int l;

			CHECK(end && (size_t)(end - p - 1) < sizeof(name));
			snprintf(name, sizeof(name), "%.*s", (int)(end - p - 1), p + 1);
			for (l = 0; l < 2 && !found; l++) {
				size_t k;
				json_t *prm;

				json_array_foreach(lists[l], k, prm)
				{
					json_t *pp = deref(doc, prm);
					const char *n, *in;

					n = json_string_value(json_object_get(pp, "name"));
					in = json_string_value(json_object_get(pp, "in"));
					if (n && in && !strcmp(n, name) && !strcmp(in, "path") &&
					    json_is_true(json_object_get(pp, "required")))
						found = true;
				}
			}
			if (!found) {
				fprintf(stderr, "    %s %s: no required path parameter \"%s\"\n",
					http_method_name(d->method), d->pattern, name);
				bad++;
			}
			p = end + 1;
		}
	}
	json_decref(doc);
	CHECK_EQ(bad, 0);
}

/* Every local "$ref" of @node (and below) resolves in @doc. */
static void refs_resolve(json_t *doc, json_t *node)
{
	const char *k;
	json_t *v;
	size_t i;

	if (json_is_object(node)) {
		if (json_is_string(json_object_get(node, "$ref")) && !deref(doc, node))
			FAIL_AT("dangling $ref %s",
				json_string_value(json_object_get(node, "$ref")));
		json_object_foreach(node, k, v) refs_resolve(doc, v);
	} else if (json_is_array(node)) {
		json_array_foreach(node, i, v) refs_resolve(doc, v);
	}
}

/* Code generated from dflockd's document names its types after dflockd's
 * components: ours must have the same names, and a server to talk to. */
TEST(openapi, dflockd_component_names_and_a_server, 10)
{
	static const char *const schemas[] = {
		"CreateSessionRequest",
		"CreateSessionResponse",
		"AcquireRequest",
		"SemAcquireRequest",
		"AcquireResponse",
		"ReleaseRequest",
		"RenewRequest",
		"RenewResponse",
		"EnqueueRequest",
		"SemEnqueueRequest",
		"EnqueueResponse",
		"WaitRequest",
		"WaitResponse",
		"StatsResponse",
		"LockInfo",
		"SemInfo",
		"IdleInfo",
		"ErrorResponse",
		"SignalRequest",
		"SignalResponse",
	};
	static const char *const params[] = { "SessionHeader", "SessionIdPath", "KeyPath" };
	static const char *const responses[] = { "Unauthorized", "BadRequest", "SessionGone",
						 "CapacityExceeded" };
	json_t *doc = load_doc(), *comp = json_object_get(doc, "components"), *servers;
	size_t i;

	for (i = 0; i < sizeof(schemas) / sizeof(schemas[0]); i++)
		if (!json_is_object(json_object_get(json_object_get(comp, "schemas"), schemas[i])))
			FAIL_AT("no components.schemas.%s", schemas[i]);
	for (i = 0; i < sizeof(params) / sizeof(params[0]); i++)
		if (!json_is_object(
			    json_object_get(json_object_get(comp, "parameters"), params[i])))
			FAIL_AT("no components.parameters.%s", params[i]);
	for (i = 0; i < sizeof(responses) / sizeof(responses[0]); i++)
		if (!json_is_object(
			    json_object_get(json_object_get(comp, "responses"), responses[i])))
			FAIL_AT("no components.responses.%s", responses[i]);
	if (!json_is_object(
		    json_object_get(json_object_get(comp, "securitySchemes"), "bearerAuth")))
		FAIL_AT("no components.securitySchemes.bearerAuth");
	servers = json_object_get(doc, "servers");
	if (!json_is_array(servers) || !json_array_size(servers) ||
	    !json_is_string(json_object_get(json_array_get(servers, 0), "url")))
		FAIL_AT("no servers entry with a url");
	refs_resolve(doc, doc);
	json_decref(doc);
}
