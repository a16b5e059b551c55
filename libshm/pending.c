// SPDX-License-Identifier: MIT
/* TEMPORARY: calls declared in liblocal.h whose implementation is in
 * progress (issue 3). Each returns -ENOSYS until it moves to its own file.
 * This file must be empty (and deleted) before the issue is closed. */
#include <errno.h>

#include "client.h"

int local_sem_acquire(local_session *s, const char *key, uint32_t limit,
		      const struct local_acquire_opts *opts, uint64_t *token)
{
	(void)s, (void)key, (void)limit, (void)opts, (void)token;
	return -ENOSYS;
}

int local_renew(local_session *s, const char *key, uint32_t lease_ms, uint64_t *remaining_ms)
{
	(void)s, (void)key, (void)lease_ms, (void)remaining_ms;
	return -ENOSYS;
}

int local_held(local_session *s, const char *key, uint64_t *token)
{
	(void)s, (void)key, (void)token;
	return -ENOSYS;
}

int local_enqueue(local_session *s, const char *key, uint32_t limit,
		  const struct local_acquire_opts *opts, int *granted, uint64_t *token)
{
	(void)s, (void)key, (void)limit, (void)opts, (void)granted, (void)token;
	return -ENOSYS;
}

int local_wait(local_session *s, const char *key, int64_t timeout_ms, uint64_t *token)
{
	(void)s, (void)key, (void)timeout_ms, (void)token;
	return -ENOSYS;
}

int local_watch(local_session *s, const char *key, uint64_t after_index, int64_t timeout_ms,
		struct local_key_info *out)
{
	(void)s, (void)key, (void)after_index, (void)timeout_ms, (void)out;
	return -ENOSYS;
}

int local_check_token(local_session *s, const char *key, uint64_t token)
{
	(void)s, (void)key, (void)token;
	return -ENOSYS;
}

int local_holders(local_session *s, const char *key,
		  int (*cb)(const struct local_holder *h, void *arg), void *arg)
{
	(void)s, (void)key, (void)cb, (void)arg;
	return -ENOSYS;
}

int local_keys(local_session *s, const char *prefix,
	       int (*cb)(const char *key, const struct local_key_info *ki, void *arg), void *arg)
{
	(void)s, (void)prefix, (void)cb, (void)arg;
	return -ENOSYS;
}

int local_sessions(local_session *s, int (*cb)(const struct local_session_info *si, void *arg),
		   void *arg)
{
	(void)s, (void)cb, (void)arg;
	return -ENOSYS;
}

int local_stats(local_session *s, struct local_stats *out)
{
	(void)s, (void)out;
	return -ENOSYS;
}

int local_force_release(local_session *s, const char *key, const char *holder_id)
{
	(void)s, (void)key, (void)holder_id;
	return -ENOSYS;
}

int local_session_destroy(local_session *s, const char *session_id)
{
	(void)s, (void)session_id;
	return -ENOSYS;
}
