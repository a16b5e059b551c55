// SPDX-License-Identifier: MIT
/*
 * Cluster semaphores (docs/cluster.md): the limit is enforced
 * across hosts, and the slots are shared between them.
 *
 * A semaphore of limit L has L slot keys in etcd, NS "s/" hex(key) "/" i for
 * i < L. A host takes a slot with a txn that creates slot i under its lease
 * only if it does not exist (create_revision == 0): etcd decides, so no two
 * hosts ever have the same slot, and the slots taken anywhere are at most L.
 * The host grants as many local holders as it has slots
 * (seg_key.cluster_slots, checked by cluster_slots_full() in every grant of a
 * new hold), asks for more when its local demand (holders + waiters) grows,
 * and gives the surplus back after --cluster-idle (--cluster-linger when
 * another host waits for slots). A host lost with slots
 * loses them with its lease; the local deadline ends its holds before that,
 * as for locks. Hosts are served in FIFO order (etcd's semaphore recipe): a
 * host that wants slots puts a waiter key, NS "s/" hex(key) "/w/" lease,
 * whose create revision is its place and whose value is how many slots it
 * still wants, and takes only the free slots that the hosts queued before it
 * do not want. Nothing for us: the worker watches the directory (a slot
 * given back, a waiter served or gone), then looks again. A host does not
 * keep its slots forever by handing them on locally: after a batch
 * (--cluster-batch, --cluster-batch-time, as for locks) it gives back what
 * the hosts waiting need (sem_batch_end()). A limit above CLUSTER_SEM_MAX
 * (64) is refused when the key takes its kind (keyops.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "core/broker.h"
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

/* Our waiter key: NS "s/" hex(key) "/w/" lease (docs/cluster.md, "FIFO
 * across hosts"). Not a slot key: slots are the 8-hex-digit names. */
static void waiter_key(const struct cluster_opts *o, const char *name, size_t len, int64_t lease,
		       char *out, size_t size)
{
	char dir[640];

	cluster_rec_key(o, 's', name, len, dir, sizeof(dir));
	snprintf(out, size, "%s/w/%016" PRIx64, dir, (uint64_t)lease);
}

static void lease_str(int64_t lease, char *out, size_t size)
{
	snprintf(out, size, "%" PRId64, lease);
}

/* The op that leaves our waiter key saying we still want @left slots (a put,
 * which keeps the key's create revision, our place), or deletes it. */
static json_t *waiter_op(const char *wk64, int64_t lease, uint32_t left)
{
	char lease_s[24], v[16], v64[32];

	if (!left)
		return etcd_op_del_if_lease(wk64, lease);
	lease_str(lease, lease_s, sizeof(lease_s));
	snprintf(v, sizeof(v), "%u", left);
	etcd_b64(v, strlen(v), v64);
	return json_pack("{s:{s:s, s:s, s:s}}", "request_put", "key", wk64, "value", v64, "lease",
			 lease_s);
}

/* What a range of the semaphore's directory says: which slots are taken,
 * and how many slots the hosts queued before us still want. */
struct sem_view {
	int64_t rev, my_cr; /* header revision; our waiter key's create revision */
	uint32_t nslots, earlier;
};

static void sem_parse(struct csworker *w, struct etcd *e, json_t *rep, size_t dlen, uint8_t *taken,
		      struct sem_view *v)
{
	json_t *kv;
	size_t j;
	struct {
		int64_t cr;
		uint32_t want;
	} q[64];
	uint32_t nq = 0, i;

	memset(taken, 0, w->limit);
	memset(v, 0, sizeof(*v));
	v->rev = etcd_i64(json_object_get(rep, "header"), "revision");
	json_array_foreach(json_object_get(rep, "kvs"), j, kv)
	{
		char raw[1000];
		const char *k64 = json_string_value(json_object_get(kv, "key"));
		ssize_t m = k64 && strlen(k64) < 1300 ? etcd_unb64(k64, raw) : -1;
		unsigned int idx = ~0u;

		if (m <= (ssize_t)dlen)
			continue;
		raw[m] = '\0';
		if (raw[dlen] == 'w' && raw[dlen + 1] == '/') {
			/* A host waiting for slots; ours gives our place. */
			int64_t cr = etcd_i64(kv, "create_revision");
			const char *v64 = json_string_value(json_object_get(kv, "value"));
			char val[64] = "";

			if (etcd_i64(kv, "lease") == w->lease) {
				v->my_cr = cr;
				continue;
			}
			if (v64 && strlen(v64) < 80) {
				ssize_t vl = etcd_unb64(v64, val);

				val[vl > 0 ? vl : 0] = '\0';
			}
			if (nq < 64) {
				q[nq].cr = cr;
				q[nq++].want = (uint32_t)strtoul(val, NULL, 10);
			}
			continue;
		}
		if (m - (ssize_t)dlen != 8 || sscanf(raw + dlen, "%8x", &idx) != 1 ||
		    idx >= w->limit)
			continue;
		taken[idx] = 1;
		v->nslots++;
		/* Ours but not known to the manager: left by a delete that
		 * failed, or by the broker before us (a re-adopted lease).
		 * Deleted, then taken anew below (if ours to take): a slot's
		 * tokens come from the revision of its own creation. */
		if (!w->mine[idx] && etcd_i64(kv, "lease") == w->lease &&
		    etcd_del_if_lease(e, k64, w->lease, STEP_MS, &w->cancel) == 0) {
			taken[idx] = 0;
			v->nslots--;
		}
	}
	/* FIFO across hosts: the slots the hosts queued before us want come
	 * first (a key missing from the range, ours, sorts last). */
	for (i = 0; i < nq; i++)
		if (!v->my_cr || q[i].cr < v->my_cr)
			v->earlier += q[i].want;
}

static int on_change(json_t *msg, void *arg)
{
	(void)arg;
	/* Any event (a slot given back, a waiter gone or served) or an
	 * error: look again. */
	return json_array_size(json_object_get(json_object_get(msg, "result"), "events")) ||
	       !json_object_get(msg, "result");
}

/* The range of the semaphore's etcd directory (slots and waiter keys):
 * @from and @to in base64; the directory's length (with its '/'). */
static size_t sem_dir_range(const struct cluster_opts *o, const char *name, size_t len, char *from,
			    char *to)
{
	char dir[660];
	size_t n;

	cluster_rec_key(o, 's', name, len, dir, sizeof(dir));
	n = strlen(dir);
	dir[n++] = '/';
	dir[n] = '\0';
	etcd_b64(dir, n, from);
	dir[n - 1]++;
	etcd_b64(dir, n, to);
	return n;
}

/*
 * Take up to w->want slots, hosts in FIFO order: first our waiter key (its
 * create revision is our place), then, at each look, as many free slots as
 * are left after what the hosts queued before us still want. Each slot is
 * taken by a txn that creates it only if it does not exist and lowers our
 * waiter key's count (deleting it at 0). Returns with the first slots got
 * (the manager grants with them); a waiter key still wanting more stays
 * there, our place kept for the next worker (w->queued).
 */
static void *sem_worker(void *arg)
{
	struct csworker *w = arg;
	char from[1000], to[1000], wk[700], wk64[1000];
	uint8_t *taken = calloc(w->limit, 1);
	struct etcd e;
	int err, ierr;
	size_t n;

	ierr = taken ? etcd_init(&e, w->c->o) : -ENOMEM;
	err = ierr;
	n = sem_dir_range(w->c->o, w->name, w->len, from, to);
	waiter_key(w->c->o, w->name, w->len, w->lease, wk, sizeof(wk));
	etcd_b64(wk, strlen(wk), wk64);
	/* Queue (or update how many we want, keeping our place). */
	if (!err)
		err = etcd_post(&e, "/v3/kv/txn",
				json_pack("{s:[o]}", "success", waiter_op(wk64, w->lease, w->want)),
				NULL, STEP_MS, &w->cancel);
	w->queued = !err;
	while (!err && !atomic_load(&w->cancel)) {
		json_t *rep = NULL;
		struct sem_view v;
		uint32_t i, allow;

		err = etcd_post(&e, "/v3/kv/range",
				json_pack("{s:s, s:s}", "key", from, "range_end", to), &rep,
				STEP_MS, &w->cancel);
		if (err)
			break;
		sem_parse(w, &e, rep, n, taken, &v);
		json_decref(rep);
		if (!v.my_cr && w->got < w->want) {
			/* Our waiter key is gone (deleted by a broker before
			 * us): queue again, at the back. */
			err = etcd_post(&e, "/v3/kv/txn",
					json_pack("{s:[o]}", "success",
						  waiter_op(wk64, w->lease, w->want - w->got)),
					NULL, STEP_MS, &w->cancel);
			continue;
		}
		allow = w->limit > v.nslots + v.earlier ? w->limit - v.nslots - v.earlier : 0;
		for (i = 0; i < w->limit && allow && w->got < w->want && !atomic_load(&w->cancel);
		     i++) {
			char sk[700], k64[1000], lease[24];
			json_t *req;

			if (taken[i])
				continue;
			slot_key(w->c->o, w->name, w->len, i, sk, sizeof(sk));
			etcd_b64(sk, strlen(sk), k64);
			lease_str(w->lease, lease, sizeof(lease));
			req = json_pack("{s:[{s:s, s:s, s:s}], s:[{s:{s:s, s:s, s:s}}, o]}",
					"compare", "key", k64, "target", "CREATE",
					"create_revision", "0", "success", "request_put", "key",
					k64, "value", "", "lease", lease,
					waiter_op(wk64, w->lease, w->want - w->got - 1));
			rep = NULL;
			if (etcd_post(&e, "/v3/kv/txn", req, &rep, STEP_MS, &w->cancel) == 0 &&
			    json_is_true(json_object_get(rep, "succeeded"))) {
				w->idx[w->got++] = i;
				w->rev = etcd_i64(json_object_get(rep, "header"), "revision");
				allow--;
			}
			json_decref(rep);
		}
		w->queued = w->got < w->want;
		if (w->got)
			break;
		/* Nothing for us yet: wait for a change (a slot given back,
		 * or a host before us served or lost), then look again. */
		{
			char rv[24];
			json_t *req;

			snprintf(rv, sizeof(rv), "%" PRId64, v.rev + 1);
			req = json_pack("{s:{s:s, s:s, s:s}}", "create_request", "key", from,
					"range_end", to, "start_revision", rv);
			err = etcd_watch_stream(&e, req, WATCH_MS, &w->cancel, on_change, NULL);
			if (err == -EAGAIN)
				err = 0;
		}
	}
	if (!err && atomic_load(&w->cancel) && !w->got)
		err = -ECANCELED;
	/* Nothing got: leave the queue (our place would hold the hosts
	 * behind us back for as long as our lease lives). A failed delete
	 * leaves w->queued for the manager to retry. */
	if (!ierr && !w->got && w->queued &&
	    etcd_del_if_lease(&e, wk64, w->lease, STEP_MS, NULL) == 0)
		w->queued = false;
	if (!ierr)
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

/* Give back slots @idx[0..n) taken under @lease (lost with the lease anyway
 * if etcd does not answer). Each delete is guarded by that lease: a slot
 * our lease lost (it expired while this broker was stopped) may be another
 * host's now, under the same name, and must stay. */
static void slots_delete(struct cluster *c, struct ckey *ck, int64_t lease, const uint32_t *idx,
			 uint32_t n)
{
	json_t *ops = json_array();
	uint32_t i;

	for (i = 0; ops && i < n; i++) {
		char sk[700], k64[1000];

		slot_key(c->o, ck->name, ck->len, idx[i], sk, sizeof(sk));
		etcd_b64(sk, strlen(sk), k64);
		json_array_append_new(ops, etcd_op_del_if_lease(k64, lease));
	}
	if (ops && n)
		etcd_post(&c->etcd, "/v3/kv/txn", json_pack("{s:o}", "success", ops), NULL, STEP_MS,
			  &c->stop);
	else
		json_decref(ops);
}

/* Leave the queue: no more slots wanted (or none usable). Retried at the
 * next look while it fails: a waiter key left there holds the hosts behind
 * us back for as long as our lease lives. */
static void waiter_leave(struct cluster *c, struct ckey *ck, int64_t lease)
{
	char wk[700], wk64[1000];

	if (!ck->sem_queued)
		return;
	waiter_key(c->o, ck->name, ck->len, lease, wk, sizeof(wk));
	etcd_b64(wk, strlen(wk), wk64);
	if (etcd_del_if_lease(&c->etcd, wk64, lease, STEP_MS, &c->stop) == 0)
		ck->sem_queued = false;
}

/*
 * The batch's question (docs/cluster.md, "The batch for semaphores"): how
 * many slots do other hosts wait for that the free ones do not cover? Their
 * waiter keys' counts (under another lease than @lease) less the slots
 * nobody holds. 0 if none, or if etcd does not answer (then asked again at
 * the next batch end: ck->others is set again).
 */
static uint32_t sem_others_need(struct cluster *c, struct ckey *ck, int64_t lease)
{
	char from[1000], to[1000];
	json_t *rep = NULL, *kv;
	uint64_t want = 0;
	uint32_t taken = 0;
	size_t dlen = sem_dir_range(c->o, ck->name, ck->len, from, to), j;

	if (etcd_post(&c->etcd, "/v3/kv/range",
		      json_pack("{s:s, s:s}", "key", from, "range_end", to), &rep, STEP_MS,
		      &c->stop)) {
		atomic_store(&ck->others, 1);
		return 0;
	}
	json_array_foreach(json_object_get(rep, "kvs"), j, kv)
	{
		char raw[1000], val[64] = "";
		const char *k64 = json_string_value(json_object_get(kv, "key"));
		const char *v64 = json_string_value(json_object_get(kv, "value"));
		ssize_t m = k64 && strlen(k64) < 1300 ? etcd_unb64(k64, raw) : -1;

		if (m <= (ssize_t)dlen + 1)
			continue;
		if (raw[dlen] != 'w' || raw[dlen + 1] != '/') {
			taken += m - (ssize_t)dlen == 8; /* a slot */
			continue;
		}
		if (etcd_i64(kv, "lease") == lease)
			continue; /* ours */
		if (v64 && strlen(v64) < 80) {
			ssize_t vl = etcd_unb64(v64, val);

			val[vl > 0 ? vl : 0] = '\0';
		}
		want += strtoul(val, NULL, 10);
	}
	json_decref(rep);
	if (taken < ck->limit)
		want = want > ck->limit - taken ? want - (ck->limit - taken) : 0;
	return want > ck->limit ? ck->limit : (uint32_t)want;
}

/* A yield under way: the slots of it that no local holder has any more go
 * back now (into @drop); cluster_slots follows. Under the key mutex. */
static void yield_drop_locked(struct seg_key *k, struct ckey *ck, uint32_t *drop, uint32_t *ndrop)
{
	uint32_t can = ck->nslots > k->holders ? ck->nslots - k->holders : 0;

	if (can > ck->yield)
		can = ck->yield;
	while (can--) {
		drop[(*ndrop)++] = ck->slots[--ck->nslots];
		ck->yield--;
	}
	seg_key_cluster_slots(k, ck->nslots - ck->yield);
	if (!ck->nslots)
		seg_key_cluster_hold_back(k, false);
	if (!ck->yield)
		ck->batch_ns = 0; /* done: a new batch from the next look */
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
	/* A yield under way goes on: the hosts it is for queued before us. */
	seg_key_cluster_slots(k, ck->nslots - ck->yield);
	/* Hosts that queued while we waited were seen before: asked once at
	 * the batch end (as for locks, open_gate()). */
	atomic_store(&ck->others, 1);
	seg_key_cluster_open(k, w->lease);
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
	ck->lease = lease;
	ck->sem_queued = false;
	ck->yield = 0;
	ck->batch_ns = 0;
	/* Refused at the key's creation (keyops.c); a key of an earlier run
	 * under a new prefix could still have one. */
	if (ck->limit > CSEM_MAX)
		ck->limit = CSEM_MAX;
	if (sem_worker_start(c, ck, ck->limit, lease))
		return false;
	ck->state = CK_SEM;
	return true;
}

/*
 * A batch is over: if other hosts wait for slots (asked only if the watch
 * saw one queue, ckey.others, or lost its place), give back as many as they
 * need, at most all ours: the holders of those slots hand nothing on at
 * their release (cluster_slots_over()), and the slots go back in etcd; the
 * local waiters queue for slots again, behind the hosts queued before (a
 * new waiter key, a later create revision). Else a new batch.
 */
static void sem_batch_end(struct cluster *c, uint32_t i, struct ckey *ck, int64_t lease)
{
	struct seg_key *k = &c->seg->keys[i];
	uint32_t need = 0, drop[CSEM_MAX], ndrop = 0;

	if (atomic_exchange(&ck->others, 0))
		need = sem_others_need(c, ck, lease);
	if (key_lock_timed(c->seg, k, BROKER_LOCK_MS)) {
		if (need) /* busy: the batch stays over, asked again at the next look */
			atomic_store(&ck->others, 1);
		return;
	}
	if (!key_is_entry(k, ck) || ck->yield || !ck->nslots) {
		key_unlock(k);
		return;
	}
	if (!need) {
		ck->batch_ns = mono_ns(); /* nobody else (that we know of): a new batch */
		ck->batch_l0 = atomic_load(&k->lock_index);
		key_unlock(k);
		return;
	}
	ck->yield = need < ck->nslots ? need : ck->nslots;
	yield_drop_locked(k, ck, drop, &ndrop);
	seg_key_cluster_arm(k); /* the releases ring us */
	key_unlock(k);
	slots_delete(c, ck, ck->lease, drop, ndrop);
	blog(LOG_DEBUG, "cluster: %.*s: batch over, %u slot(s) given back to other hosts",
	     (int)ck->len, ck->name, ck->yield + ndrop);
}

void sem_tick(struct cluster *c, uint32_t i, struct ckey *ck, uint64_t now)
{
	struct segment *seg = c->seg;
	struct seg_key *k = &seg->keys[i];
	struct csworker *w = ck->sw;
	uint32_t drop[CSEM_MAX], ndrop = 0, demand;
	int64_t lease = atomic_load(&c->lease_id);
	bool lost = ck->epoch != atomic_load(&c->epoch) || !lease, publish = false,
	     batch_over = false;
	struct cpub pub;

	if (w && atomic_load(&w->done)) {
		pthread_join(w->thread, NULL);
		ck->sw = NULL;
	} else if (w) {
		if (lost || !peek_waiters_of(k))
			atomic_store(&w->cancel, true);
		w = NULL; /* not yet */
	}
	if (w)
		ck->sem_queued = ck->sem_queued || w->queued;
	if (lost) {
		/* The lease is gone, with our slots (jeopardy ended the holds)
		 * and our waiter key. */
		free(w);
		ck->nslots = 0;
		ck->yield = 0;
		ck->sem_queued = false;
		if (!ck->sw)
			ck->state = CK_IDLE;
		return;
	}
	/* Slots nobody here uses, and the watch saw a host queue (or we do
	 * not know): do other hosts need them? Then they are kept only
	 * --cluster-linger. A hint read without the mutex; asked once per
	 * idle spell, and the mark stays for the batch end. */
	if (!ck->waited && !ck->yield && ck->nslots > peek_waiters_and_holders(k) &&
	    atomic_exchange(&ck->others, 0)) {
		ck->waited = sem_others_need(c, ck, lease) > 0;
		if (ck->waited)
			atomic_store(&ck->others, 1);
	}
	if (key_lock_timed(seg, k, BROKER_LOCK_MS)) {
		if (w) { /* give them back: we could not use them */
			slots_delete(c, ck, w->lease, w->idx, w->got);
			free(w);
		}
		return;
	}
	if (!key_is_entry(k, ck)) {
		key_unlock(k);
		if (w)
			slots_delete(c, ck, w->lease, w->idx, w->got);
		free(w);
		slots_delete(c, ck, ck->lease, ck->slots, ck->nslots);
		ck->nslots = 0;
		ck->yield = 0;
		waiter_leave(c, ck, lease);
		if (!ck->sw && !ck->sem_queued) /* else retried at the next look */
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
	if (ck->yield)
		yield_drop_locked(k, ck, drop, &ndrop);
	demand = k->holders + k->waiters;
	if (demand > ck->limit)
		demand = ck->limit;
	if (!ck->sw && demand > ck->nslots && now >= ck->retry_ns)
		sem_worker_start(c, ck, demand - ck->nslots, lease);
	if (ck->nslots > demand && ck->nslots > k->holders) {
		/* Surplus: cached for --cluster-idle, or --cluster-linger when
		 * another host waits (cluster_keep_ns()); the holders keep
		 * theirs, and no new hold goes beyond what is left. */
		uint64_t l = atomic_load(&k->lock_index), keep;

		if (!ck->idle_ns) {
			ck->idle_ns = now;
			ck->idle_l = l;
		}
		keep = cluster_keep_ns(c, ck->waited);
		if (now - ck->idle_ns >= keep) {
			uint32_t want = demand > k->holders ? demand : k->holders;

			/* Still used meanwhile, with nobody else waiting: one
			 * slot stays (it is taken again at once otherwise). */
			if (!want && l != ck->idle_l && !ck->waited && !c->table_tight)
				want = 1;
			while (ck->nslots > want)
				drop[ndrop++] = ck->slots[--ck->nslots];
			if (ck->yield > ck->nslots) /* given back anyway */
				ck->yield = ck->nslots;
			seg_key_cluster_slots(k, ck->nslots - ck->yield);
			if (!ck->nslots)
				seg_key_cluster_hold_back(k, false);
			ck->idle_ns = 0;
			ck->waited = false;
		} else {
			look_again_at(c, ck->idle_ns + keep);
		}
	} else {
		ck->idle_ns = 0;
		ck->waited = false;
	}
	/* The batch, as for locks (held_tick()): after --cluster-batch grants,
	 * or --cluster-batch-time with at least one, while slots are held and
	 * none are being given back. Every grant counts (handoffs and new
	 * holds, by the same process again too), so a host whose holders hand
	 * their slots on, or take them again within the linger, still yields. */
	if (!ck->nslots || ck->yield) {
		if (!ck->nslots)
			ck->batch_ns = 0;
	} else if (!ck->batch_ns) {
		ck->batch_ns = now;
		ck->batch_l0 = atomic_load(&k->lock_index);
	} else {
		uint64_t grants = atomic_load(&k->lock_index) - ck->batch_l0;
		uint64_t span = (uint64_t)c->o->batch_ms * 1000000ull;

		batch_over = grants >= c->o->batch || (grants && now - ck->batch_ns >= span);
	}
	if (k->holders || k->waiters)
		seg_key_cluster_arm(k);
	if (ck->nslots)
		publish = cvalue_snapshot_locked(c, k, ck, &pub);
	key_unlock(k);
	if (publish)
		cvalue_publish(c, ck, &pub);
	slots_delete(c, ck, ck->lease, drop, ndrop);
	if (batch_over)
		sem_batch_end(c, i, ck, lease);
	/* Queued, and no worker will ask for more: leave the queue. */
	if (!ck->sw && ck->sem_queued && demand <= ck->nslots)
		waiter_leave(c, ck, lease);
	if (!ck->nslots && !ck->sw && !ck->sem_queued) {
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
	char from[1000], to[1000];
	json_t *rep = NULL, *kv, *ops = json_array();
	size_t j;

	sem_dir_range(c->o, ck->name, ck->len, from, to);
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
			json_array_append_new(ops, etcd_op_del_if_lease(k64, lease));
	}
	json_decref(rep);
	if (json_array_size(ops))
		etcd_post(&c->etcd, "/v3/kv/txn", json_pack("{s:o}", "success", ops), NULL, STEP_MS,
			  &c->stop);
	else
		json_decref(ops);
}
