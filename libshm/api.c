// SPDX-License-Identifier: MIT
/* The public lock calls: argument checks, then the per-key protocol. */
#include <errno.h>
#include <string.h>

#include "abi.h"
#include "client.h"
#include "clock.h"
#include "crashpoint.h"
#include "hist.h"

/* Common entry checks: the session is ours and the key is well-formed. */
int api_enter(local_session *s, const char *key, size_t *len)
{
	int err = session_usable(s);

	if (err)
		return err;
	if (!key)
		return -EINVAL;
	*len = strnlen(key, LOCAL_KEY_MAX + 1);
	return key_check(key, *len);
}

uint64_t api_lock_deadline(uint64_t deadline_ns)
{
	uint64_t floor;

	if (!deadline_ns)
		return 0; /* no clock read for an untimed acquire */
	floor = deadline_after_ms(API_TRY_LOCK_MS);
	return deadline_ns < floor ? floor : deadline_ns;
}

int api_find_inspect(local_session *s, const char *key, size_t len, struct seg_key **out)
{
	return keytab_find_until(s->seg, key, len, false, out,
				 deadline_after_ms(API_INSPECT_LOCK_MS));
}

/*
 * Metrics: an acquire that queued counts its wait in the session's own
 * slot; its hold is remembered here, in process memory, so that its
 * release counts the hold time. Holds that never queued are not timed: the
 * lock-free path reads no clock and writes nothing for metrics.
 *
 * The notes are lock-free (three process-mutex sections per
 * contended lock+release were a tenth of its instructions). An entry
 * belongs to whoever moves its granted_ns: from 0 (empty) or a time to
 * WAITED_BUSY to fill it in, from a time to 0 to end it. A release that
 * lost the race for an entry leaves it to the winner. Two grants noted at
 * the same nanosecond could confuse an ending with a replacement: then a
 * hold time is lost or mis-timed, never anything but a metric.
 */
#define WAITED_BUSY 1ull

static void note_waited(local_session *s, uint32_t key_idx, uint64_t tok, uint64_t now)
{
	uint32_t i, tries, pick;
	uint64_t g, oldest;

	for (tries = 0; tries < 8; tries++) {
		/* An empty entry, or else the oldest note: replaced. */
		pick = 0;
		oldest = UINT64_MAX;
		for (i = 0; i < 4; i++) {
			g = atomic_load_explicit(&s->waited[i].granted_ns, memory_order_relaxed);
			if (g != WAITED_BUSY && g < oldest) {
				oldest = g;
				pick = i;
			}
		}
		if (oldest == UINT64_MAX)
			return; /* every entry being written: this note is lost */
		if (!atomic_compare_exchange_strong(&s->waited[pick].granted_ns, &oldest,
						    WAITED_BUSY))
			continue;
		if (!oldest)
			atomic_fetch_add_explicit(&s->nwaited, 1, memory_order_relaxed);
		atomic_store_explicit(&s->waited[pick].key_idx, key_idx, memory_order_relaxed);
		atomic_store_explicit(&s->waited[pick].token, tok, memory_order_relaxed);
		atomic_store_explicit(&s->waited[pick].granted_ns, now, memory_order_release);
		return;
	}
}

static void note_released(local_session *s, uint32_t key_idx, uint64_t tok)
{
	uint32_t i;

	if (!atomic_load_explicit(&s->nwaited, memory_order_relaxed))
		return;
	for (i = 0; i < 4; i++) {
		struct waited_hold *w = &s->waited[i];
		uint64_t g = atomic_load_explicit(&w->granted_ns, memory_order_acquire), t;

		/* Any entry of the key ends with its release; only the
		 * hold's own is timed (another is a hold lost meanwhile). */
		if (g <= WAITED_BUSY ||
		    atomic_load_explicit(&w->key_idx, memory_order_relaxed) != key_idx)
			continue;
		t = atomic_load_explicit(&w->token, memory_order_relaxed);
		if (!atomic_compare_exchange_strong(&w->granted_ns, &g, 0))
			continue; /* replaced or ended meanwhile: not ours */
		atomic_fetch_sub_explicit(&s->nwaited, 1, memory_order_relaxed);
		if (t == tok)
			hist_note(&s->seg->sessions[s->who.slot].hold_hist, mono_ns() - g);
	}
}

/* Is @key's hold one note_waited() remembered? Then its release takes the
 * slow path, which times it. Process memory only: a relaxed load when none.
 * The key is named by the entry its key hint gives (the one the lock-free
 * release tries, and the acquire found it in), not hashed;
 * no hint, or a note being written: the slow path, which finds out. In
 * *idx: the entry asked about. */
static bool waited_for(local_session *s, const char *key, uint32_t *idx)
{
	uint32_t i;

	*idx = IDX_NONE;
	if (!atomic_load_explicit(&s->nwaited, memory_order_relaxed))
		return false;
	*idx = key_hint_idx(&s->hints, key);
	if (*idx == IDX_NONE)
		return true;
	for (i = 0; i < 4; i++) {
		uint64_t g = atomic_load_explicit(&s->waited[i].granted_ns, memory_order_acquire);

		if (g == WAITED_BUSY || (g && atomic_load_explicit(&s->waited[i].key_idx,
								   memory_order_relaxed) == *idx))
			return true;
	}
	return false;
}

void api_note_wait(local_session *s, const char *key, int err, uint64_t since, uint32_t key_idx,
		   uint64_t tok)
{
	uint64_t now;

	(void)key; /* notes name the entry (key_idx), not the string */
	if (err && err != -ETIMEDOUT)
		return; /* the session ended, say: the slot may be another's now */
	now = mono_ns();
	hist_note(&s->seg->sessions[s->who.slot].wait_hist, now - since);
	if (!err)
		note_waited(s, key_idx, tok, now);
}

static int release_slow(local_session *s, const char *key, size_t len);

/* api_acquire() past the lock-free path: queue if need be, and wait. */
static __attribute__((noinline)) int acquire_slow(local_session *s, const char *key,
						  struct acquire_req *req, int64_t timeout_ms,
						  uint64_t *token)
{
	uint64_t deadline = timeout_ms > 0 ? deadline_after_ms(timeout_ms) : 0, tok = 0, since = 0;
	uint32_t waiter = IDX_NONE, key_idx;
	struct seg_key *k;
	size_t len;
	int err;

	err = api_enter(s, key, &len);
	if (err)
		return err;
again:
	/* The key's lock, too, is waited for no longer than the caller
	 * said: a process stopped inside it must not make a timed call hang. */
	err = keytab_find_hinted(s->seg, key, len, true, &k,
				 api_lock_deadline(timeout_ms ? deadline : 1),
				 key_hint_idx(&s->hints, key));
	if (err == -ETIMEDOUT && !timeout_ms)
		err = -EBUSY;
	if (err)
		return err;
	/* The wait starts when the request queues. @req is the caller's own
	 * (api_lock_full(), api_sem_acquire_full()), dead once we return. */
	/* cppcheck-suppress autoVariables */
	req->queued_ns = &since;
	err = key_acquire_locked(s->seg, k, req, &tok, &waiter, &s->hints);
	req->queued_ns = NULL; /* no pointer to this frame outlives it */
	key_idx = seg_key_index(s->seg, k);
	key_unlock_giving(s->seg, k);
	if (err == 1) {
		err = waiter_wait(s->seg, waiter, key_idx, s->who, deadline, &tok);
		/* Out of the queue (granted and consumed, or timed out and
		 * unlinked): no longer a request a duplicate check must find.
		 * Anything else may have left it queued: keep counting it. */
		if (!err || err == -ETIMEDOUT)
			atomic_fetch_sub_explicit(&s->hints.queued, 1, memory_order_relaxed);
		api_note_wait(s, key, err, since, key_idx, tok);
		if (!err && cluster_grant_void(s->seg, k)) {
			/* Handed over under a lease the host no longer holds:
			 * a releaser stopped inside the key's mutex went on
			 * with its handoff after the key was shut. Give the
			 * hold back and queue again, as if never granted. */
			err = release_slow(s, key, len);
			/* Not held: the broker ended it as it shut the key. */
			if (err == -LOCAL_ENOTHELD || err == -LOCAL_EEXPIRED ||
			    err == -LOCAL_ECLUSTER)
				err = 0;
			if (!err && (!deadline || mono_ns() < deadline))
				goto again;
			err = err ? err : -ETIMEDOUT;
		}
	} else if (err == -EALREADY)
		err = -LOCAL_EENQUEUED; /* another thread's request, or local_enqueue() */
	if (!err) {
		api_forget_expiry(s, key_idx);
		if (token)
			*token = tok;
	}
	return err;
}

int api_acquire(local_session *s, const char *key, struct acquire_req *req, int64_t timeout_ms,
		uint64_t *token)
{
	uint32_t key_idx;
	uint64_t tok = 0;
	int err;

	/* The lock-free path has just missed: acquire_slow() checks all. */
	if (req->fast_tried)
		return acquire_slow(s, key, req, timeout_ms, token);
	/* The lock-free path first: it checks the key as it finds it, and
	 * the slow path checks it again from the start. */
	err = session_usable(s);
	if (err)
		return err;
	if (!key)
		return -EINVAL;
	err = fast_acquire(s->seg, key, req, &tok, &s->hints, &key_idx);
	if (err == FAST_MISS)
		return acquire_slow(s, key, req, timeout_ms, token);
	if (!err) {
		api_forget_expiry(s, key_idx);
		if (token)
			*token = tok;
	}
	return err;
}

/* local_lock() when the lock-free path (fast_lock()) did not answer. */
int api_lock_full(local_session *s, const char *key, const struct local_acquire_opts *opts,
		  uint64_t *token)
{
	/* fast_lock() has just tried the lock-free path: not twice. */
	struct acquire_req req = { .kind = LOCAL_KIND_LOCK, .limit = 1, .fast_tried = true };
	struct local_acquire_opts copy;
	int64_t timeout_ms = -1;
	int err;

	if (!s)
		return -EINVAL;
	err = abi_acquire_opts(&opts, &copy);
	if (err)
		return err;
	if (opts) {
		timeout_ms = opts->timeout_ms;
		req.lease_ms = opts->lease_ms;
		req.value = opts->value;
		req.value_len = opts->value_len;
	}
	req.who = s->who;
	req.try_only = timeout_ms == 0;
	return api_acquire(s, key, &req, timeout_ms, token);
}

/* The fast path: the lock-free path first, which goes on to
 * api_lock_full() (a tail call: no frame here) when it cannot answer. */
int local_lock(local_session *s, const char *key, const struct local_acquire_opts *opts,
	       uint64_t *token)
{
	return fast_lock(s, key, opts, token);
}

static int release_slow(local_session *s, const char *key, size_t len)
{
	struct seg_key *k;
	uint32_t h, wake, key_idx;
	uint64_t tok;
	int err;

	/* Deadline 0: this process's own lock patience, as keytab_find(). */
	err = keytab_find_hinted(s->seg, key, len, false, &k, 0, key_hint_idx(&s->hints, key));
	if (err)
		return err == -ENOENT ? -LOCAL_ENOTHELD : err;
	h = key_find_hold_locked(s->seg, k, s->who);
	if (h == IDX_NONE || !session_is(s->seg, s->who)) {
		/* An ending session's holds are the broker's to release, with
		 * its lock-delay: a voluntary release now would skip it. */
		key_unlock(k);
		return api_not_held(s, seg_key_index(s->seg, k), true);
	}
	tok = s->seg->nodes[h].token;
	wake = key_release_hold_locked(s->seg, k, h, REL_VOLUNTARY);
	key_idx = seg_key_index(s->seg, k);
	/* Wake after unlocking: a waiter woken while we still held the mutex
	 * (or preempted us on this CPU) would block on it at its own release,
	 * two more system calls and a switch per handoff. If we die between
	 * the two (HANDOFF_UNLOCKED), the broker wakes it (segment_wake_granted()). */
	key_unlock_giving(s->seg, k);
	if (wake != IDX_NONE) {
		CRASH_POINT(HANDOFF_UNLOCKED);
		waiter_wake(s->seg, wake);
	}
	api_drop_granted_pending(s, key, len, key_idx);
	note_released(s, key_idx, tok);
	return 0;
}

/* local_release() when the lock-free path (fast_unlock()) did not answer. */
int api_release_full(local_session *s, const char *key)
{
	uint32_t idx;
	size_t len;
	int err = api_enter(s, key, &len);

	if (err)
		return err;
	/* fast_unlock() stands aside while any waited hold is noted; a key
	 * that is not one of them may still go lock-free (metrics). */
	if (!atomic_load_explicit(&s->npending, memory_order_relaxed) &&
	    !waited_for(s, key, &idx) && fast_release(s->seg, key, s->who, &s->hints) == 0) {
		/* The hint was stale (the string now names another entry):
		 * the hold released may have been a waited one, so forget
		 * its note (untimed) rather than keep it for ever. */
		if (idx != IDX_NONE && key_hint_idx(&s->hints, key) != idx)
			note_released(s, key_hint_idx(&s->hints, key), 0);
		return 0;
	}
	return release_slow(s, key, len);
}

/* local_release() when fast_unlock() tried the lock-free release just now
 * and it missed: straight to the mutex (not a second try). */
int api_release_tried(local_session *s, const char *key)
{
	size_t len;
	int err = api_enter(s, key, &len);

	return err ? err : release_slow(s, key, len);
}

/* The fast path, as in local_lock(). */
int local_release(local_session *s, const char *key)
{
	return fast_unlock(s, key);
}

static void describe_holder(const struct segment *seg, uint32_t slot, struct local_key_info *out)
{
	const struct seg_session *ss = seg_session_at(seg, slot);

	if (!ss)
		return;
	hex_encode(ss->id, sizeof(ss->id), out->holder_session);
	memcpy(out->holder_name, ss->name, sizeof(out->holder_name));
	out->holder_name[sizeof(out->holder_name) - 1] = '\0';
	out->holder_pid = ss->pid;
}

/* @out: a library-size struct whose sz, value_buf and value_buf_size are
 * the caller's (abi_key_info_in()); the rest is filled here. */
void api_info_clear(struct local_key_info *out)
{
	size_t sz = out->sz, room = out->value_buf_size;
	void *buf = out->value_buf;

	memset(out, 0, sizeof(*out));
	out->sz = sz;
	out->value_buf = buf;
	out->value_buf_size = room;
}

void api_fill_info_locked(struct segment *seg, struct seg_key *k, struct local_key_info *out)
{
	uint64_t vw, now;
	size_t room;
	void *buf;

	api_info_clear(out);
	room = out->value_buf_size;
	buf = out->value_buf;
	out->kind = (int)k->kind;
	out->limit = k->limit;
	out->holders = k->holders;
	out->waiters = k->waiters;
	out->lock_index = atomic_load(&k->lock_index);
	out->modify_index = atomic_load(&k->modify_index);
	now = mono_ns();
	if (k->delay_until_ns > now)
		out->lock_delay_remaining_ms = (k->delay_until_ns - now + 999999) / 1000000;
	if (k->h_head < seg->nnodes) {
		const struct seg_node *h = &seg->nodes[k->h_head];

		out->token = h->token;
		describe_holder(seg, NODE_SESSION(atomic_load(&h->word)), out);
	}
	vw = atomic_load(&k->value_word);
	out->value_len = VALUE_LEN(vw);
	if (buf)
		memcpy(buf, seg_value_buf(seg, seg_key_index(seg, k), VALUE_SEL(vw)),
		       out->value_len < room ? out->value_len : room);
}

int local_info(local_session *s, const char *key, struct local_key_info *out)
{
	struct local_key_info full;
	struct seg_key *k;
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
	abi_key_info_out(out, &full); /* a key that does not exist: all zero */
	if (!session_is(s->seg, s->who))
		return -LOCAL_ESESSION;
	err = api_find_inspect(s, key, len, &k);
	if (err == -ENOENT)
		return 0;
	if (err)
		return err;
	api_fill_info_locked(s->seg, k, &full);
	key_unlock(k);
	abi_key_info_out(out, &full);
	return 0;
}
