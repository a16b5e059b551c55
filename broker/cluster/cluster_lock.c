// SPDX-License-Identifier: MIT
/*
 * etcd's lock recipe for one cluster key, run by a worker thread (the blocking
 * steps read as etcd's own concurrency package does them):
 *
 *   1. a txn creates DIR/<lease> under the host's lease unless it exists
 *      (then its create revision is kept: a retry does not lose our place);
 *   2. the key with the largest create revision below ours under DIR is our
 *      predecessor; none: the lock is ours (FIFO across hosts by revision);
 *   3. watch the predecessor for its deletion (a release, or its host's lease
 *      expiring), then 2 again. A quiet watch is re-established every few
 *      seconds so that a stopped etcd member cannot hold us for ever.
 *
 * DIR is the namespace + the hex of the key, so no key's directory is a
 * prefix of another's. A cancelled worker deletes its etcd key.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>

#include "core/broker.h"
#include "cluster_int.h"

#define STEP_MS 3000u  /* one request */
#define WATCH_MS 5000u /* one watch, before looking again */

void cluster_dir(const struct cluster_opts *o, const char *name, size_t len, char *out, size_t size)
{
	size_t n = (size_t)snprintf(out, size, "%s", o->ns), i;

	for (i = 0; i < len && n + 3 < size; i++)
		n += (size_t)snprintf(out + n, size - n, "%02x", (unsigned char)name[i]);
	if (n + 1 < size) {
		out[n++] = '/';
		out[n] = '\0';
	}
}

/* [from, to) covering every key under @dir: the last byte bumped ('/' + 1). */
static void range_of(const char *dir, char *from, char *to)
{
	size_t n = strlen(dir);

	etcd_b64(dir, n, from);
	{
		char end[640];

		memcpy(end, dir, n);
		end[n - 1]++;
		etcd_b64(end, n, to);
	}
}

/* Step 1: our key and its create revision (*existed: it was there). */
static int create_own(struct etcd *e, struct cworker *w, int64_t *rev, bool *existed)
{
	char k64[920], lease[24];
	json_t *req, *rep = NULL;
	int err;

	etcd_b64(w->ekey, strlen(w->ekey), k64);
	snprintf(lease, sizeof(lease), "%" PRId64, w->lease);
	req = json_pack("{s:[{s:s, s:s, s:s}], s:[{s:{s:s, s:s, s:s}}], s:[{s:{s:s}}]}", "compare",
			"key", k64, "target", "CREATE", "create_revision", "0", "success",
			"request_put", "key", k64, "value", "", "lease", lease, "failure",
			"request_range", "key", k64);
	err = etcd_post(e, "/v3/kv/txn", req, &rep, STEP_MS, &w->cancel);
	if (err)
		return err;
	*existed = !json_is_true(json_object_get(rep, "succeeded"));
	if (!*existed) {
		*rev = etcd_i64(json_object_get(rep, "header"), "revision");
	} else {
		json_t *r = json_array_get(json_object_get(rep, "responses"), 0);
		json_t *kv = json_array_get(
			json_object_get(json_object_get(r, "response_range"), "kvs"), 0);

		*rev = etcd_i64(kv, "create_revision");
		/* Ours, but under another lease (an old one): not ours to use. */
		if (etcd_i64(kv, "lease") != w->lease)
			*rev = 0;
	}
	json_decref(rep);
	return *rev > 0 ? 0 : -EIO;
}

/* Step 2: the predecessor's key (base64) into @pred, or "" when none;
 * *hdr_rev the revision the answer is as of. */
static int find_pred(struct etcd *e, struct cworker *w, int64_t rev, char *pred, size_t size,
		     int64_t *hdr_rev)
{
	char from[920], to[920], max[24];
	json_t *req, *rep = NULL, *kv;
	int err;

	range_of(w->dir, from, to);
	snprintf(max, sizeof(max), "%" PRId64, rev - 1);
	req = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:b}", "key", from, "range_end", to,
			"max_create_revision", max, "sort_order", "DESCEND", "sort_target",
			"CREATE", "limit", "1", "keys_only", 1);
	err = etcd_post(e, "/v3/kv/range", req, &rep, STEP_MS, &w->cancel);
	if (err)
		return err;
	*hdr_rev = etcd_i64(json_object_get(rep, "header"), "revision");
	kv = json_array_get(json_object_get(rep, "kvs"), 0);
	pred[0] = '\0';
	if (kv && json_is_string(json_object_get(kv, "key")) &&
	    strlen(json_string_value(json_object_get(kv, "key"))) < size)
		strcpy(pred, json_string_value(json_object_get(kv, "key")));
	else if (kv)
		err = -EIO;
	json_decref(rep);
	return err;
}

static void delete_own(struct etcd *e, struct cworker *w)
{
	char k64[920];

	etcd_b64(w->ekey, strlen(w->ekey), k64);
	etcd_del_if_lease(e, k64, w->lease, STEP_MS, NULL);
}

/* Acquired: did the host before us leave a lock-delay behind (lost while
 * a holder held the key; cluster_values.c)? Not found or unreadable: none. */
static void owed_delay(struct etcd *e, struct cworker *w, const char *name, size_t len)
{
	char dkey[700], k64[1000], raw[64], mod[24];
	const char *v64;
	json_t *rep = NULL, *kv;
	long long lease;
	unsigned ms;
	ssize_t n;

	cluster_rec_key(w->c->o, 'd', name, len, dkey, sizeof(dkey));
	etcd_b64(dkey, strlen(dkey), k64);
	/* Serializable (the member's own copy, no consensus round: the
	 * linearizable read cost 5 ms of every cross-host handoff). The member
	 * is the one that just answered our linearizable range (find_pred),
	 * so it has applied everything up to our acquisition, and a lost
	 * host's record was written before that (before its lease expired). */
	if (etcd_post(e, "/v3/kv/range", json_pack("{s:s, s:b}", "key", k64, "serializable", 1),
		      &rep, STEP_MS, &w->cancel))
		return;
	kv = json_array_get(json_object_get(rep, "kvs"), 0);
	v64 = json_string_value(json_object_get(kv, "value"));
	if (v64 && strlen(v64) < 80 && (n = etcd_unb64(v64, raw)) > 0) {
		raw[n] = '\0';
		if (sscanf(raw, "%lld %u", &lease, &ms) == 2 && lease != w->lease)
			w->delay_ms = ms <= LOCAL_LOCK_DELAY_MAX_MS ? ms : LOCAL_LOCK_DELAY_MAX_MS;
		/* Honoured here: not owed again by the hosts after us. Only
		 * the record read: one written since is another's debt. */
		snprintf(mod, sizeof(mod), "%" PRId64, etcd_i64(kv, "mod_revision"));
		etcd_post(e, "/v3/kv/txn",
			  json_pack("{s:[{s:s, s:s, s:s, s:s}], s:[{s:{s:s}}]}", "compare", "key",
				    k64, "target", "MOD", "result", "EQUAL", "mod_revision", mod,
				    "success", "request_delete_range", "key", k64),
			  NULL, STEP_MS, &w->cancel);
	}
	json_decref(rep);
}

static void *worker(void *arg)
{
	struct cworker *w = arg;
	struct etcd e;
	char pred[920];
	int64_t rev = 0, hdr;
	bool existed = false;
	int err;

	err = etcd_init(&e, w->c->o);
	while (!err) {
		err = create_own(&e, w, &rev, &existed);
		if (err)
			break;
		if (w->adopt && !existed) {
			err = -ESTALE; /* our place was lost: not ours to adopt */
			break;
		}
		if (!w->adopt && existed) {
			/* Left by a delete that failed: start afresh, so that every
			 * acquisition has a revision of its own, and tokens (made
			 * from it) are never drawn twice whatever the segment kept. */
			delete_own(&e, w);
			err = create_own(&e, w, &rev, &existed);
			if (!err && existed)
				err = -EIO;
			if (err)
				break;
		}
		for (;;) {
			err = find_pred(&e, w, rev, pred, sizeof(pred), &hdr);
			if (err || !pred[0])
				break;
			if (w->adopt) {
				err = -EBUSY; /* someone before us: we did not hold it */
				break;
			}
			err = etcd_watch_delete(&e, pred, hdr + 1, WATCH_MS, &w->cancel);
			if (err && err != -EAGAIN)
				break;
			err = 0;
		}
		break;
	}
	if (!err && !w->adopt)
		owed_delay(&e, w, w->name, w->len);
	if (err && rev && e.h)
		delete_own(&e, w); /* best effort; the lease ends it otherwise */
	etcd_fini(&e);
	w->rev = rev;
	w->err = err;
	atomic_store(&w->done, true);
	cluster_ring(w->c->seg->hdr); /* tell the manager */
	return NULL;
}

int cworker_start(struct cluster *c, struct cworker *w, const char *name, size_t len, int64_t lease,
		  uint64_t epoch, bool adopt)
{
	int err;

	memset(w, 0, sizeof(*w));
	w->c = c;
	w->adopt = adopt;
	w->lease = lease;
	w->epoch = epoch;
	w->len = len < sizeof(w->name) ? len : sizeof(w->name) - 1;
	memcpy(w->name, name, w->len);
	cluster_dir(c->o, name, len, w->dir, sizeof(w->dir));
	snprintf(w->ekey, sizeof(w->ekey), "%s%016" PRIx64, w->dir, (uint64_t)lease);
	err = pthread_create(&w->thread, NULL, worker, w);
	return -err;
}

void cworker_join(struct cworker *w)
{
	pthread_join(w->thread, NULL);
}
