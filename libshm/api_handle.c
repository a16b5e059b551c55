// SPDX-License-Identifier: MIT
/*
 * Key handles: a key of one session, checked and hashed once, so that the
 * calls by handle skip finding the key by name (fastpath.c, "Key handles",
 * has the lock-free part and why its check of the cached entry is enough).
 * A handle keeps its key's name: whatever it cannot answer lock-free goes to
 * the calls by name with it, which check and report everything.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"

int local_key_open(local_session *s, const char *key, local_key **out)
{
	local_key *h;
	size_t len;
	int err;

	if (out)
		*out = NULL;
	if (!out)
		return -EINVAL;
	err = api_enter(s, key, &len);
	if (err)
		return err;
	h = malloc(sizeof(*h) + len + 1);
	if (!h)
		return -ENOMEM;
	h->s = s;
	atomic_init(&h->cache, HCACHE_NONE);
	atomic_init(&h->kept, IDX_NONE);
	h->kept_busy = false;
	atomic_init(&h->owner, 0);
	h->hash = key_hash(key, len);
	h->len = (uint32_t)len;
	memcpy(h->name, key, len + 1);
	pthread_mutex_lock(&s->handles_lock);
	h->prev = NULL;
	h->next = s->handles;
	if (s->handles)
		s->handles->prev = h;
	s->handles = h;
	pthread_mutex_unlock(&s->handles_lock);
	*out = h;
	return 0;
}

/* Every handle of @s still open gives its node back: the session's sweep
 * waits for nodes in flight, and the caller is about to end it (closing a
 * session with handles open is the caller's mistake, but it must not keep
 * the session's slot from being freed until this process exits). */
void api_handles_unpark(local_session *s)
{
	local_key *h;

	pthread_mutex_lock(&s->handles_lock);
	for (h = s->handles; h; h = h->next)
		fast_key_unpark(h);
	pthread_mutex_unlock(&s->handles_lock);
}

int local_key_close(local_key *k)
{
	int err;

	if (!k)
		return -EINVAL;
	/* In a child after fork() the session is the parent's, and so is
	 * the handle, with the node it keeps: the child frees its copy and
	 * is told so (its copy of the list, and of its lock, it leaves). */
	err = session_usable(k->s);
	if (!err) {
		local_session *s = k->s;

		fast_key_unpark(k);
		pthread_mutex_lock(&s->handles_lock);
		if (k->prev)
			k->prev->next = k->next;
		else
			s->handles = k->next;
		if (k->next)
			k->next->prev = k->prev;
		pthread_mutex_unlock(&s->handles_lock);
	}
	free(k);
	return err;
}

const char *local_key_name(const local_key *k)
{
	return k ? k->name : "";
}

/* The lock-free path first, which goes on to the calls by name when it
 * cannot answer (a tail call, as local_lock()). */
int local_key_lock(local_key *k, const struct local_acquire_opts *opts, uint64_t *token)
{
	return k ? fast_key_lock(k, opts, token) : -EINVAL;
}

int local_key_sem_acquire(local_key *k, uint32_t limit, const struct local_acquire_opts *opts,
			  uint64_t *token)
{
	return k ? fast_key_sem_acquire(k, limit, opts, token) : -EINVAL;
}

int local_key_release(local_key *k)
{
	return k ? fast_key_release(k) : -EINVAL;
}
