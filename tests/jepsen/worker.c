// SPDX-License-Identifier: MIT
/*
 * A client of the fault suite (docs/jepsen.md): takes one cluster key, a lock
 * or a semaphore, in a loop on one host's broker, and writes down every hold
 * so that tests/jepsen/check.py can judge the run afterwards:
 *
 *   W host=H id=I kind=lock|sem key=K pid=P     once, first
 *   G <ns> <token>                  the grant, once the acquire returned
 *   S <ns> <token>                  about to stop itself inside the hold
 *   R <ns> <token> <rc> <f0> <f1>   just before the release (the time), with
 *                                   the release's result and the two fence
 *                                   checks (0 accepted, 1 refused, - none)
 *   E <ns> <op> <rc>                an acquire or session call that failed
 *
 * Times are CLOCK_MONOTONIC in ns: every process of the suite runs on one
 * machine, so they compare across processes. The recorded hold [G, R] lies
 * inside the real one (taken after the grant, before the release), so two
 * recorded holds that overlap are two real holds that overlapped. Each line
 * is one write(2) to an O_APPEND file, so a worker killed at any point leaves
 * whole lines.
 *
 * A lock holder also plays the fenced resource's client: at the start and at
 * the end of each hold it offers its token to a file that keeps the largest
 * token it accepted (under flock), and notes whether it was refused.
 *
 * --once 1 makes one attempt only: a client that stops itself at a crash
 * point (SHMLOCK_STOP_AT) would stop again at its next attempt.
 *
 * SIGUSR1 asks the worker to stop itself (SIGSTOP) inside its next hold, right
 * after it wrote the grant down: the harness then cuts its host off and
 * continues it later, the case fencing exists for.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "liblocal.h"

struct worker {
	const char *socket, *kind, *key, *fence_path, *log_path;
	int host, id, limit, once;
	uint64_t until_ns, hold_us, seed;
	int log_fd, fence_fd;
	local_session *s;
};

static volatile sig_atomic_t stop_in_hold;

static void on_usr1(int sig)
{
	(void)sig;
	stop_in_hold = 1;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* xorshift64*: hold lengths vary, reproducibly from the seed. */
static uint64_t next_rand(struct worker *w)
{
	w->seed ^= w->seed >> 12;
	w->seed ^= w->seed << 25;
	w->seed ^= w->seed >> 27;
	return w->seed * 2685821657736338717ull;
}

static void note(struct worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void note(struct worker *w, const char *fmt, ...)
{
	char line[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n > 0 && (size_t)n < sizeof(line) && write(w->log_fd, line, (size_t)n) != n)
		_exit(3); /* a record lost would make the check lie */
}

/* 0: @tok accepted (it is the largest seen, or equal: the same hold), 1:
 * refused (a larger one was written before), -errno. */
static int fence_offer(struct worker *w, uint64_t tok)
{
	uint64_t max = 0;
	int r = 0;

	if (flock(w->fence_fd, LOCK_EX) < 0)
		return -errno;
	if (pread(w->fence_fd, &max, sizeof(max), 0) < 0)
		r = -errno;
	else if (tok < max)
		r = 1;
	else if (pwrite(w->fence_fd, &tok, sizeof(tok), 0) != sizeof(tok))
		r = -EIO;
	flock(w->fence_fd, LOCK_UN);
	return r;
}

#define FENCE_NONE 2 /* a semaphore's holder offers no token */

static const char *fence_str(int r, char buf[16])
{
	if (r == FENCE_NONE)
		return "-";
	snprintf(buf, 16, "%d", r);
	return buf;
}

static int session_open(struct worker *w)
{
	struct local_session_opts o;
	char name[48];

	local_session_opts_init(&o);
	snprintf(name, sizeof(name), "jepsen-h%d-w%d", w->host, w->id);
	o.socket_path = w->socket;
	o.name = name;
	/* A hold lost to a fault delays the next grant by this much only: the
	 * liveness bound is about the product, not the default 15 s. */
	o.lock_delay_ms = 50;
	o.broker_wait_ms = 1000;
	return local_session_open(&o, &w->s);
}

static int acquire(struct worker *w, uint64_t *tok)
{
	struct local_acquire_opts o = { .sz = sizeof(o), .timeout_ms = 1000 };

	if (!strcmp(w->kind, "sem"))
		return local_sem_acquire(w->s, w->key, (uint32_t)w->limit, &o, tok);
	return local_lock(w->s, w->key, &o, tok);
}

static void hold_once(struct worker *w, uint64_t tok)
{
	int lock = !strcmp(w->kind, "lock"), f0 = FENCE_NONE, f1 = FENCE_NONE, rc;
	char b0[16], b1[16];
	uint64_t t;

	note(w, "G %llu %llu\n", (unsigned long long)mono_ns(), (unsigned long long)tok);
	if (lock)
		f0 = fence_offer(w, tok);
	if (stop_in_hold) {
		stop_in_hold = 0;
		note(w, "S %llu %llu\n", (unsigned long long)mono_ns(), (unsigned long long)tok);
		raise(SIGSTOP);
	}
	usleep((useconds_t)(w->hold_us / 2 + next_rand(w) % (w->hold_us + 1)));
	if (lock)
		f1 = fence_offer(w, tok);
	t = mono_ns();
	rc = local_release(w->s, w->key);
	note(w, "R %llu %llu %d %s %s\n", (unsigned long long)t, (unsigned long long)tok, rc,
	     fence_str(f0, b0), fence_str(f1, b1));
}

static int run(struct worker *w)
{
	uint64_t tok;
	int rc;

	while (mono_ns() < w->until_ns) {
		if (!w->s) {
			rc = session_open(w);
			if (rc) {
				note(w, "E %llu open %d\n", (unsigned long long)mono_ns(), rc);
				w->s = NULL;
				usleep(50000);
				continue;
			}
		}
		tok = 0;
		rc = acquire(w, &tok);
		if (w->once)
			w->until_ns = 0; /* one attempt, whatever its outcome */
		if (rc) {
			note(w, "E %llu acquire %d\n", (unsigned long long)mono_ns(), rc);
			if (rc == -LOCAL_ESESSION || rc == -LOCAL_EBROKER) {
				local_session_close(w->s);
				w->s = NULL;
			}
			if (rc != -ETIMEDOUT)
				usleep(10000);
			continue;
		}
		hold_once(w, tok);
		usleep((useconds_t)(next_rand(w) % 1000));
	}
	if (w->s)
		local_session_close(w->s);
	return 0;
}

static int usage(void)
{
	fprintf(stderr,
		"usage: jepsen-worker --features\n"
		"       jepsen-worker --socket PATH --host N --id N --kind lock|sem --key K\n"
		"                     [--limit N] [--fence FILE] --log FILE --until-ns NS\n"
		"                     [--once 1] [--hold-us US] [--seed N]\n");
	return 2;
}

int main(int argc, char **argv)
{
	struct worker w = { .limit = 1, .hold_us = 1000, .seed = 1 };
	struct sigaction sa = { .sa_handler = on_usr1 };
	int i;

	if (argc == 2 && !strcmp(argv[1], "--features")) {
#ifdef LOCAL_CRASH_POINTS
		puts("crash-points");
#else
		puts("no-crash-points");
#endif
		return 0;
	}
	for (i = 1; i + 1 < argc; i += 2) {
		const char *k = argv[i], *v = argv[i + 1];

		if (!strcmp(k, "--socket"))
			w.socket = v;
		else if (!strcmp(k, "--host"))
			w.host = atoi(v);
		else if (!strcmp(k, "--id"))
			w.id = atoi(v);
		else if (!strcmp(k, "--kind"))
			w.kind = v;
		else if (!strcmp(k, "--key"))
			w.key = v;
		else if (!strcmp(k, "--limit"))
			w.limit = atoi(v);
		else if (!strcmp(k, "--fence"))
			w.fence_path = v;
		else if (!strcmp(k, "--log"))
			w.log_path = v;
		else if (!strcmp(k, "--until-ns"))
			w.until_ns = strtoull(v, NULL, 10);
		else if (!strcmp(k, "--once"))
			w.once = atoi(v);
		else if (!strcmp(k, "--hold-us"))
			w.hold_us = strtoull(v, NULL, 10);
		else if (!strcmp(k, "--seed"))
			w.seed = strtoull(v, NULL, 10) | 1;
		else
			return usage();
	}
	if (i != argc || !w.socket || !w.kind || !w.key || !w.log_path || !w.until_ns ||
	    (strcmp(w.kind, "lock") && strcmp(w.kind, "sem")) ||
	    (!strcmp(w.kind, "lock") && !w.fence_path))
		return usage();
	w.log_fd = open(w.log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (w.log_fd < 0) {
		perror(w.log_path);
		return 1;
	}
	if (w.fence_path) {
		w.fence_fd = open(w.fence_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
		if (w.fence_fd < 0) {
			perror(w.fence_path);
			return 1;
		}
	}
	sigaction(SIGUSR1, &sa, NULL);
	note(&w, "W host=%d id=%d kind=%s key=%s pid=%d\n", w.host, w.id, w.kind, w.key,
	     (int)getpid());
	return run(&w);
}
