// SPDX-License-Identifier: MIT
/*
 * Cluster keys on etcd: the broker's side (docs/cluster.md).
 *
 * Threads, not the event loop: every etcd step is a blocking HTTP request
 * (libcurl easy handles), and the lock recipe waits on watches that last
 * seconds. The loop stays as it is (its per-turn budget on lock words holds),
 * and the recipe reads step by step like etcd's own. Three kinds of thread:
 *
 * - the lease thread keeps the host's lease alive and enforces the local
 *   deadline: when it cannot renew in time it closes every cluster key's gate
 *   and ends the local holds (jeopardy), then takes a new lease;
 * - the manager sleeps on the segment's cluster bell (rung by clients when a
 *   gated key gains a waiter, or a cluster key is released without a
 *   handoff, and by workers) and every TICK_MS, and decides per key: start
 *   the recipe, open the gate, yield after a batch, give the lock up;
 * - a worker per key being acquired runs the recipe (cluster_lock.c).
 *
 * They meet only under the key mutexes and through atomics: the lease thread
 * clears lease_id before it sweeps the gates, and the manager opens a gate
 * only under the key mutex after checking lease_id and the epoch, so a gate
 * is never left open by a lease that is gone.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>

#include "core/broker.h"
#include "clock.h"
#include "cluster_int.h"
#include "futex.h"
#include "lockword.h"

#define TICK_MS 50u	      /* the manager looks at held keys at least this often */
#define SOON_MS 5u	      /* a key whose mutex was busy: looked at again */
#define FULL_MS 1000u	      /* ... and at every key entry */
#define RETRY_MS 200u	      /* after a failed recipe */
#define RELEASE_MS 3000u      /* deleting our etcd key */
#define GRANT_MS 2000u	      /* a lease grant attempt */
#define REGRANT_MS 500u	      /* between lease grant attempts */
#define RENEW_RETRY_MS 250u   /* after a failed renewal */
#define REVOKE_MS 1000u	      /* a revoke attempt of a lease we gave up */
#define REVOKE_RETRY_MS 250u  /* ... and between attempts */
#define OLD_LEASES 4u	      /* leases given up, revoked until etcd answers */
#define PAUSE_MS 500u	      /* the manager woke this much later than it meant to: paused */
#define UNCLOSED_LOG_MS 1000u /* a key that could not be closed: logged after 1 s, 2 s, 4 s ... */
#define UNCLOSED_LOG_MAX_MS 60000u
#define SEQ_SPAN (1ull << CLUSTER_SEQ_BITS)

/* A count read without the key mutex, as a hint (re-checked under it). */
static uint32_t peek_waiters(const struct seg_key *k)
{
	return __atomic_load_n(&k->waiters, __ATOMIC_RELAXED);
}

static bool key_is(const struct seg_key *k, const struct ckey *ck)
{
	return atomic_load(&k->state) == KEY_USED && k->key_len == ck->len &&
	       !memcmp(k->key, ck->name, ck->len);
}

/* End every local hold of @k (gate closed first): the holders are told as at
 * a lease expiry (their next call says LOCAL_ECLUSTER; watchers, such as
 * `shmlock lock`'s monitor, are woken by the change). */
static uint32_t end_holds_locked(struct segment *seg, struct seg_key *k)
{
	uint32_t idx = seg_key_index(seg, k), n = 0, h;

	while ((h = k->h_head) != IDX_NONE && h < seg->caps.max_holds && n < seg->nnodes) {
		uint64_t w = atomic_load(&seg->nodes[h].word);

		record_expiry(seg, NODE_SESSION(w), idx, seg->nodes[h].token, SESS_EXPIRED_CLUSTER);
		key_release_hold_locked(seg, k, h, REL_VOLUNTARY); /* gated: no handoff */
		n++;
	}
	return n;
}

/* Shut @k (its cluster lock is lost, or never was ours): no grant, and
 * every local hold ended. The count of holds ended. */
static uint32_t key_close_locked(struct segment *seg, struct seg_key *k)
{
	seg_key_cluster_shut(k);
	return end_holds_locked(seg, k);
}

/* ---- the lease thread ------------------------------------------------------ */

static void wait_until(struct cluster *c, uint64_t at_ns)
{
	struct timespec ts = { (time_t)(at_ns / 1000000000ull), (long)(at_ns % 1000000000ull) };

	pthread_mutex_lock(&c->mu);
	if (!atomic_load(&c->stop))
		pthread_cond_timedwait(&c->stop_cv, &c->mu, &ts);
	pthread_mutex_unlock(&c->mu);
}

/* Close every cluster key's gate and end its local holds: the lease can no
 * longer be shown to be alive. lease_id is cleared first (see the top). */
static void jeopardy(struct cluster *c, const char *why)
{
	struct segment *seg = c->seg;
	uint32_t i, ended = 0, left = 0;

	atomic_store(&c->lease_id, 0);
	atomic_fetch_add(&c->epoch, 1); /* what was taken under it is gone */
	/* No grant from here on, even by a client alone (cluster_gated()). */
	seg_cluster_set_deadline(seg->hdr, SEG_CLUSTER_DEADLINE_PAST);
	seg_cluster_set_lease(seg->hdr, 0);
	for (i = 0; i < seg->caps.max_keys; i++) {
		struct seg_key *k = &seg->keys[i];

		if (atomic_load(&k->state) != KEY_USED || !(atomic_load(&k->cluster) & CL_KEY))
			continue;
		/* A client stopped inside the key's critical section cannot
		 * grant meanwhile, nor after: the key was opened under the
		 * lease that ends here (seg_key.cluster_lease), which no later
		 * lease matches. The manager closes it once its mutex frees
		 * (close_stale()); one try here, so that a few busy keys do not
		 * hold the next lease back. */
		if (key_lock_timed(seg, k, BROKER_LOCK_MS)) {
			left++;
			continue;
		}
		if (atomic_load(&k->state) == KEY_USED)
			ended += key_close_locked(seg, k);
		key_unlock(k);
	}
	atomic_store(&c->lease_seen_ns, mono_ns()); /* known: gone */
	blog(LOG_WARNING, "cluster: %s: %u local hold(s) of cluster keys ended%s", why, ended,
	     left ? " (some keys busy: see below)" : "");
	if (left)
		blog(LOG_ERR,
		     "cluster: %u cluster key(s) could not be closed (mutex held): shut by their "
		     "lease, closed as soon as their mutex frees",
		     left);
	cluster_ring(seg->hdr);
}

/* The local deadline, for the lease thread and in the segment: there the
 * clients check it themselves (cluster_gated(), local_held(), local_watch()),
 * so it holds even when this broker is stopped or dead. */
static void set_deadline(struct cluster *c, uint64_t at)
{
	atomic_store(&c->deadline_ns, at);
	seg_cluster_set_deadline(c->seg->hdr, at);
}

static int64_t lease_grant(struct cluster *c, struct etcd *e, int64_t *ttl)
{
	json_t *rep = NULL;
	int64_t id = 0;

	if (etcd_post(e, "/v3/lease/grant",
		      json_pack("{s:I}", "TTL", (json_int_t)c->o->lease_ttl_s), &rep, GRANT_MS,
		      &c->stop) == 0) {
		id = etcd_i64(rep, "ID");
		*ttl = etcd_i64(rep, "TTL");
	}
	json_decref(rep);
	return *ttl > 0 ? id : 0;
}

/* 0 renewed (*ttl set), -ENOENT the lease is gone at etcd, or an error. */
static int lease_renew(struct etcd *e, int64_t id, uint32_t timeout_ms, _Atomic bool *stop,
		       int64_t *ttl)
{
	char s[24];
	json_t *rep = NULL;
	int err;

	snprintf(s, sizeof(s), "%" PRId64, id);
	err = etcd_post(e, "/v3/lease/keepalive", json_pack("{s:s}", "ID", s), &rep, timeout_ms,
			stop);
	if (!err) {
		*ttl = etcd_i64(json_object_get(rep, "result"), "TTL");
		if (*ttl <= 0)
			err = -ENOENT;
	}
	json_decref(rep);
	return err;
}

/* 0 revoked, or gone at etcd already (an error answer: not found); else no
 * answer in time. */
static int lease_revoke(struct etcd *e, int64_t id, _Atomic bool *stop)
{
	char s[24];
	int err;

	snprintf(s, sizeof(s), "%" PRId64, id);
	err = etcd_post(e, "/v3/lease/revoke", json_pack("{s:s}", "ID", s), NULL, REVOKE_MS, stop);
	return err == -EIO ? 0 : err;
}

/*
 * The leases we gave up (jeopardy) are revoked, so that their etcd keys, the
 * cluster locks the other hosts wait for, go at once: tried again until etcd
 * answers, however long it is away (a restarted etcd extends every lease by
 * a TTL, so waiting for the old one to expire costs the other hosts that
 * much). Returns when the next attempt is due (0: none left).
 */
static uint64_t revoke_old(struct cluster *c, struct etcd *e, int64_t *old, uint64_t *due)
{
	uint64_t now = mono_ns(), next = 0;
	uint32_t j;

	for (j = 0; j < OLD_LEASES; j++) {
		if (!old[j])
			continue;
		if (now >= due[j]) {
			if (lease_revoke(e, old[j], &c->stop) == 0) {
				blog(LOG_INFO, "cluster: lease %016" PRIx64 " revoked",
				     (uint64_t)old[j]);
				old[j] = 0;
				continue;
			}
			now = mono_ns();
			due[j] = now + REVOKE_RETRY_MS * 1000000ull;
		}
		if (!next || due[j] < next)
			next = due[j];
	}
	return next;
}

static void give_up_lease(int64_t *old, uint64_t *due, int64_t id)
{
	uint32_t j, at = 0;

	for (j = 0; j < OLD_LEASES; j++)
		if (!old[j] || due[j] < due[at])
			at = j; /* a free place, else the longest tried */
	for (j = 0; j < OLD_LEASES; j++)
		if (!old[j]) {
			at = j;
			break;
		}
	if (old[at])
		blog(LOG_WARNING, "cluster: lease %016" PRIx64 " no longer revoked (too many)",
		     (uint64_t)old[at]);
	old[at] = id;
	due[at] = 0;
}

static void *lease_thread(void *arg)
{
	struct cluster *c = arg;
	uint64_t renew_ns = (uint64_t)c->o->lease_ttl_s * 1000000000ull / 3, next = 0;
	uint64_t old_due[OLD_LEASES] = { 0 };
	int64_t id = c->adopt_id, old[OLD_LEASES] = { 0 }, ttl = 0;
	bool adopting = id != 0;
	struct etcd e;

	if (etcd_init(&e, c->o))
		return NULL;
	while (!atomic_load(&c->stop)) {
		uint64_t now = mono_ns(), deadline = atomic_load(&c->deadline_ns), sent, wake;
		uint64_t revoke_at = revoke_old(c, &e, old, old_due);
		int err;

		if (!id) {
			sent = mono_ns();
			ttl = 0;
			id = lease_grant(c, &e, &ttl);
			if (!id) {
				wake = mono_ns() + REGRANT_MS * 1000000ull;
				wait_until(c, revoke_at && revoke_at < wake ? revoke_at : wake);
				continue;
			}
			/* The segment first: a key the manager opens under
			 * lease_id must find it there (cluster_gated()). */
			seg_cluster_set_lease(c->seg->hdr, id);
			set_deadline(c, sent + (uint64_t)ttl * 1000000000ull -
						(uint64_t)c->margin_ms * 1000000ull);
			atomic_fetch_add(&c->epoch, 1);
			atomic_store(&c->lease_id, id);
			atomic_store(&c->lease_seen_ns, sent);
			blog(LOG_INFO, "cluster: lease %016" PRIx64 " granted (TTL %" PRId64 " s)",
			     (uint64_t)id, ttl);
			next = sent + renew_ns;
			cluster_ring(c->seg->hdr);
			continue;
		}
		if (now >= deadline) {
			adopting = false;
			jeopardy(c, "lease not renewed in time");
			give_up_lease(old, old_due, id);
			id = 0;
			continue;
		}
		/* The manager woke from a pause: the lease first (see manager()). */
		if (atomic_load(&c->lease_check_ns) > atomic_load(&c->lease_seen_ns))
			next = now;
		if (now < next) {
			wake = next < deadline ? next : deadline;
			wait_until(c, revoke_at && revoke_at < wake ? revoke_at : wake);
			continue;
		}
		/* The lease lasts at least TTL from when etcd received this,
		 * which is after we sent it: the deadline counts from here. */
		sent = mono_ns();
		err = lease_renew(&e, id, (uint32_t)((deadline - sent) / 1000000ull) + 1, &c->stop,
				  &ttl);
		if (!err) {
			set_deadline(c, sent + (uint64_t)ttl * 1000000000ull -
						(uint64_t)c->margin_ms * 1000000ull);
			next = sent + renew_ns;
			if (adopting) {
				/* The lease of the broker before us lives: ours. */
				adopting = false;
				atomic_fetch_add(&c->epoch, 1);
				atomic_store(&c->lease_id, id);
				blog(LOG_INFO, "cluster: lease %016" PRIx64 " re-adopted",
				     (uint64_t)id);
				cluster_ring(c->seg->hdr);
			}
			atomic_store(&c->lease_seen_ns, sent);
		} else if (err == -ENOENT) {
			adopting = false;
			jeopardy(c, "lease gone at etcd");
			id = 0;
		} else {
			next = mono_ns() + RENEW_RETRY_MS * 1000000ull;
		}
	}
	if (id) {
		/* A clean stop: the local holds end first, then the lease. */
		jeopardy(c, "stopping");
		lease_revoke(&e, id, NULL);
	}
	etcd_fini(&e);
	return NULL;
}

/* ---- the manager ---------------------------------------------------------- */

/* Give up @ck's cluster lock: delete our etcd key. If etcd does not answer,
 * the key stays CK_REL and the delete is tried again at every tick (a key
 * left there would block every other host for as long as our lease lives);
 * local waiters meanwhile wait for it to be gone, then queue anew. */
static void release_etcd(struct cluster *c, struct ckey *ck)
{
	/* With our records (cluster_values.c): a clean release owes no
	 * lock-delay and shows no holder here. */
	if (cvalue_release(c, ck) == 0)
		ck->state = CK_IDLE;
	else
		ck->state = CK_REL;
}

/* The worker got the lock: open the gate, with this acquisition's tokens. */
static int open_gate(struct cluster *c, uint32_t i, struct ckey *ck)
{
	struct segment *seg = c->seg;
	struct seg_key *k = &seg->keys[i];
	uint32_t wake[64], n, j;
	uint64_t base, start, l;
	int r = key_lock_timed(seg, k, BROKER_LOCK_MS);

	if (r)
		return r == -ETIMEDOUT ? -EAGAIN : r;
	if (!key_is(k, ck) || !k->waiters || atomic_load(&c->lease_id) != ck->w->lease ||
	    atomic_load(&seg->hdr->cluster_lease_id) != ck->w->lease ||
	    atomic_load(&c->epoch) != ck->epoch || mono_ns() >= atomic_load(&c->deadline_ns)) {
		key_unlock(k);
		return -ENOENT;
	}
	/* Tokens: CLUSTER_TOKEN_BASE + rev * 2^24 + local sequence (keyops.h).
	 * lock_index is exact under the mutex (key_lock() counted the
	 * lock-free grants), so the next grant gets start + 1. Every acquisition
	 * has a revision of its own (cluster_lock.c re-creates a key a failed
	 * delete left); going on from the last token drawn is a second guard. */
	base = CLUSTER_TOKEN_BASE + ((uint64_t)ck->w->rev << CLUSTER_SEQ_BITS);
	start = __atomic_load_n(&k->tok_last, __ATOMIC_RELAXED);
	if (start < base || start >= base + SEQ_SPAN - 1)
		start = base;
	l = atomic_load(&k->lock_index);
	__atomic_store_n(&k->tok_off, start - l, __ATOMIC_RELAXED);
	__atomic_store_n(&k->tok_hi, base + SEQ_SPAN - 1, __ATOMIC_RELAXED);
	__atomic_store_n(&k->tok_last, start, __ATOMIC_RELAXED);
	__atomic_store_n(&k->token, start, __ATOMIC_RELAXED);
	/* The host before us was lost holding the key: its holder's
	 * lock-delay, from now (cluster_values.c). */
	if (ck->w->delay_ms) {
		uint64_t until = mono_ns() + (uint64_t)ck->w->delay_ms * 1000000ull;

		if (until > k->delay_until_ns)
			k->delay_until_ns = until;
		blog(LOG_INFO, "cluster: %.*s: lock-delay %u ms of a lost host", (int)ck->len,
		     ck->name, ck->w->delay_ms);
	}
	/* Nothing of ours is in etcd: the release before deleted it. */
	ck->pub_valid = true;
	ck->pub_tok = 0;
	ck->seen_tok = UINT64_MAX;
	/* Whether hosts queued behind us while we waited is not known here
	 * (their puts may have been seen before this): asked once. */
	atomic_store(&ck->others, 1);
	seg_key_cluster_open(k, ck->w->lease);
	ck->batch_ns = mono_ns();
	ck->batch_l0 = l;
	ck->yielding = false;
	ck->idle_ns = 0;
	ck->waited = false;
	do {
		n = key_grant_pending_locked(seg, k, wake, 64);
		for (j = 0; j < n; j++)
			waiter_wake(seg, wake[j]);
	} while (n == 64);
	key_unlock(k);
	return 0;
}

enum { OTHERS_NONE, OTHERS_WAIT, OTHERS_LOST };

/*
 * Do other hosts wait for @ck's cluster lock (OTHERS_WAIT)? One range of
 * the key's lock directory, oldest first: while we hold the lock our etcd
 * key is the first, and any other is a host queued behind us. If ours is not
 * the first (OTHERS_LOST), our place is gone (a key deleted by hand): as a
 * cached key may be kept a long time, that is checked here too.
 */
static int others_wait(struct cluster *c, struct ckey *ck)
{
	char dir[640], from[920], to[920], mine[920];
	const char *first;
	json_t *rep = NULL;
	int r = OTHERS_NONE;
	size_t n;

	cluster_dir(c->o, ck->name, ck->len, dir, sizeof(dir));
	n = strlen(dir);
	etcd_b64(dir, n, from);
	dir[n - 1]++;
	etcd_b64(dir, n, to);
	etcd_b64(ck->ekey, strlen(ck->ekey), mine);
	if (etcd_post(&c->etcd, "/v3/kv/range",
		      json_pack("{s:s, s:s, s:s, s:s, s:s, s:b}", "key", from, "range_end", to,
				"sort_order", "ASCEND", "sort_target", "CREATE", "limit", "1",
				"keys_only", 1),
		      &rep, RELEASE_MS, &c->stop) == 0) {
		first = json_string_value(
			json_object_get(json_array_get(json_object_get(rep, "kvs"), 0), "key"));
		if (!first || strcmp(first, mine))
			r = OTHERS_LOST;
		else if (etcd_i64(rep, "count") > 1)
			r = OTHERS_WAIT;
	} else {
		atomic_store(&ck->others, 1); /* not known: ask again next time */
	}
	json_decref(rep);
	return r;
}

/* Under @k's mutex: our etcd key is no longer the first of its directory
 * (others_wait()), so another host may hold the lock: shut the key, its
 * holds ended as at a lease loss; the caller gives it up (our records go
 * only if our key is there, guarded) and local waiters queue anew. */
static void place_lost_locked(struct cluster *c, struct seg_key *k, struct ckey *ck)
{
	uint32_t ended = key_close_locked(c->seg, k);

	blog(LOG_ERR,
	     "cluster: %.*s: our lock key is no longer first in etcd (deleted by "
	     "hand?): closed, %u hold(s) ended",
	     (int)ck->len, ck->name, ended);
}

static void held_tick(struct cluster *c, uint32_t i, struct ckey *ck, uint64_t now)
{
	struct segment *seg = c->seg;
	struct seg_key *k = &seg->keys[i];
	bool give_up = false, batch_over = false, publish = false, asked = false, lost = false;
	struct cpub pub;
	int r;

	if (ck->epoch != atomic_load(&c->epoch) || !atomic_load(&c->lease_id)) {
		ck->state = CK_IDLE; /* the lease is gone: so is our etcd key */
		return;
	}
	/* Idle, and the watch saw a host queue (or we do not know): ask, and
	 * if one waits keep the key only --cluster-linger, not --cluster-idle.
	 * Known for this idle spell: not asked again. */
	if (!ck->yielding && !ck->waited && peek_waiters_idle(k) &&
	    atomic_exchange(&ck->others, 0)) {
		asked = true;
		r = others_wait(c, ck);
		lost = r == OTHERS_LOST;
		ck->waited = r == OTHERS_WAIT;
		/* Taken again meanwhile (the key is only seen idle here, not
		 * under the mutex): the batch end must still know. */
		if (ck->waited)
			atomic_store(&ck->others, 1);
	}
	if (key_lock_timed(seg, k, BROKER_LOCK_MS))
		return; /* busy (or quarantined): next tick */
	if (!key_is(k, ck)) {
		give_up = true; /* reclaimed: cannot happen while open, but be sure */
	} else if (lost) {
		place_lost_locked(c, k, ck);
		give_up = true;
	} else if (k->holders == 0 && !k->waiters && !ck->yielding) {
		/* Idle: cached (docs/cluster.md, "Holding"). Used since the
		 * last look, its idle spell starts again, and whether another
		 * host waits is asked again (the mark stays set while one
		 * does). */
		uint64_t l = atomic_load(&k->lock_index), keep;

		if (!ck->idle_ns || l != ck->idle_l) {
			ck->idle_ns = now;
			ck->idle_l = l;
			if (!asked)
				ck->waited = false;
		}
		keep = cluster_keep_ns(c, ck->waited);
		if (now - ck->idle_ns >= keep) {
			seg_key_cluster_hold_back(k, false);
			give_up = true;
		} else {
			look_again_at(c, ck->idle_ns + keep);
		}
	} else if (k->holders == 0 && (ck->yielding || cluster_gated(seg, k))) {
		/* Yielded and now free, or its token range spent. */
		seg_key_cluster_hold_back(k, false);
		give_up = true;
	} else if (!ck->yielding) {
		ck->idle_ns = 0;
		ck->waited = false;
		/* A batch is over after --cluster-batch grants or
		 * --cluster-batch-time with at least one grant: also when the
		 * same process takes the key again and again, so that the
		 * queue is never seen empty. A long hold alone is no reason to
		 * ask etcd: it ends with a release, which rings us. */
		uint64_t grants = atomic_load(&k->lock_index) - ck->batch_l0;

		batch_over =
			grants >= c->o->batch || grants >= SEQ_SPAN / 2 ||
			(grants && now - ck->batch_ns >= (uint64_t)c->o->batch_ms * 1000000ull);
	}
	/* In use (or yielding): ring us at the next release without handoff.
	 * Idle: the next look (a tick, or --cluster-linger) sees it anyway. */
	if (!give_up && key_is(k, ck) && (k->holders || k->waiters || ck->yielding))
		seg_key_cluster_arm(k);
	/* A lock-delay (of a lost host) over: grant the queue. */
	if (!give_up && key_is(k, ck) && !k->holders && k->waiters && k->delay_until_ns &&
	    now >= k->delay_until_ns && (atomic_load(&k->cluster) & CL_OPEN)) {
		uint32_t wake[64], n, j;

		n = key_grant_pending_locked(seg, k, wake, 64);
		for (j = 0; j < n; j++)
			waiter_wake(seg, wake[j]);
	} else if (!give_up && key_is(k, ck) && k->delay_until_ns > now) {
		look_again_at(c, k->delay_until_ns); /* the queue is granted then */
	}
	/* Holder or value changed: shown to the other hosts. */
	if (!give_up && key_is(k, ck))
		publish = cvalue_snapshot_locked(c, k, ck, &pub);
	key_unlock(k);
	if (publish)
		cvalue_publish(c, ck, &pub);
	if (give_up) {
		release_etcd(c, ck);
		return;
	}
	if (!batch_over)
		return;
	/* Asked only if the watch saw a host queue (or lost its place);
	 * cleared first, so that a queue seen meanwhile sets it again. */
	r = atomic_exchange(&ck->others, 0) ? others_wait(c, ck) : OTHERS_NONE;
	if (r == OTHERS_NONE) {
		ck->batch_ns = mono_ns(); /* nobody else: a new batch */
		ck->batch_l0 = atomic_load(&k->lock_index);
		return;
	}
	/* Stop granting; the holder's release rings us and we give it up. */
	if (key_lock_timed(seg, k, BROKER_LOCK_MS)) {
		atomic_store(&ck->others, 1); /* busy: asked again at the next look */
		return;
	}
	if (key_is(k, ck) && r == OTHERS_LOST) {
		place_lost_locked(c, k, ck);
		key_unlock(k);
		release_etcd(c, ck);
		return;
	}
	if (key_is(k, ck)) {
		seg_key_cluster_hold_back(k, true);
		ck->yielding = true;
		if (!k->holders) {
			key_unlock(k);
			release_etcd(c, ck);
			return;
		}
	}
	key_unlock(k);
}

static void acq_tick(struct cluster *c, uint32_t i, struct ckey *ck)
{
	struct cworker *w = ck->w;
	int err;

	if (!atomic_load(&w->done)) {
		/* Nobody waits any more, or the lease changed: stop asking. */
		if (ck->epoch != atomic_load(&c->epoch) || !atomic_load(&c->lease_id) ||
		    !peek_waiters(&c->seg->keys[i]))
			atomic_store(&w->cancel, true);
		return;
	}
	if (!w->err) {
		err = open_gate(c, i, ck);
		if (err == -EAGAIN)
			return; /* key busy: next tick */
		strcpy(ck->ekey, w->ekey);
		ck->lease = w->lease;
		if (!err) {
			ck->rev = w->rev;
			ck->state = CK_HELD;
		} else {
			release_etcd(c, ck); /* nobody to give it to */
		}
	} else {
		ck->state = CK_IDLE;
		if (w->err != -ECANCELED) {
			blog(LOG_INFO, "cluster: taking %.*s: %s; retrying", (int)ck->len, ck->name,
			     strerror(-w->err));
			ck->retry_ns = mono_ns() + RETRY_MS * 1000000ull;
		}
	}
	cworker_join(w);
	free(w);
	ck->w = NULL;
}

/* A key the broker before us held open: once the lease is re-adopted, check
 * in etcd that our key is there and first (a worker in adopt mode); then it
 * is ours as if taken now. If not, its holds end and the key queues anew.
 * Until then the gate stays as it was: the published deadline, which only a
 * renewal of that same lease extends, still bounds every grant. */
static void adopt_tick(struct cluster *c, uint32_t i, struct ckey *ck)
{
	struct segment *seg = c->seg;
	struct seg_key *k = &seg->keys[i];
	struct cworker *w = ck->w;

	if (!w) {
		if (atomic_load(&c->epoch) == 0)
			return; /* the lease thread has not answered yet */
		if (atomic_load(&c->epoch) != ck->epoch ||
		    atomic_load(&c->lease_id) != c->adopt_id) {
			ck->state = CK_IDLE; /* not re-adopted: jeopardy ended the holds */
			return;
		}
		w = calloc(1, sizeof(*w));
		if (!w || cworker_start(c, w, ck->name, ck->len, c->adopt_id, ck->epoch, true)) {
			free(w);
			return; /* next tick */
		}
		ck->w = w;
		return;
	}
	if (!atomic_load(&w->done))
		return;
	strcpy(ck->ekey, w->ekey);
	ck->lease = w->lease;
	ck->rev = w->rev;
	if (!w->err) {
		ck->state = CK_HELD;
		ck->pub_valid = false;
		ck->batch_ns = mono_ns();
		ck->batch_l0 = atomic_load(&k->lock_index);
		ck->yielding = false;
		ck->idle_ns = 0;
		ck->waited = false;
		blog(LOG_INFO, "cluster: %.*s re-adopted", (int)ck->len, ck->name);
	} else {
		bool sem = false;

		blog(LOG_WARNING, "cluster: %.*s not re-adopted (%s): its holds end", (int)ck->len,
		     ck->name, strerror(-w->err));
		if (key_lock_timed(seg, k, BROKER_LOCK_MS) == 0) {
			if (key_is(k, ck)) {
				key_close_locked(seg, k);
				sem = k->kind == LOCAL_KIND_SEMAPHORE;
			}
			key_unlock(k);
		} else {
			return; /* busy: next tick (the worker stays done) */
		}
		/* A semaphore's slots are not re-adopted: given back. */
		if (sem)
			sem_drop_own(c, ck, c->adopt_id);
		if (w->err != -ESTALE && w->rev)
			release_etcd(c, ck);
		else
			ck->state = CK_IDLE;
	}
	cworker_join(w);
	free(w);
	ck->w = NULL;
}

/*
 * Key entry @i was opened under @lease, which is not the host's lease now:
 * it ended while a client held the key's mutex (a stopped or descheduled
 * client), or the broker before us left it. Nothing is granted under it
 * meanwhile (cluster_gated() compares the leases); shut it (its holds end)
 * as soon as its mutex frees, tried at every look, and say so until then,
 * less and less often. False while it stays open.
 */
/* A key's name length, bounded (the segment is untrusted). */
static uint32_t key_name_len(const struct seg_key *k)
{
	return k->key_len <= LOCAL_KEY_MAX ? k->key_len : 0;
}

static bool close_stale(struct cluster *c, uint32_t i, struct ckey *ck, int64_t lease, uint64_t now)
{
	struct segment *seg = c->seg;
	struct seg_key *k = &seg->keys[i];
	uint32_t ended = 0;
	bool was_open;

	if (!ck->unclosed_ns) {
		ck->unclosed_ns = now;
		ck->unclosed_log_ns = now + UNCLOSED_LOG_MS * 1000000ull;
	}
	if (key_lock_timed(seg, k, BROKER_LOCK_MS)) {
		now = mono_ns();
		if (now >= ck->unclosed_log_ns) {
			uint64_t gap = (ck->unclosed_log_ns - ck->unclosed_ns) * 2;

			if (gap > UNCLOSED_LOG_MAX_MS * 1000000ull)
				gap = UNCLOSED_LOG_MAX_MS * 1000000ull;
			/* The name read without the mutex: bounded, a hint. */
			blog(LOG_ERR,
			     "cluster: %.*s (key entry %u, lease %016" PRIx64 " ended) still open "
			     "after %" PRIu64 " ms: its mutex is held; nothing is granted until it "
			     "is closed",
			     (int)key_name_len(k), k->key, i, (uint64_t)lease,
			     (uint64_t)((now - ck->unclosed_ns) / 1000000ull));
			ck->unclosed_log_ns = now + gap;
		}
		look_again_at(c, now + SOON_MS * 1000000ull);
		return false;
	}
	was_open = atomic_load(&k->cluster) & CL_OPEN;
	if (atomic_load(&k->state) == KEY_USED && atomic_load(&k->cluster_lease) == lease) {
		ended = key_close_locked(seg, k);
		/* Only what jeopardy could not close: a key given up before
		 * its lease ended is shut already, and has nothing to tell. */
		if (was_open || ended)
			blog(LOG_WARNING,
			     "cluster: %.*s closed %" PRIu64
			     " ms after its lease ended, %u hold(s) ended",
			     (int)key_name_len(k), k->key,
			     (uint64_t)((mono_ns() - ck->unclosed_ns) / 1000000ull), ended);
	} else if (atomic_load(&k->cluster_lease) == lease) {
		seg_key_cluster_forget_lease(k); /* a free entry's leftover */
	} /* else re-opened under another lease since @lease was read: not ours to clear */
	key_unlock(k);
	ck->unclosed_ns = 0;
	return true;
}

/* The manager's look at key entry @i. */
static void look_at(struct cluster *c, uint32_t i, uint64_t now)
{
	struct segment *seg = c->seg;
	struct seg_key *k = &seg->keys[i];
	struct ckey *ck = &c->keys[i];
	int64_t lease = atomic_load(&k->cluster_lease);

	/* Opened under a lease that is not ours now: shut first, whatever
	 * else is pending (the etcd side went with that lease). The keys of
	 * a lease being re-adopted are adopt_tick()'s. */
	if (lease && ck->state != CK_ADOPT && lease != atomic_load(&c->lease_id) &&
	    !close_stale(c, i, ck, lease, now))
		return;

	if (ck->state == CK_ACQ) {
		acq_tick(c, i, ck);
		return;
	}
	if (ck->state == CK_ADOPT) {
		adopt_tick(c, i, ck);
		return;
	}
	if (ck->state == CK_HELD) {
		held_tick(c, i, ck, now);
		return;
	}
	if (ck->state == CK_SEM) {
		sem_tick(c, i, ck, now);
		return;
	}
	if (ck->state == CK_REL) {
		/* Delete first, whatever the key's entry has become: our
		 * etcd key left there would block every other host. */
		if (ck->epoch != atomic_load(&c->epoch))
			ck->state = CK_IDLE; /* gone with its lease */
		else
			release_etcd(c, ck);
		return;
	}
	/* CK_IDLE: a gated key with waiters wants its cluster lock. */
	if (atomic_load(&k->state) != KEY_USED || !(atomic_load(&k->cluster) & CL_KEY) ||
	    !peek_waiters(k) || (atomic_load(&k->cluster) & CL_OPEN) || now < ck->retry_ns)
		return;
	lease = atomic_load(&c->lease_id);
	if (!lease || key_lock_timed(seg, k, BROKER_LOCK_MS))
		return;
	/* The name under the mutex: the entry may be changing hands. */
	if (atomic_load(&k->state) != KEY_USED || !k->waiters) {
		key_unlock(k);
		return;
	}
	ck->len = k->key_len <= LOCAL_KEY_MAX ? k->key_len : LOCAL_KEY_MAX;
	memcpy(ck->name, k->key, ck->len);
	ck->name[ck->len] = '\0';
	/* A semaphore takes slots, not the lock (cluster_sem.c). */
	ck->limit = k->kind == LOCAL_KIND_SEMAPHORE ? k->limit : 0;
	key_unlock(k);
	if (ck->limit) {
		if (!ck->slots)
			ck->slots = calloc(CSEM_MAX, sizeof(*ck->slots));
		if (!ck->slots || !sem_begin(c, ck, lease))
			ck->retry_ns = now + RETRY_MS * 1000000ull;
		return;
	}
	ck->epoch = atomic_load(&c->epoch);
	ck->w = malloc(sizeof(*ck->w));
	if (!ck->w || cworker_start(c, ck->w, ck->name, ck->len, lease, ck->epoch, false)) {
		free(ck->w);
		ck->w = NULL;
		ck->retry_ns = now + RETRY_MS * 1000000ull;
		return;
	}
	ck->state = CK_ACQ;
}

/*
 * Look at the keys. After a ring (@full) every entry: a gated key that
 * gained a waiter is found only so, the bell does not say which. Otherwise
 * (a tick) only the keys in some cluster state (c->active), so that an idle
 * manager costs what its cluster keys cost, not what --max-keys does.
 */
static bool stays_active(const struct ckey *ck, uint64_t now)
{
	return ck->state != CK_IDLE || ck->retry_ns > now || ck->unclosed_ns;
}

static void scan(struct cluster *c, bool full)
{
	uint64_t now = mono_ns();
	uint32_t i, j, used = 0;

	if (!full) {
		for (j = 0; j < c->nactive; j++)
			look_at(c, c->active[j], now);
	} else {
		for (i = 0; i < c->seg->caps.max_keys; i++) {
			look_at(c, i, now);
			used += atomic_load(&c->seg->keys[i].state) == KEY_USED;
		}
		/* Seven eighths of the entries in use: cached keys make room
		 * (cluster_keep_ns()). */
		c->table_tight = (uint64_t)used * 8 >= (uint64_t)c->seg->caps.max_keys * 7;
	}
	/* The list anew: the keys that are not idle now, or to be retried, or
	 * left open by a lease that ended. */
	for (i = 0, j = 0; full && i < c->seg->caps.max_keys; i++)
		if (stays_active(&c->keys[i], now))
			c->active[j++] = i;
	if (!full) {
		for (i = 0; i < c->nactive; i++)
			if (stays_active(&c->keys[c->active[i]], now))
				c->active[j++] = c->active[i];
	}
	c->nactive = j;
}

/* The manager woke from a pause at @at: the lease thread renews now. */
static void ask_lease_check(struct cluster *c, uint64_t at)
{
	if (atomic_load(&c->lease_check_ns) >= at)
		return;
	atomic_store(&c->lease_check_ns, at);
	pthread_mutex_lock(&c->mu);
	pthread_cond_broadcast(&c->stop_cv);
	pthread_mutex_unlock(&c->mu);
}

static void *manager(void *arg)
{
	struct cluster *c = arg;
	struct seg_header *h = c->seg->hdr;
	uint32_t last = atomic_load(&h->cluster_bell) - CLUSTER_BELL_FIND; /* the first: full */
	uint64_t next_full = 0, nfull = 0, nlooks = 0, woke_by = 0, paused = 0;
	uint32_t i;

	while (!atomic_load(&c->stop)) {
		uint32_t v = atomic_load(&h->cluster_bell);
		uint64_t now = mono_ns();

		/* Woken long after it meant to (the broker was stopped, or
		 * starved), or past the lease's deadline: what it knew may be
		 * stale, and so may be any etcd write it would make. Nothing
		 * before the lease thread has looked at the lease again (and
		 * dropped the local grants, if it is lost). */
		if (!paused && ((woke_by && now > woke_by + PAUSE_MS * 1000000ull) ||
				(atomic_load(&c->lease_id) && now >= atomic_load(&c->deadline_ns))))
			paused = now;
		woke_by = 0;
		if (paused) {
			/* No lease: nothing granted to protect (jeopardy drops
			 * the grants), and keys left open are to be closed. */
			if (atomic_load(&c->lease_seen_ns) > paused || !atomic_load(&c->lease_id)) {
				paused = 0;
			} else {
				ask_lease_check(c, paused);
				futex_wait_until(&h->cluster_bell, v, now + TICK_MS * 1000000ull);
				continue;
			}
		}
		/* Every entry only when a key we may not know gained a waiter
		 * (cluster_ring()); a release of a key we hold rings the low
		 * half (cluster_ring_release()): our own keys are enough. */
		bool full = (v >> 16) != (last >> 16) || mono_ns() >= next_full;

		nfull += full;
		nlooks++;

		c->soon_ns = 0;
		/* A full scan at least every FULL_MS too: a look that could not
		 * be made (a busy mutex, no lease yet) is not lost. */
		if (full)
			next_full = mono_ns() + FULL_MS * 1000000ull;
		scan(c, full);
		last = v;
		seg_cluster_set_listening(h, true);
		/* Sooner when a key asked for it (at least 1 ms later: a time
		 * already past would spin). */
		now = mono_ns();
		woke_by = now + TICK_MS * 1000000ull;
		if (c->soon_ns && c->soon_ns < woke_by)
			woke_by = c->soon_ns > now + 1000000ull ? c->soon_ns : now + 1000000ull;
		if (atomic_load(&h->cluster_bell) == v && !atomic_load(&c->stop))
			futex_wait_until(&h->cluster_bell, v, woke_by);
		seg_cluster_set_listening(h, false);
	}
	/* How busy the manager was (the cost of the bell: docs/cluster.md). */
	blog(LOG_INFO, "cluster: manager: %" PRIu64 " looks, %" PRIu64 " at every key entry",
	     nlooks, nfull);
	for (i = 0; i < c->seg->caps.max_keys; i++) {
		struct ckey *ck = &c->keys[i];

		if (ck->w) {
			atomic_store(&ck->w->cancel, true);
			cworker_join(ck->w);
			free(ck->w);
			ck->w = NULL;
		}
		if (ck->sw) {
			atomic_store(&ck->sw->cancel, true);
			pthread_join(ck->sw->thread, NULL);
			free(ck->sw);
			ck->sw = NULL;
		}
		free(ck->slots);
		ck->slots = NULL;
		ck->state = CK_IDLE; /* the lease thread revokes the lease */
	}
	return NULL;
}

/* ---- start and stop -------------------------------------------------------- */

static void publish_prefixes(struct broker *b, struct cluster *c)
{
	const struct cluster_opts *o = &b->opts.cluster;
	struct seg_header *h = b->seg.hdr;
	uint64_t dl = atomic_load(&h->cluster_deadline_ns);
	uint32_t i;

	/* The broker before us left a lease whose deadline has not passed:
	 * re-adopt it (the lease thread renews it first). */
	if (c && atomic_load(&h->cluster_lease_id) && dl > 1 && mono_ns() < dl) {
		c->adopt_id = atomic_load(&h->cluster_lease_id);
		atomic_store(&c->deadline_ns, dl);
	}
	/* Until the first lease: past (nothing granted); 0 without a cluster. */
	if (!c || !c->adopt_id) {
		seg_cluster_set_deadline(h, c ? SEG_CLUSTER_DEADLINE_PAST : 0);
		seg_cluster_set_lease(h, 0);
	}
	seg_cluster_set_prefixes(h, o->prefixes, o->nprefixes);
	/* Keys of an earlier run (a restart): cluster keys or not by today's
	 * prefixes, and closed until this broker takes their cluster locks. */
	for (i = 0; i < b->seg.caps.max_keys; i++) {
		struct seg_key *k = &b->seg.keys[i];

		if (atomic_load(&k->state) != KEY_USED ||
		    key_lock_timed(&b->seg, k, BROKER_LOCK_MS))
			continue;
		if (!cluster_prefix_match(&b->seg, k->key, k->key_len)) {
			seg_key_cluster_reset(k, false);
		} else if (c && c->adopt_id && atomic_load(&k->cluster_lease) == c->adopt_id &&
			   ((atomic_load(&k->cluster) & CL_OPEN) || k->holders)) {
			/* Open under the lease we re-adopt, or held while it
			 * yielded to another host (the gate closed, our etcd
			 * key still there until the release): checked in etcd. */
			struct ckey *ck = &c->keys[i];

			seg_key_cluster_open(k, c->adopt_id);
			ck->state = CK_ADOPT;
			ck->len = k->key_len <= LOCAL_KEY_MAX ? k->key_len : LOCAL_KEY_MAX;
			memcpy(ck->name, k->key, ck->len);
			ck->name[ck->len] = '\0';
			ck->epoch = 1; /* the lease thread's first: the adoption */
		} else {
			seg_key_cluster_reset(k, true);
			/* Holds of an earlier run whose cluster locks this broker
			 * does not hold. */
			if (k->holders)
				blog(LOG_NOTICE,
				     "cluster: %u hold(s) of %.*s from an earlier run ended",
				     end_holds_locked(&b->seg, k), (int)k->key_len, k->key);
		}
		key_unlock(k);
	}
}

int cluster_start(struct broker *b)
{
	const struct cluster_opts *o = &b->opts.cluster;
	pthread_condattr_t ca;
	struct cluster *c;
	int err;

	if (!o->nendpoints) {
		publish_prefixes(b, NULL);
		return 0;
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT))
		return -ENOMEM;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->keys = calloc(b->seg.caps.max_keys, sizeof(*c->keys));
	c->active = calloc(b->seg.caps.max_keys, sizeof(*c->active));
	if (!c->keys || !c->active || etcd_init(&c->etcd, o)) {
		free(c->active);
		free(c->keys);
		free(c);
		return -ENOMEM;
	}
	c->b = b;
	c->view = b->seg;
	c->view.lock_budgeted = false;
	c->view.lock_budget_ns = 0;
	c->view.lock_judge = &lw_pid_judge; /* owners.c judges on the loop only */
	c->seg = &c->view;
	c->o = o;
	c->margin_ms = o->margin_ms ? o->margin_ms : o->lease_ttl_s * 200u;
	if (c->margin_ms < 1000 && !o->margin_ms)
		c->margin_ms = 1000;
	pthread_mutex_init(&c->mu, NULL);
	pthread_mutex_init(&c->rmu, NULL); /* cluster_values.c */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->stop_cv, &ca);
	pthread_condattr_destroy(&ca);
	b->cluster = c;
	publish_prefixes(b, c);
	if (c->adopt_id)
		blog(LOG_INFO, "cluster: re-adopting lease %016" PRIx64 " of the broker before",
		     (uint64_t)c->adopt_id);
	err = pthread_create(&c->lease_thr, NULL, lease_thread, c);
	if (err)
		return -err;
	c->lease_running = true;
	err = pthread_create(&c->mgr, NULL, manager, c);
	if (err)
		return -err;
	c->mgr_running = true;
	err = cvalue_start(c);
	if (err)
		return err;
	blog(LOG_INFO, "cluster: %u etcd endpoint(s), %u prefix(es), lease TTL %u s, margin %u ms",
	     o->nendpoints, o->nprefixes, o->lease_ttl_s, c->margin_ms);
	return 0;
}

void cluster_stop(struct broker *b)
{
	struct cluster *c = b->cluster;

	if (!c)
		return;
	pthread_mutex_lock(&c->mu);
	atomic_store(&c->stop, true);
	pthread_cond_broadcast(&c->stop_cv);
	pthread_mutex_unlock(&c->mu);
	cluster_ring(c->seg->hdr);
	if (c->mgr_running)
		pthread_join(c->mgr, NULL);
	if (c->lease_running)
		pthread_join(c->lease_thr, NULL);
	cvalue_stop(c);
	etcd_fini(&c->etcd);
	pthread_cond_destroy(&c->stop_cv);
	pthread_mutex_destroy(&c->mu);
	free(c->keys);
	free(c->active);
	free(c);
	b->cluster = NULL;
	curl_global_cleanup();
}
