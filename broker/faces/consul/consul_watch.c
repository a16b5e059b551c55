// SPDX-License-Identifier: MIT
/*
 * Changes made to watched keys outside this API (liblocal, the CLI, the
 * HTTP and TCP APIs) wake the blocking queries without polling.
 *
 * For each segment key a blocking query reads, the broker's own session
 * holds a watch node on it (NODE_WATCHING, as local_watch() does): the key
 * then leaves the lock-free path, so that every change bumps its
 * modify_index and key_unlock() wakes the futex on it. One thread sleeps
 * in futex_waitv(2) on all of those words at once, plus a control word of
 * its own; when one of them moves it rings the segment's doorbell, which
 * the event loop already serves (leases.c), and consul_doorbell() re-reads
 * the keys' holders there. At most CONSUL_WATCH_MAX keys are watched at
 * once; the queries on others are still woken by this API's own changes
 * and at their deadlines (docs/consul-api.md).
 */
#include <errno.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <syslog.h>
#include <unistd.h>

#include "client.h"
#include "consul_int.h"
#include "crashpoint.h"
#include "futex.h"

#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449
#endif

static uint32_t word_of(struct seg_key *k)
{
	return atomic_load(key_change_futex(k));
}

static void *watch_thread(void *arg)
{
	struct consul *c = arg;
	struct futex_waitv wv[CONSUL_WATCH_MAX + 1];
	uint32_t n, i, ctl;
	bool moved;

	while (!atomic_load(&c->wstop)) {
		pthread_mutex_lock(&c->wlock);
		ctl = atomic_load(&c->ctl);
		memset(wv, 0, sizeof(wv));
		wv[0].uaddr = (uintptr_t)&c->ctl;
		wv[0].val = ctl;
		wv[0].flags = FUTEX_32 | FUTEX_PRIVATE_FLAG;
		n = c->nwatch;
		for (i = 0; i < n; i++) {
			wv[i + 1].uaddr = (uintptr_t)key_change_futex(c->watch[i].k);
			wv[i + 1].val = c->watch[i].expect;
			wv[i + 1].flags = FUTEX_32; /* shared: other processes wake it */
		}
		pthread_mutex_unlock(&c->wlock);
		if (atomic_load(&c->wstop))
			break;
		if (syscall(SYS_futex_waitv, wv, n + 1, 0, NULL, CLOCK_MONOTONIC) < 0 &&
		    errno != EAGAIN && errno != EINTR) {
			blog(LOG_ERR,
			     "consul: futex_waitv: %s; changes made outside the "
			     "Consul API no longer wake blocking queries",
			     strerror(errno));
			break;
		}
		moved = false;
		pthread_mutex_lock(&c->wlock);
		for (i = 0; i < c->nwatch; i++) {
			uint32_t now = word_of(c->watch[i].k);

			if (now != c->watch[i].expect) {
				c->watch[i].expect = now;
				moved = true;
			}
		}
		pthread_mutex_unlock(&c->wlock);
		if (moved)
			broker_ring(c->b->seg.hdr);
	}
	return NULL;
}

static void kick(struct consul *c)
{
	atomic_fetch_add(&c->ctl, 1);
	syscall(SYS_futex, &c->ctl, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

int consul_watch_start(struct consul *c)
{
	int err;

	pthread_mutex_init(&c->wlock, NULL);
	err = pthread_create(&c->wthread, NULL, watch_thread, c);
	if (err)
		return -err;
	c->wthread_running = true;
	return 0;
}

/* Our watch node on @k (as local_watch()'s watch_begin()), under its mutex. */
static int arm(struct consul *c, struct cwatch *w)
{
	struct segment *seg = &c->b->seg;
	local_session *s = c->self;
	struct seg_key *k;
	uint32_t node;
	int err;

	err = keytab_find_until(seg, w->key, strlen(w->key), true, &k, 0);
	if (err)
		return err;
	node = node_claim(seg, seg->caps.max_holds, seg->caps.max_waiters, s->who.slot,
			  seg_key_index(seg, k), &s->hints.wait);
	if (node == IDX_NONE) {
		key_unlock(k);
		return -LOCAL_EMAXWAITERS;
	}
	seg->nodes[node].session_gen = s->who.gen;
	atomic_store(&seg->nodes[node].word,
		     NODE_PACK(NODE_WATCHING, s->who.slot, seg_key_index(seg, k)));
	atomic_fetch_add(&k->watchers, 1);
	w->k = k;
	w->node = node;
	w->expect = word_of(k);
	key_unlock(k);
	return 0;
}

static void disarm(struct consul *c, struct cwatch *w)
{
	struct segment *seg = &c->b->seg;
	local_session *s = c->self;
	uint64_t word = NODE_PACK(NODE_WATCHING, s->who.slot, seg_key_index(seg, w->k));

	if (key_lock(seg, w->k))
		return; /* a stalled key: the session's end frees the node */
	/* CAS: a repair may have dropped it. */
	if (atomic_compare_exchange_strong(&seg->nodes[w->node].word, &word, 0))
		atomic_fetch_sub(&w->k->watchers, 1);
	key_unlock(w->k);
}

static struct cwatch *watched(struct consul *c, const char *key)
{
	uint32_t i;

	for (i = 0; i < c->nwatch; i++)
		if (!strcmp(c->watch[i].key, key))
			return &c->watch[i];
	return NULL;
}

static bool full_logged;

static void want(struct consul *c, const char *key)
{
	struct cwatch *w = watched(c, key);

	if (w) {
		w->want = true;
		return;
	}
	if (c->nwatch >= CONSUL_WATCH_MAX) {
		if (!full_logged)
			blog(LOG_WARNING,
			     "consul: over %d keys under blocking queries; changes "
			     "made outside the Consul API to the others wake no one",
			     CONSUL_WATCH_MAX);
		full_logged = true;
		return;
	}
	w = &c->watch[c->nwatch];
	memset(w, 0, sizeof(*w));
	snprintf(w->key, sizeof(w->key), "%s", key);
	if (arm(c, w))
		return;
	w->want = true;
	c->nwatch++;
}

void consul_watch_update(struct consul *c)
{
	uint32_t i, before;

	if (!c->self)
		return;
	pthread_mutex_lock(&c->wlock);
	before = c->nwatch;
	for (i = 0; i < c->nwatch; i++)
		c->watch[i].want = false;
	for (i = 0; i < c->nwaits; i++) {
		const struct cwait *w = &c->waits[i];

		if (!w->r || w->kind == CW_SESSIONS)
			continue;
		if (w->kind == CW_KEY && w->key[0])
			want(c, w->key);
		else
			consul_kv_prefix_keys(c, w->key, want);
	}
	for (i = 0; i < c->nwatch;) {
		if (c->watch[i].want) {
			i++;
			continue;
		}
		disarm(c, &c->watch[i]);
		c->watch[i] = c->watch[--c->nwatch];
	}
	pthread_mutex_unlock(&c->wlock);
	if (before || c->nwatch)
		kick(c);
}

void consul_watch_stop(struct consul *c)
{
	uint32_t i;

	if (c->wthread_running) {
		atomic_store(&c->wstop, true);
		kick(c);
		pthread_join(c->wthread, NULL);
		c->wthread_running = false;
	}
	for (i = 0; i < c->nwatch; i++)
		disarm(c, &c->watch[i]);
	c->nwatch = 0;
}
