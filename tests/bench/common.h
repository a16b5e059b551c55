/* SPDX-License-Identifier: MIT */
/*
 * shmlock-bench: what every section shares. A private broker (or two),
 * children forked and reaped with deadlines, a barrier on a MAP_SHARED page,
 * the table of targets, timing loops, percentiles and a syscall counter.
 *
 * Rules for a section: it is one function called from main(); it maps its
 * own shared state with shared_map() before it forks; its children open
 * their own sessions (sessions are not inherited) and report errors with
 * child_fail(); the parent calls fatal() only for real errors, and judges
 * timing with add_target(), never with the exit status.
 */
#ifndef SHMLOCK_BENCH_COMMON_H
#define SHMLOCK_BENCH_COMMON_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "liblocal.h"

#define NSEC_PER_USEC 1000ull
#define NSEC_PER_MSEC 1000000ull
#define NSEC_PER_SEC 1000000000ull

/* Timing loops: best of UNC_RUNS runs of UNC_RUN_NS each, after one warm-up
 * run. The clock is read once per UNC_BATCH operations so it costs nothing
 * per op. */
#define UNC_RUNS 5
#define UNC_RUN_NS (200 * NSEC_PER_MSEC)
#define UNC_BATCH 1000

/* The most children a section runs at once; the scaling section (9) runs
 * one per online CPU, up to MAX_KIDS. */
#define MAX_PROCS 8
#define MAX_KIDS 256

/* How long a child may take to reach a barrier, a flag or its end. */
#define STEP_TIMEOUT_MS 5000
#define END_TIMEOUT_MS 10000

/* Once a waiter is seen about to sleep, let it settle well past liblocal's
 * few-microsecond spin, so it is measured asleep in the kernel. */
#define PARK_SETTLE_NS (2 * NSEC_PER_MSEC)

struct broker {
	pid_t pid;
	char dir[64];
	char sock[128];
	char shm[64];
	char log[128];
	char file[128]; /* the flock/OFD lock file */
};

/* Parent <-> children control, in a MAP_SHARED page made before any fork. */
struct shared {
	_Alignas(64) _Atomic uint32_t ready;	/* children at the barrier */
	_Atomic uint32_t start;			/* futex: the barrier opens */
	_Atomic uint32_t stop;			/* time is up */
	_Alignas(64) _Atomic int32_t err;	/* first error a child hit */
	_Alignas(64) _Atomic uint64_t syscalls; /* count_syscalls() */
	_Atomic int32_t first_syscall;
};

/* The main broker (default caps), the control page, our pid. */
extern struct broker broker;
extern struct shared *sh;
extern pid_t main_pid;
extern int product_errors; /* hangs found: reported, then exit 1 */

/* ---- time and futexes ---------------------------------------------------- */

uint64_t now_ns(void);
void sleep_ns(uint64_t ns);
void sleep_until_ns(uint64_t at);
void futex_wait(_Atomic uint32_t *word, uint32_t val, uint64_t timeout_ns);
void futex_wake(_Atomic uint32_t *word, int n);

/* ---- errors, targets ---------------------------------------------------- */

void __attribute__((format(printf, 1, 2), noreturn)) fatal(const char *fmt, ...);
void __attribute__((format(printf, 2, 3))) add_target(bool met, const char *fmt, ...);
void print_summary(void);
/* utime + stime of every thread of @pid, in ms (clock-tick resolution). */
double proc_cpu_ms(pid_t pid);

/* Is @n in @list, numbers with any separators ("1,4", "10 200")? */
bool number_listed(const char *list, long n);

/* ---- the broker ---------------------------------------------------------- */

/* Start shmlockd with its own socket and segment (@tag makes the names
 * unique), plus the NULL-terminated @extra flags; stop it with
 * broker_stop(). fatal() stops every broker still running. */
void broker_start(struct broker *b, const char *tag, const char *const *extra);
void broker_stop(struct broker *b, bool dump_log);

/* A session with lock-delay 0 (a child that dies holding a key must not
 * stall the run): on the main broker, or on @b. */
int open_session(local_session **s);
int open_session_at(const struct broker *b, local_session **s);

/* ---- shared memory, children -------------------------------------------- */

void *shared_map(size_t size);
void shared_unmap(void *p, size_t size);
void reset_shared(void);

typedef int (*child_fn)(int idx);

pid_t spawn(child_fn fn, int idx);
void forget_kid(pid_t pid);
void kill_kids(void);
int reap(pid_t pid, int timeout_ms);
void reap_ok(pid_t pid, const char *what);
void reap_killed(pid_t pid, const char *what);
bool reap_finished(pid_t *pids, int n, uint64_t deadline, const char *what);
const char *child_error(void);
int child_fail(const char *what, int err);
void wait_flag(_Atomic uint32_t *flag, pid_t pid, const char *what);
void wait_sleeping(pid_t pid, const char *what);
int barrier_wait(void);
uint64_t barrier_open(int n, const char *what);

/* ---- measuring ----------------------------------------------------------- */

int cmp_double(const void *a, const void *b);
double percentile(double *v, int n, int pct);

struct latency {
	double min, median, p90, max;
};

struct latency summarize(double *v, int n);
void print_latency_row(const char *name, struct latency l);

/*
 * Paired runs: a measured case and its baseline run back to back,
 * several times, in alternating order, so that a slowdown of the whole
 * machine (other work on a shared VM) hits both sides of a pair alike. The
 * figure is the median of the per-pair ratios, with their spread; a single
 * ratio of two medians would mix runs minutes apart.
 */
struct paired {
	double ratio, ratio_lo, ratio_hi; /* measured / baseline: median, min, max */
	double base, base_lo, base_hi;	  /* the baseline's runs: median, min, max */
	double meas, meas_lo, meas_hi;	  /* the measured case's runs */
	int n;				  /* pairs */
};

/* Summarize @n pairs (@meas[i] against @base[i]; both arrays are left alone). */
struct paired paired_summary(const double *meas, const double *base, int n);

/* "0.83 (0.61-0.97 over 9 pairs)": the ratio and its spread. */
const char *paired_text(const struct paired *p, char *buf, size_t size);

/* A timing loop: @n operations on @arg; 0 or a negative error. */
typedef int (*op_loop)(void *arg, uint64_t n);

struct op_result {
	double best, median; /* ns per operation */
};

/* Run @fn in batches of UNC_BATCH for @run_ns; ns per operation. */
double ns_per_op(op_loop fn, void *arg, uint64_t run_ns, const char *what);

/* Run @fn in batches for UNC_RUN_NS, UNC_RUNS times; ns per operation. */
struct op_result measure_ops(op_loop fn, void *arg, const char *what);

/*
 * System calls made by @n calls of @fn, counted in a fresh child under a
 * seccomp filter that traps every call (none is carried out). @setup runs
 * in the child before the filter (open a session, take a key) and fills
 * *arg. Returns the count (*first_nr: the first call's number), or -1 when
 * seccomp is not available.
 */
long count_syscalls(int (*setup)(void **arg), op_loop fn, uint64_t n, int *first_nr);

/* ---- the sections (one file each) --------------------------------------- */

void bench_uncontended(void);	/* uncontended.c */
void bench_handoffs(void);	/* handoff.c */
void bench_crash_release(void); /* crash_release.c */
void bench_semaphores(void);	/* semaphores.c */
void bench_lease_renew(void);	/* leases.c */
void bench_watch(void);		/* watch.c */
void bench_lease_expiry(void);	/* leases.c */
void bench_http(void);		/* http.c */
void bench_scale(void);		/* scale.c */
void bench_flat(void);		/* flat.c */
void bench_tcp(void);		/* tcp.c */

#endif
