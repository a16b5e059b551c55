// SPDX-License-Identifier: MIT
/*
 * 9. Scaling with cores: N processes, each locking and releasing its own key
 *    in a loop, for N = 1, 2 and every online CPU; next to N processes each
 *    locking its own robust process-shared pthread mutex (in its own cache
 *    line) in the same run. Nothing is shared between the processes but
 *    whatever the lock implementation shares, so the throughput should grow
 *    N-fold (the aim: >= 0.9 N x one process).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#define SCALE_ROUNDS 9
#define SCALE_RUN_NS (100 * NSEC_PER_MSEC)
#define SCALE_WARMUP 20000 /* lock+release pairs before the barrier */

struct scale_slot {
	_Alignas(64) _Atomic uint64_t ops;
	_Atomic uint64_t cpu_ns; /* CPU time of the timed loop */
	pthread_mutex_t mutex;	 /* the robust mutex of this process, alone in its lines */
};

enum scale_mode { SCALE_LIBLOCAL, SCALE_MUTEX, SCALE_COMPUTE };

struct scale_shared {
	_Atomic int mode; /* enum scale_mode */
	struct scale_slot slot[MAX_KIDS];
};

static struct scale_shared *ss;

static int lock_loop(local_session *s, const char *key, uint64_t n)
{
	static const LOCAL_OPTS(local_acquire_opts, try_once, .timeout_ms = 0);
	int err = 0;

	while (n-- && !err) {
		err = local_lock(s, key, &try_once, NULL);
		if (!err)
			err = local_release(s, key);
	}
	return err;
}

static int mutex_loop(pthread_mutex_t *m, uint64_t n)
{
	int err = 0;

	while (n-- && !err) {
		err = pthread_mutex_lock(m);
		if (!err)
			err = pthread_mutex_unlock(m);
	}
	return -err;
}

/* No lock at all: a chain of multiplies, as a gauge of what the cores give
 * to work that shares nothing (on a VM, two vCPUs may share a core). */
static int compute_loop(struct scale_slot *me, uint64_t n)
{
	uint64_t x = n;

	while (n--) {
		int i;

		for (i = 0; i < 24; i++)
			x = x * 6364136223846793005ull + 1442695040888963407ull;
	}
	atomic_store_explicit(&me->ops,
			      atomic_load_explicit(&me->ops, memory_order_relaxed) ^ (x & 1),
			      memory_order_relaxed);
	return 0;
}

static int run_loop(int mode, struct scale_slot *me, local_session *s, const char *key, uint64_t n)
{
	return mode == SCALE_MUTEX     ? mutex_loop(&me->mutex, n)
	       : mode == SCALE_COMPUTE ? compute_loop(me, n)
				       : lock_loop(s, key, n);
}

/* This process's CPU time: what a loop costs, however much of the machine
 * it got. */
static uint64_t cpu_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

static int scale_child(int idx)
{
	struct scale_slot *me = &ss->slot[idx];
	int mode = atomic_load(&ss->mode);
	local_session *s = NULL;
	uint64_t ops = 0, cpu0;
	char key[64];
	int err = 0;

	snprintf(key, sizeof(key), "bench/scale/%d", idx);
	if (mode == SCALE_LIBLOCAL) {
		err = open_session(&s);
		if (err)
			return child_fail("session open", err);
	}
	/* Warm up: the key exists, is lock-free, and has a large token range. */
	err = run_loop(mode, me, s, key, SCALE_WARMUP);
	if (err)
		return child_fail("warm-up", err);
	err = barrier_wait();
	if (err)
		return err;
	cpu0 = cpu_now_ns();
	while (!atomic_load_explicit(&sh->stop, memory_order_relaxed)) {
		err = run_loop(mode, me, s, key, UNC_BATCH);
		if (err)
			return child_fail("lock loop", err);
		ops += UNC_BATCH;
	}
	atomic_store(&me->cpu_ns, cpu_now_ns() - cpu0);
	atomic_store(&me->ops, ops);
	if (s)
		local_session_close(s);
	return 0;
}

/* One run: @n processes for SCALE_RUN_NS; total lock+release pairs per s,
 * and the CPU time per pair in *cpu_per_op (ns). */
static double scale_run(int n, int mode, double *cpu_per_op)
{
	pid_t pids[MAX_KIDS];
	uint64_t t0, t1, total = 0, cpu = 0;
	int i;

	reset_shared();
	atomic_store(&ss->mode, mode);
	for (i = 0; i < n; i++) {
		atomic_store(&ss->slot[i].ops, 0);
		pids[i] = spawn(scale_child, i);
	}
	t0 = barrier_open(n, "scale");
	sleep_until_ns(t0 + SCALE_RUN_NS);
	atomic_store(&sh->stop, 1);
	t1 = now_ns();
	for (i = 0; i < n; i++)
		reap_ok(pids[i], "scale");
	for (i = 0; i < n; i++) {
		total += atomic_load(&ss->slot[i].ops);
		cpu += atomic_load(&ss->slot[i].cpu_ns);
	}
	*cpu_per_op = total ? (double)cpu / (double)total : 0;
	return (double)total * (double)NSEC_PER_SEC / (double)(t1 - t0);
}

#define NMODES 3
static const char *const mode_name[NMODES] = { "liblocal", "robust mutex", "compute" };

/* Per N > 1 and mode: SCALE_ROUNDS pairs of (1 process, N processes). */
struct scale_series {
	double one[SCALE_ROUNDS], many[SCALE_ROUNDS];
	double one_cpu[SCALE_ROUNDS], many_cpu[SCALE_ROUNDS]; /* ns of CPU per op */
};

void bench_scale(void)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	static struct scale_series ser[2][NMODES]; /* [N index - 1][mode] */
	pthread_mutexattr_t a;
	int ns[3], nn = 0, i, m, r;
	char text[96];

	ns[nn++] = 1;
	ns[nn++] = 2;
	if (cpus > 2)
		ns[nn++] = cpus < MAX_KIDS ? (int)cpus : MAX_KIDS;
	ss = shared_map(sizeof(*ss));
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	for (i = 0; i < MAX_KIDS; i++)
		if (pthread_mutex_init(&ss->slot[i].mutex, &a))
			fatal("pthread_mutex_init");
	pthread_mutexattr_destroy(&a);
	/* Paired: each N-process run next to a one-process run of
	 * the same mode, the order alternating from round to round, so that a
	 * burst of load from elsewhere on the machine hits both sides of a
	 * pair. The figure is the median of the per-pair ratios. */
	for (r = 0; r < SCALE_ROUNDS; r++)
		for (i = 1; i < nn; i++)
			for (m = 0; m < NMODES; m++) {
				struct scale_series *s = &ser[i - 1][m];

				if ((r + m) % 2) {
					s->one[r] = scale_run(1, m, &s->one_cpu[r]);
					s->many[r] = scale_run(ns[i], m, &s->many_cpu[r]);
				} else {
					s->many[r] = scale_run(ns[i], m, &s->many_cpu[r]);
					s->one[r] = scale_run(1, m, &s->one_cpu[r]);
				}
			}
	printf("\n9. Scaling with cores: N processes, each locking and releasing its own key\n");
	printf("   (million lock+release pairs per second, all processes together; %d rounds,\n"
	       "   in each every N-process run of %llu ms is paired with a one-process run of\n"
	       "   the same kind just before or after it; x N=1: the median of the per-pair\n"
	       "   ratios, and their range. robust mutexes: one per process, own lines)\n\n",
	       SCALE_ROUNDS, SCALE_RUN_NS / NSEC_PER_MSEC);
	printf("  %4s %-13s %9s %9s %8s %12s %10s %12s\n", "N", "kind", "N=1 M/s", "N M/s", "x N=1",
	       "min-max", "CPU/op", "min-max");
	for (i = 1; i < nn; i++)
		for (m = 0; m < NMODES; m++) {
			struct scale_series *s = &ser[i - 1][m];
			struct paired p = paired_summary(s->many, s->one, SCALE_ROUNDS);
			struct paired c = paired_summary(s->many_cpu, s->one_cpu, SCALE_ROUNDS);

			printf("  %4d %-13s %9.1f %9.1f %7.2fx %5.2f-%-5.2f %9.2fx %5.2f-%-5.2f\n",
			       ns[i], mode_name[m], p.base / 1e6, p.meas / 1e6, p.ratio, p.ratio_lo,
			       p.ratio_hi, c.ratio, c.ratio_lo, c.ratio_hi);
		}
	printf("\n  (compute: a lock-free multiply loop, what the cores give to work that\n"
	       "   shares nothing: on a shared VM, N processes may get less than N cores.\n"
	       "   CPU/op: CPU time per operation with N processes / alone, same pairs: a\n"
	       "   line written by all would show here as a higher cost, whatever share of\n"
	       "   the machine the runs got; 1.00x is no cost from running side by side)\n");
	for (i = 1; i < nn; i++) {
		struct paired p =
			paired_summary(ser[i - 1][0].many, ser[i - 1][0].one, SCALE_ROUNDS);
		struct paired mx =
			paired_summary(ser[i - 1][1].many, ser[i - 1][1].one, SCALE_ROUNDS);
		struct paired c =
			paired_summary(ser[i - 1][2].many, ser[i - 1][2].one, SCALE_ROUNDS);

		struct paired cost =
			paired_summary(ser[i - 1][0].many_cpu, ser[i - 1][0].one_cpu, SCALE_ROUNDS);

		add_target(p.ratio >= 0.9 * ns[i],
			   "distinct keys, %d processes >= %.1fx one process: %s; robust mutex "
			   "%.2fx, compute %.2fx",
			   ns[i], 0.9 * ns[i], paired_text(&p, text, sizeof(text)), mx.ratio,
			   c.ratio);
		printf("  (liblocal's CPU per lock+release, %d processes / one: %s)\n", ns[i],
		       paired_text(&cost, text, sizeof(text)));
	}
	for (i = 0; i < MAX_KIDS; i++)
		pthread_mutex_destroy(&ss->slot[i].mutex);
	shared_unmap(ss, sizeof(*ss));
}
