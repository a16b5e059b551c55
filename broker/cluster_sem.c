// SPDX-License-Identifier: MIT
/*
 * Cluster semaphores (issue 16, docs/cluster.md): the limit is enforced
 * across hosts, and the slots are shared between them.
 *
 * A semaphore of limit L has L slot keys in etcd, NS "s/" hex(key) "/" i for
 * i < L. A host takes a slot with a txn that creates slot i under its lease
 * only if it does not exist (create_revision == 0): etcd decides, so no two
 * hosts ever have the same slot, and the slots taken anywhere are at most L.
 * The host grants as many local holders as it has slots
 * (seg_key.cluster_slots, checked by cluster_slots_full() in every grant of a
 * new hold), asks for more when its local demand (holders + waiters) grows,
 * and gives the surplus back after --cluster-linger. A host lost with slots
 * loses them with its lease; the local deadline ends its holds before that,
 * as for locks. No slot free: the worker watches the slot directory for a
 * deletion, then looks again.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "broker.h"
#include "clock.h"
#include "cluster_int.h"

#define STEP_MS 3000u
#define WATCH_MS 5000u
#define RETRY_MS 200u
#define SEQ_SPAN (1ull << CLUSTER_SEQ_BITS)

static void slot_key(const struct cluster_opts *o, const char *name, size_t len, uint32_t i,
		     char *out, size_t size)
{
	char dir[640];

	cluster_rec_key(o, 's', name, len, dir, sizeof(dir));
	snprintf(out, size, "%s/%08x", dir, i);
}

static int on_delete(json_t *msg, void *arg)
{
	(void)arg;
	/* Any event (the watch filters puts out) or an error: look again. */
	return json_array_size(json_object_get(json_object_get(msg, "result"), "events")) ||
	       !json_object_get(msg, "result");
}

static void *sem_worker(void *arg)
{
	struct csworker *w = arg;
	char from[1000], to[1000], dir[660];
	uint8_t *taken = calloc(w->limit, 1);
	struct etcd e;
	int err;
	size_t n;

	err = taken ? etcd_init(&e, w->c->o) : -ENOMEM;
	cluster_rec_key(w->c->o, 's', w->name, w->len, dir, sizeof(dir));
	n = strlen(dir);
	dir[n++] = '/';
	dir[n] = '\0';
	etcd_b64(dir, n, from);
	dir[n - 1]++;
	etcd_b64(dir, n, to);
	while (!err && !atomic_load(&w->cancel)) {
		json_t *rep = NULL, *kv;
		int64_t hdr;
		uint32_t i;
		size_t j;

		err = etcd_post(&e, "/v3/kv/range",
				json_pack("{s:s, s:s}", "key", from, "range_end", to), &rep, STEP_MS,
				&w->cancel);
		if (err)
			break;
		hdr = etcd_i64(json_object_get(rep, "header"), "revision");
		memset(taken, 0, w->limit);
		json_array_foreach(json_object_get(rep, "kvs"), j, kv)
		{
			char raw[1000];
			const char *k64 = json_string_value(json_object_get(kv, "key"));
			ssize_t m = k64 && strlen(k64) < 1300 ? etcd_unb64(k64, raw) : -1;
			unsigned int idx = ~0u;

			if (m > 8) {
				raw[m] = '\0';
				if (sscanf(raw + m - 8, "%8x", &idx) == 1 && idx < w->limit)
					taken[idx] = 1;
				/* Ours but not known to the manager: left by a
				 * delete that failed, or by the broker before us
				 * (a re-adopted lease). Deleted, then taken anew
				 * below (if still free): a slot's tokens come from
				 * the revision of its own creation. */
				if (idx < w->limit && taken[idx] && !w->mine[idx] &&
				    etcd_i64(kv, "lease") == w->lease) {
					char k64b[1000];

					etcd_b64(raw, (size_t)m, k64b);
					if (etcd_post(&e, "/v3/kv/deleterange",
						      json_pack("{s:s}", "key", k64b), NULL, STEP_MS,
						      &w->cancel) == 0)
						taken[idx] = 0;
				}
			}
		}
		json_decref(rep);
		for (i = 0; i < w->limit && w->got < w->want && !atomic_load(&w->cancel); i++) {
			char sk[700], k64[1000], lease[24];
			json_t *req;

			if (taken[i])
				continue;
			slot_key(w->c->o, w->name, w->len, i, sk, sizeof(sk));
			etcd_b64(sk, strlen(sk), k64);
			snprintf(lease, sizeof(lease), "%" PRId64, w->lease);
			req = json_pack("{s:[{s:s, s:s, s:s}], s:[{s:{s:s, s:s, s:s}}]}", "compare",
					"key", k64, "target", "CREATE", "create_revision", "0",
					"success", "request_put", "key", k64, "value", "", "lease",
					lease);
			rep = NULL;
			if (etcd_post(&e, "/v3/kv/txn", req, &rep, STEP_MS, &w->cancel) == 0 &&
			    json_is_true(json_object_get(rep, "succeeded"))) {
				w->idx[w->got++] = i;
				w->rev = etcd_i64(json_object_get(rep, "header"), "revision");
			}
			json_decref(rep);
		}
		if (w->got)
			break;
		/* All taken: wait for one to be given back (or its host lost). */
		{
			char rv[24];
			json_t *req;

			snprintf(rv, sizeof(rv), "%" PRId64, hdr + 1);
			req = json_pack("{s:{s:s, s:s, s:s, s:[s]}}", "create_request", "key", from,
					"range_end", to, "start_revision", rv, "filters", "NOPUT");
			err = etcd_watch_stream(&e, req, WATCH_MS, &w->cancel, on_delete, NULL);
			if (err == -EAGAIN)
				err = 0;
		}
	}
	if (!err && atomic_load(&w->cancel) && !w->got)
		err = -ECANCELED;
	if (taken)
		etcd_fini(&e);
	free(taken);
	w->err = w->got ? 0 : err ? err : -ECANCELED;
	atomic_store(&w->done, true);
	cluster_ring(w->c->seg->hdr);
	return NULL;
}

static int sem_worker_start(struct cluster *c, struct ckey *ck, uint32_t want, int64_t lease)
{
	struct csworker *w = calloc(1, sizeof(*w));
	int err;

	if (!w)
		return -ENOMEM;
	w->c = c;
	w->lease = lease;
	w->limit = ck->limit;
	w->want = want < CSEM_BATCH ? want : CSEM_BATCH;
	for (err = 0; (uint32_t)err < ck->nslots; err++)
		w->mine[ck->slots[err]] = 1;
	w->len = ck->len;
	memcpy(w->name, ck->name, ck->len + 1);
	err = pthread_create(&w->thread, NULL, sem_worker, w);
	if (err) {
		free(w);
		return -err;
	}
	ck->sw = w;
	return 0;
}

/* Give back slots @idx[0..n) (a txn of deletes; lost with the lease anyway
 * if etcd does not answer). */
static void slots_delete(struct cluster *c, struct ckey *ck, const uint32_t *idx, uint32_t n)
{
	json_t *ops = json_array();
	uint32_t i;

	for (i = 0; ops && i < n; i++) {
		char sk[700], k64[1000];

		slot_key(c->o, ck->name, ck->len, idx[i], sk, sizeof(sk));
		etcd_b64(sk, strlen(sk), k64);
		json_array_append_new(ops, json_pack("{s:{s:s}}", "request_delete_range", "key",
						     k64));
	}
	if (ops && n)
		etcd_post(&c->etcd, "/v3/kv/txn", json_pack("{s:o}", "success", ops), NULL, STEP_MS,
			  &c->stop);
	else
		json_decref(ops);
}

/* New slots: more local holders may be granted, with tokens from this
 * acquisition's revision (above every range given out before it). */
static void slots_add_locked(struct cluster *c, struct seg_key *k, struct ckey *ck,
			     struct csworker *w)
{
	struct segment *seg = c->seg;
	uint32_t wake[64], n, j;
	uint64_t base = CLUSTER_TOKEN_BASE + ((uint64_t)w->rev << CLUSTER_SEQ_BITS), start, l;

	for (j = 0; j < w->got && ck->nslots < CSEM_MAX; j++)
		ck->slots[ck->nslots++] = w->idx[j];
	start = __atomic_load_n(&k->tok_last, __ATOMIC_RELAXED);
	if (start < base) {
		l = atomic_load(&k->lock_index);
		__atomic_store_n(&k->tok_off, base - l, __ATOMIC_RELAXED);
		__atomic_store_n(&k->tok_hi, base + SEQ_SPAN - 1, __ATOMIC_RELAXED);
		__atomic_store_n(&k->tok_last, base, __ATOMIC_RELAXED);
		__atomic_store_n(&k->token, base, __ATOMIC_RELAXED);
	}
	k->cluster_slots = ck->nslots;
	atomic_store(&k->cluster, CL_KEY | CL_OPEN | CL_ARMED);
	do {
		n = key_grant_pending_locked(seg, k, wake, 64);
		for (j = 0; j < n; j++)
			waiter_wake(seg, wake[j]);
	} while (n == 64);
}

bool sem_begin(struct cluster *c, struct ckey *ck, int64_t lease)
{
	ck->nslots = 0;
	ck->idle_ns = 0;
	ck->pub_valid = true; /* nothing of ours in etcd (see open_gate()) */
	ck->pub_tok = 0;
	ck->seen_tok = UINT64_MAX;
	ck->epoch = atomic_load(&c->epoch);
	if (ck->limit > CSEM_MAX)
		ck->limit = CSEM_MAX;
	if (sem_worker_start(c, ck, ck->limit, lease))
		return false;
	ck->state = CK_SEM;
	return true;
}

void sem_tick(struct cluster *c, uint32_t i, struct ckey *ck, uint64_t now)
{
	struct segment *seg = c->seg;
	struct seg_key *k = &seg->keys[i];
	struct csworker *w = ck->sw;
	uint32_t drop[CSEM_MAX], ndrop = 0, demand;
	int64_t lease = atomic_load(&c->lease_id);
	bool lost = ck->epoch != atomic_load(&c->epoch) || !lease, publish = false;
	struct cpub pub;

	if (w && atomic_load(&w->done)) {
		pthread_join(w->thread, NULL);
		ck->sw = NULL;
	} else if (w) {
		if (lost || !peek_waiters_of(k))
			atomic_store(&w->cancel, true);
		w = NULL; /* not yet */
	}
	if (lost) {
		/* The lease is gone, with our slots (jeopardy ended the holds). */
		free(w);
		ck->nslots = 0;
		if (!ck->sw)
			ck->state = CK_IDLE;
		return;
	}
	if (key_lock_timed(seg, k, BROKER_LOCK_MS)) {
		if (w) { /* give them back: we could not use them */
			slots_delete(c, ck, w->idx, w->got);
			free(w);
		}
		return;
	}
	if (!key_is_entry(k, ck)) {
		key_unlock(k);
		if (w)
			slots_delete(c, ck, w->idx, w->got);
		free(w);
		slots_delete(c, ck, ck->slots, ck->nslots);
		ck->nslots = 0;
		if (!ck->sw)
			ck->state = CK_IDLE;
		return;
	}
	if (w) {
		if (!w->err && w->got)
			slots_add_locked(c, k, ck, w);
		else if (w->err != -ECANCELED)
			ck->retry_ns = now + RETRY_MS * 1000000ull;
		free(w);
	}
	demand = k->holders + k->waiters;
	if (demand > ck->limit)
		demand = ck->limit;
	if (!ck->sw && demand > ck->nslots && now >= ck->retry_ns)
		sem_worker_start(c, ck, demand - ck->nslots, lease);
	if (ck->nslots > demand && ck->nslots > k->holders) {
		/* Surplus: given back after --cluster-linger (the holders keep
		 * theirs; no new hold beyond what is left). */
		if (!ck->idle_ns) {
			ck->idle_ns = now;
			c->lingering = true;
		} else if (now - ck->idle_ns >= (uint64_t)c->o->linger_ms * 1000000ull) {
			uint32_t keep = demand > k->holders ? demand : k->holders;

			while (ck->nslots > keep)
				drop[ndrop++] = ck->slots[--ck->nslots];
			k->cluster_slots = ck->nslots;
			if (!ck->nslots)
				atomic_store(&k->cluster, atomic_load(&k->cluster) & ~CL_OPEN);
			ck->idle_ns = 0;
		} else {
			c->lingering = true;
		}
	} else {
		ck->idle_ns = 0;
	}
	if (k->holders || k->waiters)
		atomic_fetch_or(&k->cluster, CL_ARMED);
	if (ck->nslots)
		publish = cvalue_snapshot_locked(c, k, ck, &pub);
	key_unlock(k);
	if (publish)
		cvalue_publish(c, ck, &pub);
	slots_delete(c, ck, drop, ndrop);
	if (!ck->nslots && !ck->sw) {
		cvalue_release(c, ck); /* our records, if any */
		ck->state = CK_IDLE;
	}
}

/* A semaphore the broker before us held slots of, under the lease we
 * re-adopted: its holds have ended (not re-adopted), so its slots must not
 * stay taken for as long as our lease lives. Deleted now (best effort: the
 * next sem_begin() finds any left as its own and deletes them too). */
void sem_drop_own(struct cluster *c, struct ckey *ck, int64_t lease)
{
	char from[1000], to[1000], dir[660];
	json_t *rep = NULL, *kv, *ops = json_array();
	size_t n, j;

	cluster_rec_key(c->o, 's', ck->name, ck->len, dir, sizeof(dir));
	n = strlen(dir);
	dir[n++] = '/';
	dir[n] = '\0';
	etcd_b64(dir, n, from);
	dir[n - 1]++;
	etcd_b64(dir, n, to);
	if (!ops || etcd_post(&c->etcd, "/v3/kv/range",
			      json_pack("{s:s, s:s}", "key", from, "range_end", to), &rep, STEP_MS,
			      &c->stop)) {
		json_decref(ops);
		return;
	}
	json_array_foreach(json_object_get(rep, "kvs"), j, kv)
	{
		const char *k64 = json_string_value(json_object_get(kv, "key"));

		if (k64 && etcd_i64(kv, "lease") == lease)
			json_array_append_new(ops, json_pack("{s:{s:s}}", "request_delete_range",
							     "key", k64));
	}
	json_decref(rep);
	if (json_array_size(ops))
		etcd_post(&c->etcd, "/v3/kv/txn", json_pack("{s:o}", "success", ops), NULL, STEP_MS,
			  &c->stop);
	else
		json_decref(ops);
}
