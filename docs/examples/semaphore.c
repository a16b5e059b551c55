// SPDX-License-Identifier: MIT
/*
 * semaphore — a counting semaphore with liblocal: six worker processes share
 * a pool of three slots (think: three licences, three GPU contexts). Each
 * worker takes a slot with local_sem_acquire() (FIFO, with a fencing token
 * that rises per key, as for locks), works a little, and gives it back with
 * local_release(). A counter in shared memory shows how many are inside at
 * once; it never exceeds the limit. Exits 0 when done, 1 on any failure.
 *
 * Build: cc semaphore.c $(pkg-config --cflags --libs liblocal) -o semaphore
 * Run:   semaphore       (shmlockd running on the default socket or
 *                         $SHMLOCK_SOCKET)
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <liblocal.h>

#define WORKERS 6
#define LIMIT 3
#define ROUNDS 3
#define KEY "demo/pool"

struct shared {
	_Atomic int inside;
	_Atomic int most;
	_Atomic int over;
};

static int worker(int id, struct shared *sh)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 10000);
	struct local_session_opts so;
	local_session *s;
	char name[32];
	uint64_t token;
	int round, err, n, m;

	snprintf(name, sizeof(name), "worker-%d", id);
	local_session_opts_init(&so); /* socket: $SHMLOCK_SOCKET or the default */
	so.name = name;
	err = local_session_open(&so, &s);
	if (err) {
		fprintf(stderr, "%s: cannot open a session: %s\n", name, local_strerror(err));
		return 1;
	}
	for (round = 0; round < ROUNDS; round++) {
		/* Every user of the key must agree on its limit. */
		err = local_sem_acquire(s, KEY, LIMIT, &o, &token);
		if (err) {
			fprintf(stderr, "%s: acquire: %s\n", name, local_strerror(err));
			return 1;
		}
		n = atomic_fetch_add(&sh->inside, 1) + 1;
		m = atomic_load(&sh->most);
		while (n > m && !atomic_compare_exchange_weak(&sh->most, &m, n))
			;
		if (n > LIMIT)
			atomic_fetch_add(&sh->over, 1);
		printf("  %s: in  (token %llu), %d of %d slots in use\n", name,
		       (unsigned long long)token, n, LIMIT);
		usleep(20000 + (useconds_t)(id * 3000)); /* the work */
		n = atomic_fetch_sub(&sh->inside, 1) - 1;
		printf("  %s: out, %d in use\n", name, n);
		err = local_release(s, KEY);
		if (err) {
			fprintf(stderr, "%s: release: %s\n", name, local_strerror(err));
			return 1;
		}
	}
	local_session_close(s);
	return 0;
}

int main(void)
{
	struct shared *sh =
		mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t pids[WORKERS];
	int i, status, failed = 0;

	if (sh == MAP_FAILED)
		return 1;
	memset(sh, 0, sizeof(*sh));
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("semaphore: %d workers share %d slots of '%s'\n", WORKERS, LIMIT, KEY);
	for (i = 0; i < WORKERS; i++) {
		fflush(stdout);
		pids[i] = fork();
		if (pids[i] < 0)
			return 1;
		if (pids[i] == 0)
			_exit(worker(i, sh));
	}
	for (i = 0; i < WORKERS; i++)
		if (waitpid(pids[i], &status, 0) != pids[i] || !WIFEXITED(status) ||
		    WEXITSTATUS(status))
			failed++;
	printf("semaphore: at most %d of %d slots were in use at once%s\n", atomic_load(&sh->most),
	       LIMIT, atomic_load(&sh->over) ? " -- OVER THE LIMIT" : "");
	if (failed || atomic_load(&sh->over)) {
		printf("semaphore: FAILED (%d worker(s) failed)\n", failed);
		return 1;
	}
	printf("semaphore: done\n");
	return 0;
}
