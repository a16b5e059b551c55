// SPDX-License-Identifier: MIT
/* Watches, hold checks and sequencers. */
#include <errno.h>
#include <string.h>

#include "client.h"
#include "clock.h"
#include "futex.h"

int api_not_held(local_session *s, uint32_t key_idx)
{
	struct seg_session *ss = &s->seg->sessions[s->who.slot];
	uint32_t i;

	if (!session_is(s->seg, s->who))
		return -LOCAL_ESESSION;
	for (i = 0; i < SESS_EXPIRED_SLOTS; i++) {
		uint32_t want = key_idx + 1;

		if (atomic_compare_exchange_strong(&ss->expired[i].key, &want, 0))
			return -LOCAL_EEXPIRED;
	}
	return -LOCAL_ENOTHELD;
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
	err = keytab_find(s->seg, key, len, false, &k);
	if (err)
		return err == -ENOENT ? (session_is(s->seg, s->who) ? -LOCAL_ENOTHELD
								     : -LOCAL_ESESSION)
				      : err;
	h = key_find_hold_locked(s->seg, k, s->who);
	if (h != IDX_NONE && token)
		*token = s->seg->nodes[h].token;
	key_unlock(k);
	return h != IDX_NONE ? 0 : api_not_held(s, seg_key_index(s->seg, k));
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
	err = keytab_find(s->seg, key, len, false, &k);
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
 * Register as a watcher, then re-read the index: a change made after the
 * registration wakes us (key_touch_locked() reads the count after its add),
 * and one made before is seen by the re-read.
 */
int local_watch(local_session *s, const char *key, uint64_t after_index, int64_t timeout_ms,
		struct local_key_info *out)
{
	uint64_t deadline = timeout_ms >= 0 ? deadline_after_ms(timeout_ms) : 0, idx;
	struct seg_key *k;
	size_t len;
	int err;

	if (!out)
		return -EINVAL;
	err = api_enter(s, key, &len);
	if (err)
		return err;
	if (!session_is(s->seg, s->who))
		return -LOCAL_ESESSION;
	/* Create the key if need be: a watch on a key that does not exist yet
	 * works, and a watched key is never reclaimed. */
	err = keytab_find(s->seg, key, len, true, &k);
	if (err)
		return err;
	atomic_fetch_add(&k->watchers, 1);
	key_unlock(k);
	for (;;) {
		idx = atomic_load(&k->modify_index);
		if (idx > after_index)
			break;
		err = futex_wait_until(key_change_futex(k), (uint32_t)idx, deadline);
		if (err == -ETIMEDOUT || (deadline && mono_ns() >= deadline)) {
			err = -ETIMEDOUT;
			break;
		}
		err = 0;
	}
	/* Describe it while still a watcher: the entry cannot be reclaimed. */
	if (key_lock(s->seg, k) == 0) {
		api_fill_info_locked(s->seg, k, out);
		key_unlock(k);
	}
	atomic_fetch_sub(&k->watchers, 1);
	return err;
}
