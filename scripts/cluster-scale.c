// SPDX-License-Identifier: MIT
/*
 * Cluster keys at scale (docs/cluster.md, docs/performance.md): PROCS
 * processes per host (one socket per host) take and release cluster keys in
 * a loop for SECONDS, choosing each key by PATTERN:
 *   affine  host h uses only its own KEYS keys, c/a<h>/<j>;
 *   shared  every host uses the same KEYS keys, c/s/<j>;
 *   random  every host picks among KEYS * hosts keys, c/r/<j>.
 * Prints one line: operations (a lock and its release), per host, timeouts
 * (an acquisition that waited 1 s) and errors. scripts/cluster-scale.sh
 * builds and runs it, and counts etcd's writes around it.
 * Usage: cluster-scale PATTERN SECONDS KEYS PROCS SOCKET...
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "liblocal.h"

#define HOSTS_MAX 16

struct shared {
	_Atomic int ready;
	_Atomic long ops[HOSTS_MAX], timeouts, errors;
};

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void run(struct shared *sh, const char *sock, const char *pattern, double secs, int keys,
		int host, int hosts, int n)
{
	LOCAL_OPTS(local_acquire_opts, ao, .timeout_ms = 1000);
	struct local_session_opts so;
	uint64_t rnd = 0x9e3779b97f4a7c15ull ^ ((uint64_t)getpid() << 20);
	long ops = 0, timeouts = 0, errors = 0;
	local_session *s;
	char key[64];
	double end;
	int err;

	local_session_opts_init(&so);
	so.socket_path = sock;
	so.lock_delay_ms = 0;
	if (local_session_open(&so, &s))
		_exit(1);
	atomic_fetch_add(&sh->ready, 1);
	while (atomic_load(&sh->ready) < n)
		usleep(1000);
	end = now() + secs;
	while (now() < end) {
		int j = (int)(xorshift(&rnd) % (uint64_t)(pattern[0] == 'r' ? keys * hosts : keys));

		if (pattern[0] == 'a')
			snprintf(key, sizeof(key), "c/a%d/%d", host, j);
		else
			snprintf(key, sizeof(key), "c/%c/%d", pattern[0], j);
		err = local_lock(s, key, &ao, NULL);
		if (err == -ETIMEDOUT) {
			timeouts++;
			continue;
		}
		if (err) {
			errors++;
			continue;
		}
		if (local_release(s, key))
			errors++;
		ops++;
	}
	atomic_fetch_add(&sh->ops[host], ops);
	atomic_fetch_add(&sh->timeouts, timeouts);
	atomic_fetch_add(&sh->errors, errors);
	local_session_close(s);
	_exit(0);
}

int main(int argc, char **argv)
{
	struct shared *sh =
		mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int keys, procs, hosts, h, i;
	long total = 0;
	double secs;

	if (argc < 6 || sh == MAP_FAILED || !strchr("asr", argv[1][0]) || argc - 5 > HOSTS_MAX) {
		fprintf(stderr, "usage: %s affine|shared|random SECONDS KEYS PROCS SOCKET...\n",
			argv[0]);
		return 2;
	}
	secs = atof(argv[2]);
	keys = atoi(argv[3]);
	procs = atoi(argv[4]);
	hosts = argc - 5;
	if (keys < 1 || procs < 1)
		return 2;
	for (h = 0; h < hosts; h++)
		for (i = 0; i < procs; i++)
			if (fork() == 0)
				run(sh, argv[5 + h], argv[1], secs, keys, h, hosts, hosts * procs);
	for (i = 0; i < hosts * procs; i++)
		wait(NULL);
	for (h = 0; h < hosts; h++)
		total += sh->ops[h];
	printf("ops %ld per_host", total);
	for (h = 0; h < hosts; h++)
		printf(" %ld", (long)sh->ops[h]);
	printf(" timeouts %ld errors %ld\n", (long)sh->timeouts, (long)sh->errors);
	return 0;
}
