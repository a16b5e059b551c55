// SPDX-License-Identifier: MIT
/*
 * dflockd's POST /v1/signals/{channel} (docs/http-api.md, "Signals"): publish
 * a signal, sessionless, to the TCP protocol's listeners (core/signals.c);
 * answers {"delivered": N}. The payload is pushed as one line to them, so it
 * may not hold a line break or NUL.
 */
#include <string.h>

#include "core/signals.h"
#include "http_int.h"

void http_signal_publish(struct hreq *r)
{
	const char *ch = r->rt.param, *p;
	json_t *j, *v;
	size_t pl;
	long n;

	if (strchr(ch, '*') || strchr(ch, '>')) {
		hreq_error(r, 400, "bad_request",
			   "a channel to publish on has no wildcard (* or >)");
		return;
	}
	j = hreq_json(r);
	if (!j)
		return; /* answered */
	v = json_object_get(j, "payload");
	p = json_string_value(v);
	pl = json_string_length(v);
	if (!p || !pl || strspn(p, " \t") == pl || memchr(p, '\n', pl) || memchr(p, '\r', pl) ||
	    memchr(p, '\0', pl)) {
		hreq_error(r, 400, "bad_request",
			   "payload: a non-empty string without line breaks or NUL");
	} else if (pl > SIGNAL_PAYLOAD_MAX) {
		hreq_error(r, 413, "payload_too_large", "payload over %u bytes",
			   SIGNAL_PAYLOAD_MAX);
	} else if ((n = signals_publish(r->h->b, ch, r->rt.param_len, p, pl)) < 0) {
		hreq_error(r, 500, "internal", "out of memory");
	} else {
		hreq_reply_json(r, 200, json_pack("{s:I}", "delivered", (json_int_t)n));
	}
	json_decref(j);
}
