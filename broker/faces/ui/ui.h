/* SPDX-License-Identifier: MIT */
/*
 * The live web view (docs/web-view.md): a page under /ui/ on
 * the HTTP listener, its assets compiled in (ui/, scripts/embed.sh), and
 * its data, /ui/api/state, a snapshot of the segment built here with
 * jansson, answered at once or as a long poll that a change ends.
 */
#ifndef SHMLOCKD_UI_H
#define SHMLOCKD_UI_H

#include <stdbool.h>
#include <stdint.h>

#include "faces/http/http_int.h"

/* The face the core knows (core/face.h): a client of the HTTP engine that
 * takes /ui on the HTTP API's listeners. */
struct face;
extern const struct face ui_face;

/* Is @url the view's (/ui, /ui/...)? */
bool ui_path(const char *url);
/* Serve a request under /ui (after the rate limit, before the token check:
 * the assets are open, the data asks for the token). */
void ui_dispatch(struct hreq *r);
/* The request is over: forget its long poll. */
void ui_request_done(struct hreq *r);
/* The doorbell rang, or the HTTP tick came: answer the long polls whose
 * view changed, or whose deadline passed. */
void ui_poll(struct http *h, bool tick);
/* Answer every long poll now (draining, shutdown) and free the state. */
void ui_end_all(struct http *h);
void ui_free(struct http *h);

/* ---- the snapshot (ui_state.c) ------------------------------------------- */

struct ui_query {
	char q[256];   /* substring of the key name; "" all */
	char sort[16]; /* key, kind, holders, waiters, delay, grants */
	bool desc;
	uint32_t offset, limit;
};

/* A fingerprint of everything the view shows but the clocks: it changes
 * when a key is taken, released, queued on, put in lock-delay or out of
 * it, when a session opens or closes, a lease is set, a key quarantined.
 * Also notes when each hold was first seen (held for). */
uint64_t ui_stamp(struct http *h);
/* The view's JSON for @q (NULL: out of memory). */
json_t *ui_snapshot(struct http *h, const struct ui_query *q, uint64_t stamp);

/* The first time each hold's token was seen (ui_state.c). */
struct ui_seen {
	uint64_t token, since_ns;
};

struct ui_wait {
	struct hreq *r;
	uint64_t since; /* the stamp the page has */
	uint64_t deadline_ns;
	struct ui_query q;
};

struct ui {
	struct ui_wait *waits;
	uint32_t nwaits, cap;
	struct ui_seen *seen; /* sorted by token */
	uint32_t nseen;
	uint64_t polls_answered;
};

#endif
