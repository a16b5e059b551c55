// SPDX-License-Identifier: MIT
/* Watches, hold checks and sequencers. */
#include <errno.h>
#include <string.h>

#include "abi.h"
#include "client.h"
#include "clock.h"
#include "crashpoint.h"
#include "futex.h"

/* A watcher re-reads the index this often even when not woken: a change's
 * wake-up call comes after its maker unlocks the key, and a maker killed
 * in between must not leave watchers asleep for good. */
#define WATCH_RECHECK_NS 1000000000ull

int api_not_held(local_session *s, uint32_t key_idx, bool consume)
{
	struct seg_session *ss = &s->seg->sessions[s->who.slot];
	uint32_t i;

	if (!session_is(s->seg, s->who))
		return -LOCAL_ESESSION;
	for (i = 0; i < SESS_EXPIRED_SLOTS; i++) {
		uint32_t want = key_idx + 1;

		/* (why: a cluster key whose lock the host lost.) */
		if (!consume && atomic_load(&ss->expired[i].key) == want)
			return ss->expired[i].why == SESS_EXPIRED_CLUSTER ? -LOCAL_ECLUSTER
									  : -LOCAL_EEXPIRED;
		if (consume && atomic_compare_exchange_strong(&ss->expired[i].key, &want, 0))
			return ss->expired[i].why == SESS_EXPIRED_CLUSTER ? -LOCAL_ECLUSTER
									  : -LOCAL_EEXPIRED;
	}
	return -LOCAL_ENOTHELD;
}

void api_forget_expiry(local_session *s, uint32_t key_idx)
{
	struct seg_session *ss = &s->seg->sessions[s->who.slot];
	uint32_t i;

	/* Most sessions never had a lease expire: one load and done. */
	if (!atomic_load_explicit(&ss->expired_next, memory_order_relaxed))
		return;
	for (i = 0; i < SESS_EXPIRED_SLOTS; i++) {
		uint32_t want = key_idx + 1;

		atomic_compare_exchange_strong(&ss->expired[i].key, &want, 0);
	}
}

int local_held(local_session *s, const char *key, uint64_t *token)
{
	struct seg_key *k;
	size_t len;
	uint32_t h;
	int err;

	err = api_enter(s, key, &len);
	if (err)
		return err;
	err = api_find_inspect(s, key, len, &k);
	/* A cluster key's mutex held by a stopped process (its broker,
	 * stopped inside a look at the key): past the host's deadline no
	 * hold of a cluster key is valid here, whoever holds the mutex. */
	if (err == -ETIMEDOUT && cluster_prefix_match(s->seg, key, len) &&
	    cluster_deadline_passed(s->seg))
		return -LOCAL_ECLUSTER;
	if (err)
		return err == -ENOENT
			       ? (session_is(s->seg, s->who) ? -LOCAL_ENOTHELD : -LOCAL_ESESSION)
			       : err;
	h = key_find_hold_locked(s->seg, k, s->who);
	if (h != IDX_NONE && token)
		*token = s->seg->nodes[h].token;
	/* Cluster keys: past the host's deadline, or under a lease the host
	 * no longer holds, a hold no broker ended is not safe any more
	 * (another host may be granted soon, or already is). */
	if (h != IDX_NONE && (atomic_load(&k->cluster) & CL_KEY) && cluster_key_stale(s->seg, k))
		h = IDX_NONE, err = -LOCAL_ECLUSTER;
	key_unlock(k);
	if (err)
		return err;
	/* A question: the answer stays until a renew or release acts on it. */
	return h != IDX_NONE ? 0 : api_not_held(s, seg_key_index(s->seg, k), false);
}

int local_check_token(local_session *s, const char *key, uint64_t token)
{
	struct seg_key *k;
	uint32_t i, steps = 0;
	size_t len;
	int err;

	err = api_enter(s, key, &len);
	if (err)
		return err;
	err = api_find_inspect(s, key, len, &k);
	if (err)
		return err == -ENOENT ? -LOCAL_ESTALE : err;
	err = -LOCAL_ESTALE;
	for (i = k->h_head; i < s->seg->nnodes && steps++ < s->seg->nnodes;
	     i = s->seg->nodes[i].next)
		if (s->seg->nodes[i].token == token) {
			err = 0;
			break;
		}
	key_unlock(k);
	return err;
}

/*
 * A watch is a node of its own (from the waiter table), so that the broker
 * removes it when the watcher's session ends and repair recounts watchers:
 * a dead watcher never pins a key. Both steps run under the key mutex.
 */
static int watch_begin(struct segment *seg, struct seg_key *k, local_session *s, uint32_t *node)
{
	uint32_t n = node_claim(seg, seg->caps.max_holds, seg->caps.max_waiters, s->who.slot,
				seg_key_index(seg, k), &s->hints.wait);

	if (n == IDX_NONE)
		return -LOCAL_EMAXWAITERS;
	if (!session_is(seg, s->who)) {
		atomic_store(&seg->nodes[n].word, 0);
		return -LOCAL_ESESSION;
	}
	seg->nodes[n].session_gen = s->who.gen;
	atomic_store(&seg->nodes[n].word,
		     NODE_PACK(NODE_WATCHING, s->who.slot, seg_key_index(seg, k)));
	CRASH_POINT(WATCH_CLAIMED);
	atomic_fetch_add(&k->watchers, 1);
	*node = n;
	return 0;
}

static void watch_end(struct segment *seg, struct seg_key *k, local_session *s, uint32_t n)
{
	uint64_t w = NODE_PACK(NODE_WATCHING, s->who.slot, seg_key_index(seg, k));

	/* CAS: the broker may have removed it with the session. */
	if (atomic_compare_exchange_strong(&seg->nodes[n].word, &w, 0)) {
		CRASH_POINT(UNWATCH_FREED);
		atomic_fetch_sub(&k->watchers, 1);
	}
}

/*
 * Register as a watcher (under the key mutex), then re-read the index: a
 * change made after the registration wakes us (key_touch_locked(), under the
 * same mutex, reads the count), and one made before is seen by the re-read.
 */
int local_watch(local_session *s, const char *key, uint64_t after_index, int64_t timeout_ms,
		struct local_key_info *out)
{
	uint64_t deadline = timeout_ms >= 0 ? deadline_after_ms(timeout_ms) : 0, idx, wake_by;
	struct local_key_info full;
	struct seg_key *k;
	uint32_t node;
	size_t len;
	int err;

	if (!out)
		return -EINVAL;
	err = abi_key_info_in(out, &full);
	if (err)
		return err;
	err = api_enter(s, key, &len);
	if (err)
		return err;
	if (!session_is(s->seg, s->who))
		return -LOCAL_ESESSION;
	/* Create the key if need be: a watch on a key that does not exist yet
	 * works, and a watched key is never reclaimed. */
	err = keytab_find_until(s->seg, key, len, true, &k, api_lock_deadline(deadline));
	if (err)
		return err;
	err = watch_begin(s->seg, k, s, &node);
	key_unlock(k);
	if (err)
		return err;
	for (;;) {
		/* The session first: its end wakes us and changes the index. */
		if (!session_is(s->seg, s->who)) {
			err = -LOCAL_ESESSION;
			break;
		}
		idx = atomic_load(&k->modify_index);
		if (idx > after_index)
			break;
		/* Cluster keys: the host's deadline (or a lease the key was not
		 * opened under) ends the watch, so that a holder's monitor
		 * learns of it with no broker. */
		if ((atomic_load(&k->cluster) & CL_KEY) && cluster_key_stale(s->seg, k)) {
			err = -LOCAL_ECLUSTER;
			break;
		}
		wake_by = mono_ns() + WATCH_RECHECK_NS;
		if (deadline && deadline < wake_by)
			wake_by = deadline;
		if ((atomic_load(&k->cluster) & CL_KEY) &&
		    atomic_load(&s->seg->hdr->cluster_deadline_ns) &&
		    atomic_load(&s->seg->hdr->cluster_deadline_ns) < wake_by)
			wake_by = atomic_load(&s->seg->hdr->cluster_deadline_ns);
		futex_wait_until(key_change_futex(k), (uint32_t)idx, wake_by);
		if (deadline && mono_ns() >= deadline) {
			err = -ETIMEDOUT;
			break;
		}
	}
	/* Describe it while still a watcher: the entry cannot be reclaimed. */
	if (key_lock(s->seg, k) == 0) {
		api_fill_info_locked(s->seg, k, &full);
		watch_end(s->seg, k, s, node);
		key_unlock(k);
		abi_key_info_out(out, &full);
	}
	return err;
}
