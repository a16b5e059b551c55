// SPDX-License-Identifier: MIT
/*
 * Instructions per acquire+release, for callgrind: a clock
 * is noisy on a shared 2-core machine, an instruction count is not.
 *
 *   valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file=OUT \
 *       callgrind-pairs BROKER CASE N
 *
 * starts BROKER (shmlockd) on a private socket and segment, sets CASE up,
 * runs N warm-up pairs, then N pairs with instrumentation on, and prints
 * nothing: callgrind_annotate OUT gives the total, divide by N. CASE is
 *   lock      - uncontended local_lock + local_release (lock-free)
 *   lockwait  - the same with NULL options (wait forever)
 *   handle    - uncontended local_key_lock + local_key_release (a key handle)
 *   handlewait - the same with NULL options
 *   mutex     - a process-shared robust pthread mutex lock + unlock, the
 *               anchor of `make bench` section 1
 *   watched   - the same on a key another process watches (mutex path)
 *   sem       - local_sem_acquire(limit 4) + local_release, no other holder
 *   semheld   - the same while another session holds one unit
 *   posixsem  - sem_wait + sem_post on a process-shared POSIX semaphore
 *               (value 4) in a MAP_SHARED page: the anchor of the two above
 *   contendedP - local_lock + local_release on a key that P-1 other
 *               processes (2 <= P <= 16) lock and release in a loop too: a
 *               FIFO handoff per pair. Only this process is
 *               counted; the others run under valgrind as well (forked), with
 *               instrumentation off. Run it under `taskset -c 0` for the
 *               one-CPU case of `make bench` section 2.
 * Built by scripts/callgrind-pairs.sh, not by make: it is a measuring tool.
 */
#include <errno.h>
#include <semaphore.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <valgrind/callgrind.h>

#include "client.h" /* the key's watcher count, to know the watch is set */

static char dir[64] = "/tmp/cgpairs-XXXXXX", sock[128], shm[64];
static pid_t broker, watcher;
static pid_t others[16];
static int nothers;
static bool contended_case; /* contendedP: a blocking lock, P-1 others */
/* Shared with the contending processes: stop, and how many have locked. */
static struct {
	_Atomic int stop;
	_Atomic int started;
} * cshared;

static void die(const char *what, int err)
{
	fprintf(stderr, "callgrind-pairs: %s: %s\n", what, err ? local_strerror(err) : "");
	if (watcher > 0)
		kill(watcher, SIGKILL);
	while (nothers > 0)
		kill(others[--nothers], SIGKILL);
	if (broker > 0)
		kill(broker, SIGTERM);
	exit(1);
}

static void pause_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static int answers(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), ok;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

static local_session *session(void)
{
	struct local_session_opts o;
	local_session *s;
	int err;

	local_session_opts_init(&o);
	o.socket_path = sock;
	o.name = "callgrind-pairs";
	o.lock_delay_ms = 0;
	err = local_session_open(&o, &s);
	if (err)
		die("session", err);
	return s;
}

static local_key *handle;      /* handle, handlewait */
static pthread_mutex_t *mutex; /* mutex */
static sem_t *posix;	       /* posixsem */

static int pairs(local_session *s, const char *cs, const char *key, long n)
{
	static const LOCAL_OPTS(local_acquire_opts, try_once, .timeout_ms = 0);
	/* Decided once: a strcmp() per pair was 40 of the instructions counted. */
	bool sem = !strcmp(cs, "sem") || !strcmp(cs, "semheld");
	const struct local_acquire_opts *o = strstr(cs, "wait") ? NULL : &try_once;
	int err = 0;

	if (mutex) {
		while (n-- > 0 && !err) {
			err = -pthread_mutex_lock(mutex);
			if (!err)
				err = -pthread_mutex_unlock(mutex);
		}
		return err;
	}
	if (handle) {
		while (n-- > 0 && !err) {
			err = local_key_lock(handle, o, NULL);
			if (!err)
				err = local_key_release(handle);
		}
		return err;
	}
	if (posix) {
		while (n-- > 0)
			if (sem_wait(posix) || sem_post(posix))
				return -errno;
		return 0;
	}
	while (n-- > 0 && !err) {
		if (sem)
			err = local_sem_acquire(s, key, 4, &try_once, NULL);
		else if (contended_case)
			err = local_lock(s, key, NULL, NULL); /* queue and wait */
		else
			err = local_lock(s, key, o, NULL);
		if (!err)
			err = local_release(s, key);
	}
	return err;
}

/* The key's handoff count (the segment's own, read directly). */
static uint64_t handoffs(local_session *s, const char *key)
{
	uint32_t i;

	for (i = 0; i < s->seg->caps.max_keys; i++)
		if (!strcmp(s->seg->keys[i].key, key))
			return s->seg->keys[i].n_handoffs;
	return 0;
}

int main(int argc, char **argv)
{
	const char *key = "cg/key";
	local_session *s, *other;
	struct timespec t0, t1;
	uint64_t h0;
	long n, tries;
	int err, st;

	if (argc != 4)
		die("usage: callgrind-pairs BROKER CASE N", 0);
	n = atol(argv[3]);
	if (!mkdtemp(dir)) /* a directory only we can change: the broker wants one */
		die("mkdtemp", -errno);
	snprintf(sock, sizeof(sock), "%s/sock", dir);
	snprintf(shm, sizeof(shm), "/cgpairs-%d", (int)getpid());
	broker = fork();
	if (!broker) {
		execl(argv[1], argv[1], "--socket", sock, "--shm-name", shm,
		      "--destroy-segment-on-exit", (char *)NULL);
		_exit(127);
	}
	for (tries = 0; !answers(); tries++) {
		if (tries > 5000)
			die("broker does not answer", 0);
		pause_ms(2);
	}
	s = session();
	if (!strcmp(argv[2], "semheld")) {
		other = session();
		err = local_sem_acquire(other, key, 4, NULL, NULL);
		if (err)
			die("other holder", err);
	} else if (!strcmp(argv[2], "posixsem")) {
		posix = mmap(NULL, sizeof(*posix), PROT_READ | PROT_WRITE,
			     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (posix == MAP_FAILED || sem_init(posix, 1, 4))
			die("POSIX semaphore", -errno);
	} else if (!strcmp(argv[2], "watched")) {
		struct local_key_info info = { .sz = sizeof(info) };

		err = local_lock(s, key, NULL, NULL); /* the key exists, kind lock */
		if (!err)
			err = local_release(s, key);
		if (err)
			die("create", err);
		watcher = fork();
		if (!watcher) {
			local_session *w = session();

			for (;;) {
				if (local_info(w, key, &info))
					_exit(1);
				local_watch(w, key, info.modify_index, 60000, &info);
			}
		}
		/* Registered when the key says so; then stop it asleep, so
		 * that its wake-ups cost the measured process nothing but
		 * the FUTEX_WAKE it makes. */
		for (tries = 0;; tries++) {
			uint32_t i, seen = 0;

			for (i = 0; i < s->seg->caps.max_keys; i++)
				if (!strcmp(s->seg->keys[i].key, key))
					seen = atomic_load(&s->seg->keys[i].watchers);
			if (seen)
				break;
			if (tries > 20000)
				die("watch not registered", 0);
			pause_ms(5);
		}
		pause_ms(200);
		kill(watcher, SIGSTOP);
	} else if (!strncmp(argv[2], "handle", 6)) {
		err = local_key_open(s, key, &handle);
		if (err)
			die("handle", err);
	} else if (!strcmp(argv[2], "mutex")) {
		pthread_mutexattr_t a;

		mutex = mmap(NULL, sizeof(*mutex), PROT_READ | PROT_WRITE,
			     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (mutex == MAP_FAILED)
			die("mmap", -errno);
		pthread_mutexattr_init(&a);
		pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
		pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
		err = -pthread_mutex_init(mutex, &a);
		if (err)
			die("pthread_mutex_init", err);
	} else if (!strncmp(argv[2], "contended", 9)) {
		int p = atoi(argv[2] + 9), i;

		if (p < 2 || p > 16)
			die("contendedP: 2 <= P <= 16", 0);
		contended_case = true;
		cshared = mmap(NULL, sizeof(*cshared), PROT_READ | PROT_WRITE,
			       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (cshared == MAP_FAILED)
			die("mmap", -errno);
		for (i = 0; i < p - 1; i++) {
			pid_t c = fork();

			if (c < 0)
				die("fork", -errno);
			if (!c) {
				local_session *o = session();
				bool first = true;

				while (!atomic_load(&cshared->stop)) {
					if (local_lock(o, key, NULL, NULL) || local_release(o, key))
						_exit(1);
					if (first)
						atomic_fetch_add(&cshared->started, 1);
					first = false;
				}
				local_session_close(o);
				_exit(0);
			}
			others[nothers++] = c;
		}
		for (tries = 0; atomic_load(&cshared->started) < p - 1; tries++) {
			if (tries > 30000)
				die("contending processes do not start", 0);
			pause_ms(2);
		}
	}
	err = pairs(s, argv[2], key, n);
	if (err)
		die("warm-up", err);
	h0 = handoffs(s, key);
	CALLGRIND_ZERO_STATS;
	CALLGRIND_TOGGLE_COLLECT; /* on: valgrind --collect-atstart=no */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	err = pairs(s, argv[2], key, n);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	CALLGRIND_TOGGLE_COLLECT;
	if (!RUNNING_ON_VALGRIND) /* natively: the time too, for a rough look */
		printf("%s %.1f ns/pair\n", argv[2],
		       ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / n);
	CALLGRIND_DUMP_STATS_AT(argv[2]);
	if (err)
		die("pairs", err);
	if (cshared) /* every pair should have been a handoff in and one out */
		fprintf(stderr, "%s: %" PRIu64 " handoffs (all processes) during %ld pairs\n",
			argv[2], handoffs(s, key) - h0, n);
	if (watcher > 0) {
		kill(watcher, SIGKILL);
		waitpid(watcher, &st, 0);
	}
	if (cshared)
		atomic_store(&cshared->stop, 1);
	while (nothers > 0)
		waitpid(others[--nothers], &st, 0);
	if (handle)
		local_key_close(handle);
	local_session_close(s);
	kill(broker, SIGTERM);
	waitpid(broker, &st, 0);
	return 0;
}
