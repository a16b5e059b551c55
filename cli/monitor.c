// SPDX-License-Identifier: MIT
/*
 * Notice a lost hold within milliseconds: a thread blocks in local_watch()
 * (a futex on the key's change counter) and asks local_held() after every
 * change. Nothing polls: the thread sleeps until the key changes.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "lock.h"

#define RETRY_PAUSE_MS 1000 /* between watch retries, as consul lock does */

const char *monitor_reason(int code)
{
	switch (-code) {
	case LOCAL_EEXPIRED:
		return "its lease expired";
	case LOCAL_ENOTHELD:
		return "it was released by an operator, or expired";
	case LOCAL_ESESSION:
		return "the session ended (TTL expired or destroyed by an operator)";
	case LOCAL_ECLUSTER:
		return "this host lost the cluster key's lock (etcd lease not renewed)";
	default:
		return local_strerror(code);
	}
}

static void lost(struct monitor *m, int code)
{
	uint64_t one = 1;

	atomic_store(&m->lost, code);
	(void)!write(m->efd, &one, sizeof(one));
}

/* Wait before retrying a failed watch; false if asked to stop meanwhile. */
static bool pause_retry(struct monitor *m)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += RETRY_PAUSE_MS / 1000;
	pthread_mutex_lock(&m->mu);
	while (!atomic_load(&m->stop))
		if (pthread_cond_timedwait(&m->cv, &m->mu, &ts) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&m->mu);
	return !atomic_load(&m->stop);
}

/* Does the session still hold the key, with the token it was granted? */
static int check(struct monitor *m)
{
	uint64_t token = 0;
	int r = local_held(m->s, m->key, &token);

	if (!r && token != m->token)
		r = -LOCAL_ENOTHELD;
	return r;
}

static void *monitor_main(void *arg)
{
	struct monitor *m = arg;
	struct local_key_info *ki = calloc(1, sizeof(*ki));
	uint64_t index = 0;
	uint32_t failures = 0;
	int r;

	if (!ki) {
		lost(m, -ENOMEM);
		return NULL;
	}
	ki->sz = sizeof(*ki); /* sized struct; no value wanted */
	for (;;) {
		/* The check follows the index it waits from: a change after
		 * the check wakes the watch, one before it is seen by it. */
		r = check(m);
		if (atomic_load(&m->stop))
			break;
		if (r == -ETIMEDOUT) {
			/* The key's lock word stayed taken (a stopped client, or
			 * one that wrote someone else's pid there): no answer is
			 * not a loss. Nothing changes the hold while the word is
			 * taken; ask again. */
			if (!pause_retry(m))
				break;
			continue;
		}
		if (r) {
			lost(m, r);
			break;
		}
		r = local_watch(m->s, m->key, index, -1, ki);
		if (atomic_load(&m->stop))
			break;
		if (!r) {
			index = ki->modify_index;
			failures = 0;
			continue;
		}
		/* The session ending is a loss, not a monitoring failure. */
		if (r == -LOCAL_ESESSION || r == -LOCAL_EFORKED || r == -LOCAL_ECLUSTER ||
		    failures++ >= m->retries) {
			lost(m, r);
			break;
		}
		if (!pause_retry(m))
			break;
	}
	free(ki);
	return NULL;
}

int monitor_start(struct monitor *m, local_session *s, const char *key, uint64_t token,
		  uint32_t retries)
{
	pthread_condattr_t ca;
	int err;

	m->s = s;
	m->key = key;
	m->token = token;
	m->retries = retries;
	atomic_init(&m->lost, 0);
	atomic_init(&m->stop, false);
	m->running = false;
	m->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (m->efd < 0)
		return -errno;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&m->cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&m->mu, NULL);
	err = -pthread_create(&m->thread, NULL, monitor_main, m);
	if (err) {
		close(m->efd);
		m->efd = -1;
		return err;
	}
	m->running = true;
	return 0;
}

void monitor_stop(struct monitor *m)
{
	if (!m->running)
		return;
	pthread_mutex_lock(&m->mu);
	atomic_store(&m->stop, true);
	pthread_cond_signal(&m->cv);
	pthread_mutex_unlock(&m->mu);
}

int monitor_join(struct monitor *m)
{
	struct timespec ts;
	int err = 0;

	if (m->running) {
		/* pthread_timedjoin_np() measures against CLOCK_REALTIME. */
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		err = -pthread_timedjoin_np(m->thread, NULL, &ts);
		if (err)
			return err;
		m->running = false;
		pthread_cond_destroy(&m->cv);
		pthread_mutex_destroy(&m->mu);
	}
	if (m->efd >= 0)
		close(m->efd);
	m->efd = -1;
	return 0;
}
