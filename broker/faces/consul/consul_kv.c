// SPDX-License-Identifier: MIT
/*
 * Consul's KV store (/v1/kv/...). Where things live (docs/architecture.md,
 * "Consul-compatible API"):
 *
 * - Entries (key, value, flags, CreateIndex, ModifyIndex, LockIndex,
 *   Session) live in the broker's memory, in one array sorted by key, so
 *   that a prefix is one contiguous run for ?recurse, ?keys and blocking
 *   queries. The segment keeps no plain data: its values belong to holds
 *   and a key without holder or waiter is reclaimed.
 * - A lock (?acquire=) is the segment's lock of the same name, taken by the
 *   Consul session's segment session without waiting: one FIFO, one fencing
 *   order with liblocal, the CLI, dflockd's HTTP and TCP clients. The value
 *   is attached to the hold too, so local_info() shows it.
 * - The Session of an entry is read back from the segment (kv_sync_at()): a
 *   holder that is not a session of this API shows as its public id
 *   ("s3g7"), and a hold lost elsewhere (an operator's force-release)
 *   clears it. Each such change is a modification (ModifyIndex, and
 *   LockIndex for a new holder), as it would be in Consul.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "consul_int.h"

/* ---- the sorted table ---------------------------------------------------- */

/* Index of the first entry >= @key (by bytes). */
static size_t lower_bound(struct consul *c, const char *key)
{
	size_t lo = 0, hi = c->nents;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (strcmp(c->ents[mid]->key, key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static struct kv *find(struct consul *c, const char *key)
{
	size_t i = lower_bound(c, key);

	return i < c->nents && !strcmp(c->ents[i]->key, key) ? c->ents[i] : NULL;
}

static struct kv *insert(struct consul *c, const char *key, size_t len)
{
	size_t i = lower_bound(c, key);
	struct kv *e;

	if (c->nents == c->cap_ents) {
		size_t cap = c->cap_ents ? c->cap_ents * 2 : 64;
		struct kv **p = realloc(c->ents, cap * sizeof(*p));

		if (!p)
			return NULL;
		c->ents = p;
		c->cap_ents = cap;
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	memcpy(e->key, key, len + 1);
	e->key_len = len;
	memmove(c->ents + i + 1, c->ents + i, (c->nents - i) * sizeof(*c->ents));
	c->ents[i] = e;
	c->nents++;
	return e;
}

/* Remove entry @i; a lock held through this API is released with it. */
static void remove_at(struct consul *c, size_t i)
{
	struct kv *e = c->ents[i];

	if (e->owner) {
		local_release(e->owner->ls, e->key);
		c->b->seg.rung_local = true; /* a waiter of any face may be granted */
	}
	memmove(c->ents + i, c->ents + i + 1, (c->nents - i - 1) * sizeof(*c->ents));
	c->nents--;
	free(e->val);
	free(e);
}

static bool has_prefix(const struct kv *e, const char *prefix, size_t n)
{
	return !strncmp(e->key, prefix, n);
}

void consul_kv_prefix_keys(struct consul *c, const char *prefix,
			   void (*cb)(struct consul *c, const char *key))
{
	size_t n = strlen(prefix), i;

	for (i = lower_bound(c, prefix); i < c->nents && has_prefix(c->ents[i], prefix, n); i++)
		cb(c, c->ents[i]->key);
}

void consul_kv_free(struct consul *c)
{
	size_t i;

	for (i = 0; i < c->nents; i++) {
		free(c->ents[i]->val);
		free(c->ents[i]);
	}
	free(c->ents);
	c->ents = NULL;
	c->nents = c->cap_ents = 0;
}

/* ---- lock state from the segment ------------------------------------------ */

static int set_value(struct kv *e, const char *val, size_t len)
{
	char *v = NULL;

	if (len && !(v = malloc(len)))
		return -ENOMEM;
	if (len)
		memcpy(v, val, len);
	free(e->val);
	e->val = v;
	e->len = len;
	return 0;
}

/* What the segment says of a key's lock. */
struct hold {
	struct csession *owner; /* a session of this API holds it */
	char foreign[32];	/* else a session from elsewhere: its public id */
	uint64_t lock_index, modify_index;
	char *val; /* the hold's value, as far as --max-value (malloc'd) */
	size_t len;
};

static void hold_free(struct hold *h)
{
	free(h->val);
	h->val = NULL;
}

/* The holder of @key's lock, its lock_index and the hold's value; a
 * semaphore or a free key has no holder. The holder's identity is the
 * broker's session table's (consul_session_of_hex(), consul_foreign_id()),
 * never the segment's word for it. */
static int read_hold(struct consul *c, const char *key, struct hold *h)
{
	size_t cap = c->b->seg.caps.max_value;
	LOCAL_OPTS(local_key_info, ki);
	uint32_t slot;
	bool live;
	int err;

	memset(h, 0, sizeof(*h));
	if (!(h->val = malloc(cap ? cap : 1)))
		return -ENOMEM;
	ki.value_buf = h->val;
	ki.value_buf_size = cap;
	err = local_info(c->self, key, &ki);
	if (err < 0) {
		hold_free(h);
		return err;
	}
	if (ki.kind != LOCAL_KIND_LOCK || !ki.holders || !ki.holder_session[0])
		return 0;
	h->lock_index = ki.lock_index;
	h->modify_index = ki.modify_index;
	h->len = ki.value_len < cap ? ki.value_len : cap;
	h->owner = consul_session_of_hex(c, ki.holder_session, &live, &slot);
	if (!h->owner && live)
		consul_foreign_id(c, slot, h->foreign, sizeof(h->foreign));
	return 0;
}

/* A new holder's LockIndex: the key's lock_index in the segment, and never
 * less than one past the entry's (the segment's count restarts when an idle
 * key is reclaimed; Consul's never goes back). */
static uint64_t next_lock_index(const struct kv *e, uint64_t seg_lock_index)
{
	return seg_lock_index > e->lock_index ? seg_lock_index : e->lock_index + 1;
}

/* A held lock with no entry (taken by liblocal, the CLI, the other faces):
 * an entry made of the hold, gone with it. True if one was made. */
static bool import_held(struct consul *c, const char *key)
{
	struct hold h;
	struct kv *e;
	bool made = false;

	if (find(c, key) || read_hold(c, key, &h) < 0)
		return false;
	if (h.foreign[0] && (e = insert(c, key, strlen(key)))) {
		if (set_value(e, h.val, h.len)) {
			remove_at(c, lower_bound(c, key));
		} else {
			e->held_only = true;
			snprintf(e->foreign, sizeof(e->foreign), "%s", h.foreign);
			e->lock_index = h.lock_index;
			e->seg_modify = h.modify_index;
			e->create = e->modify = c->kv_index = consul_bump(c);
			made = true;
		}
	}
	hold_free(&h);
	return made;
}

struct held_keys {
	struct consul *c;
	char (*keys)[LOCAL_KEY_MAX + 1];
	size_t n, cap;
};

static int collect_held(const char *key, const struct local_key_info *ki, void *arg)
{
	struct held_keys *hk = arg;

	if (ki->kind != LOCAL_KIND_LOCK || !ki->holders || find(hk->c, key))
		return 0;
	if (hk->n == hk->cap) {
		size_t cap = hk->cap ? hk->cap * 2 : 16;
		void *p = realloc(hk->keys, cap * sizeof(*hk->keys));

		if (!p)
			return -ENOMEM;
		hk->keys = p;
		hk->cap = cap;
	}
	snprintf(hk->keys[hk->n++], sizeof(*hk->keys), "%s", key);
	return 0;
}

/* import_held() for every held lock under @prefix. Keys are gathered first:
 * local_keys() walks the table, local_info() then reads each on its own. */
static void import_prefix(struct consul *c, const char *prefix)
{
	struct held_keys hk = { .c = c };
	size_t i;

	local_keys(c->self, prefix, collect_held, &hk);
	for (i = 0; i < hk.n; i++)
		import_held(c, hk.keys[i]);
	free(hk.keys);
}

/* Bring entry @i's Session (and, for a holder from elsewhere, its value) in
 * line with the segment's holder: true if it changed; *gone when the entry
 * was only that hold, now released, and is removed. */
static bool kv_sync_at(struct consul *c, size_t i, bool *gone)
{
	struct kv *e = c->ents[i];
	struct hold h;
	bool changed = false, new_holder;

	*gone = false;
	if (read_hold(c, e->key, &h) < 0)
		return false; /* a stalled key: look again next time */
	if (e->held_only && !h.owner && !h.foreign[0]) {
		hold_free(&h);
		remove_at(c, i);
		c->kv_del_index = c->kv_index = consul_bump(c);
		*gone = true;
		return true;
	}
	new_holder = h.owner != e->owner || strcmp(h.foreign, e->foreign);
	/* A holder from elsewhere writes the value, as Consul's acquire does,
	 * when it takes the key or changes its hold's value (the segment key's
	 * modify_index moved): a PUT during its hold stands until then. */
	if (h.foreign[0] && (new_holder || h.modify_index != e->seg_modify) &&
	    (h.len != e->len || (h.len && memcmp(h.val, e->val, h.len))) &&
	    !set_value(e, h.val, h.len))
		changed = true;
	e->seg_modify = h.modify_index;
	if (new_holder) {
		if (h.owner || h.foreign[0])
			e->lock_index = next_lock_index(e, h.lock_index);
		e->owner = h.owner;
		snprintf(e->foreign, sizeof(e->foreign), "%s", h.foreign);
		changed = true;
	}
	hold_free(&h);
	if (changed)
		e->modify = c->kv_index = consul_bump(c);
	return changed;
}

/* Sync @key's entry, or make one for a hold from elsewhere: true if the
 * table changed. */
static bool sync_key(struct consul *c, const char *key)
{
	size_t i = lower_bound(c, key);
	bool gone;

	if (i < c->nents && !strcmp(c->ents[i]->key, key))
		return kv_sync_at(c, i, &gone);
	return import_held(c, key);
}

static void sync_range(struct consul *c, const char *prefix, bool exact)
{
	size_t n = strlen(prefix), i;
	bool gone;

	if (exact) {
		sync_key(c, prefix);
		return;
	}
	import_prefix(c, prefix);
	i = lower_bound(c, prefix);
	while (i < c->nents && has_prefix(c->ents[i], prefix, n)) {
		kv_sync_at(c, i, &gone);
		if (!gone)
			i++;
	}
}

bool consul_kv_sync_all(struct consul *c)
{
	bool any = false;
	uint32_t i;

	for (i = 0; i < c->nwatch; i++)
		if (sync_key(c, c->watch[i].key))
			any = true;
	return any;
}

uint64_t consul_kv_view(struct consul *c, enum cw_kind kind, const char *key)
{
	size_t n = strlen(key), i;
	uint64_t v = c->kv_del_index;
	struct kv *e;

	if (kind == CW_KEY) {
		e = find(c, key);
		v = e ? e->modify : c->kv_index;
	} else {
		for (i = lower_bound(c, key); i < c->nents && has_prefix(c->ents[i], key, n); i++)
			if (c->ents[i]->modify > v)
				v = c->ents[i]->modify;
	}
	return v ? v : 1;
}

void consul_kv_session_ended(struct consul *c, struct csession *cs)
{
	size_t i = 0;

	while (i < c->nents) {
		struct kv *e = c->ents[i];

		if (e->owner != cs) {
			i++;
			continue;
		}
		e->owner = NULL; /* the sweep releases its hold */
		if (cs->behavior_delete) {
			remove_at(c, i);
			c->kv_del_index = c->kv_index = consul_bump(c);
		} else {
			e->modify = c->kv_index = consul_bump(c);
			i++;
		}
	}
}

/* ---- answers --------------------------------------------------------------- */

static json_t *base64(const char *in, size_t n)
{
	static const char tab[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t i, o = 0;
	char *out = malloc((n + 2) / 3 * 4 + 1);
	json_t *j;

	if (!out)
		return NULL;
	for (i = 0; i + 2 < n; i += 3) {
		uint32_t v = (uint32_t)(unsigned char)in[i] << 16 |
			     (uint32_t)(unsigned char)in[i + 1] << 8 | (unsigned char)in[i + 2];

		out[o++] = tab[v >> 18];
		out[o++] = tab[(v >> 12) & 63];
		out[o++] = tab[(v >> 6) & 63];
		out[o++] = tab[v & 63];
	}
	if (i < n) {
		uint32_t v = (uint32_t)(unsigned char)in[i] << 16;

		if (i + 1 < n)
			v |= (uint32_t)(unsigned char)in[i + 1] << 8;
		out[o++] = tab[v >> 18];
		out[o++] = tab[(v >> 12) & 63];
		out[o++] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
		out[o++] = '=';
	}
	out[o] = '\0';
	j = json_string(out);
	free(out);
	return j;
}

static json_t *entry_json(const struct kv *e)
{
	json_t *j =
		json_pack("{s:I, s:s, s:o, s:o, s:I, s:I}", "LockIndex", (json_int_t)e->lock_index,
			  "Key", e->key, "Flags", consul_u64(e->flags), "Value",
			  e->len ? base64(e->val, e->len) : json_null(), "CreateIndex",
			  (json_int_t)e->create, "ModifyIndex", (json_int_t)e->modify);

	if (!j) /* a key that is not UTF-8: JSON cannot say it */
		return NULL;
	if (e->owner)
		json_object_set_new(j, "Session", json_string(e->owner->id));
	else if (e->foreign[0])
		json_object_set_new(j, "Session", json_string(e->foreign));
	return j;
}

static void list_keys(struct hreq *r, struct consul *c, const char *prefix)
{
	char sep[64] = "";
	size_t n = strlen(prefix), i, sn;
	json_t *a = json_array(), *last = NULL;

	consul_arg(r, "separator", sep, sizeof(sep));
	sn = strlen(sep);
	for (i = lower_bound(c, prefix); i < c->nents && has_prefix(c->ents[i], prefix, n); i++) {
		const char *k = c->ents[i]->key, *s = sn ? strstr(k + n, sep) : NULL;
		size_t len = s ? (size_t)(s - k) + sn : strlen(k);
		json_t *v = json_stringn(k, len);

		if (!v)
			continue;
		if (last && json_equal(last, v)) {
			json_decref(v);
			continue;
		}
		json_array_append_new(a, v);
		last = v;
	}
	consul_set_index(r, consul_kv_view(c, CW_PREFIX, prefix));
	if (!json_array_size(a)) {
		json_decref(a);
		consul_reply(r, 404, NULL);
		return;
	}
	consul_reply(r, 200, a);
}

void consul_kv_get(struct hreq *r, const char *key, bool from_wait)
{
	struct consul *c = r->h->consul;
	char buf[8];
	bool recurse = consul_arg(r, "recurse", buf, sizeof(buf));
	bool keys = consul_arg(r, "keys", buf, sizeof(buf));
	size_t n = strlen(key), i;
	enum cw_kind kind = recurse || keys ? CW_PREFIX : CW_KEY;
	struct kv *e;
	json_t *a;

	(void)from_wait;
	sync_range(c, key, kind == CW_KEY);
	if (consul_block(r, kind, key, consul_kv_view(c, kind, key)))
		return;
	if (keys) {
		list_keys(r, c, key);
		return;
	}
	consul_set_index(r, consul_kv_view(c, kind, key));
	if (kind == CW_KEY) {
		e = find(c, key);
		if (!e) {
			consul_reply(r, 404, NULL);
		} else if (consul_arg(r, "raw", buf, sizeof(buf))) {
			consul_reply_raw(r, e->val ? e->val : "", e->len);
		} else {
			json_t *j = entry_json(e);

			consul_reply(r, 200, j ? json_pack("[o]", j) : json_array());
		}
		return;
	}
	a = json_array();
	for (i = lower_bound(c, key); i < c->nents && has_prefix(c->ents[i], key, n); i++) {
		json_t *j = entry_json(c->ents[i]);

		if (j)
			json_array_append_new(a, j);
	}
	if (!json_array_size(a)) {
		json_decref(a);
		consul_reply(r, 404, NULL);
		return;
	}
	consul_reply(r, 200, a);
}

/* ?name=N as an unsigned 64-bit number: 1 present and valid, 0 absent, -1
 * malformed (answered). */
static int arg_u64(struct hreq *r, const char *name, uint64_t *out)
{
	char buf[32], *end;

	if (!consul_arg(r, name, buf, sizeof(buf)))
		return 0;
	errno = 0;
	*out = strtoull(buf, &end, 10);
	if (errno || !buf[0] || *end || buf[0] == '-') {
		consul_reply_text(r, 400, "Invalid %s value: '%s'", name, buf);
		return -1;
	}
	return 1;
}

/* The segment's count of acquisitions of @key (0 if unreadable). */
static uint64_t seg_lock_index(struct consul *c, const char *key)
{
	LOCAL_OPTS(local_key_info, ki);

	return local_info(c->self, key, &ki) ? 0 : ki.lock_index;
}

static void put(struct hreq *r, const char *key, size_t klen)
{
	struct consul *c = r->h->consul;
	char acq[64], rel[64];
	bool acquire = consul_arg(r, "acquire", acq, sizeof(acq));
	bool release = consul_arg(r, "release", rel, sizeof(rel));
	uint64_t flags = 0, cas = 0, tok = 0;
	int has_flags = arg_u64(r, "flags", &flags), has_cas;
	struct csession *cs = NULL;
	struct kv *e;
	bool created = false;
	int err;

	if (has_flags < 0 || (has_cas = arg_u64(r, "cas", &cas)) < 0)
		return;
	if (!klen) {
		consul_reply_text(r, 400, "Missing key name");
		return;
	}
	if (acquire && release) {
		consul_reply_text(r, 400, "Conflicting flags: acquire=%s&release=%s", acq, rel);
		return;
	}
	if (r->body_len > CONSUL_VALUE_MAX) {
		consul_reply_text(r, 413,
				  "Request body(%zu bytes) too large, max size: %u bytes. See "
				  "https://www.consul.io/docs/agent/"
				  "options.html#kv_max_value_size.",
				  r->body_len, CONSUL_VALUE_MAX);
		return;
	}
	if ((acquire || release) && !(cs = consul_session_find(c, acquire ? acq : rel))) {
		consul_reply_text(r, 500, "invalid session \"%s\"", acquire ? acq : rel);
		return;
	}
	if (r->h->draining && acquire) {
		consul_reply_text(r, 503, "the broker is shutting down");
		return;
	}
	sync_key(c, key);
	e = find(c, key);
	if (has_cas && (cas == 0 ? e != NULL : (!e || e->modify != cas))) {
		consul_reply(r, 200, json_false());
		return;
	}
	if (release && (!e || e->owner != cs)) {
		consul_reply(r, 200, json_false());
		return;
	}
	if (acquire && e && e->owner != cs && (e->owner || e->foreign[0])) {
		consul_reply(r, 200, json_false());
		return;
	}
	if (acquire && (!e || e->owner != cs)) {
		/* Consul's acquire never waits: a try in the key's FIFO. */
		LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 0, .lease_ms = 0);

		if (r->body_len <= c->b->seg.caps.max_value) {
			o.value = r->body;
			o.value_len = r->body_len;
		}
		err = local_lock(cs->ls, key, &o, &tok);
		if (err == -EBUSY || err == -ETIMEDOUT || err == -LOCAL_EKIND) {
			/* held elsewhere, in lock-delay, or a semaphore */
			consul_reply(r, 200, json_false());
			return;
		}
		if (err) {
			consul_reply_text(r, 500, "%s", local_strerror(err));
			return;
		}
	}
	if (!e) {
		e = insert(c, key, klen);
		if (!e) {
			if (acquire)
				local_release(cs->ls, key);
			consul_reply_text(r, 500, "out of memory");
			return;
		}
		created = true;
	}
	if (set_value(e, r->body, r->body_len)) {
		consul_reply_text(r, 500, "out of memory");
		return;
	}
	e->flags = flags; /* as Consul: a PUT without ?flags (acquire, release too) sets 0 */
	e->held_only = false;
	if (acquire && e->owner != cs) {
		e->owner = cs;
		e->foreign[0] = '\0';
		e->lock_index = next_lock_index(e, seg_lock_index(c, key));
	} else if (acquire) {
		/* Held already: Consul replaces the value, and so does the
		 * segment (local_lock() again with the value). */
		LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 0);

		if (r->body_len <= c->b->seg.caps.max_value) {
			o.value = r->body;
			o.value_len = r->body_len;
			local_lock(cs->ls, key, &o, &tok);
		}
	}
	if (release) {
		local_release(cs->ls, key);
		c->b->seg.rung_local = true; /* a waiter of any face may be granted */
		e->owner = NULL;
	}
	e->modify = c->kv_index = consul_bump(c);
	if (created)
		e->create = e->modify;
	consul_changed(c);
	consul_reply(r, 200, json_true());
}

static void del(struct hreq *r, const char *key)
{
	struct consul *c = r->h->consul;
	char buf[8];
	bool recurse = consul_arg(r, "recurse", buf, sizeof(buf));
	size_t n = strlen(key), i;
	uint64_t cas = 0;
	int has_cas = arg_u64(r, "cas", &cas);
	struct kv *e;
	bool any = false;

	if (has_cas < 0)
		return;
	if (recurse && has_cas) {
		consul_reply_text(r, 400, "Conflicting flags: cas=%" PRIu64 "&recurse", cas);
		return;
	}
	if (recurse) {
		i = lower_bound(c, key);
		while (i < c->nents && has_prefix(c->ents[i], key, n)) {
			remove_at(c, i);
			any = true;
		}
	} else if (sync_key(c, key), (e = find(c, key))) {
		if (has_cas && e->modify != cas) {
			consul_reply(r, 200, json_false());
			return;
		}
		remove_at(c, lower_bound(c, key));
		any = true;
	} else if (has_cas && cas != 0) {
		consul_reply(r, 200, json_false());
		return;
	}
	if (any) {
		c->kv_del_index = c->kv_index = consul_bump(c);
		consul_changed(c);
	}
	consul_reply(r, 200, json_true());
}

void consul_kv_route(struct hreq *r, const char *rest)
{
	char key[LOCAL_KEY_MAX + 1];
	size_t klen = 0;

	if (consul_unescape(rest, strlen(rest), key, sizeof(key), &klen, false)) {
		consul_reply_text(r, 400, "Invalid key: 0..%d bytes, percent-encoded, no NUL",
				  LOCAL_KEY_MAX);
		return;
	}
	if (!klen && strcmp(r->verb, "PUT")) {
		char buf[8];
		bool many = consul_arg(r, "recurse", buf, sizeof(buf)) ||
			    (!strcmp(r->verb, "GET") && consul_arg(r, "keys", buf, sizeof(buf)));

		if (!many) { /* all keys only with ?recurse or ?keys, as Consul */
			consul_reply_text(r, 400, "Missing key name");
			return;
		}
	}
	if (!strcmp(r->verb, "GET"))
		consul_kv_get(r, key, false);
	else if (!strcmp(r->verb, "PUT"))
		put(r, key, klen);
	else if (!strcmp(r->verb, "DELETE"))
		del(r, key);
	else
		consul_reply_text(r, 405, "method %s not allowed", r->verb);
}
