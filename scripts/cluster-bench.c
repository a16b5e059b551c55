// SPDX-License-Identifier: MIT
/*
 * Cluster keys (docs/cluster.md): one process per socket given takes and
 * releases KEY in a loop for SECONDS, each waiting after its release until
 * another process has had the key (so every grant is a handoff: between
 * processes, or between hosts when each process is on its own host); prints
 * handoffs per second. scripts/cluster-bench.sh builds and runs it.
 * Usage: cluster-bench KEY SECONDS SOCKET...
 *        cluster-bench -u KEY SECONDS SOCKET: one process alone, lock+release
 *        in a loop (uncontended); prints ns per lock+release.
 */
#include <sched.h>
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
};

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void run(struct shared *sh, const char *sock, const char *key, double secs, int me, int n)
{
	struct local_session_opts o;
	local_session *s;
	long grants = 0, changes = 0;
	double end;

	local_session_opts_init(&o);
	o.socket_path = sock;
	o.lock_delay_ms = 0;
	if (local_session_open(&o, &s))
		_exit(1);
	if (local_lock(s, key, NULL, NULL) || local_release(s, key))
		_exit(2);
	atomic_fetch_add(&sh->ready, 1);
	while (atomic_load(&sh->ready) < n)
		;
	end = now() + secs;
	while (now() < end) {
		if (local_lock(s, key, NULL, NULL))
			_exit(3);
		if (atomic_fetch_add(&sh->inside, 1))
			atomic_fetch_add(&sh->overlaps, 1);
		if (atomic_exchange(&sh->last, me) != me)
			changes++;
		grants++;
		atomic_fetch_sub(&sh->inside, 1);
		local_release(s, key);
		while (atomic_load(&sh->last) == me && now() < end)
			sched_yield(); /* alternate: the next grant is someone else's */
	}
	atomic_fetch_add(&sh->grants, grants);
	atomic_fetch_add(&sh->changes, changes);
	local_session_close(s);
	_exit(0);
}

/* One process, lock+release of KEY for @secs after a warm-up (the first
 * lock of a cluster key waits for the host to take its etcd lock). */
static int uncontended(const char *key, double secs, const char *sock)
{
	struct local_session_opts o;
	local_session *s;
	double start, end, t;
	long n = 0;
	int i;

	local_session_opts_init(&o);
	o.socket_path = sock;
	o.lock_delay_ms = 0;
	if (local_session_open(&o, &s))
		return 1;
	for (i = 0; i < 100000; i++)
		if (local_lock(s, key, NULL, NULL) || local_release(s, key))
			return 3;
	start = now();
	end = start + secs;
	do {
		for (i = 0; i < 1000; i++)
			if (local_lock(s, key, NULL, NULL) || local_release(s, key))
				return 3;
		n += 1000;
	} while ((t = now()) < end);
	printf("%-5s 1 process: %8.1f ns per lock+release (%ld after a warm-up of 100000)\n", key,
	       (t - start) * 1e9 / (double)n, n);
	local_session_close(s);
	return 0;
}

int main(int argc, char **argv)
{
	struct shared *sh =
		mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	double secs;
	int n, i;

	if (argc == 5 && !strcmp(argv[1], "-u"))
		return uncontended(argv[2], atof(argv[3]), argv[4]);
	if (argc < 4 || sh == MAP_FAILED) {
		fprintf(stderr, "usage: %s KEY SECONDS SOCKET...\n", argv[0]);
		return 2;
	}
	secs = atof(argv[2]);
	n = argc - 3;
	for (i = 0; i < n; i++)
		if (fork() == 0)
			run(sh, argv[3 + i], argv[1], secs, i + 1, n);
	for (i = 0; i < n; i++)
		wait(NULL);
	printf("%-5s %d processes: %8.0f handoffs/s (%.2f us each), %ld overlaps\n", argv[1], n,
	       (double)sh->changes / secs, sh->changes ? secs * 1e6 / (double)sh->changes : 0.0,
	       (long)sh->overlaps);
	return 0;
}
