// SPDX-License-Identifier: MIT
/*
 * Cluster keys across hosts: values, leader discovery, watches and the
 * lock-delay owed by a lost host (docs/cluster.md).
 *
 * The host that holds a key's cluster lock publishes its holder (session,
 * name, pid, token, kind) and value in etcd, at NS "v/" hex(key), under the
 * host's lease: the record goes with the lease, and the next holder's
 * overwrites it. The manager publishes what changed at each look at a held
 * key (every bell, at least every 50 ms), not at every local handoff.
 *
 * Every broker watches NS "v/" (one stream for all keys): another host's
 * record is written into the local key's value (so local_info() and
 * local_watch() see it) with a change of the key's modify index (so every
 * local watcher, `shmlock watch`, HTTP and TCP watches wake), and kept here
 * so that the broker's info (`shmlock leader`) names the holder.
 *
 * Lock-delay: while a holder whose session has a lock-delay holds the key,
 * NS "d/" hex(key) = "<lease> <ms>" is written too, without a lease, and
 * deleted with the lock key when the host gives the key up cleanly (in the
 * same txn). A host that is lost holding the key leaves it behind; the next
 * host to take the key finds it (cluster_lock.c) and holds grants back for
 * that long.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "core/broker.h"
#include "clock.h"
#include "cluster_int.h"
#include "proto.h"

#define PUB_MS 2000u	  /* one publication */
#define PUB_SETTLE_MS 20u /* a holder and value are published once they last this */
#define RWATCH_MS 10000u  /* one watch stream, before it is made anew */
#define RWATCH_RETRY_MS 200u

/* The cluster whose remote holders the broker's info reports (one broker
 * per process). */
static struct cluster *_Atomic the_cluster;

void cluster_rec_key(const struct cluster_opts *o, char what, const char *name, size_t len,
		     char *out, size_t size)
{
	size_t n = (size_t)snprintf(out, size, "%s%c/", o->ns, what), i;

	/* hex: a record's directory never has 'v/' or 'd/' of a lock key's. */
	for (i = 0; i < len && n + 3 < size; i++)
		n += (size_t)snprintf(out + n, size - n, "%02x", (unsigned char)name[i]);
}

/* ---- publishing (the manager) -------------------------------------------- */

bool cvalue_snapshot_locked(struct cluster *c, struct seg_key *k, struct ckey *ck, struct cpub *p)
{
	struct segment *seg = c->seg;
	uint32_t idx = seg_key_index(seg, k), h = k->h_head;
	uint64_t vw = atomic_load(&k->value_word), tok = 0;
	const struct seg_session *s = NULL;

	if (k->holders && h < seg->nnodes) {
		tok = seg->nodes[h].token;
		s = seg_session_at(seg, NODE_SESSION(atomic_load(&seg->nodes[h].word)));
	}
	if (ck->pub_valid && ck->pub_tok == tok && (ck->pub_vw == vw || !tok))
		return false; /* as published (with no holder, nothing is) */
	/* A state is published once it has lasted PUB_SETTLE_MS: an etcd
	 * write (an fsync) per grant would halve the cross-host handoff rate,
	 * and a holder that comes and goes within it has nothing to lead. */
	if (ck->seen_tok != tok || ck->seen_vw != vw) {
		ck->seen_tok = tok;
		ck->seen_vw = vw;
		ck->seen_ns = mono_ns();
	}
	if (mono_ns() - ck->seen_ns < PUB_SETTLE_MS * 1000000ull) {
		/* Looked at again once it has settled, not a whole tick
		 * (50 ms) later: the sooner a holder with a lock-delay is
		 * published, the shorter the window in which its host's loss
		 * leaves no lock-delay behind (docs/cluster.md). */
		look_again_at(c, ck->seen_ns + PUB_SETTLE_MS * 1000000ull);
		return false;
	}
	memset(p, 0, sizeof(*p));
	p->held = tok != 0;
	p->token = tok;
	p->kind = (int32_t)k->kind;
	p->limit = k->limit;
	if (s) {
		memcpy(p->sid, s->id, sizeof(p->sid));
		memcpy(p->hname, s->name, sizeof(p->hname));
		p->hname[sizeof(p->hname) - 1] = '\0';
		p->pid = s->pid;
		p->delay_ms = s->lock_delay_ms;
	}
	p->vlen = VALUE_LEN(vw) <= seg->caps.max_value ? VALUE_LEN(vw) : 0;
	if (p->vlen) {
		p->value = malloc(p->vlen);
		if (!p->value)
			return false; /* next look */
		memcpy(p->value, seg_value_buf(seg, idx, VALUE_SEL(vw)), p->vlen);
	}
	ck->pub_tok = tok;
	ck->pub_vw = vw;
	ck->pub_valid = true;
	return true;
}

static json_t *op_put(const char *key, const char *val, int64_t lease)
{
	char *k64 = malloc(strlen(key) * 4 / 3 + 8), *v64 = malloc(strlen(val) * 4 / 3 + 8);
	char ls[24];
	json_t *r;

	if (!k64 || !v64) {
		free(k64);
		free(v64);
		return NULL;
	}
	etcd_b64(key, strlen(key), k64);
	etcd_b64(val, strlen(val), v64);
	snprintf(ls, sizeof(ls), "%" PRId64, lease);
	r = lease ? json_pack("{s:{s:s, s:s, s:s}}", "request_put", "key", k64, "value", v64,
			      "lease", ls)
		  : json_pack("{s:{s:s, s:s}}", "request_put", "key", k64, "value", v64);
	free(k64);
	free(v64);
	return r;
}

static json_t *op_del(const char *key)
{
	char k64[1024];

	if (strlen(key) > 700)
		return NULL;
	etcd_b64(key, strlen(key), k64);
	return json_pack("{s:{s:s}}", "request_delete_range", "key", k64);
}

/*
 * A txn of @ops (taken over) made only while our claim on @ck stands: a
 * lock's etcd key (ck->ekey) is there under the lease it was taken under;
 * a semaphore's record (NS "v/" hex) is ours. A broker that was stopped past
 * its lease must not delete what another host wrote there since.
 */
static json_t *guarded(struct cluster *c, struct ckey *ck, json_t *ops)
{
	char vkey[700], k64[1000];
	const char *key = ck->ekey;

	if (ck->state == CK_SEM) {
		cluster_rec_key(c->o, 'v', ck->name, ck->len, vkey, sizeof(vkey));
		key = vkey;
	}
	etcd_b64(key, strlen(key), k64);
	return json_pack("{s:[o], s:o}", "compare", etcd_cmp_lease(k64, ck->lease), "success", ops);
}

void cvalue_publish(struct cluster *c, struct ckey *ck, struct cpub *p)
{
	char vkey[700], dkey[700], sid[33], ds[48], *val = NULL, *v64 = NULL;
	json_t *ops = json_array(), *rec = NULL;
	int64_t lease = atomic_load(&c->lease_id);
	size_t i;

	cluster_rec_key(c->o, 'v', ck->name, ck->len, vkey, sizeof(vkey));
	cluster_rec_key(c->o, 'd', ck->name, ck->len, dkey, sizeof(dkey));
	if (!ops || !lease)
		goto out;
	if (!p->held) {
		/* No holder here: nothing to show, nothing owed. */
		json_array_append_new(ops, op_del(vkey));
		json_array_append_new(ops, op_del(dkey));
	} else {
		v64 = malloc(p->vlen * 4 / 3 + 8);
		if (!v64)
			goto out;
		etcd_b64(p->value ? p->value : "", p->vlen, v64);
		for (i = 0; i < 16; i++)
			snprintf(sid + 2 * i, 3, "%02x", p->sid[i]);
		rec = json_pack("{s:I, s:s, s:s, s:i, s:i, s:i, s:s, s:I}", "t",
				(json_int_t)p->token, "s", sid, "n", p->hname, "p", (int)p->pid,
				"k", (int)p->kind, "l", (int)p->limit, "v", v64, "h",
				(json_int_t)lease);
		val = rec ? json_dumps(rec, JSON_COMPACT) : NULL;
		if (!val)
			goto out;
		json_array_append_new(ops, op_put(vkey, val, lease));
		if (p->delay_ms) {
			snprintf(ds, sizeof(ds), "%" PRId64 " %u", lease, p->delay_ms);
			json_array_append_new(ops, op_put(dkey, ds, 0));
		} else {
			json_array_append_new(ops, op_del(dkey));
		}
	}
	/* A semaphore's record is put under the lease, which etcd checks;
	 * the first has nothing to compare with. */
	if (etcd_post(&c->etcd, "/v3/kv/txn",
		      ck->state == CK_SEM && p->held ? json_pack("{s:o}", "success", ops)
						     : guarded(c, ck, ops),
		      NULL, PUB_MS, &c->stop))
		ck->pub_valid = false; /* again at the next look */
	ops = NULL;
out:
	if (ops)
		ck->pub_valid = false;
	json_decref(ops);
	json_decref(rec);
	free(val);
	free(v64);
	free(p->value);
	p->value = NULL;
}

int cvalue_release(struct cluster *c, struct ckey *ck)
{
	char vkey[700], dkey[700];
	json_t *ops;

	cluster_rec_key(c->o, 'v', ck->name, ck->len, vkey, sizeof(vkey));
	cluster_rec_key(c->o, 'd', ck->name, ck->len, dkey, sizeof(dkey));
	/* A semaphore (cluster_sem.c) has no lock key: its slots go apart. */
	ops = ck->state == CK_SEM
		      ? json_pack("[o, o]", op_del(vkey), op_del(dkey))
		      : json_pack("[o, o, o]", op_del(ck->ekey), op_del(vkey), op_del(dkey));
	ck->pub_valid = false;
	if (!ops)
		return -ENOMEM;
	/* Only while the lease it was taken under still has them: the records
	 * are one per key, and another host's may stand there by now. */
	return etcd_post(&c->etcd, "/v3/kv/txn", guarded(c, ck, ops), NULL, 3000, &c->stop);
}

/* ---- other hosts' records (the watch thread) ------------------------------ */

static struct cremote *remote_find(struct cluster *c, const char *name, size_t len)
{
	uint32_t i;

	for (i = 0; i < c->nremote; i++)
		if (c->remote[i].len == len && !memcmp(c->remote[i].name, name, len))
			return &c->remote[i];
	return NULL;
}

/* A change of @name's record seen: its value (@v, @vlen; NULL: none) into
 * the local key, whose watchers wake. Not while this host holds the key:
 * there the local holder is the truth (and its record ours). */
static void touch_local(struct cluster *c, const char *name, size_t len, const void *v, size_t vlen)
{
	struct segment *seg = c->seg;
	struct seg_key *k;

	if (!cluster_prefix_match(seg, name, len))
		return;
	/* Created if missing: `shmlock leader` and watchers find it. */
	if (keytab_find_timed(seg, name, len, v != NULL, &k, BROKER_LOCK_MS))
		return;
	if (!(atomic_load(&k->cluster) & CL_OPEN) && !k->holders) {
		if (v && vlen <= seg->caps.max_value)
			key_set_value_locked(seg, k, v, vlen);
		key_touch_locked(k);
	}
	key_unlock(k);
}

/* The key's name from a record's etcd key (base64 of NS "v/" hex). */
static int rec_name(struct cluster *c, const char *k64, char *name, size_t *len)
{
	char raw[1200], vdir[200];
	ssize_t n;
	size_t pl, i;

	if (strlen(k64) > 1500)
		return -EINVAL;
	n = etcd_unb64(k64, raw);
	snprintf(vdir, sizeof(vdir), "%sv/", c->o->ns);
	pl = strlen(vdir);
	if (n < 0 || (size_t)n < pl || memcmp(raw, vdir, pl) || ((size_t)n - pl) % 2 ||
	    ((size_t)n - pl) / 2 > LOCAL_KEY_MAX)
		return -EINVAL;
	for (i = 0; i < ((size_t)n - pl) / 2; i++) {
		unsigned int b;

		if (sscanf(raw + pl + 2 * i, "%2x", &b) != 1)
			return -EINVAL;
		name[i] = (char)b;
	}
	*len = ((size_t)n - pl) / 2;
	name[*len] = '\0';
	return 0;
}

/* One record put (@kv) or deleted (@kv NULL, @k64 its key). */
static void apply(struct cluster *c, const char *k64, const json_t *kv)
{
	char name[LOCAL_KEY_MAX + 1], *val = NULL, *value = NULL;
	struct cremote *r, rec = { 0 };
	json_t *j = NULL;
	ssize_t vlen = 0;
	size_t len;
	uint32_t i;

	if (rec_name(c, k64, name, &len))
		return;
	if (kv) {
		const char *v64 = json_string_value(json_object_get(kv, "value"));
		const char *sid, *hn, *vb;

		ssize_t n;

		val = v64 ? malloc(strlen(v64) + 4) : NULL;
		if (!val || (n = etcd_unb64(v64, val)) < 0)
			goto out;
		val[n] = '\0';
		j = json_loads(val, 0, NULL);
		rec.lease = etcd_i64(j, "h");
		/* Ours: this host's holder is the truth here. */
		if (!j || rec.lease == atomic_load(&c->lease_id))
			goto out;
		sid = json_string_value(json_object_get(j, "s"));
		hn = json_string_value(json_object_get(j, "n"));
		vb = json_string_value(json_object_get(j, "v"));
		rec.token = (uint64_t)etcd_i64(j, "t");
		rec.pid = (int32_t)etcd_i64(j, "p");
		rec.kind = (int32_t)etcd_i64(j, "k");
		rec.limit = (uint32_t)etcd_i64(j, "l");
		for (i = 0; sid && i < 16 && strlen(sid) >= 32; i++) {
			unsigned int b;

			if (sscanf(sid + 2 * i, "%2x", &b) == 1)
				rec.sid[i] = (uint8_t)b;
		}
		snprintf(rec.hname, sizeof(rec.hname), "%s", hn ? hn : "");
		value = malloc(vb ? strlen(vb) + 4 : 4);
		if (!value || (vlen = etcd_unb64(vb ? vb : "", value)) < 0)
			goto out;
	}
	memcpy(rec.name, name, len + 1);
	rec.len = (uint32_t)len;
	pthread_mutex_lock(&c->rmu);
	r = remote_find(c, name, len);
	if (kv) {
		if (!r && c->nremote == c->capremote) {
			uint32_t cap = c->capremote ? 2 * c->capremote : 16;
			struct cremote *p = realloc(c->remote, cap * sizeof(*p));

			if (p) {
				c->remote = p;
				c->capremote = cap;
			}
		}
		if (!r && c->nremote < c->capremote)
			r = &c->remote[c->nremote++];
		if (r)
			*r = rec;
	} else if (r) {
		*r = c->remote[--c->nremote];
	}
	pthread_mutex_unlock(&c->rmu);
	touch_local(c, name, len, kv ? (value ? value : "") : NULL, (size_t)vlen);
out:
	json_decref(j);
	free(val);
	free(value);
}

/* A PUT in a lock directory (NS hex(key) "/" lease), or of a semaphore's
 * waiter key (NS "s/" hex(key) "/w/" lease, cluster_sem.c): a host queued
 * for the key. Not ours: the manager is told (ckey.others), if the key is
 * here. */
static void note_queued(struct cluster *c, const char *raw, size_t n)
{
	char name[LOCAL_KEY_MAX + 1], mine[24];
	size_t pl = strlen(c->o->ns), hl, i;
	struct seg_key *k;
	uint32_t idx;
	int err;

	if (n < pl + 18 || memcmp(raw, c->o->ns, pl) || raw[n - 17] != '/')
		return;
	snprintf(mine, sizeof(mine), "%016" PRIx64, (uint64_t)atomic_load(&c->lease_id));
	if (!memcmp(raw + n - 16, mine, 16))
		return;
	hl = n - 17 - pl;
	if (hl > 4 && raw[pl] == 's' && raw[pl + 1] == '/' && raw[n - 19] == '/' &&
	    raw[n - 18] == 'w') {
		pl += 2; /* a semaphore's waiter key: its hex between "s/" and "/w/" */
		hl -= 4;
	}
	if (hl % 2 || hl / 2 > LOCAL_KEY_MAX || !hl)
		return;
	for (i = 0; i < hl / 2; i++) {
		unsigned int b;

		if (sscanf(raw + pl + 2 * i, "%2x", &b) != 1)
			return;
		name[i] = (char)b;
	}
	err = keytab_find_timed(c->seg, name, hl / 2, false, &k, BROKER_LOCK_MS);
	if (err == -ENOENT)
		return; /* not here: not ours to give up */
	if (err) {
		/* Busy or damaged: not known which key; every key asks at
		 * its next batch end rather than none (no starvation). */
		for (idx = 0; idx < c->seg->caps.max_keys; idx++)
			atomic_store(&c->keys[idx].others, 1);
		cluster_ring(c->seg->hdr);
		return;
	}
	idx = seg_key_index(c->seg, k);
	key_unlock(k);
	atomic_store(&c->keys[idx].others, 1);
	cluster_ring(c->seg->hdr);
}

struct rwatch {
	struct cluster *c;
	int64_t rev; /* the last revision applied */
};

/* Is @k64 a value record (NS "v/...")? */
static bool is_record(struct cluster *c, const char *k64)
{
	char raw[1000], vdir[200];
	ssize_t n;

	if (strlen(k64) > 1300)
		return false;
	n = etcd_unb64(k64, raw);
	snprintf(vdir, sizeof(vdir), "%sv/", c->o->ns);
	return n >= (ssize_t)strlen(vdir) && !memcmp(raw, vdir, strlen(vdir));
}

static int on_watch_msg(json_t *msg, void *arg)
{
	struct rwatch *rw = arg;
	json_t *res = json_object_get(msg, "result"), *ev;
	size_t i;

	if (!res)
		return 1; /* an error: watch anew */
	if (json_is_true(json_object_get(res, "canceled")))
		return 1;
	json_array_foreach(json_object_get(res, "events"), i, ev)
	{
		json_t *kv = json_object_get(ev, "kv");
		const char *k64 = json_string_value(json_object_get(kv, "key"));
		bool del = json_is_string(json_object_get(ev, "type")) &&
			   !strcmp(json_string_value(json_object_get(ev, "type")), "DELETE");
		int64_t mod = etcd_i64(kv, "mod_revision");

		if (k64 && is_record(rw->c, k64))
			apply(rw->c, k64, del ? NULL : kv);
		else if (k64 && !del && strlen(k64) < 1300) {
			char raw[1000];
			ssize_t n = etcd_unb64(k64, raw);

			if (n > 0)
				note_queued(rw->c, raw, (size_t)n);
		}
		if (mod > rw->rev)
			rw->rev = mod;
	}
	return atomic_load(&rw->c->stop) ? 1 : 0;
}

/* The records there are now (a start, or a watch that lost its place):
 * every one applied, and ours forgotten if gone. */
static int load_all(struct cluster *c, struct etcd *e, const char *from, const char *to,
		    int64_t *rev)
{
	json_t *rep = NULL, *kv;
	char(*seen)[LOCAL_KEY_MAX + 1] = NULL;
	size_t i, n;
	uint32_t j;
	int err;

	err = etcd_post(e, "/v3/kv/range", json_pack("{s:s, s:s}", "key", from, "range_end", to),
			&rep, 3000, &c->stop);
	if (err)
		return err;
	*rev = etcd_i64(json_object_get(rep, "header"), "revision");
	n = json_array_size(json_object_get(rep, "kvs"));
	json_array_foreach(json_object_get(rep, "kvs"), i, kv)
		apply(c, json_string_value(json_object_get(kv, "key")), kv);
	/* Queued hosts may have gone unseen: every key asks at its next
	 * batch end (as before the watch). */
	for (j = 0; j < c->seg->caps.max_keys; j++)
		atomic_store(&c->keys[j].others, 1);
	/* Records gone while we did not watch: their holders are gone too. */
	seen = calloc(n + 1, sizeof(*seen));
	if (seen) {
		json_array_foreach(json_object_get(rep, "kvs"), i, kv)
		{
			size_t len;

			if (rec_name(c, json_string_value(json_object_get(kv, "key")), seen[i],
				     &len))
				seen[i][0] = '\0';
		}
		pthread_mutex_lock(&c->rmu);
		for (j = 0; j < c->nremote;) {
			bool there = false;

			for (i = 0; i < n && !there; i++)
				there = strlen(seen[i]) == c->remote[j].len &&
					!memcmp(seen[i], c->remote[j].name, c->remote[j].len);
			if (there)
				j++;
			else
				c->remote[j] = c->remote[--c->nremote];
		}
		pthread_mutex_unlock(&c->rmu);
	}
	free(seen);
	json_decref(rep);
	return 0;
}

static void *rwatch_thread(void *arg)
{
	struct cluster *c = arg;
	struct rwatch rw = { c, 0 };
	char dir[200], from[300], to[300];
	char wfrom[300], wto[300];
	struct etcd e;
	size_t n;
	bool loaded = false;

	if (etcd_init(&e, c->o))
		return NULL;
	snprintf(dir, sizeof(dir), "%sv/", c->o->ns);
	n = strlen(dir);
	etcd_b64(dir, n, from);
	dir[n - 1]++;
	etcd_b64(dir, n, to);
	/* The watch covers the whole namespace: the records, and the lock
	 * directories, whose puts say that a host queued (note_queued()). */
	snprintf(dir, sizeof(dir), "%s", c->o->ns);
	n = strlen(dir);
	etcd_b64(dir, n, wfrom);
	dir[n - 1]++;
	etcd_b64(dir, n, wto);
	while (!atomic_load(&c->stop)) {
		char rev[24];
		json_t *req;
		int err;

		if (!loaded) {
			if (load_all(c, &e, from, to, &rw.rev)) {
				struct timespec ts = { 0, RWATCH_RETRY_MS * 1000000L };

				nanosleep(&ts, NULL);
				continue;
			}
			loaded = true;
		}
		snprintf(rev, sizeof(rev), "%" PRId64, rw.rev + 1);
		req = json_pack("{s:{s:s, s:s, s:s}}", "create_request", "key", wfrom, "range_end",
				wto, "start_revision", rev);
		err = etcd_watch_stream(&e, req, RWATCH_MS, &c->stop, on_watch_msg, &rw);
		/* Ended by an error or a cancel (a compaction past our place):
		 * load everything again; a quiet stream: watch on from rev. */
		if (err != -EAGAIN)
			loaded = false;
	}
	etcd_fini(&e);
	return NULL;
}

int cvalue_start(struct cluster *c)
{
	int err;

	the_cluster = c;
	err = pthread_create(&c->rw_thr, NULL, rwatch_thread, c);
	if (err)
		return -err;
	c->rw_running = true;
	return 0;
}

void cvalue_stop(struct cluster *c)
{
	if (c->rw_running)
		pthread_join(c->rw_thr, NULL);
	c->rw_running = false;
	the_cluster = NULL;
	pthread_mutex_lock(&c->rmu);
	free(c->remote);
	c->remote = NULL;
	c->nremote = c->capremote = 0;
	pthread_mutex_unlock(&c->rmu);
	pthread_mutex_destroy(&c->rmu);
}

/* The broker's info of @name (operator.c) when no local process holds it:
 * the holder on another host, if any. */
void cluster_remote_fill(const char *name, size_t len, struct proto_op_key *r)
{
	struct cluster *c = the_cluster;
	struct cremote *rm;

	if (!c || r->holders)
		return;
	pthread_mutex_lock(&c->rmu);
	rm = remote_find(c, name, len);
	if (rm) {
		if (r->kind == LOCAL_KIND_NONE) {
			r->kind = rm->kind;
			r->limit = rm->limit;
		}
		r->token = rm->token;
		memcpy(r->holder_id, rm->sid, sizeof(r->holder_id));
		memcpy(r->holder_name, rm->hname, sizeof(r->holder_name));
		r->holder_name[sizeof(r->holder_name) - 1] = '\0';
		r->holder_pid = rm->pid;
	}
	pthread_mutex_unlock(&c->rmu);
}
