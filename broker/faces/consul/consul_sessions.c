// SPDX-License-Identifier: MIT
/*
 * Consul sessions (/v1/session/...): each a real segment session the broker
 * opens in its own name, as HTTP sessions are, so that a key acquired with
 * one is held in the segment by it: liblocal, the CLI and the other APIs
 * see that holder, queue behind it in the same FIFO, and its loss (destroy,
 * TTL expiry) releases the key with the session's lock-delay.
 *
 * The Consul ID is the segment session's id written as a UUID. TTL: the
 * segment session's TTL is twice the one asked for, as Consul's servers
 * invalidate a session only after twice its TTL without a renew. Checks:
 * the only check this node has is "serfHealth" (the broker itself); the
 * default list is that, an empty list means no check at all, and a session
 * needs no process check either way (it is the broker's own).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <syslog.h>
#include <unistd.h>

#include "clock.h"
#include "consul_int.h"
#include "procinfo.h"
#include "segment.h"

#define TTL_MAX_S 86400u
#define LOCK_DELAY_MAX_NS 60000000000ull
#define LOCK_DELAY_DEFAULT_NS 15000000000ull

static uint64_t broker_start_time;

int csessions_init(struct consul *c)
{
	struct proto_open req;
	struct proto_reply rep;
	int err;

	c->by_slot = calloc(c->b->seg.caps.max_sessions, sizeof(*c->by_slot));
	c->foreign = calloc(c->b->seg.caps.max_sessions, sizeof(*c->foreign));
	if (!c->by_slot || !c->foreign)
		return -ENOMEM;
	proc_start_time(getpid(), &broker_start_time);
	/* The broker's own session for this API: it watches keys for the
	 * blocking queries and inspects holders. */
	memset(&req, 0, sizeof(req));
	memset(&rep, 0, sizeof(rep));
	snprintf(req.name, sizeof(req.name), "consul:watch");
	req.flags = SESS_FLAG_HTTP;
	req.start_time = broker_start_time;
	err = session_open(c->b, &req, -1, getpid(), getuid(), broker_start_time, &rep);
	if (err)
		return err;
	c->self_slot = rep.slot;
	c->self = session_inproc_new(&c->b->seg, (struct owner){ rep.slot, rep.gen }, rep.id);
	return c->self ? 0 : -ENOMEM;
}

void csessions_fini(struct consul *c)
{
	if (c->self) {
		session_end_slot(c->b, c->self_slot, false, "closed (broker shutdown)");
		session_inproc_free(c->self);
		c->self = NULL;
	}
	free(c->by_slot);
	c->by_slot = NULL;
	free(c->foreign);
	c->foreign = NULL;
}

/* A field of @j, its name matched without case, as Go's encoding/json
 * (Consul's decoder) does: python-consul sends "name", "ttl", "lockdelay". */
static json_t *jget(json_t *j, const char *name)
{
	const char *k;
	json_t *v;

	json_object_foreach(j, k, v) if (!strcasecmp(k, name)) return v;
	return NULL;
}

static void uuid_of(const uint8_t id[16], char out[CONSUL_UUID_LEN + 1])
{
	char hex[33];

	hex_encode(id, 16, hex);
	snprintf(out, CONSUL_UUID_LEN + 1, "%.8s-%.4s-%.4s-%.4s-%.12s", hex, hex + 8, hex + 12,
		 hex + 16, hex + 20);
}

/* The 16 bytes of a session ID written as a UUID (or as 32 hex digits). */
static int parse_uuid(const char *s, uint8_t id[16])
{
	char hex[33];
	size_t i, o = 0, n = strlen(s);

	if (n != 36 && n != 32)
		return -1;
	for (i = 0; i < n; i++) {
		if (n == 36 && (i == 8 || i == 13 || i == 18 || i == 23)) {
			if (s[i] != '-')
				return -1;
			continue;
		}
		hex[o++] = (char)(s[i] >= 'A' && s[i] <= 'F' ? s[i] - 'A' + 'a' : s[i]);
	}
	hex[o] = '\0';
	return o == 32 ? hex_decode(hex, id, 16) : -1;
}

static struct csession *by_slot_live(struct consul *c, uint32_t slot)
{
	struct csession *cs;

	if (slot == IDX_NONE || slot >= c->b->seg.caps.max_sessions || !(cs = c->by_slot[slot]))
		return NULL;
	return session_is(&c->b->seg, (struct owner){ cs->slot, cs->gen }) ? cs : NULL;
}

struct csession *consul_session_find(struct consul *c, const char *uuid)
{
	uint8_t id[16];

	if (parse_uuid(uuid, id))
		return NULL;
	return by_slot_live(c, session_slot_of(c->b, id));
}

struct csession *consul_session_of_hex(struct consul *c, const char *hex, bool *live,
				       uint32_t *slot)
{
	uint8_t id[16];

	*live = false;
	*slot = IDX_NONE;
	if (strlen(hex) != 32 || hex_decode(hex, id, 16))
		return NULL;
	*slot = session_slot_of(c->b, id);
	*live = *slot != IDX_NONE;
	return *live ? by_slot_live(c, *slot) : NULL;
}

json_t *consul_session_json(struct consul *c, const struct csession_view *v)
{
	char ttl[32] = "";
	json_t *checks = json_array(), *e;
	size_t i;

	if (v->ttl_ns)
		duration_format(v->ttl_ns / 1000000u, ttl, sizeof(ttl));
	json_array_foreach(v->node_checks, i, e) json_array_append(checks, e);
	return json_pack(
		"{s:s, s:s, s:s, s:I, s:s, s:s, s:O, s:O, s:o, s:I, s:I}", "ID", v->id, "Name",
		v->name, "Node", c->node, "LockDelay", (json_int_t)v->lock_delay_ns, "Behavior",
		v->behavior_delete ? "delete" : "release", "TTL", ttl, "NodeChecks", v->node_checks,
		"ServiceChecks", v->service_checks, "Checks", checks, "CreateIndex",
		(json_int_t)v->create_index, "ModifyIndex", (json_int_t)v->modify_index);
}

static json_t *entry_json(struct consul *c, const struct csession *cs)
{
	struct csession_view v = {
		.id = cs->id,
		.name = cs->name,
		.node_checks = cs->node_checks,
		.service_checks = cs->service_checks,
		.lock_delay_ns = cs->lock_delay_ns,
		.ttl_ns = cs->ttl_ms * 1000000ull,
		.create_index = cs->create_index,
		.modify_index = cs->modify_index,
		.behavior_delete = cs->behavior_delete,
	};

	return consul_session_json(c, &v);
}

uint64_t consul_sessions_view(struct consul *c)
{
	return c->sess_index ? c->sess_index : 1;
}

json_t *consul_session_list_json(struct consul *c, const char *node)
{
	json_t *a = json_array();
	uint32_t i;

	if (node && strcmp(node, c->node))
		return a;
	/* By slot: this API's sessions and those of liblocal, the CLI and the
	 * other faces (holders whose keys the KV API shows), one list. */
	for (i = 0; i < c->b->seg.caps.max_sessions; i++) {
		json_t *e = by_slot_live(c, i) ? entry_json(c, c->by_slot[i])
					       : consul_foreign_json(c, i);

		if (e)
			json_array_append_new(a, e);
	}
	return a;
}

/* Check names: "serfHealth" is this node's one check. */
static int check_list(struct hreq *r, json_t *j, const char *field, bool objects, json_t **out)
{
	json_t *v = jget(j, field);
	size_t i;
	json_t *e;

	*out = NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_array(v)) {
		consul_reply_text(r, 400, "Request decode failed: %s must be a list", field);
		return -1;
	}
	json_array_foreach(v, i, e)
	{
		const char *name =
			objects ? json_string_value(jget(e, "ID")) : json_string_value(e);

		if (!name) {
			consul_reply_text(r, 400, "Request decode failed: malformed %s", field);
			return -1;
		}
		if (objects || strcmp(name, "serfHealth")) {
			consul_reply_text(r, 500, "Missing check '%s' registration", name);
			return -1;
		}
	}
	*out = json_incref(v);
	return 0;
}

/* LockDelay: a Go duration (sub-second values kept), or a number as
 * Consul's decoder takes it: below 1000 seconds, else nanoseconds. At most
 * 60 s, as Consul clamps it. */
static int parse_lock_delay(struct hreq *r, json_t *v, uint64_t *ns)
{
	const char *why;
	int64_t d;
	int err;

	if (!v || json_is_null(v)) {
		*ns = LOCK_DELAY_DEFAULT_NS;
		return 0;
	}
	if (json_is_integer(v) && json_integer_value(v) >= 0) {
		d = json_integer_value(v);
	} else if (json_is_real(v) && json_real_value(v) >= 0 && json_real_value(v) < 9e18) {
		d = (int64_t)json_real_value(v); /* Go's time.Duration(float64) */
	} else if (json_is_string(v)) {
		err = duration_parse(json_string_value(v), &d, &why);
		if (!err && d < 0) {
			err = -ERANGE;
			why = "negative duration";
		}
		if (err) {
			consul_reply_text(r, 400, "Request decode failed: LockDelay '%s': %s",
					  json_string_value(v), why);
			return -1;
		}
		*ns = (uint64_t)d;
		goto clamp;
	} else {
		consul_reply_text(r, 400, "Request decode failed: invalid LockDelay");
		return -1;
	}
	*ns = d < 1000 ? (uint64_t)d * 1000000000ull : (uint64_t)d;
clamp:
	if (*ns > LOCK_DELAY_MAX_NS)
		*ns = LOCK_DELAY_MAX_NS;
	return 0;
}

static void free_cs(struct csession *cs)
{
	if (!cs)
		return;
	if (cs->ls)
		session_inproc_free(cs->ls);
	json_decref(cs->node_checks);
	json_decref(cs->service_checks);
	free(cs->name);
	free(cs);
}

static void create(struct hreq *r)
{
	struct consul *c = r->h->consul;
	struct http *h = r->h;
	const struct http_opts *o = &h->b->opts.http;
	struct net_ipstat *ip = net_rate_peer(&h->rates, r->peer);
	json_t *j = NULL, *checks = NULL, *nchecks = NULL, *schecks = NULL, *v;
	const char *name = "", *behavior = "release", *node = NULL;
	struct csession *cs = NULL;
	struct proto_open req;
	struct proto_reply rep;
	json_error_t e;
	uint64_t ttl_ms = 0;
	int err;

	if (r->body_len) {
		j = json_loadb(r->body, r->body_len, 0, &e);
		if (!j || !json_is_object(j)) {
			consul_reply_text(r, 400, "Request decode failed: %s",
					  j ? "not an object" : e.text);
			goto out;
		}
	} else {
		j = json_object();
	}
	if ((v = jget(j, "Name")) && json_is_string(v))
		name = json_string_value(v);
	if ((v = jget(j, "Node")) && json_is_string(v) && json_string_length(v))
		node = json_string_value(v);
	if (node && strcmp(node, c->node)) {
		consul_reply_text(r, 500, "Missing node registration");
		goto out;
	}
	if ((v = jget(j, "Behavior")) && json_is_string(v) && json_string_length(v))
		behavior = json_string_value(v);
	if (strcmp(behavior, "release") && strcmp(behavior, "delete")) {
		consul_reply_text(r, 400, "Invalid Behavior setting '%s'", behavior);
		goto out;
	}
	if ((v = jget(j, "TTL")) && !json_is_null(v)) {
		/* A Go duration, as Consul's time.ParseDuration reads it: no
		 * bare number, no hex, no overflow (which once meant no TTL). */
		int64_t ns = 0, min_ns = (int64_t)h->b->opts.consul.ttl_min_s * 1000000000ll;
		const char *why = "a string";

		if (!json_is_string(v) ||
		    (json_string_length(v) && duration_parse(json_string_value(v), &ns, &why))) {
			consul_reply_text(r, 400, "Request decode failed: TTL %s%s%s: %s",
					  json_is_string(v) ? "'" : "",
					  json_is_string(v) ? json_string_value(v) : "",
					  json_is_string(v) ? "'" : "", why);
			goto out;
		}
		/* Consul's range, its own error; sub-second TTLs are kept (to
		 * the millisecond the segment counts in, rounded up). */
		if (ns && (ns < min_ns || ns > (int64_t)TTL_MAX_S * 1000000000ll)) {
			consul_reply_text(r, 400,
					  "Invalid Session TTL '%" PRId64 "', must be between "
					  "[%us=24h0m0s]",
					  ns, h->b->opts.consul.ttl_min_s);
			goto out;
		}
		ttl_ms = (uint64_t)duration_ms(ns);
	}
	if (check_list(r, j, "Checks", false, &checks) ||
	    check_list(r, j, "NodeChecks", false, &nchecks) ||
	    check_list(r, j, "ServiceChecks", true, &schecks))
		goto out;
	cs = calloc(1, sizeof(*cs));
	if (!cs || !(cs->name = strdup(name))) {
		consul_reply_text(r, 500, "out of memory");
		goto out;
	}
	if (parse_lock_delay(r, jget(j, "LockDelay"), &cs->lock_delay_ns))
		goto out;
	/* Checks and NodeChecks are one list here; neither given: the
	 * default, serfHealth. */
	if (checks && nchecks) {
		json_array_extend(checks, nchecks);
		cs->node_checks = json_incref(checks);
	} else if (checks || nchecks) {
		cs->node_checks = json_incref(checks ? checks : nchecks);
	} else {
		cs->node_checks = json_pack("[s]", "serfHealth");
	}
	cs->service_checks = schecks ? json_incref(schecks) : json_null();
	cs->ttl_ms = ttl_ms;
	cs->behavior_delete = !strcmp(behavior, "delete");
	if (h->draining) {
		consul_reply_text(r, 503, "the broker is shutting down");
		goto out;
	}
	if (c->nsessions >= http_engine_sessions_cap(h)) {
		consul_reply_text(r, 500,
				  "%u sessions open: this API's share of the session "
				  "table (--http-max-sessions)",
				  c->nsessions);
		goto out;
	}
	if (!ip || (o->max_sessions_per_ip && ip->sessions >= o->max_sessions_per_ip)) {
		consul_reply_text(r, 429,
				  "%s has too many sessions open "
				  "(--http-max-sessions-per-ip)",
				  r->ip);
		goto out;
	}
	memset(&req, 0, sizeof(req));
	memset(&rep, 0, sizeof(rep));
	snprintf(req.name, sizeof(req.name), "consul:%.55s", name);
	req.flags = SESS_FLAG_HTTP;
	req.start_time = broker_start_time;
	req.ttl_ms = (uint32_t)(ttl_ms * 2u);
	req.lock_delay_ms = (uint32_t)(cs->lock_delay_ns / 1000000u);
	req.behavior = cs->behavior_delete ? LOCAL_BEHAVIOR_DELETE : LOCAL_BEHAVIOR_RELEASE;
	err = session_open(h->b, &req, -1, getpid(), getuid(), broker_start_time, &rep);
	if (!err && !(cs->ls = session_inproc_new(&h->b->seg, (struct owner){ rep.slot, rep.gen },
						  rep.id))) {
		session_end_slot(h->b, rep.slot, false, "closed (out of memory)");
		err = -ENOMEM;
	}
	if (err) {
		consul_reply_text(r, 500, "%s", local_strerror(err));
		goto out;
	}
	cs->slot = rep.slot;
	cs->gen = rep.gen;
	uuid_of(rep.id, cs->id);
	snprintf(cs->ip, sizeof(cs->ip), "%s", r->peer);
	cs->create_index = cs->modify_index = c->sess_index = consul_bump(c);
	c->by_slot[cs->slot] = cs;
	c->nsessions++;
	ip->sessions++;
	consul_changed(c);
	consul_reply(r, 200, json_pack("{s:s}", "ID", cs->id));
	cs = NULL;
out:
	free_cs(cs);
	json_decref(checks);
	json_decref(nchecks);
	json_decref(schecks);
	json_decref(j);
}

void consul_session_ended(struct broker *b, uint32_t slot)
{
	struct consul *c = b->http ? b->http->consul : NULL; /* the HTTP engine's */
	struct csession *cs;
	struct net_ipstat *ip;

	if (!c || !c->by_slot || slot >= b->seg.caps.max_sessions || !(cs = c->by_slot[slot]))
		return;
	c->by_slot[slot] = NULL;
	c->nsessions--;
	ip = net_rate_peer(&c->h->rates, cs->ip);
	if (ip && ip->sessions)
		ip->sessions--;
	consul_kv_session_ended(c, cs); /* behavior release or delete */
	c->sess_index = consul_bump(c);
	consul_changed(c);
	free_cs(cs);
}

void consul_sessions_close_all(struct consul *c)
{
	uint32_t i;

	for (i = 0; c->by_slot && i < c->b->seg.caps.max_sessions; i++)
		if (c->by_slot[i])
			session_end_slot(c->b, i, false, "closed (broker shutdown)");
}

static bool need(struct hreq *r, const char *verb)
{
	if (!strcmp(r->verb, verb))
		return true;
	consul_reply_text(r, 405, "method %s not allowed", r->verb);
	return false;
}

static const char *after(const char *rest, const char *prefix)
{
	size_t n = strlen(prefix);

	return !strncmp(rest, prefix, n) && rest[n] && !strchr(rest + n, '/') ? rest + n : NULL;
}

void consul_session_route(struct hreq *r, const char *rest)
{
	struct consul *c = r->h->consul;
	struct csession *cs;
	const char *id = NULL;
	json_t *a;

	if (!strcmp(rest, "create")) {
		if (need(r, "PUT"))
			create(r);
	} else if ((id = after(rest, "destroy/"))) {
		if (!need(r, "PUT"))
			return;
		cs = consul_session_find(c, id);
		/* Destroying invalidates: the session's keys get its
		 * lock-delay, as in Consul. */
		if (cs) {
			session_end_slot(c->b, cs->slot, true, "destroyed over the Consul API");
			c->b->seg.rung_local = true; /* a waiter of any face may be granted */
		}
		consul_reply(r, 200, json_true());
	} else if ((id = after(rest, "info/"))) {
		json_t *e;

		if (!need(r, "GET"))
			return;
		consul_foreign_scan(c);
		if (consul_block(r, CW_SESSIONS, NULL, consul_sessions_view(c)))
			return;
		cs = consul_session_find(c, id);
		a = json_array();
		if ((e = cs ? entry_json(c, cs) : consul_foreign_find_json(c, id)))
			json_array_append_new(a, e);
		consul_set_index(r, consul_sessions_view(c));
		consul_reply(r, 200, a);
	} else if ((id = after(rest, "renew/"))) {
		if (!need(r, "PUT"))
			return;
		cs = consul_session_find(c, id);
		if (!cs || local_session_renew(cs->ls)) {
			consul_reply_text(r, 404, "Session id '%s' not found", id);
			return;
		}
		consul_set_index(r, consul_sessions_view(c));
		consul_reply(r, 200, json_pack("[o]", entry_json(c, cs)));
	} else if (!strcmp(rest, "list") || (id = after(rest, "node/"))) {
		if (!need(r, "GET"))
			return;
		consul_foreign_scan(c);
		if (consul_block(r, CW_SESSIONS, NULL, consul_sessions_view(c)))
			return;
		consul_set_index(r, consul_sessions_view(c));
		consul_reply(r, 200, consul_session_list_json(c, strcmp(rest, "list") ? id : NULL));
	} else if (!strcmp(rest, "destroy/") || !strcmp(rest, "info/") || !strcmp(rest, "renew/") ||
		   !strcmp(rest, "node/")) {
		consul_reply_text(r, 400, "Missing %s", strcmp(rest, "node/") ? "session" : "node");
	} else {
		consul_reply_text(r, 404, "Not Found");
	}
}
