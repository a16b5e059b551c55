// SPDX-License-Identifier: MIT
/* Semaphores and two-phase acquire (enqueue, then wait). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "abi.h" /* sized options */
#include "client.h"
#include "clock.h"

static void req_from_opts(struct acquire_req *req, local_session *s, uint32_t limit,
			  const struct local_acquire_opts *opts)
{
	memset(req, 0, sizeof(*req));
	req->who = s->who;
	req->kind = limit ? LOCAL_KIND_SEMAPHORE : LOCAL_KIND_LOCK;
	req->limit = limit ? limit : 1;
	if (opts) {
		req->lease_ms = opts->lease_ms;
		req->value = opts->value;
		req->value_len = opts->value_len;
	}
}

/* local_sem_acquire() when the lock-free path (fast_sem_acquire()) did not
 * answer. */
int api_sem_acquire_full(local_session *s, const char *key, uint32_t limit,
			 const struct local_acquire_opts *opts, uint64_t *token)
{
	struct local_acquire_opts copy; /* sized options, checked in abi.c */
	struct acquire_req req;
	int64_t timeout_ms;
	int err = abi_acquire_opts(&opts, &copy);

	if (err)
		return err;
	timeout_ms = opts ? opts->timeout_ms : -1;
	if (!s || limit < 1 || (opts && opts->value_len && !opts->value))
		return -EINVAL;
	req_from_opts(&req, s, limit, opts);
	req.try_only = timeout_ms == 0;
	req.fast_tried = true; /* fast_sem_acquire() has just tried: not twice */
	return api_acquire(s, key, &req, timeout_ms, token);
}

int local_sem_acquire(local_session *s, const char *key, uint32_t limit,
		      const struct local_acquire_opts *opts, uint64_t *token)
{
	return fast_sem_acquire(s, key, limit, opts, token);
}

static struct pending **find_pending(local_session *s, const char *key, size_t len)
{
	struct pending **p;

	for (p = &s->pending; *p; p = &(*p)->next)
		if ((*p)->len == len && !memcmp((*p)->key, key, len))
			return p;
	return p;
}

static void remember(local_session *s, struct pending *p, const char *key, size_t len,
		     uint32_t node, uint32_t key_idx)
{
	memcpy(p->key, key, len);
	p->len = len;
	p->node = node;
	p->key_idx = key_idx;
	pthread_mutex_lock(&s->pending_lock);
	p->next = s->pending;
	s->pending = p;
	atomic_fetch_add(&s->npending, 1);
	pthread_mutex_unlock(&s->pending_lock);
}

/* Remove @s's pending request for @key; NULL if there is none. */
static struct pending *take_pending(local_session *s, const char *key, size_t len)
{
	struct pending **pp, *p;

	pthread_mutex_lock(&s->pending_lock);
	pp = find_pending(s, key, len);
	p = *pp;
	if (p) {
		*pp = p->next;
		atomic_fetch_sub(&s->npending, 1);
	}
	pthread_mutex_unlock(&s->pending_lock);
	return p;
}

int local_enqueue(local_session *s, const char *key, uint32_t limit,
		  const struct local_acquire_opts *opts, int *granted, uint64_t *token)
{
	uint32_t waiter = IDX_NONE, key_idx;
	struct local_acquire_opts copy; /* sized options, checked in abi.c */
	struct acquire_req req;
	struct pending *p;
	struct seg_key *k;
	uint64_t tok = 0;
	size_t len;
	int err;

	err = abi_acquire_opts(&opts, &copy);
	if (err)
		return err;
	if (!granted || (opts && opts->value_len && !opts->value))
		return -EINVAL;
	err = api_enter(s, key, &len);
	if (err)
		return err;
	/* Allocated first: once queued, the request must be remembered. */
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	req_from_opts(&req, s, limit, opts);
	pthread_mutex_lock(&s->pending_lock);
	err = *find_pending(s, key, len) ? -LOCAL_EENQUEUED : 0;
	pthread_mutex_unlock(&s->pending_lock);
	if (!err)
		err = keytab_find(s->seg, key, len, true, &k);
	if (err) {
		free(p);
		return err;
	}
	if (key_find_hold_locked(s->seg, k, s->who) != IDX_NONE)
		err = -LOCAL_EENQUEUED; /* holding already: nothing to queue for */
	else
		err = key_acquire_locked(s->seg, k, &req, &tok, &waiter, &s->hints);
	key_idx = seg_key_index(s->seg, k);
	key_unlock(k);
	if (err <= 0)
		free(p);
	if (err == -EALREADY)
		return -LOCAL_EENQUEUED;
	if (err < 0)
		return err;
	*granted = err == 0;
	if (err == 0) {
		api_forget_expiry(s, key_idx);
		if (token)
			*token = tok;
		return 0;
	}
	p->queued_ns = mono_ns(); /* metrics */
	remember(s, p, key, len, waiter, key_idx);
	return 0;
}

int local_wait(local_session *s, const char *key, int64_t timeout_ms, uint64_t *token)
{
	uint64_t deadline = timeout_ms >= 0 ? deadline_after_ms(timeout_ms) : 0;
	struct pending *p;
	uint64_t tok = 0;
	size_t len;
	int err;

	err = api_enter(s, key, &len);
	if (err)
		return err;
	p = take_pending(s, key, len); /* one waiter per request */
	if (!p)
		return -LOCAL_ENOTENQUEUED;
	err = waiter_wait(s->seg, p->node, p->key_idx, s->who, deadline, &tok);
	if (!err) {
		struct seg_key *k = seg_key_at(s->seg, p->key_idx);

		/* A grant handed over under a lease the host no longer holds
		 * (acquire_slow() queues again; a two-phase request cannot):
		 * give it back and say the host lost the key. */
		if (k && cluster_grant_void(s->seg, k)) {
			/* Not held any more (the broker ended it as it shut the
			 * key) or given back now: either way, not granted. */
			err = api_release_tried(s, key);
			if (!err || err == -LOCAL_ENOTHELD || err == -LOCAL_EEXPIRED)
				err = -LOCAL_ECLUSTER;
		}
	}
	/* Out of the queue: the duplicate check may skip its walk again once
	 * the session has no other request queued (as acquire_slow()). */
	if (!err || err == -ETIMEDOUT)
		atomic_fetch_sub_explicit(&s->hints.queued, 1, memory_order_relaxed);
	if (p->queued_ns) /* metrics */
		api_note_wait(s, key, err, p->queued_ns, p->key_idx, tok);
	if (!err)
		api_forget_expiry(s, p->key_idx);
	free(p);
	if (!err && token)
		*token = tok;
	return err;
}

void api_drop_granted_pending(local_session *s, const char *key, size_t len, uint32_t key_idx)
{
	struct pending **pp, *p;
	uint64_t granted = NODE_PACK(NODE_GRANTED, s->who.slot, key_idx);

	/* Most sessions never queue with local_enqueue(): one load, no lock.
	 * (A request not yet remembered is missed either way.) */
	if (!atomic_load_explicit(&s->npending, memory_order_relaxed))
		return;
	pthread_mutex_lock(&s->pending_lock);
	pp = find_pending(s, key, len);
	p = *pp;
	/* Granted and then released without a local_wait(): the request is
	 * over; a later wait must not hand out the released hold's token. */
	if (p && atomic_compare_exchange_strong(&s->seg->nodes[p->node].word, &granted, 0)) {
		*pp = p->next;
		atomic_fetch_sub(&s->npending, 1);
		atomic_fetch_sub_explicit(&s->hints.queued, 1, memory_order_relaxed);
	} else
		p = NULL;
	pthread_mutex_unlock(&s->pending_lock);
	free(p);
}

int api_pending_arm(local_session *s, const char *key)
{
	return api_pending_arm_word(s, key, NULL, NULL);
}

int api_pending_arm_word(local_session *s, const char *key, _Atomic uint64_t **word,
			 uint64_t *waiting)
{
	struct pending *p;
	size_t len;
	int err;

	err = api_enter(s, key, &len);
	if (err)
		return err;
	pthread_mutex_lock(&s->pending_lock);
	p = *find_pending(s, key, len);
	err = !p							 ? -LOCAL_ENOTENQUEUED
	      : waiter_arm_doorbell(s->seg, p->node, p->key_idx, s->who) ? 0
									 : 1;
	if (p && word) {
		*word = &s->seg->nodes[p->node].word;
		*waiting = NODE_PACK(NODE_WAITING, s->who.slot, p->key_idx);
	}
	pthread_mutex_unlock(&s->pending_lock);
	return err;
}

int api_pending_poll(local_session *s, const char *key, bool cancel, uint64_t *token)
{
	struct pending *p;
	uint64_t tok = 0;
	size_t len;
	int err;

	err = api_enter(s, key, &len);
	if (err)
		return err;
	p = take_pending(s, key, len);
	if (!p)
		return -LOCAL_ENOTENQUEUED;
	err = waiter_poll(s->seg, p->node, p->key_idx, s->who, cancel, &tok);
	if (err == -EAGAIN) {
		remember(s, p, key, len, p->node, p->key_idx); /* still queued */
		return err;
	}
	if (p->queued_ns && (!err || cancel)) /* metrics (a cancel gave up) */
		api_note_wait(s, key, err ? -ETIMEDOUT : 0, p->queued_ns, p->key_idx, tok);
	if (!err)
		api_forget_expiry(s, p->key_idx);
	free(p);
	if (!err && token)
		*token = tok;
	return err;
}
