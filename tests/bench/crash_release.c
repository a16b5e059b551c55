// SPDX-License-Identifier: MIT
/*
 * 3. Crash-release latency: how long after SIGKILL of the holder a queued
 *    waiter gets the lock, for liblocal and for flock(2).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

/* Trials per mechanism. After the waiter is seen queued we let it settle
 * (PARK_SETTLE_NS), so both mechanisms are measured with the waiter asleep in
 * the kernel. */
#define CRASH_TRIALS 40
#define FLOCK_BLOCK_SETTLE_NS (5 * NSEC_PER_MSEC)

#define KEY_CRASH "bench/crash"

/* This section's part of the shared memory: a child's progress and the
 * waiter's timestamp. */
struct crash_shared {
	_Alignas(64) _Atomic uint32_t held;
	_Atomic uint32_t blocking;
	_Atomic uint64_t acquired_ns;
};

static struct crash_shared *cs;

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
	atomic_store(&cs->held, 1);
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
	atomic_store(&cs->acquired_ns, t);
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
	atomic_store(&cs->held, 1);
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
	atomic_store(&cs->blocking, 1);
	if (flock(fd, LOCK_EX))
		return child_fail("flock (waiter)", -errno);
	t = now_ns();
	atomic_store(&cs->acquired_ns, t);
	close(fd);
	return 0;
}

/* The parent's view of the crash key: wait until the waiter is queued. */
static void wait_queued(local_session *probe, pid_t waiter)
{
	static LOCAL_OPTS(local_key_info, info);
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
	t_acq = atomic_load(&cs->acquired_ns);
	if (t_acq < t_kill)
		fatal("%s: the waiter got the lock before its holder was killed", what);
	return (double)(t_acq - t_kill) / (double)NSEC_PER_USEC;
}

static double crash_trial_liblocal(local_session *probe)
{
	pid_t holder, waiter;

	reset_shared();
	memset(cs, 0, sizeof(*cs));
	holder = spawn(crash_holder_liblocal, 0);
	wait_flag(&cs->held, holder, "liblocal crash holder");
	waiter = spawn(crash_waiter_liblocal, 1);
	wait_queued(probe, waiter);
	sleep_ns(PARK_SETTLE_NS);
	return kill_and_measure(holder, waiter, "liblocal crash release");
}

static double crash_trial_flock(void)
{
	pid_t holder, waiter;

	reset_shared();
	memset(cs, 0, sizeof(*cs));
	holder = spawn(crash_holder_flock, 0);
	wait_flag(&cs->held, holder, "flock crash holder");
	waiter = spawn(crash_waiter_flock, 1);
	wait_flag(&cs->blocking, waiter, "flock crash waiter");
	/* flock has no queue to inspect: "about to block" plus a pause. */
	sleep_ns(FLOCK_BLOCK_SETTLE_NS);
	return kill_and_measure(holder, waiter, "flock crash release");
}

void bench_crash_release(void)
{
	double lib_us[CRASH_TRIALS], fl_us[CRASH_TRIALS];
	struct latency lib, fl;
	local_session *probe;
	int i, err;

	err = open_session(&probe);
	if (err)
		fatal("session open: %s", local_strerror(err));
	cs = shared_map(sizeof(*cs));
	for (i = 0; i < CRASH_TRIALS; i++) {
		lib_us[i] = crash_trial_liblocal(probe);
		fl_us[i] = crash_trial_flock();
	}
	local_session_close(probe);
	shared_unmap(cs, sizeof(*cs));
	cs = NULL;
	lib = summarize(lib_us, CRASH_TRIALS);
	fl = summarize(fl_us, CRASH_TRIALS);

	printf("\n3. Crash release: SIGKILL of the holder -> queued waiter holds the lock\n");
	printf("   (microseconds from just before kill() to the waiter's return from its\n"
	       "   lock call; %d trials each, interleaved; holder session lock_delay_ms=0;\n"
	       "   the waiter is asleep: liblocal seen queued + %llu ms, flock + %llu ms)\n\n",
	       CRASH_TRIALS, PARK_SETTLE_NS / NSEC_PER_MSEC, FLOCK_BLOCK_SETTLE_NS / NSEC_PER_MSEC);
	printf("  %-36s %9s %9s %9s %9s\n", "mechanism", "min us", "median us", "p90 us", "max us");
	print_latency_row("liblocal (broker pidfd cleanup)", lib);
	print_latency_row("flock(2) (kernel release at exit)", fl);
	printf("\n  liblocal / flock: median %.2fx, p90 %.2fx\n", lib.median / fl.median,
	       lib.p90 / fl.p90);
	add_target(lib.median <= 2 * fl.median, "crash release median liblocal <= 2x flock (%.2fx)",
		   lib.median / fl.median);
	add_target(lib.p90 < 1000, "crash release liblocal p90 under 1 ms (%.0f us)", lib.p90);
}
