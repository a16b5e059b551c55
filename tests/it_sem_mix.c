// SPDX-License-Identifier: MIT
/*
 * Semaphore holds taken every way at once: processes on 40 semaphores
 * (limit 3) each acquire one lock-free, with a value (the mutex path), or
 * two-phase (enqueue, then wait), then ask again with a try, which must
 * answer the same token at once (one slot per session, however the slot was
 * granted and whatever path the others took meanwhile), and release. The
 * holders are counted in a shared table from a snapshot (as the soak does),
 * which must never show more than the limit. This is the mix that found a
 * re-acquire granting a second slot in a lock-free holders prototype.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker_fixture.h"
#include "harness.h"

#define MIX_PROCS 8
#define MIX_ITERS 8000
#define MIX_LIMIT 3
/* More keys than a session has entries for its lock-free semaphore holds
 * (16 in the prototype that failed), so that keys share entries. */
#define MIX_KEYS 40

struct mix {
	_Atomic uint32_t inside[MIX_KEYS][MIX_PROCS]; /* 1 while that process holds key k */
	_Atomic uint64_t changes[MIX_KEYS];	      /* counts each store to inside[k][] */
	char what[256];				      /* the first failure, from a child */
	_Atomic int failed;
};

__attribute__((format(printf, 2, 3))) static void mix_fail(struct mix *m, const char *fmt, ...)
{
	va_list ap;
	int was = 0;

	if (!atomic_compare_exchange_strong(&m->failed, &was, 1))
		_exit(1);
	va_start(ap, fmt);
	vsnprintf(m->what, sizeof(m->what), fmt, ap);
	va_end(ap);
	_exit(1);
}

static void mix_mark(struct mix *m, unsigned k, unsigned me, uint32_t v)
{
	atomic_store(&m->inside[k][me], v);
	atomic_fetch_add(&m->changes[k], 1);
}

/* Holders of key @k now, from reads no change came between. */
static unsigned mix_count(struct mix *m, unsigned k)
{
	uint32_t seen[MIX_PROCS];
	uint64_t before;
	unsigned i, n = 0;

	do {
		before = atomic_load(&m->changes[k]);
		for (i = 0; i < MIX_PROCS; i++)
			seen[i] = atomic_load(&m->inside[k][i]);
	} while (atomic_load(&m->changes[k]) != before);
	for (i = 0; i < MIX_PROCS; i++)
		n += seen[i];
	return n;
}

static void mix_child(const struct broker_proc *b, struct mix *m, unsigned me)
{
	LOCAL_OPTS(local_acquire_opts, try, .timeout_ms = 0);
	local_session *s = open_session(b, "mix", 0, 0);
	unsigned seed = me * 7919u + 1;
	int i, rc;

	for (i = 0; i < MIX_ITERS; i++) {
		LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 10000);
		unsigned k = (unsigned)rand_r(&seed) % MIX_KEYS, how = (unsigned)rand_r(&seed) % 3;
		char key[16];
		uint64_t tok = 0, again = 0;
		int granted = 0;

		snprintf(key, sizeof(key), "mix/%u", k);
		if (how == 1) {
			o.value = "v";
			o.value_len = 1;
		}
		if (how == 2) {
			rc = local_enqueue(s, key, MIX_LIMIT, &o, &granted, &tok);
			if (!rc && !granted)
				rc = local_wait(s, key, 10000, &tok);
		} else {
			rc = local_sem_acquire(s, key, MIX_LIMIT, &o, &tok);
		}
		if (rc)
			mix_fail(m, "proc %u, round %d: acquire (way %u) %s: %s", me, i, how, key,
				 local_strerror(rc));
		mix_mark(m, k, me, 1);
		if (mix_count(m, k) > MIX_LIMIT)
			mix_fail(m, "proc %u, round %d: %u holders of %s, limit %d", me, i,
				 mix_count(m, k), key, MIX_LIMIT);
		rc = local_sem_acquire(s, key, MIX_LIMIT, &try, &again);
		if (rc || again != tok)
			mix_fail(m,
				 "proc %u, round %d: asked again (way %u) %s: %s, token %llu, held "
				 "%llu",
				 me, i, how, key, local_strerror(rc), (unsigned long long)again,
				 (unsigned long long)tok);
		if (rand_r(&seed) % 4 == 0) /* hold a while: others hold beside us */
			usleep((useconds_t)(rand_r(&seed) % 200));
		mix_mark(m, k, me, 0);
		rc = local_release(s, key);
		if (rc)
			mix_fail(m, "proc %u, round %d: release %s: %s", me, i, key,
				 local_strerror(rc));
	}
	_exit(0);
}

TEST(sem_mix, every_way_of_granting_keeps_one_slot_per_session, 120)
{
	struct mix *m =
		mmap(NULL, sizeof(*m), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct broker_proc b;
	pid_t pids[MIX_PROCS];
	unsigned i;
	int st, bad = 0;

	CHECK(m != MAP_FAILED);
	memset(m, 0, sizeof(*m));
	broker_start(&b, NULL);
	fflush(NULL);
	for (i = 0; i < MIX_PROCS; i++) {
		pids[i] = fork();
		CHECK(pids[i] >= 0);
		if (pids[i] == 0)
			mix_child(&b, m, i);
	}
	for (i = 0; i < MIX_PROCS; i++) {
		CHECK(waitpid(pids[i], &st, 0) == pids[i]);
		bad += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
	}
	if (m->what[0])
		FAIL_AT("%s", m->what);
	CHECK_EQ(bad, 0);
	broker_stop_clean(&b);
}
