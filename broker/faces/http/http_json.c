// SPDX-License-Identifier: MIT
/*
 * A request's body as one JSON object, by dflockd's rules (Go's decoder: the
 * last of duplicate members wins, null reads as absent) unless
 * --http-extensions asks for strict ones. Apart from http_server.c so that a
 * route handler that reads a body (http_locks.c, http_signals.c) needs the
 * engine's answers and this, not the dispatcher that calls it.
 */
#include <stdbool.h>

#include "http_int.h"
#include "net/http_engine.h"

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
