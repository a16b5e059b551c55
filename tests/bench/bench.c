// SPDX-License-Identifier: MIT
/*
 * shmlock-bench: liblocal against the kernel's own locks, on this machine.
 *
 * It starts a private shmlockd ($SHMLOCK_BROKER_BIN, its own socket and
 * segment), measures three things and prints one table per section:
 *
 *   1. uncontended lock+release, single thread: liblocal, a process-shared
 *      robust pthread mutex, flock(2), fcntl OFD locks;
 *   2. FIFO handoffs per second between 2, 4 and 8 processes on one key,
 *      next to a plain futex ping-pong between two processes;
 *   3. crash-release latency: how long after SIGKILL of the holder a queued
 *      waiter gets the lock, for liblocal and for flock(2).
 *
 * Timing never fails the run: each target is printed as MET or NOT MET and
 * the exit status is 0 either way. Only a real error exits 1: the broker
 * does not start, a call fails, mutual exclusion breaks (at once), or
 * processes hang in local_lock (reported as HUNG; the other measurements
 * still run and print, then the exit status is 1).
 */
#include <errno.h>
#include <fcntl.h>
#include <gnu/libc-version.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "liblocal.h"

#define NSEC_PER_USEC 1000ull
#define NSEC_PER_MSEC 1000000ull
#define NSEC_PER_SEC 1000000000ull

/* Uncontended: best of RUNS runs of RUN_NS each, after one warm-up run. The
 * clock is read once per BATCH operations so it costs nothing per op. */
#define UNC_RUNS 5
#define UNC_RUN_NS (200 * NSEC_PER_MSEC)
#define UNC_BATCH 1000

/* Handoffs: HANDOFF_RUNS runs of HANDOFF_NS each, the median reported. No
 * progress at all for STALL_NS means a hang; after stop, the processes get
 * FINISH_TIMEOUT_MS to come back before they are declared stuck. */
#define MAX_PROCS 8
#define HANDOFF_RUNS 5
#define HANDOFF_NS NSEC_PER_SEC
#define STALL_NS (300 * NSEC_PER_MSEC)
#define FINISH_TIMEOUT_MS 1000

/* Crash release: trials per mechanism. After the waiter is seen queued we
 * let it settle well past liblocal's few-microsecond spin, so both
 * mechanisms are measured with the waiter asleep in the kernel. */
#define CRASH_TRIALS 40
#define PARK_SETTLE_NS (2 * NSEC_PER_MSEC)
#define FLOCK_BLOCK_SETTLE_NS (5 * NSEC_PER_MSEC)

/* How long a child may take to reach a barrier, a flag or its end. */
#define STEP_TIMEOUT_MS 5000
#define END_TIMEOUT_MS 10000

#define KEY_UNCONTENDED "bench/uncontended"
#define KEY_HANDOFF "bench/handoff"
#define KEY_CRASH "bench/crash"

struct broker {
	pid_t pid;
	char dir[64];
	char sock[128];
	char shm[64];
	char log[128];
	char file[128]; /* the flock/OFD lock file */
};

/* Per-process results, one cache line each. */
struct slot {
	_Atomic uint64_t acquisitions;
	_Atomic uint64_t handoffs;
	uint64_t vol_csw;
	uint64_t invol_csw;
} __attribute__((aligned(64)));

/* Parent <-> children, in a MAP_SHARED mapping made before any fork. */
struct shared {
	/* Control, written by the parent: read-mostly in the timed loops. */
	_Alignas(64) _Atomic uint32_t ready; /* children at the barrier */
	_Atomic uint32_t start;		     /* futex: the barrier opens */
	_Atomic uint32_t stop;		     /* time is up */
	/* Crash tests: a child's progress and the waiter's timestamp. */
	_Alignas(64) _Atomic uint32_t held;
	_Atomic uint32_t blocking;
	_Atomic uint64_t acquired_ns;
	_Atomic int32_t err; /* first error a child hit */
	/* Ping-pong futex word, alone on its line. */
	_Alignas(64) _Atomic uint32_t turn;
	/* Written only by the holder of the benchmarked lock. */
	_Alignas(64) _Atomic int32_t inside; /* holder's index + 1, 0 when free */
	_Atomic int32_t last_owner;
	_Atomic uint32_t violations;
	struct slot per[MAX_PROCS];
};

struct target {
	bool met;
	char text[160];
};

static struct broker broker;
static struct shared *sh;
static pid_t main_pid;
static pid_t kids[MAX_PROCS + 2];
static int nkids;
static struct target targets[16];
static int ntargets;
static int product_errors; /* hangs found: reported, then exit 1 */

static void broker_stop(struct broker *b, bool dump_log);

/* ---- small helpers ----------------------------------------------------- */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
	uint64_t until = now_ns() + ns;
	struct timespec ts = { .tv_sec = (time_t)(until / NSEC_PER_SEC),
			       .tv_nsec = (long)(until % NSEC_PER_SEC) };

	/* Absolute, so a signal cannot stretch or shorten the sleep. */
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static void futex_wait(_Atomic uint32_t *word, uint32_t val, uint64_t timeout_ns)
{
	struct timespec ts = { .tv_sec = (time_t)(timeout_ns / NSEC_PER_SEC),
			       .tv_nsec = (long)(timeout_ns % NSEC_PER_SEC) };

	/* Shared (no FUTEX_PRIVATE_FLAG): the word is in a MAP_SHARED page. */
	syscall(SYS_futex, word, FUTEX_WAIT, val, timeout_ns ? &ts : NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *word, int n)
{
	syscall(SYS_futex, word, FUTEX_WAKE, n, NULL, NULL, 0);
}

static void kill_kids(void)
{
	int i;

	for (i = 0; i < nkids; i++) {
		kill(kids[i], SIGKILL);
		waitpid(kids[i], NULL, 0);
	}
	nkids = 0;
}

/* A real error: in a child, just exit; in the parent, clean up and exit 1. */
static void __attribute__((format(printf, 1, 2), noreturn)) fatal(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fputs("shmlock-bench: error: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (getpid() != main_pid)
		_exit(1);
	kill_kids();
	broker_stop(&broker, true);
	exit(1);
}

static void __attribute__((format(printf, 2, 3))) add_target(bool met, const char *fmt, ...)
{
	struct target *t;
	va_list ap;

	if (ntargets == (int)(sizeof(targets) / sizeof(targets[0])))
		fatal("too many targets");
	t = &targets[ntargets++];
	t->met = met;
	va_start(ap, fmt);
	vsnprintf(t->text, sizeof(t->text), fmt, ap);
	va_end(ap);
	printf("  target: %s: %s\n", t->text, met ? "MET" : "NOT MET");
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Nearest-rank percentile of @v (sorted in place). */
static double percentile(double *v, int n, int pct)
{
	int rank = (pct * n + 99) / 100;

	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return v[rank > 0 ? rank - 1 : 0];
}

/* ---- children ---------------------------------------------------------- */

typedef int (*child_fn)(int idx);

static pid_t spawn(child_fn fn, int idx)
{
	pid_t pid;

	if (nkids == (int)(sizeof(kids) / sizeof(kids[0])))
		fatal("too many children");
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		fatal("fork: %s", strerror(errno));
	if (pid == 0)
		_exit(fn(idx) ? 1 : 0);
	kids[nkids++] = pid;
	return pid;
}

static void forget_kid(pid_t pid)
{
	int i;

	for (i = 0; i < nkids; i++)
		if (kids[i] == pid) {
			kids[i] = kids[--nkids];
			return;
		}
}

/* Wait up to @timeout_ms for @pid; kill it if it is still there. Returns
 * the wait status, or -1 when it had to be killed. */
static int reap(pid_t pid, int timeout_ms)
{
	uint64_t deadline = now_ns() + (uint64_t)timeout_ms * NSEC_PER_MSEC;
	int status;

	for (;;) {
		pid_t r = waitpid(pid, &status, WNOHANG);

		if (r == pid)
			break;
		if (r < 0 && errno != EINTR)
			fatal("waitpid %d: %s", (int)pid, strerror(errno));
		if (now_ns() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			status = -1;
			break;
		}
		sleep_ns(200 * NSEC_PER_USEC);
	}
	forget_kid(pid);
	return status;
}

static const char *child_error(void)
{
	int err = atomic_load(&sh->err);

	return err ? local_strerror(err) : "no error recorded";
}

static void reap_ok(pid_t pid, const char *what)
{
	int status = reap(pid, END_TIMEOUT_MS);

	if (status == -1)
		fatal("%s: child %d did not finish in %d ms", what, (int)pid, END_TIMEOUT_MS);
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		fatal("%s: child %d failed (status 0x%x): %s", what, (int)pid, status,
		      child_error());
}

static void reap_killed(pid_t pid, const char *what)
{
	int status = reap(pid, END_TIMEOUT_MS);

	if (status == -1 || !WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
		fatal("%s: holder %d did not die of SIGKILL (status 0x%x)", what, (int)pid,
		      status);
}

/* In a child: record the first error for the parent and fail. */
static int child_fail(const char *what, int err)
{
	int32_t none = 0;

	atomic_compare_exchange_strong(&sh->err, &none, err);
	fprintf(stderr, "shmlock-bench: child %d: %s: %s\n", (int)getpid(), what,
		local_strerror(err));
	return 1;
}

/* Wait for a child's flag; fail early if the child is already gone. */
static void wait_flag(_Atomic uint32_t *flag, pid_t pid, const char *what)
{
	uint64_t deadline = now_ns() + STEP_TIMEOUT_MS * NSEC_PER_MSEC;
	int status;

	while (!atomic_load(flag)) {
		if (waitpid(pid, &status, WNOHANG) == pid) {
			forget_kid(pid);
			fatal("%s: child %d exited (status 0x%x): %s", what, (int)pid, status,
			      child_error());
		}
		if (now_ns() > deadline)
			fatal("%s: no progress in %d ms", what, STEP_TIMEOUT_MS);
		sleep_ns(20 * NSEC_PER_USEC);
	}
}

/* In a child: arrive, then sleep until the parent opens the barrier. */
static int barrier_wait(void)
{
	uint64_t deadline = now_ns() + STEP_TIMEOUT_MS * NSEC_PER_MSEC;

	atomic_fetch_add(&sh->ready, 1);
	while (!atomic_load(&sh->start)) {
		if (now_ns() > deadline)
			return child_fail("barrier", -ETIMEDOUT);
		futex_wait(&sh->start, 0, 100 * NSEC_PER_MSEC);
	}
	return 0;
}

/* In the parent: once @n children have arrived, release them all at once. */
static uint64_t barrier_open(int n, const char *what)
{
	uint64_t deadline = now_ns() + STEP_TIMEOUT_MS * NSEC_PER_MSEC, t0;

	while (atomic_load(&sh->ready) < (uint32_t)n) {
		if (now_ns() > deadline)
			fatal("%s: only %u of %d children reached the barrier: %s", what,
			      atomic_load(&sh->ready), n, child_error());
		sleep_ns(100 * NSEC_PER_USEC);
	}
	t0 = now_ns();
	atomic_store(&sh->start, 1);
	futex_wake(&sh->start, INT_MAX);
	return t0;
}

static void reset_shared(void)
{
	memset(sh, 0, sizeof(*sh));
	atomic_store(&sh->last_owner, -1);
}

/* Every benchmark session has lock-delay 0: a child that dies holding a key
 * must not stall the rest of the run for the default 15 s. */
static int open_session(local_session **s)
{
	struct local_session_opts o;

	local_session_opts_init(&o);
	o.socket_path = broker.sock;
	o.name = "shmlock-bench";
	o.lock_delay_ms = 0;
	return local_session_open(&o, s);
}

/* ---- the broker -------------------------------------------------------- */

static bool socket_answers(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	bool ok;

	if (fd < 0)
		return false;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

static void broker_exec(const struct broker *b, const char *bin)
{
	int fd = open(b->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (fd >= 0) {
		dup2(fd, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
	}
	execl(bin, bin, "--socket", b->sock, "--shm-name", b->shm, "--destroy-segment-on-exit",
	      (char *)NULL);
	fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
	_exit(127);
}

static void broker_start(struct broker *b)
{
	const char *bin = getenv("SHMLOCK_BROKER_BIN");
	uint64_t deadline;
	int status;

	if (!bin || !*bin)
		fatal("SHMLOCK_BROKER_BIN is not set (use 'make bench')");
	snprintf(b->dir, sizeof(b->dir), "/tmp/shmlock-bench-XXXXXX");
	if (!mkdtemp(b->dir))
		fatal("mkdtemp: %s", strerror(errno));
	snprintf(b->sock, sizeof(b->sock), "%s/sock", b->dir);
	snprintf(b->log, sizeof(b->log), "%s/broker.log", b->dir);
	snprintf(b->file, sizeof(b->file), "%s/lockfile", b->dir);
	snprintf(b->shm, sizeof(b->shm), "/shmlock-bench-%d", (int)getpid());
	shm_unlink(b->shm); /* left over by a killed run that had our pid */
	fflush(NULL);
	b->pid = fork();
	if (b->pid < 0)
		fatal("fork: %s", strerror(errno));
	if (b->pid == 0)
		broker_exec(b, bin);
	deadline = now_ns() + STEP_TIMEOUT_MS * NSEC_PER_MSEC;
	while (!socket_answers(b->sock)) {
		if (waitpid(b->pid, &status, WNOHANG) == b->pid) {
			b->pid = 0;
			fatal("broker %s exited at start (status 0x%x)", bin, status);
		}
		if (now_ns() > deadline)
			fatal("broker did not answer on %s within %d ms", b->sock,
			      STEP_TIMEOUT_MS);
		sleep_ns(1 * NSEC_PER_MSEC);
	}
}

static void dump_file(const char *path)
{
	char buf[4096];
	size_t n;
	FILE *f = fopen(path, "r");

	if (!f)
		return;
	fprintf(stderr, "---- %s ----\n", path);
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		fwrite(buf, 1, n, stderr);
	fclose(f);
}

/* SIGTERM, wait, remove what we created. Safe to call twice. */
static void broker_stop(struct broker *b, bool dump_log)
{
	if (b->pid > 0) {
		pid_t pid = b->pid;
		int status;

		b->pid = 0; /* reap() may end in fatal(), which calls us again */
		kill(pid, SIGTERM);
		status = reap(pid, STEP_TIMEOUT_MS);
		if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status)) {
			fprintf(stderr, "shmlock-bench: broker stopped badly (status 0x%x)\n",
				status);
			dump_log = true;
		}
	}
	if (!b->dir[0])
		return;
	if (dump_log)
		dump_file(b->log);
	/* --destroy-segment-on-exit should have removed it already. */
	if (shm_unlink(b->shm) == 0)
		fprintf(stderr, "shmlock-bench: note: segment %s survived the broker\n", b->shm);
	unlink(b->sock);
	unlink(b->log);
	unlink(b->file);
	rmdir(b->dir);
	b->dir[0] = '\0';
}

/* ---- 1. uncontended lock + release ------------------------------------- */

struct uncontended {
	local_session *s;
	pthread_mutex_t *mutex;
	int flock_fd;
	int ofd_fd;
};

typedef int (*unc_loop)(struct uncontended *u, uint64_t n);

static int loop_liblocal_try(struct uncontended *u, uint64_t n)
{
	static const struct local_acquire_opts try_once = { .timeout_ms = 0 };
	int err = 0;

	while (n-- && !err) {
		err = local_lock(u->s, KEY_UNCONTENDED, &try_once, NULL);
		if (!err)
			err = local_release(u->s, KEY_UNCONTENDED);
	}
	return err;
}

static int loop_liblocal_wait(struct uncontended *u, uint64_t n)
{
	int err = 0;

	while (n-- && !err) {
		err = local_lock(u->s, KEY_UNCONTENDED, NULL, NULL);
		if (!err)
			err = local_release(u->s, KEY_UNCONTENDED);
	}
	return err;
}

static int loop_robust_mutex(struct uncontended *u, uint64_t n)
{
	int err = 0;

	while (n-- && !err) {
		err = pthread_mutex_lock(u->mutex);
		if (!err)
			err = pthread_mutex_unlock(u->mutex);
	}
	return -err;
}

static int loop_flock(struct uncontended *u, uint64_t n)
{
	while (n--)
		if (flock(u->flock_fd, LOCK_EX) || flock(u->flock_fd, LOCK_UN))
			return -errno;
	return 0;
}

static int loop_ofd(struct uncontended *u, uint64_t n)
{
	struct flock lk = { .l_whence = SEEK_SET }; /* whole file; l_pid must be 0 */
	struct flock un = { .l_whence = SEEK_SET };

	lk.l_type = F_WRLCK;
	un.l_type = F_UNLCK;
	while (n--)
		if (fcntl(u->ofd_fd, F_OFD_SETLKW, &lk) || fcntl(u->ofd_fd, F_OFD_SETLKW, &un))
			return -errno;
	return 0;
}

struct unc_result {
	double best, median;
};

/* Run @fn in batches for UNC_RUN_NS, UNC_RUNS times; ns per lock+release. */
static struct unc_result measure_uncontended(unc_loop fn, struct uncontended *u,
					     const char *what)
{
	double runs[UNC_RUNS];
	struct unc_result r;
	int i;

	for (i = -1; i < UNC_RUNS; i++) { /* run -1 warms caches and the CPU clock */
		uint64_t t0 = now_ns(), t, ops = 0;
		int err;

		do {
			err = fn(u, UNC_BATCH);
			if (err)
				fatal("%s: %s", what, local_strerror(err));
			ops += UNC_BATCH;
			t = now_ns();
		} while (t - t0 < UNC_RUN_NS);
		if (i >= 0)
			runs[i] = (double)(t - t0) / (double)ops;
	}
	r.median = percentile(runs, UNC_RUNS, 50);
	r.best = runs[0];
	return r;
}

static void uncontended_setup(struct uncontended *u)
{
	pthread_mutexattr_t a;
	int err;

	err = open_session(&u->s);
	if (err)
		fatal("session open: %s", local_strerror(err));
	u->mutex = mmap(NULL, sizeof(*u->mutex), PROT_READ | PROT_WRITE,
			MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (u->mutex == MAP_FAILED)
		fatal("mmap: %s", strerror(errno));
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	err = pthread_mutex_init(u->mutex, &a);
	pthread_mutexattr_destroy(&a);
	if (err)
		fatal("pthread_mutex_init: %s", strerror(err));
	/* Two opens: flock and OFD locks both belong to the open file description. */
	u->flock_fd = open(broker.file, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	u->ofd_fd = open(broker.file, O_RDWR | O_CLOEXEC);
	if (u->flock_fd < 0 || u->ofd_fd < 0)
		fatal("open %s: %s", broker.file, strerror(errno));
}

static void uncontended_teardown(struct uncontended *u)
{
	pthread_mutex_destroy(u->mutex);
	munmap(u->mutex, sizeof(*u->mutex));
	close(u->flock_fd);
	close(u->ofd_fd);
	local_session_close(u->s);
}

static void print_unc_row(const char *name, struct unc_result r, double base)
{
	printf("  %-44s %10.1f %12.1f %11.2fx\n", name, r.best, r.median, r.best / base);
}

static void bench_uncontended(void)
{
	struct unc_result mutex, try, wait, fl, ofd;
	struct uncontended u;
	double lib;

	uncontended_setup(&u);
	mutex = measure_uncontended(loop_robust_mutex, &u, "robust mutex");
	try = measure_uncontended(loop_liblocal_try, &u, "liblocal (timeout_ms=0)");
	wait = measure_uncontended(loop_liblocal_wait, &u, "liblocal (NULL opts)");
	fl = measure_uncontended(loop_flock, &u, "flock");
	ofd = measure_uncontended(loop_ofd, &u, "OFD lock");
	uncontended_teardown(&u);

	printf("\n1. Uncontended lock+release, one thread, same key/lock every time\n");
	printf("   (ns per lock+release pair; best and median of %d runs of %llu ms)\n\n",
	       UNC_RUNS, UNC_RUN_NS / NSEC_PER_MSEC);
	printf("  %-44s %10s %12s %12s\n", "mechanism", "best ns/op", "median ns/op",
	       "vs mutex");
	print_unc_row("robust process-shared pthread mutex", mutex, mutex.best);
	print_unc_row("liblocal local_lock(timeout_ms=0)+release", try, mutex.best);
	print_unc_row("liblocal local_lock(NULL opts)+release", wait, mutex.best);
	print_unc_row("flock(2) LOCK_EX + LOCK_UN", fl, mutex.best);
	print_unc_row("fcntl F_OFD_SETLKW F_WRLCK + F_UNLCK", ofd, mutex.best);

	/* Judge liblocal by the slower of its two entry points. */
	lib = try.best > wait.best ? try.best : wait.best;
	printf("\n  liblocal / robust mutex = %.2f    flock / liblocal = %.2f"
	       "    OFD / liblocal = %.2f\n",
	       lib / mutex.best, fl.best / lib, ofd.best / lib);
	add_target(lib <= 3 * mutex.best, "uncontended liblocal <= 3x robust mutex (%.2fx)",
		   lib / mutex.best);
	add_target(fl.best >= 10 * lib, "uncontended liblocal >= 10x faster than flock (%.1fx)",
		   fl.best / lib);
}

/* ---- 2. FIFO handoffs --------------------------------------------------- */

static void end_rusage(int idx, const struct rusage *before)
{
	struct rusage after;

	getrusage(RUSAGE_SELF, &after);
	sh->per[idx].vol_csw = (uint64_t)(after.ru_nvcsw - before->ru_nvcsw);
	sh->per[idx].invol_csw = (uint64_t)(after.ru_nivcsw - before->ru_nivcsw);
}

/* Inside the lock: check exclusion and count changes of owner. */
static void critical_section(int idx, uint64_t *handoffs)
{
	if (atomic_exchange_explicit(&sh->inside, idx + 1, memory_order_relaxed))
		atomic_fetch_add(&sh->violations, 1);
	if (atomic_load_explicit(&sh->last_owner, memory_order_relaxed) != idx) {
		atomic_store_explicit(&sh->last_owner, idx, memory_order_relaxed);
		(*handoffs)++;
	}
	atomic_store_explicit(&sh->inside, 0, memory_order_relaxed);
}

/* Counts go out as they change (a plain store to our own line), so the
 * parent sees progress and knows how far a run got if it hangs. */
static void publish(int idx, uint64_t acquisitions, uint64_t handoffs)
{
	atomic_store_explicit(&sh->per[idx].acquisitions, acquisitions, memory_order_relaxed);
	atomic_store_explicit(&sh->per[idx].handoffs, handoffs, memory_order_relaxed);
}

static int handoff_child(int idx)
{
	uint64_t acquisitions = 0, handoffs = 0;
	struct rusage before;
	local_session *s;
	int err;

	/* Sessions are per process: open it here, after the fork. */
	err = open_session(&s);
	if (err)
		return child_fail("session open", err);
	if (barrier_wait())
		return 1;
	getrusage(RUSAGE_SELF, &before);
	while (!atomic_load_explicit(&sh->stop, memory_order_relaxed)) {
		err = local_lock(s, KEY_HANDOFF, NULL, NULL);
		if (err)
			return child_fail("local_lock", err);
		critical_section(idx, &handoffs);
		publish(idx, ++acquisitions, handoffs);
		err = local_release(s, KEY_HANDOFF);
		if (err)
			return child_fail("local_release", err);
	}
	end_rusage(idx, &before);
	err = local_session_close(s);
	return err ? child_fail("session close", err) : 0;
}

/*
 * Two processes pass one shared futex word back and forth: the word says
 * whose turn it is; a pass stores the other's number and wakes it. Every pass
 * is one handoff, a round trip is two.
 */
static int pingpong_child(int idx)
{
	uint32_t me = (uint32_t)idx, other = me ^ 1, v;
	uint64_t passes = 0;
	struct rusage before;

	if (barrier_wait())
		return 1;
	getrusage(RUSAGE_SELF, &before);
	while (!atomic_load_explicit(&sh->stop, memory_order_relaxed)) {
		while ((v = atomic_load(&sh->turn)) != me) {
			if (atomic_load(&sh->stop))
				goto out;
			futex_wait(&sh->turn, v, 0);
		}
		atomic_store(&sh->turn, other);
		futex_wake(&sh->turn, 1);
		passes++;
		publish(idx, passes, passes);
	}
out:
	end_rusage(idx, &before);
	return 0;
}

struct handoff_result {
	double handoffs_per_s;
	double acquisitions_per_s;
	double vol_csw_per_handoff;
	double invol_csw_per_handoff;
	bool hung;
	char note[320];
};

static uint64_t total_acquisitions(int n)
{
	uint64_t sum = 0;
	int i;

	for (i = 0; i < n; i++)
		sum += atomic_load_explicit(&sh->per[i].acquisitions, memory_order_relaxed);
	return sum;
}

/* Sleep through the run, waking every 10 ms to watch progress. Ends when
 * the time is up or when nothing moved for STALL_NS; *last gets the time of
 * the last progress seen. */
static uint64_t watch_run(uint64_t t0, int n, uint64_t *last)
{
	uint64_t seen = 0, now, cur;

	*last = t0;
	for (;;) {
		sleep_ns(10 * NSEC_PER_MSEC);
		now = now_ns();
		cur = total_acquisitions(n);
		if (cur != seen) {
			seen = cur;
			*last = now;
		}
		if (now - t0 >= HANDOFF_NS || now - *last >= STALL_NS)
			return now;
	}
}

/* Reap the children in @pids that have ended (slots set to 0); true once
 * none is left, false if some are still running at @deadline. */
static bool reap_finished(pid_t *pids, int n, uint64_t deadline, const char *what)
{
	int i, left, status;

	for (;;) {
		for (i = 0, left = 0; i < n; i++) {
			if (!pids[i])
				continue;
			if (waitpid(pids[i], &status, WNOHANG) != pids[i]) {
				left++;
				continue;
			}
			forget_kid(pids[i]);
			if (!WIFEXITED(status) || WEXITSTATUS(status))
				fatal("%s: child %d failed (status 0x%x): %s", what, (int)pids[i],
				      status, child_error());
			pids[i] = 0;
		}
		if (!left)
			return true;
		if (now_ns() > deadline)
			return false;
		sleep_ns(1 * NSEC_PER_MSEC);
	}
}

static void read_wchan(pid_t pid, char *out, size_t size)
{
	char path[64];
	FILE *f;

	snprintf(out, size, "?");
	snprintf(path, sizeof(path), "/proc/%d/wchan", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return;
	if (!fgets(out, (int)size, f))
		snprintf(out, size, "?");
	fclose(f);
}

/* Some children never came back after stop: say what the key looks like,
 * then kill them. The broker releases their sessions (lock-delay 0). */
static void diagnose_hang(pid_t *pids, int n, uint64_t stalled_ms, struct handoff_result *r)
{
	static struct local_key_info info; /* 64 KiB: not on the stack */
	char wchan[64] = "?", holder[96] = "";
	local_session *probe;
	int i, stuck = 0;

	for (i = 0; i < n; i++)
		if (pids[i] && !stuck++)
			read_wchan(pids[i], wchan, sizeof(wchan));
	memset(&info, 0, sizeof(info));
	if (!open_session(&probe)) {
		local_info(probe, KEY_HANDOFF, &info);
		local_session_close(probe);
	}
	for (i = 0; i < n; i++)
		if (pids[i] && info.holder_pid == pids[i])
			snprintf(holder, sizeof(holder),
				 " The holder (pid %d) is one of them: granted, never woken.",
				 (int)info.holder_pid);
	snprintf(r->note, sizeof(r->note),
		 "HUNG: progress stopped %llu ms into the run; %d of %d processes still in "
		 "local_lock %d ms after stop (wchan %s); key: %u holder(s), %u waiter(s).%s",
		 (unsigned long long)stalled_ms, stuck, n, FINISH_TIMEOUT_MS, wchan, info.holders,
		 info.waiters, holder);
	for (i = 0; i < n; i++)
		if (pids[i]) {
			kill(pids[i], SIGKILL);
			reap(pids[i], END_TIMEOUT_MS);
		}
	r->hung = true;
	product_errors++;
}

/* One timed run of @fn in @n processes. */
static struct handoff_result handoff_run(child_fn fn, int n, const char *what)
{
	uint64_t t0, t1, last, acq = 0, hand = 0, vcsw = 0, icsw = 0;
	struct handoff_result r = { .hung = false };
	pid_t pids[MAX_PROCS];
	double secs;
	int i;

	reset_shared();
	for (i = 0; i < n; i++)
		pids[i] = spawn(fn, i);
	t0 = barrier_open(n, what);
	t1 = watch_run(t0, n, &last);
	atomic_store(&sh->stop, 1);
	/* A ping-pong process may sleep on turn: give it a value nobody waits
	 * for and wake it, so it sees stop. */
	atomic_store(&sh->turn, 2);
	futex_wake(&sh->turn, INT_MAX);
	if (!reap_finished(pids, n, now_ns() + FINISH_TIMEOUT_MS * NSEC_PER_MSEC, what)) {
		diagnose_hang(pids, n, (last - t0) / NSEC_PER_MSEC, &r);
		t1 = last; /* the rate below is the rate while it still ran */
	}
	if (atomic_load(&sh->violations))
		fatal("%s: MUTUAL EXCLUSION VIOLATED %u times", what, atomic_load(&sh->violations));
	for (i = 0; i < n; i++) {
		acq += sh->per[i].acquisitions;
		hand += sh->per[i].handoffs;
		vcsw += sh->per[i].vol_csw;
		icsw += sh->per[i].invol_csw;
	}
	secs = t1 > t0 ? (double)(t1 - t0) / (double)NSEC_PER_SEC : 1e-9;
	r.handoffs_per_s = (double)hand / secs;
	r.acquisitions_per_s = (double)acq / secs;
	r.vol_csw_per_handoff = hand ? (double)vcsw / (double)hand : 0;
	r.invol_csw_per_handoff = hand ? (double)icsw / (double)hand : 0;
	return r;
}

static int cmp_handoff(const void *a, const void *b)
{
	const struct handoff_result *x = a, *y = b;

	return cmp_double(&x->handoffs_per_s, &y->handoffs_per_s);
}

/* Up to HANDOFF_RUNS runs: the median run, with the spread in *lo and *hi.
 * A run that hangs ends the series and is what gets reported. */
static struct handoff_result handoff_median(child_fn fn, int n, const char *what, double *lo,
					    double *hi)
{
	struct handoff_result runs[HANDOFF_RUNS];
	int i;

	for (i = 0; i < HANDOFF_RUNS; i++) {
		runs[i] = handoff_run(fn, n, what);
		if (runs[i].hung) {
			*lo = *hi = runs[i].handoffs_per_s;
			return runs[i];
		}
	}
	qsort(runs, HANDOFF_RUNS, sizeof(runs[0]), cmp_handoff);
	*lo = runs[0].handoffs_per_s;
	*hi = runs[HANDOFF_RUNS - 1].handoffs_per_s;
	return runs[HANDOFF_RUNS / 2];
}

static void print_handoff_row(const char *name, const struct handoff_result *r, double lo,
			      double hi, double pingpong)
{
	if (r->hung) {
		printf("  %-26s %11s   (%.0f/s while it ran: %.2fx p-p)\n", name, "HUNG",
		       r->handoffs_per_s, r->handoffs_per_s / pingpong);
		return;
	}
	printf("  %-26s %11.0f %9.0f-%-9.0f %8.0f %9.2f %7.2f %8.2f\n", name, r->handoffs_per_s,
	       lo, hi, 1e9 / r->handoffs_per_s, r->vol_csw_per_handoff, r->invol_csw_per_handoff,
	       r->handoffs_per_s / pingpong);
}

static void bench_handoffs(void)
{
	static const int procs[] = { 2, 4, 8 };
	struct handoff_result pp, fifo[3];
	double pp_lo, pp_hi, lo[3], hi[3];
	char name[64];
	int i;

	pp = handoff_median(pingpong_child, 2, "futex ping-pong", &pp_lo, &pp_hi);
	if (pp.hung)
		fatal("futex ping-pong hung: %s", pp.note);
	for (i = 0; i < 3; i++) {
		snprintf(name, sizeof(name), "FIFO handoff, %d processes", procs[i]);
		fifo[i] = handoff_median(handoff_child, procs[i], name, &lo[i], &hi[i]);
	}

	printf("\n2. Handoffs per second on one key (median of %d runs of %llu ms)\n",
	       HANDOFF_RUNS, HANDOFF_NS / NSEC_PER_MSEC);
	printf("   unit: handoffs/s = times per second the lock (or the futex turn) passes\n"
	       "   from one process to another. liblocal: acquisitions whose previous holder\n"
	       "   was another process (each process loops local_lock(NULL opts) + release).\n"
	       "   ping-pong: passes of one shared futex word between 2 processes\n"
	       "   (FUTEX_WAIT/FUTEX_WAKE, not private); 1 round trip = 2 handoffs.\n"
	       "   csw: voluntary / involuntary context switches per handoff, all processes.\n\n");
	printf("  %-26s %11s %19s %8s %9s %7s %8s\n", "mechanism", "handoffs/s", "min-max",
	       "ns each", "vol.csw", "inv.csw", "vs p-p");
	print_handoff_row("futex ping-pong, 2 procs", &pp, pp_lo, pp_hi, pp.handoffs_per_s);
	for (i = 0; i < 3; i++) {
		snprintf(name, sizeof(name), "liblocal FIFO, %d procs", procs[i]);
		print_handoff_row(name, &fifo[i], lo[i], hi[i], pp.handoffs_per_s);
	}
	printf("\n  acquisitions/s (including re-acquisitions without a handoff):");
	for (i = 0; i < 3; i++)
		printf(" %d procs %.0f%s", procs[i], fifo[i].acquisitions_per_s, i < 2 ? "," : "\n");
	for (i = 0; i < 3; i++)
		if (fifo[i].hung)
			printf("  %d procs: %s\n", procs[i], fifo[i].note);
	for (i = 0; i < 3; i++) {
		if (fifo[i].hung)
			add_target(false, "FIFO handoffs, %d procs >= 2/3 of futex ping-pong (HUNG)",
				   procs[i]);
		else
			add_target(fifo[i].handoffs_per_s * 3 >= pp.handoffs_per_s * 2,
				   "FIFO handoffs, %d procs >= 2/3 of futex ping-pong (%.2f)",
				   procs[i], fifo[i].handoffs_per_s / pp.handoffs_per_s);
	}
}

/* ---- 3. crash-release latency ------------------------------------------ */

static int __attribute__((noreturn)) hold_until_killed(void)
{
	for (;;)
		pause();
}

static int crash_holder_liblocal(int idx)
{
	local_session *s;
	int err;

	(void)idx;
	err = open_session(&s);
	if (err)
		return child_fail("session open", err);
	err = local_lock(s, KEY_CRASH, NULL, NULL);
	if (err)
		return child_fail("local_lock (holder)", err);
	atomic_store(&sh->held, 1);
	return hold_until_killed();
}

static int crash_waiter_liblocal(int idx)
{
	local_session *s;
	uint64_t t;
	int err;

	(void)idx;
	err = open_session(&s);
	if (err)
		return child_fail("session open", err);
	err = local_lock(s, KEY_CRASH, NULL, NULL);
	t = now_ns();
	if (err)
		return child_fail("local_lock (waiter)", err);
	atomic_store(&sh->acquired_ns, t);
	err = local_release(s, KEY_CRASH);
	if (err)
		return child_fail("local_release (waiter)", err);
	err = local_session_close(s);
	return err ? child_fail("session close", err) : 0;
}

static int crash_holder_flock(int idx)
{
	int fd = open(broker.file, O_RDWR | O_CLOEXEC);

	(void)idx;
	if (fd < 0 || flock(fd, LOCK_EX))
		return child_fail("flock (holder)", -errno);
	atomic_store(&sh->held, 1);
	return hold_until_killed();
}

static int crash_waiter_flock(int idx)
{
	/* Its own open: an inherited descriptor would share the holder's lock. */
	int fd = open(broker.file, O_RDWR | O_CLOEXEC);
	uint64_t t;

	(void)idx;
	if (fd < 0)
		return child_fail("open (waiter)", -errno);
	atomic_store(&sh->blocking, 1);
	if (flock(fd, LOCK_EX))
		return child_fail("flock (waiter)", -errno);
	t = now_ns();
	atomic_store(&sh->acquired_ns, t);
	close(fd);
	return 0;
}

/* The parent's view of the crash key: wait until the waiter is queued. */
static void wait_queued(local_session *probe, pid_t waiter)
{
	static struct local_key_info info; /* 64 KiB: not on the stack */
	uint64_t deadline = now_ns() + STEP_TIMEOUT_MS * NSEC_PER_MSEC;
	int err;

	for (;;) {
		err = local_info(probe, KEY_CRASH, &info);
		if (err)
			fatal("local_info: %s", local_strerror(err));
		if (info.waiters >= 1)
			return;
		if (waitpid(waiter, NULL, WNOHANG) == waiter) {
			forget_kid(waiter);
			fatal("crash waiter exited before queueing: %s", child_error());
		}
		if (now_ns() > deadline)
			fatal("crash waiter not queued after %d ms", STEP_TIMEOUT_MS);
		sleep_ns(20 * NSEC_PER_USEC);
	}
}

/* Kill the holder; microseconds until the waiter had the lock. */
static double kill_and_measure(pid_t holder, pid_t waiter, const char *what)
{
	uint64_t t_kill, t_acq;

	t_kill = now_ns();
	kill(holder, SIGKILL);
	reap_ok(waiter, what);
	reap_killed(holder, what);
	t_acq = atomic_load(&sh->acquired_ns);
	if (t_acq < t_kill)
		fatal("%s: the waiter got the lock before its holder was killed", what);
	return (double)(t_acq - t_kill) / (double)NSEC_PER_USEC;
}

static double crash_trial_liblocal(local_session *probe)
{
	pid_t holder, waiter;

	reset_shared();
	holder = spawn(crash_holder_liblocal, 0);
	wait_flag(&sh->held, holder, "liblocal crash holder");
	waiter = spawn(crash_waiter_liblocal, 1);
	wait_queued(probe, waiter);
	sleep_ns(PARK_SETTLE_NS);
	return kill_and_measure(holder, waiter, "liblocal crash release");
}

static double crash_trial_flock(void)
{
	pid_t holder, waiter;

	reset_shared();
	holder = spawn(crash_holder_flock, 0);
	wait_flag(&sh->held, holder, "flock crash holder");
	waiter = spawn(crash_waiter_flock, 1);
	wait_flag(&sh->blocking, waiter, "flock crash waiter");
	/* flock has no queue to inspect: "about to block" plus a pause. */
	sleep_ns(FLOCK_BLOCK_SETTLE_NS);
	return kill_and_measure(holder, waiter, "flock crash release");
}

struct latency {
	double min, median, p90, max;
};

static struct latency summarize(double *v, int n)
{
	struct latency l;

	l.median = percentile(v, n, 50);
	l.p90 = percentile(v, n, 90);
	l.min = v[0];
	l.max = v[n - 1];
	return l;
}

static void print_latency_row(const char *name, struct latency l)
{
	printf("  %-36s %9.1f %9.1f %9.1f %9.1f\n", name, l.min, l.median, l.p90, l.max);
}

static void bench_crash_release(void)
{
	double lib_us[CRASH_TRIALS], fl_us[CRASH_TRIALS];
	struct latency lib, fl;
	local_session *probe;
	int i, err;

	err = open_session(&probe);
	if (err)
		fatal("session open: %s", local_strerror(err));
	for (i = 0; i < CRASH_TRIALS; i++) {
		lib_us[i] = crash_trial_liblocal(probe);
		fl_us[i] = crash_trial_flock();
	}
	local_session_close(probe);
	lib = summarize(lib_us, CRASH_TRIALS);
	fl = summarize(fl_us, CRASH_TRIALS);

	printf("\n3. Crash release: SIGKILL of the holder -> queued waiter holds the lock\n");
	printf("   (microseconds from just before kill() to the waiter's return from its\n"
	       "   lock call; %d trials each, interleaved; holder session lock_delay_ms=0;\n"
	       "   the waiter is asleep: liblocal seen queued + %llu ms, flock + %llu ms)\n\n",
	       CRASH_TRIALS, PARK_SETTLE_NS / NSEC_PER_MSEC, FLOCK_BLOCK_SETTLE_NS / NSEC_PER_MSEC);
	printf("  %-36s %9s %9s %9s %9s\n", "mechanism", "min us", "median us", "p90 us",
	       "max us");
	print_latency_row("liblocal (broker pidfd cleanup)", lib);
	print_latency_row("flock(2) (kernel release at exit)", fl);
	printf("\n  liblocal / flock: median %.2fx, p90 %.2fx\n", lib.median / fl.median,
	       lib.p90 / fl.p90);
	add_target(lib.median <= 2 * fl.median, "crash release median liblocal <= 2x flock (%.2fx)",
		   lib.median / fl.median);
	add_target(lib.p90 < 1000, "crash release liblocal p90 under 1 ms (%.0f us)", lib.p90);
}

/* ---- main -------------------------------------------------------------- */

static void cpu_model(char *out, size_t size)
{
	char line[256];
	FILE *f = fopen("/proc/cpuinfo", "r");

	snprintf(out, size, "unknown");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');

		if (strncmp(line, "model name", 10) || !colon)
			continue;
		colon += strspn(colon + 1, " \t") + 1;
		colon[strcspn(colon, "\n")] = '\0';
		snprintf(out, size, "%s", colon);
		break;
	}
	fclose(f);
}

static void print_machine(void)
{
	struct utsname u;
	char cpu[128];

	uname(&u);
	cpu_model(cpu, sizeof(cpu));
	printf("shmlock-bench: liblocal %d.%d against kernel and glibc locks\n",
	       LOCAL_VERSION_MAJOR, LOCAL_VERSION_MINOR);
	printf("  machine: %ld online CPUs (nproc), %s\n", sysconf(_SC_NPROCESSORS_ONLN), cpu);
	printf("  kernel:  %s %s %s %s\n", u.sysname, u.release, u.version, u.machine);
	printf("  glibc:   %s\n", gnu_get_libc_version());
	printf("  broker:  %s (socket %s, segment %s)\n", getenv("SHMLOCK_BROKER_BIN"),
	       broker.sock, broker.shm);
}

static void print_summary(void)
{
	int i, met = 0;

	printf("\nSummary of targets\n");
	for (i = 0; i < ntargets; i++) {
		printf("  %-7s  %s\n", targets[i].met ? "MET" : "NOT MET", targets[i].text);
		met += targets[i].met;
	}
	printf("  %d of %d targets met\n", met, ntargets);
	if (product_errors)
		printf("  PRODUCT ERRORS: %d run(s) hung (see the notes above); exit status 1\n",
		       product_errors);
}

int main(void)
{
	uint64_t t0 = now_ns();

	main_pid = getpid();
	/* Unbuffered-ish output for a run that prints as it goes. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		fatal("mmap: %s", strerror(errno));
	broker_start(&broker);
	print_machine();
	bench_uncontended();
	bench_handoffs();
	bench_crash_release();
	broker_stop(&broker, false);
	print_summary();
	printf("  (wall time %.1f s; timing targets never change the exit status)\n",
	       (double)(now_ns() - t0) / (double)NSEC_PER_SEC);
	return product_errors ? 1 : 0;
}
