// SPDX-License-Identifier: MIT
/*
 * shmlock-bench infrastructure: brokers, children, the barrier, the shared
 * control page, targets, timing loops, percentiles, the syscall counter.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/filter.h>
#include <linux/futex.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "common.h"

struct broker broker;
struct shared *sh;
pid_t main_pid;
int product_errors;

struct target {
	bool met;
	char text[160];
};

static struct target targets[32];
static int ntargets;
static pid_t kids[MAX_KIDS + 2];
static int nkids;
static struct broker *running[4]; /* brokers fatal() must stop */

/* ---- time and futexes ---------------------------------------------------- */

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

void sleep_until_ns(uint64_t at)
{
	struct timespec ts = { .tv_sec = (time_t)(at / NSEC_PER_SEC),
			       .tv_nsec = (long)(at % NSEC_PER_SEC) };

	/* Absolute, so a signal cannot stretch or shorten the sleep. */
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

void sleep_ns(uint64_t ns)
{
	sleep_until_ns(now_ns() + ns);
}

void futex_wait(_Atomic uint32_t *word, uint32_t val, uint64_t timeout_ns)
{
	struct timespec ts = { .tv_sec = (time_t)(timeout_ns / NSEC_PER_SEC),
			       .tv_nsec = (long)(timeout_ns % NSEC_PER_SEC) };

	/* Shared (no FUTEX_PRIVATE_FLAG): the word is in a MAP_SHARED page. */
	syscall(SYS_futex, word, FUTEX_WAIT, val, timeout_ns ? &ts : NULL, NULL, 0);
}

void futex_wake(_Atomic uint32_t *word, int n)
{
	syscall(SYS_futex, word, FUTEX_WAKE, n, NULL, NULL, 0);
}

/* ---- errors, targets ---------------------------------------------------- */

void kill_kids(void)
{
	int i;

	for (i = 0; i < nkids; i++) {
		kill(kids[i], SIGKILL);
		waitpid(kids[i], NULL, 0);
	}
	nkids = 0;
}

/* A real error: in a child, just exit; in the parent, clean up and exit 1. */
void fatal(const char *fmt, ...)
{
	va_list ap;
	int i;

	fflush(stdout);
	fputs("shmlock-bench: error: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (getpid() != main_pid)
		_exit(1);
	kill_kids();
	for (i = 0; i < (int)(sizeof(running) / sizeof(running[0])); i++)
		if (running[i])
			broker_stop(running[i], true);
	exit(1);
}

void add_target(bool met, const char *fmt, ...)
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

void print_summary(void)
{
	int i, met = 0;

	printf("\nSummary of targets\n");
	for (i = 0; i < ntargets; i++) {
		printf("  %-7s  %s\n", targets[i].met ? "MET" : "NOT MET", targets[i].text);
		met += targets[i].met;
	}
	printf("  %d of %d targets met\n", met, ntargets);
	if (product_errors)
		printf("  PRODUCT ERRORS: %d (hung runs, stranded leases: see the notes above);"
		       " exit status 1\n",
		       product_errors);
}

/* ---- the broker ---------------------------------------------------------- */

static bool socket_answers(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	size_t len = strlen(path);
	bool ok;

	if (fd < 0)
		return false;
	if (len >= sizeof(sa.sun_path)) {
		close(fd);
		return false;
	}
	memcpy(sa.sun_path, path, len + 1);
	ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

static void broker_exec(const struct broker *b, const char *bin, const char *const *extra)
{
	const char *argv[32] = { bin,	       "--socket", b->sock,
				 "--shm-name", b->shm,	   "--destroy-segment-on-exit" };
	int fd = open(b->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	int argc = 6;

	if (fd >= 0) {
		dup2(fd, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
	}
	while (extra && *extra && argc < (int)(sizeof(argv) / sizeof(argv[0])) - 1)
		argv[argc++] = *extra++;
	argv[argc] = NULL;
	execv(bin, (char *const *)argv);
	fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
	_exit(127);
}

static void track(struct broker *b, bool on)
{
	int i;

	for (i = 0; i < (int)(sizeof(running) / sizeof(running[0])); i++)
		if (on ? !running[i] : running[i] == b) {
			running[i] = on ? b : NULL;
			return;
		}
}

void broker_start(struct broker *b, const char *tag, const char *const *extra)
{
	const char *bin = getenv("SHMLOCK_BROKER_BIN");
	uint64_t deadline;
	int status;

	if (!bin || !*bin)
		fatal("SHMLOCK_BROKER_BIN is not set (use 'make bench')");
	snprintf(b->dir, sizeof(b->dir), "/tmp/shmlock-bench-XXXXXX");
	if (!mkdtemp(b->dir))
		fatal("mkdtemp: %s", strerror(errno));
	track(b, true);
	snprintf(b->sock, sizeof(b->sock), "%s/sock", b->dir);
	snprintf(b->log, sizeof(b->log), "%s/broker.log", b->dir);
	snprintf(b->file, sizeof(b->file), "%s/lockfile", b->dir);
	snprintf(b->shm, sizeof(b->shm), "/shmlock-bench-%d%s%s", (int)getpid(), *tag ? "-" : "",
		 tag);
	shm_unlink(b->shm); /* left over by a killed run that had our pid */
	fflush(NULL);
	b->pid = fork();
	if (b->pid < 0)
		fatal("fork: %s", strerror(errno));
	if (b->pid == 0)
		broker_exec(b, bin, extra);
	deadline = now_ns() + STEP_TIMEOUT_MS * NSEC_PER_MSEC;
	while (!socket_answers(b->sock)) {
		if (waitpid(b->pid, &status, WNOHANG) == b->pid) {
			b->pid = 0;
			fatal("broker %s exited at start (status 0x%x)", bin, status);
		}
		if (now_ns() > deadline)
			fatal("broker did not answer on %s within %d ms", b->sock, STEP_TIMEOUT_MS);
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
void broker_stop(struct broker *b, bool dump_log)
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
	track(b, false);
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

int open_session_at(const struct broker *b, local_session **s)
{
	struct local_session_opts o;

	local_session_opts_init(&o);
	o.socket_path = b->sock;
	o.name = "shmlock-bench";
	o.lock_delay_ms = 0;
	return local_session_open(&o, s);
}

int open_session(local_session **s)
{
	return open_session_at(&broker, s);
}

/* ---- shared memory, children -------------------------------------------- */

void *shared_map(size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		fatal("mmap: %s", strerror(errno));
	return p;
}

void shared_unmap(void *p, size_t size)
{
	munmap(p, size);
}

void reset_shared(void)
{
	memset(sh, 0, sizeof(*sh));
}

pid_t spawn(child_fn fn, int idx)
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

void forget_kid(pid_t pid)
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
int reap(pid_t pid, int timeout_ms)
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

const char *child_error(void)
{
	int err = atomic_load(&sh->err);

	return err ? local_strerror(err) : "no error recorded";
}

void reap_ok(pid_t pid, const char *what)
{
	int status = reap(pid, END_TIMEOUT_MS);

	if (status == -1)
		fatal("%s: child %d did not finish in %d ms", what, (int)pid, END_TIMEOUT_MS);
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		fatal("%s: child %d failed (status 0x%x): %s", what, (int)pid, status,
		      child_error());
}

void reap_killed(pid_t pid, const char *what)
{
	int status = reap(pid, END_TIMEOUT_MS);

	if (status == -1 || !WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
		fatal("%s: holder %d did not die of SIGKILL (status 0x%x)", what, (int)pid, status);
}

/* Reap the children in @pids that have ended (slots set to 0); true once
 * none is left, false if some are still running at @deadline. */
bool reap_finished(pid_t *pids, int n, uint64_t deadline, const char *what)
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

/* In a child: record the first error for the parent and fail. */
int child_fail(const char *what, int err)
{
	int32_t none = 0;

	atomic_compare_exchange_strong(&sh->err, &none, err);
	fprintf(stderr, "shmlock-bench: child %d: %s: %s\n", (int)getpid(), what,
		local_strerror(err));
	return 1;
}

static void check_alive(pid_t pid, const char *what)
{
	int status;

	if (waitpid(pid, &status, WNOHANG) == pid) {
		forget_kid(pid);
		fatal("%s: child %d exited (status 0x%x): %s", what, (int)pid, status,
		      child_error());
	}
}

/* Wait for a child's flag; fail early if the child is already gone. */
void wait_flag(_Atomic uint32_t *flag, pid_t pid, const char *what)
{
	uint64_t deadline = now_ns() + STEP_TIMEOUT_MS * NSEC_PER_MSEC;

	while (!atomic_load(flag)) {
		check_alive(pid, what);
		if (now_ns() > deadline)
			fatal("%s: no progress in %d ms", what, STEP_TIMEOUT_MS);
		sleep_ns(20 * NSEC_PER_USEC);
	}
}

static char proc_state(pid_t pid)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return '?';
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return '?';
	buf[n] = '\0';
	p = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
	return p && p[1] == ' ' ? p[2] : '?';
}

/* Wait until @pid sleeps in the kernel (state S). */
void wait_sleeping(pid_t pid, const char *what)
{
	uint64_t deadline = now_ns() + STEP_TIMEOUT_MS * NSEC_PER_MSEC;

	while (proc_state(pid) != 'S') {
		check_alive(pid, what);
		if (now_ns() > deadline)
			fatal("%s: child %d not asleep after %d ms", what, (int)pid,
			      STEP_TIMEOUT_MS);
		sleep_ns(20 * NSEC_PER_USEC);
	}
}

/* In a child: arrive, then sleep until the parent opens the barrier. */
int barrier_wait(void)
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
uint64_t barrier_open(int n, const char *what)
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

/* ---- measuring ----------------------------------------------------------- */

int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Nearest-rank percentile of @v (sorted in place). */
double percentile(double *v, int n, int pct)
{
	int rank = (pct * n + 99) / 100;

	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return v[rank > 0 ? rank - 1 : 0];
}

struct latency summarize(double *v, int n)
{
	struct latency l;

	l.median = percentile(v, n, 50);
	l.p90 = percentile(v, n, 90);
	l.min = v[0];
	l.max = v[n - 1];
	return l;
}

void print_latency_row(const char *name, struct latency l)
{
	printf("  %-36s %9.1f %9.1f %9.1f %9.1f\n", name, l.min, l.median, l.p90, l.max);
}

static void median_range(double *v, int n, double *med, double *lo, double *hi)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	/* The middle one, or the mean of the two middle ones. */
	*med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	*lo = v[0];
	*hi = v[n - 1];
}

struct paired paired_summary(const double *meas, const double *base, int n)
{
	struct paired p = { .n = n };
	double *v;
	int i;

	if (n <= 0)
		return p;
	v = calloc((size_t)n, sizeof(*v));
	if (!v)
		fatal("out of memory");
	for (i = 0; i < n; i++)
		v[i] = base[i] > 0 ? meas[i] / base[i] : 0;
	median_range(v, n, &p.ratio, &p.ratio_lo, &p.ratio_hi);
	memcpy(v, base, (size_t)n * sizeof(*v));
	median_range(v, n, &p.base, &p.base_lo, &p.base_hi);
	memcpy(v, meas, (size_t)n * sizeof(*v));
	median_range(v, n, &p.meas, &p.meas_lo, &p.meas_hi);
	free(v);
	return p;
}

const char *paired_text(const struct paired *p, char *buf, size_t size)
{
	snprintf(buf, size, "%.2f (%.2f-%.2f over %d pairs)", p->ratio, p->ratio_lo, p->ratio_hi,
		 p->n);
	return buf;
}

double ns_per_op(op_loop fn, void *arg, uint64_t run_ns, const char *what)
{
	uint64_t t0 = now_ns(), t, ops = 0;
	int err;

	do {
		err = fn(arg, UNC_BATCH);
		if (err)
			fatal("%s: %s", what, local_strerror(err));
		ops += UNC_BATCH;
		t = now_ns();
	} while (t - t0 < run_ns);
	return (double)(t - t0) / (double)ops;
}

struct op_result measure_ops(op_loop fn, void *arg, const char *what)
{
	double runs[UNC_RUNS];
	struct op_result r;
	int i;

	ns_per_op(fn, arg, UNC_RUN_NS, what); /* warms caches and the CPU clock */
	for (i = 0; i < UNC_RUNS; i++)
		runs[i] = ns_per_op(fn, arg, UNC_RUN_NS, what);
	r.median = percentile(runs, UNC_RUNS, 50);
	r.best = runs[0];
	return r;
}

/* ---- counting system calls ---------------------------------------------- */

/* In the child, under the filter: no system call may happen in here. */
static void on_sigsys(int sig, siginfo_t *si, void *ctx)
{
	int32_t none = -1;

	(void)sig;
	atomic_fetch_add(&sh->syscalls, 1);
	atomic_compare_exchange_strong(&sh->first_syscall, &none, si->si_syscall);
#ifdef __x86_64__
	/* The call was not carried out: make it look like it failed. */
	((ucontext_t *)ctx)->uc_mcontext.gregs[REG_RAX] = -ENOSYS;
#else
	(void)ctx;
#endif
}

static int trap_all_syscalls(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_rt_sigreturn, 2, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_exit_group, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]), .filter = f };
	struct sigaction sa = { .sa_sigaction = on_sigsys, .sa_flags = SA_SIGINFO };

	if (sigaction(SIGSYS, &sa, NULL) || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		return -errno;
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) ? -errno : 0;
}

static int (*count_setup)(void **arg);
static op_loop count_fn;
static uint64_t count_n;

static int count_child(int idx)
{
	void *arg = NULL;
	int err;

	(void)idx;
	err = count_setup(&arg);
	if (err)
		return child_fail("syscall count setup", err);
	err = count_fn(arg, 1); /* warm: first-touch work is not the steady state */
	if (err)
		return child_fail("syscall count warm-up", err);
	if (trap_all_syscalls()) {
		atomic_store(&sh->first_syscall, -2);
		return 0;
	}
	err = count_fn(arg, count_n);
	/* A trapped call fails with ENOSYS, which may fail the operation: the
	 * count is the answer then. Returning ends in exit_group (allowed). */
	return err && !atomic_load(&sh->syscalls);
}

long count_syscalls(int (*setup)(void **arg), op_loop fn, uint64_t n, int *first_nr)
{
	count_setup = setup;
	count_fn = fn;
	count_n = n;
	atomic_store(&sh->syscalls, 0);
	atomic_store(&sh->first_syscall, -1);
	reap_ok(spawn(count_child, 0), "syscall count");
	*first_nr = atomic_load(&sh->first_syscall);
	return *first_nr == -2 ? -1 : (long)atomic_load(&sh->syscalls);
}

/* utime + stime of every thread of @pid, in ms (clock-tick resolution). */
bool number_listed(const char *list, long n)
{
	char *end;

	while (*list) {
		long v = strtol(list, &end, 10);

		if (end == list)
			end++; /* skip a separator */
		else if (v == n)
			return true;
		list = end;
	}
	return false;
}

double proc_cpu_ms(pid_t pid)
{
	unsigned long long utime, stime;
	char path[64], buf[1024], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		fatal("open %s: %s", path, strerror(errno));
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		fatal("read %s: %s", path, n ? strerror(errno) : "empty");
	buf[n] = '\0';
	p = strrchr(buf, ')');
	/* After the name: state ppid pgrp session tty tpgid flags minflt
	 * cminflt majflt cmajflt utime stime (fields 3-15 of proc(5)). */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
			 &stime) != 2)
		fatal("cannot parse %s", path);
	return (double)(utime + stime) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
}
