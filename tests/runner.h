/* SPDX-License-Identifier: MIT */
/*
 * The parallel part of the test runner: every test in a forked child (its
 * own process group, its own environment: isolate.h) with its output
 * buffered in a file, up to @jobs at once, a TEST_ALONE test with no other
 * beside it, each under its deadline. main.c reports the results in CUnit's
 * order as they come in.
 */
#ifndef SHMLOCK_TEST_RUNNER_H
#define SHMLOCK_TEST_RUNNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "harness.h"

struct test_run {
	const struct test_case *tc;
	int timeout_s; /* the deadline applied, after $SHMLOCK_TEST_TIMEOUT_S */
	bool started, done, timed_out;
	pid_t pid;
	int pidfd;	/* -1 where pidfd_open() is unknown (valgrind) */
	uint64_t t0_ms; /* start, on now_ms()'s clock */
	uint64_t took_ms;
	uint64_t cpu_ms; /* user + system time of the test and what it waited for */
	int status;	 /* raw wait status */
	char dir[512];	 /* the test's HOME and XDG_RUNTIME_DIR are below */
	char out[512];	 /* its stdout and stderr */
};

/*
 * Prepare @n tests (kept by reference: @tcs must outlive the run) to run up
 * to @jobs at once under the run's directory @run_dir; while the machine's
 * load average exceeds @busy_load (0: never), one at a time. Nothing starts
 * yet. 0 or -ENOMEM.
 */
int runner_init(const struct test_case *const *tcs, size_t n, unsigned jobs, double busy_load,
		const char *run_dir);

/* Run tests, in the background of each other, until test @i is done;
 * its record. */
const struct test_run *runner_wait(size_t i);

/* Copy test @i's buffered output to @to. */
void runner_replay(size_t i, FILE *to);

/* How many tests are done. */
size_t runner_done(void);

/* The @top slowest tests done, slowest first, then the @top that took the
 * most CPU time (make check is CPU-bound: that is where its time goes). */
void runner_print_slowest(FILE *to, size_t top);

/* Kill whatever still runs (an interrupted run) and free the records. */
void runner_end(void);
/* Only the killing, as a signal handler may: kill() of each process group. */
void runner_kill_all(void);

#endif
