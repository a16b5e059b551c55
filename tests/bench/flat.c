// SPDX-License-Identifier: MIT
/*
 * 10. Flat cost: one session's uncontended lock+release of one key while the
 *     segment fills around it, with a broker of its own with raised caps:
 *     10^3, 10^5 and 10^6 live keys, then 10^4 more sessions, then 10^4
 *     waiters asleep on other keys. Each row should cost what the first does.
 *
 * The live keys beyond the first few are written into the key table
 * directly (fill_keys(): what keytab.c's create_locked() writes, where it
 * places them, in fast mode, and indexed), because 10^6 creations through
 * the API, each a round of lock calls, would make the bench slow to fill.
 * They are keys like any other for every lookup, lock and release.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "common.h"

#define FLAT_KEYS_MAX 1000000u
#define FLAT_SESSIONS 10000u
#define FLAT_WAITERS 10000u
#define FLAT_PROBE "bench/flat/probe"

static local_session *probe;
static pthread_mutex_t *control; /* a robust mutex measured in each row too */

static int loop_control(void *arg, uint64_t n)
{
	int err = 0;

	(void)arg;
	while (n-- && !err) {
		err = pthread_mutex_lock(control);
		if (!err)
			err = pthread_mutex_unlock(control);
	}
	return -err;
}

static int loop_probe(void *arg, uint64_t n)
{
	static const LOCAL_OPTS(local_acquire_opts, try_once, .timeout_ms = 0);
	int err = 0;

	(void)arg;
	while (n-- && !err) {
		err = local_lock(probe, FLAT_PROBE, &try_once, NULL);
		if (!err)
			err = local_release(probe, FLAT_PROBE);
	}
	return err;
}

static void key_name(char *out, size_t size, uint32_t i)
{
	snprintf(out, size, "bench/flat/k%u", i);
}

/*
 * Make keys [from, to) live: free entries filled in as create_locked() does,
 * lock kind, in fast mode, and indexed. Nobody else creates keys on this
 * broker while we do (the bench is its only client).
 */
static void fill_keys(struct segment *seg, uint32_t from, uint32_t to)
{
	uint32_t mask = seg->index_size - 1, i, slot, cursor;

	for (i = from; i < to; i++) {
		struct seg_key *k;
		char name[64];
		size_t len;
		uint32_t hash;

		key_name(name, sizeof(name), i);
		len = strlen(name);
		hash = key_hash(name, len);
		/* Where keytab.c places it: the first free entry from its home. */
		cursor = hash % seg->caps.max_keys;
		for (slot = 0; slot < seg->caps.max_keys &&
			       !key_state_free(atomic_load(&seg->keys[cursor].state));
		     slot++)
			cursor = cursor + 1 == seg->caps.max_keys ? 0 : cursor + 1;
		if (slot == seg->caps.max_keys)
			fatal("flat: key table full at %u keys", i);
		k = &seg->keys[cursor];
		k->kind = LOCAL_KIND_LOCK;
		k->limit = 1;
		k->holders = k->waiters = 0;
		k->q_head = k->q_tail = k->h_head = IDX_NONE;
		memcpy(k->key, name, len + 1);
		k->key_len = (uint32_t)len;
		atomic_store(&k->fast_base, FBASE_PACK(1, 0, 0));
		atomic_store(&k->fast, FAST_PACK(0, 0, 1));
		atomic_store(&k->hash, hash);
		atomic_store(&k->state, KEY_USED);
		for (slot = hash & mask; atomic_load(&seg->index[slot]) != 0;
		     slot = (slot + 1) & mask)
			;
		atomic_store(&seg->index[slot], cursor + 1);
		cursor++;
	}
}

/* ---- waiters: one thread each, in a child process ------------------------ */

static const struct broker *flat_broker; /* the child's copy is the same */

static void *waiter_thread(void *p)
{
	local_session *s = ((void **)p)[0];
	uint32_t i = (uint32_t)(uintptr_t)((void **)p)[1];
	char name[64];
	int err;

	key_name(name, sizeof(name), i);
	err = local_lock(s, name, NULL, NULL);
	if (!err)
		err = local_release(s, name);
	if (err)
		child_fail("flat waiter", err);
	return NULL;
}

static int waiters_child(int idx)
{
	static void *args[FLAT_WAITERS][2];
	static pthread_t t[FLAT_WAITERS];
	const struct broker *b = flat_broker;
	pthread_attr_t a;
	local_session *s;
	uint32_t i, n = 0;
	int err;

	(void)idx;
	err = open_session_at(b, &s);
	if (err)
		return child_fail("flat waiters: session", err);
	pthread_attr_init(&a);
	pthread_attr_setstacksize(&a, 64 * 1024);
	for (i = 0; i < FLAT_WAITERS; i++, n++) {
		args[i][0] = s;
		args[i][1] = (void *)(uintptr_t)i;
		if (pthread_create(&t[i], &a, waiter_thread, args[i]))
			break;
	}
	pthread_attr_destroy(&a);
	if (n < FLAT_WAITERS)
		child_fail("flat waiters: pthread_create", -EAGAIN);
	for (i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	local_session_close(s);
	return n < FLAT_WAITERS;
}

/* ---- the section ---------------------------------------------------------- */

struct flat_row {
	const char *what;
	struct op_result r, mutex; /* the mutex: how busy the machine was */
};

static struct flat_row measure_row(const char *what)
{
	struct flat_row row = { .what = what };

	row.mutex = measure_ops(loop_control, NULL, "flat control");
	row.r = measure_ops(loop_probe, NULL, "flat");
	return row;
}

static uint32_t waiters_now(void)
{
	LOCAL_OPTS(local_stats, st);

	return local_stats(probe, &st) ? 0 : st.waiters;
}

void bench_flat(void)
{
	static const char *const extra[] = { "--max-keys",  "1002048",	     "--max-sessions",
					     "10240",	    "--max-waiters", "10240",
					     "--max-holds", "10240",	     "--max-value",
					     "16",	    "--gc-idle",     "0",
					     NULL };
	static local_session *many[FLAT_SESSIONS];
	static const LOCAL_OPTS(local_acquire_opts, try_once, .timeout_ms = 0);
	struct flat_row rows[5];
	struct broker fb;
	struct segment *seg;
	uint64_t deadline;
	uint32_t i, nrows = 0, opened = 0;
	pid_t kid;
	char name[64];
	int err;

	pthread_mutexattr_t ma;

	control = shared_map(sizeof(*control));
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
	if (pthread_mutex_init(control, &ma))
		fatal("flat: pthread_mutex_init");
	pthread_mutexattr_destroy(&ma);
	broker_start(&fb, "flat", extra);
	err = open_session_at(&fb, &probe);
	if (err)
		fatal("flat: session open: %s", local_strerror(err));
	seg = probe->seg;
	if ((err = loop_probe(NULL, 1)))
		fatal("flat: first lock: %s", local_strerror(err));

	fill_keys(seg, 0, 1000 - 1);
	rows[nrows++] = measure_row("10^3 live keys");
	fill_keys(seg, 1000 - 1, 100000 - 1);
	rows[nrows++] = measure_row("10^5 live keys");
	fill_keys(seg, 100000 - 1, FLAT_KEYS_MAX - 1);
	rows[nrows++] = measure_row("10^6 live keys");

	for (; opened < FLAT_SESSIONS; opened++)
		if ((err = open_session_at(&fb, &many[opened])))
			fatal("flat: session %u: %s", opened, local_strerror(err));
	rows[nrows++] = measure_row("10^6 keys, +10^4 sessions");

	/* The probe's session holds 10^4 keys; a child queues a thread on each. */
	for (i = 0; i < FLAT_WAITERS; i++) {
		key_name(name, sizeof(name), i);
		if ((err = local_lock(many[0], name, &try_once, NULL)))
			fatal("flat: hold %s: %s", name, local_strerror(err));
	}
	flat_broker = &fb;
	kid = spawn(waiters_child, 0);
	deadline = now_ns() + 60 * NSEC_PER_SEC;
	while (waiters_now() < FLAT_WAITERS) {
		if (now_ns() > deadline)
			fatal("flat: only %u of %u waiters queued: %s", waiters_now(), FLAT_WAITERS,
			      child_error());
		sleep_ns(10 * NSEC_PER_MSEC);
	}
	sleep_ns(PARK_SETTLE_NS);
	rows[nrows++] = measure_row("... +10^4 waiters on other keys");
	for (i = 0; i < FLAT_WAITERS; i++) {
		key_name(name, sizeof(name), i);
		if ((err = local_release(many[0], name)))
			fatal("flat: release %s: %s", name, local_strerror(err));
	}
	reap_ok(kid, "flat waiters");
	for (i = 0; i < opened; i++)
		local_session_close(many[i]);
	local_session_close(probe);
	broker_stop(&fb, false);

	pthread_mutex_destroy(control);
	shared_unmap(control, sizeof(*control));
	printf("\n10. Flat cost: uncontended lock+release of one key as the segment fills\n");
	printf("   (ns per lock+release pair; best of %d runs of %llu ms; a broker of its own\n"
	       "   with room for 10^6 keys, 10^4 sessions and 10^4 waiters; a robust mutex is\n"
	       "   measured in each row too, as a gauge of how busy the machine was)\n\n",
	       UNC_RUNS, UNC_RUN_NS / NSEC_PER_MSEC);
	printf("  %-34s %9s %9s %9s %9s %11s\n", "segment", "ns/op", "vs first", "mutex ns",
	       "vs first", "liblocal/mx");
	for (i = 0; i < nrows; i++)
		printf("  %-34s %9.1f %8.2fx %9.1f %8.2fx %10.2fx\n", rows[i].what, rows[i].r.best,
		       rows[i].r.best / rows[0].r.best, rows[i].mutex.best,
		       rows[i].mutex.best / rows[0].mutex.best,
		       rows[i].r.best / rows[i].mutex.best);
	for (i = 1; i < nrows; i++) {
		double grew = (rows[i].r.best / rows[i].mutex.best) /
			      (rows[0].r.best / rows[0].mutex.best);

		add_target(grew <= 1.25,
			   "flat cost: %s <= 1.25x 10^3 keys, against the mutex (%.2fx)",
			   rows[i].what, grew);
	}
}
