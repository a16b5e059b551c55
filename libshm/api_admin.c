// SPDX-License-Identifier: MIT
/* Inspection (holders, keys, sessions, stats) and operator actions. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "abi.h"
#include "client.h"
#include "clock.h"

static uint64_t ms_left(uint64_t until, uint64_t now)
{
	return until > now ? (until - now + 999999) / 1000000 : 0;
}

static void session_label(const struct segment *seg, uint32_t slot, char *id, char *name,
			  int32_t *pid)
{
	const struct seg_session *ss = seg_session_at(seg, slot);

	if (!ss)
		return;
	hex_encode(ss->id, sizeof(ss->id), id);
	memcpy(name, ss->name, 64);
	name[63] = '\0';
	*pid = ss->pid;
}

int local_holders(local_session *s, const char *key,
		  int (*cb)(const struct local_holder *h, void *arg), void *arg)
{
	struct local_holder *v = NULL;
	uint32_t i, n = 0, steps = 0;
	struct seg_key *k;
	uint64_t now;
	size_t len;
	int err;

	if (!cb)
		return -EINVAL;
	err = api_enter(s, key, &len);
	if (err)
		return err;
	err = api_find_inspect(s, key, len, &k);
	if (err)
		return err == -ENOENT ? 0 : err;
	v = calloc(k->holders ? k->holders : 1, sizeof(*v));
	if (!v) {
		key_unlock(k);
		return -ENOMEM;
	}
	now = mono_ns();
	for (i = k->h_head; i < s->seg->nnodes && n < k->holders && steps++ < s->seg->nnodes;
	     i = s->seg->nodes[i].next) {
		const struct seg_node *node = &s->seg->nodes[i];

		v[n].sz = sizeof(v[n]);
		session_label(s->seg, NODE_SESSION(atomic_load(&node->word)), v[n].session,
			      v[n].name, &v[n].pid);
		v[n].token = node->token;
		v[n].lease_remaining_ms =
			node->lease_until_ns ? ms_left(node->lease_until_ns, now) : 0;
		n++;
	}
	key_unlock(k);
	/* Callbacks outside the mutex: they may call back into liblocal. */
	err = 0;
	for (i = 0; i < n && !err; i++)
		err = cb(&v[i], arg);
	free(v);
	return err;
}

int local_keys(local_session *s, const char *prefix,
	       int (*cb)(const char *key, const struct local_key_info *ki, void *arg), void *arg)
{
	size_t plen = prefix ? strnlen(prefix, LOCAL_KEY_MAX + 1) : 0;
	struct local_key_info info = { .sz = sizeof(info) }; /* no value: value_buf NULL */
	char name[LOCAL_KEY_MAX + 1];
	uint64_t deadline = deadline_after_ms(API_INSPECT_LOCK_MS);
	uint32_t i;
	int err;

	if (!cb)
		return -EINVAL;
	err = session_usable(s);
	if (err)
		return err;
	for (i = 0; i < s->seg->caps.max_keys && !err; i++) {
		struct seg_key *k = &s->seg->keys[i];

		/* One bound for the whole listing: past it, a key whose lock is
		 * held (by a process stopped inside, say) is tried once and left
		 * out, so that one stuck key never hangs the inspection. */
		if (atomic_load(&k->state) != KEY_USED || key_lock_until(s->seg, k, deadline))
			continue;
		/* plen 0: no prefix (which may be NULL, not for memcmp()). */
		if (atomic_load(&k->state) != KEY_USED || k->key_len < plen ||
		    (plen && memcmp(k->key, prefix, plen))) {
			key_unlock(k);
			continue;
		}
		api_fill_info_locked(s->seg, k, &info);
		memcpy(name, k->key, k->key_len);
		name[k->key_len] = '\0';
		key_unlock(k);
		err = cb(name, &info, arg);
	}
	return err;
}

int local_sessions(local_session *s, int (*cb)(const struct local_session_info *si, void *arg),
		   void *arg)
{
	struct segment *seg;
	uint32_t(*counts)[2], i;
	uint64_t now = mono_ns();
	int err;

	if (!cb)
		return -EINVAL;
	err = session_usable(s);
	if (err)
		return err;
	seg = s->seg;
	counts = calloc(seg->caps.max_sessions, sizeof(*counts));
	if (!counts)
		return -ENOMEM;
	for (i = 0; i < seg->nnodes; i++) {
		uint64_t w = atomic_load(&seg->nodes[i].word);
		uint32_t st = NODE_STATE(w), slot = NODE_SESSION(w);

		if (slot >= seg->caps.max_sessions)
			continue;
		if (seg_node_is_hold(seg, i, w))
			counts[slot][0]++;
		else if (st == NODE_WAITING)
			counts[slot][1]++;
	}
	for (i = 0; i < seg->caps.max_sessions && !err; i++) {
		const struct seg_session *ss = &seg->sessions[i];
		struct local_session_info si;

		if (SESS_STATE(atomic_load(&ss->state_gen)) != SESS_ACTIVE)
			continue;
		memset(&si, 0, sizeof(si));
		si.sz = sizeof(si);
		session_label(seg, i, si.id, si.name, &si.pid);
		si.uid = ss->uid;
		si.ttl_ms = ss->ttl_ms;
		if (ss->ttl_ms)
			si.ttl_remaining_ms = ms_left(atomic_load(&ss->renewed_ns) +
							      (uint64_t)ss->ttl_ms * 1000000ull,
						      now);
		si.lock_delay_ms = ss->lock_delay_ms;
		si.behavior = (int)ss->behavior;
		si.holds = counts[i][0];
		si.waiting = counts[i][1];
		err = cb(&si, arg);
	}
	free(counts);
	return err;
}

static int stats_fill(local_session *s, struct local_stats *out);

int local_stats(local_session *s, struct local_stats *out)
{
	struct local_stats full;
	size_t n;
	int err;

	if (!out)
		return -EINVAL;
	err = abi_size(out, sizeof(full), &n);
	if (err)
		return err;
	err = session_usable(s);
	if (err)
		return err;
	memset(&full, 0, sizeof(full));
	err = stats_fill(s, &full);
	full.sz = n;
	if (!err)
		memcpy(out, &full, n);
	return err;
}

void api_seg_stats(const struct segment *seg, struct proto_op_stats *r)
{
	const struct seg_header *h = seg->hdr;
	uint64_t grants = 0, started;
	uint32_t i;

	for (i = 0; i < seg->caps.max_sessions; i++)
		r->sessions += SESS_STATE(atomic_load(&seg->sessions[i].state_gen)) == SESS_ACTIVE;
	for (i = 0; i < seg->caps.max_keys; i++) {
		uint32_t st = atomic_load(&seg->keys[i].state);

		if (st == KEY_USED) {
			uint64_t li, mi;

			r->keys++;
			key_counts_peek(&seg->keys[i], &li, &mi);
			grants += li;
		}
		r->quarantined_keys += st == KEY_QUARANTINED;
	}
	for (i = 0; i < seg->nnodes; i++) {
		uint64_t w = atomic_load(&seg->nodes[i].word);

		r->holds += seg_node_is_hold(seg, i, w);
		r->waiters += NODE_STATE(w) == NODE_WAITING;
	}
	r->broker_pid = atomic_load(&h->broker_pid);
	started = atomic_load(&h->broker_started_ns);
	r->uptime_ms = started ? (mono_ns() - started) / 1000000 : 0;
	r->max_sessions = seg->caps.max_sessions;
	r->max_keys = seg->caps.max_keys;
	r->max_holds = seg->caps.max_holds;
	r->max_waiters = seg->caps.max_waiters;
	r->max_value = seg->caps.max_value;
	r->grants = grants + atomic_load(&h->stats.reclaimed_grants);
	/* The fast path's counts: per key entry since SEG_ABI 6 */
	seg_slow_counts(seg, &r->handoffs, &r->timeouts);
	r->lease_expiries = atomic_load(&h->stats.lease_expiries);
	r->ttl_expiries = atomic_load(&h->stats.ttl_expiries);
	r->crash_cleanups = atomic_load(&h->stats.crash_cleanups);
	r->repairs = atomic_load(&h->stats.repairs);
	r->quarantined = atomic_load(&h->stats.quarantined);
	r->sessions_opened = atomic_load(&h->stats.sessions_opened);
	r->sessions_closed = atomic_load(&h->stats.sessions_closed);
}

void api_stats_from_op(const struct proto_op_stats *r, struct local_stats *out)
{
	memset(out, 0, sizeof(*out));
	out->broker_pid = r->broker_pid;
	out->uptime_ms = r->uptime_ms;
	out->sessions = r->sessions;
	out->keys = r->keys;
	out->holds = r->holds;
	out->waiters = r->waiters;
	out->max_sessions = r->max_sessions;
	out->max_keys = r->max_keys;
	out->max_holds = r->max_holds;
	out->max_waiters = r->max_waiters;
	out->max_value = r->max_value;
	out->grants = r->grants;
	out->timeouts = r->timeouts;
	out->handoffs = r->handoffs;
	out->lease_expiries = r->lease_expiries;
	out->ttl_expiries = r->ttl_expiries;
	out->crash_cleanups = r->crash_cleanups;
	out->repairs = r->repairs;
	out->quarantined = r->quarantined;
	out->sessions_opened = r->sessions_opened;
	out->sessions_closed = r->sessions_closed;
}

/* What the broker would answer MSG_OP_STATS, read from the mapping. */
static int stats_fill(local_session *s, struct local_stats *out)
{
	struct proto_op_stats r;

	memset(&r, 0, sizeof(r));
	api_seg_stats(s->seg, &r);
	api_stats_from_op(&r, out);
	return 0;
}

static int call(local_session *s, const void *req, size_t len)
{
	struct proto_reply rep;
	int err = broker_call(s->socket_path, req, len, &rep, NULL, 0);

	return err ? err : rep.status;
}

int api_force_release_req(struct proto_force_release *req, const char *key, size_t len,
			  const char *holder_id)
{
	memset(req, 0, sizeof(*req));
	proto_init_hdr(&req->hdr, MSG_FORCE_RELEASE, sizeof(*req));
	if (!holder_id)
		req->all = 1;
	else if (hex_decode(holder_id, req->holder, sizeof(req->holder)))
		return -EINVAL;
	req->key_len = (uint32_t)len;
	memcpy(req->key, key, len);
	return 0;
}

int api_destroy_req(struct proto_session_id *req, const char *session_id)
{
	if (!session_id)
		return -EINVAL;
	memset(req, 0, sizeof(*req));
	proto_init_hdr(&req->hdr, MSG_DESTROY, sizeof(*req));
	if (hex_decode(session_id, req->id, sizeof(req->id)))
		return -EINVAL;
	return 0;
}

int local_force_release(local_session *s, const char *key, const char *holder_id)
{
	struct proto_force_release req;
	size_t len;
	int err;

	err = api_enter(s, key, &len);
	if (!err)
		err = api_force_release_req(&req, key, len, holder_id);
	return err ? err : call(s, &req, sizeof(req));
}

int local_session_destroy(local_session *s, const char *session_id)
{
	struct proto_session_id req;
	int err = session_usable(s);

	if (!err)
		err = api_destroy_req(&req, session_id);
	return err ? err : call(s, &req, sizeof(req));
}
