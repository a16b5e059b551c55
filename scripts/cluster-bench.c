// SPDX-License-Identifier: MIT
/*
 * Cluster keys (docs/cluster.md): one process per socket given takes and
 * releases KEY in a loop for SECONDS, each waiting after its release until
 * another process has had the key (so every grant is a handoff: between
 * processes, or between hosts when each process is on its own host); prints
 * handoffs per second. scripts/cluster-bench.sh builds and runs it.
 * Usage: cluster-bench KEY SECONDS SOCKET...
 *        cluster-bench -h LOCAL_KEY CLUSTER_KEY SECONDS SOCKET...: the same,
 *        the processes switching between the two keys together every 20 ms;
 *        prints each key's handoffs per second.
 *        cluster-bench -u LOCAL_KEY CLUSTER_KEY SECONDS SOCKET: one process
 *        alone, lock+release of each key in alternating batches
 *        (uncontended); prints the median ns per lock+release of each.
 */
#include <sched.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "liblocal.h"

struct shared {
	_Atomic int ready;
	_Atomic int last;
	_Atomic long grants, changes, overlaps;
	_Atomic int inside;
	_Atomic int stop;
	/* -h: which key the processes take now (keys[phase & 1]), and the
	 * handoffs counted on each */
	_Atomic int phase;
	_Atomic long kchanges[2];
};

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Take keys[phase & 1] in turns with the other processes until told to
 * stop, counting the grants that changed hands. */
static void run(struct shared *sh, const char *sock, const char *const keys[2], int me, int n)
{
	struct local_session_opts o;
	local_session *s;
	long grants = 0, changes[2] = { 0, 0 };

	local_session_opts_init(&o);
	o.socket_path = sock;
	o.lock_delay_ms = 0;
	if (local_session_open(&o, &s))
		_exit(1);
	if (local_lock(s, keys[0], NULL, NULL) || local_release(s, keys[0]) ||
	    local_lock(s, keys[1], NULL, NULL) || local_release(s, keys[1]))
		_exit(2);
	atomic_fetch_add(&sh->ready, 1);
	while (atomic_load(&sh->ready) < n)
		;
	while (!atomic_load(&sh->stop)) {
		int p = atomic_load(&sh->phase) & 1;

		if (local_lock(s, keys[p], NULL, NULL))
			_exit(3);
		if (atomic_fetch_add(&sh->inside, 1))
			atomic_fetch_add(&sh->overlaps, 1);
		if (atomic_exchange(&sh->last, me) != me)
			changes[p]++;
		grants++;
		atomic_fetch_sub(&sh->inside, 1);
		local_release(s, keys[p]);
		while (atomic_load(&sh->last) == me && !atomic_load(&sh->stop))
			sched_yield(); /* alternate: the next grant is someone else's */
	}
	atomic_fetch_add(&sh->grants, grants);
	atomic_fetch_add(&sh->changes, changes[0] + changes[1]);
	atomic_fetch_add(&sh->kchanges[0], changes[0]);
	atomic_fetch_add(&sh->kchanges[1], changes[1]);
	local_session_close(s);
	_exit(0);
}

static void nap(double secs)
{
	struct timespec t = { (time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9) };

	nanosleep(&t, NULL);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* ns per lock+release of @key over one batch of @n. */
static double batch(local_session *s, const char *key, int n)
{
	double t0 = now();
	int i;

	for (i = 0; i < n; i++)
		if (local_lock(s, key, NULL, NULL) || local_release(s, key))
			_exit(3);
	return (now() - t0) * 1e9 / n;
}

#define BATCH 1000
#define MAX_BATCHES 100000

/*
 * One process, lock+release of @lk and @ck (a host-local and a cluster key)
 * in alternating batches of BATCH for @secs, after a warm-up (the first
 * lock of a cluster key waits for the host to take its etcd lock): the
 * machine's load falls on both alike. Prints the median ns of each key's
 * batches (a batch a preemption hit does not move it).
 */
static int uncontended(const char *lk, const char *ck, double secs, const char *sock)
{
	static double tl[MAX_BATCHES], tc[MAX_BATCHES];
	struct local_session_opts o;
	local_session *s;
	double end;
	int n = 0;

	local_session_opts_init(&o);
	o.socket_path = sock;
	o.lock_delay_ms = 0;
	if (local_session_open(&o, &s))
		return 1;
	batch(s, lk, 100000);
	batch(s, ck, 100000);
	end = now() + secs;
	while (n < MAX_BATCHES && now() < end) {
		tl[n] = batch(s, lk, BATCH);
		tc[n] = batch(s, ck, BATCH);
		n++;
	}
	qsort(tl, (size_t)n, sizeof(tl[0]), cmp_double);
	qsort(tc, (size_t)n, sizeof(tc[0]), cmp_double);
	printf("%s %s 1 process: %.1f %.1f ns per lock+release (medians of %d batches of %d "
	       "each)\n",
	       lk, ck, tl[n / 2], tc[n / 2], n, BATCH);
	local_session_close(s);
	return 0;
}

#define PHASE_S 0.02

/*
 * KEY SECONDS SOCKET...: one process per socket takes KEY in turns; prints
 * handoffs per second. -h LOCAL_KEY CLUSTER_KEY SECONDS SOCKET...: the
 * processes switch between the two keys every PHASE_S, together (the
 * machine's load falls on both alike); prints each key's handoffs per
 * second of the time it was the one taken.
 */
int main(int argc, char **argv)
{
	struct shared *sh =
		mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	const char *keys[2];
	double secs, t[2] = { 0, 0 };
	bool two;
	int n, i, first;

	if (argc == 6 && !strcmp(argv[1], "-u"))
		return uncontended(argv[2], argv[3], atof(argv[4]), argv[5]);
	two = argc > 1 && !strcmp(argv[1], "-h");
	first = two ? 5 : 3;
	if (argc <= first || sh == MAP_FAILED) {
		fprintf(stderr,
			"usage: %s KEY SECONDS SOCKET...\n"
			"       %s -h LOCAL_KEY CLUSTER_KEY SECONDS SOCKET...\n"
			"       %s -u LOCAL_KEY CLUSTER_KEY SECONDS SOCKET\n",
			argv[0], argv[0], argv[0]);
		return 2;
	}
	keys[0] = argv[two ? 2 : 1];
	keys[1] = two ? argv[3] : keys[0];
	secs = atof(argv[first - 1]);
	n = argc - first;
	for (i = 0; i < n; i++)
		if (fork() == 0)
			run(sh, argv[first + i], keys, i + 1, n);
	while (atomic_load(&sh->ready) < n)
		nap(0.001);
	while (t[0] + t[1] < secs) {
		double t0 = now();

		nap(two ? PHASE_S : secs);
		t[atomic_load(&sh->phase) & 1] += now() - t0;
		if (two)
			atomic_fetch_add(&sh->phase, 1);
	}
	atomic_store(&sh->stop, 1);
	for (i = 0; i < n; i++)
		wait(NULL);
	if (two)
		printf("%s %s %d processes: %.0f %.0f handoffs/s, %ld overlaps\n", keys[0], keys[1],
		       n, (double)sh->kchanges[0] / t[0], (double)sh->kchanges[1] / t[1],
		       (long)sh->overlaps);
	else
		printf("%-5s %d processes: %8.0f handoffs/s (%.2f us each), %ld overlaps\n",
		       keys[0], n, (double)sh->changes / t[0],
		       sh->changes ? t[0] * 1e6 / (double)sh->changes : 0.0, (long)sh->overlaps);
	return 0;
}
