// SPDX-License-Identifier: MIT
/*
 * 6. Watch wake-up latency: a process sleeps in local_watch() on a key,
 *    another changes the key (local_lock), and the time from just before the
 *    change to the watcher's return is measured. Next to it, the same with a
 *    plain shared futex word: a store and FUTEX_WAKE against FUTEX_WAIT.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

#define WATCH_TRIALS 50
#define WATCH_TIMEOUT_MS 5000
#define KEY_WATCH "bench/watch"

enum { PHASE_FUTEX = 0, PHASE_WATCH = 1 };

/* This section's part of the shared memory. Phase p (0, 1, ...) is a futex
 * trial when p is even and a watch trial when it is odd. */
struct watch_shared {
	_Alignas(64) _Atomic uint32_t go;   /* parent: phase + 1 may start */
	_Atomic uint32_t armed;		    /* child: about to sleep (phase + 1) */
	_Atomic uint64_t woke_ns;	    /* child: when it returned */
	_Alignas(64) _Atomic uint32_t word; /* the futex baseline's word */
};

static struct watch_shared *ws;

static int wait_go(uint32_t phase)
{
	uint64_t deadline = now_ns() + STEP_TIMEOUT_MS * NSEC_PER_MSEC;
	uint32_t v;

	while ((v = atomic_load(&ws->go)) != phase + 1) {
		if (now_ns() > deadline)
			return child_fail("watch: waiting for the parent", -ETIMEDOUT);
		futex_wait(&ws->go, v, 100 * NSEC_PER_MSEC);
	}
	return 0;
}

static int futex_trial(uint32_t phase)
{
	uint32_t v = atomic_load(&ws->word);
	uint64_t deadline = now_ns() + WATCH_TIMEOUT_MS * NSEC_PER_MSEC;

	atomic_store(&ws->armed, phase + 1);
	while (atomic_load(&ws->word) == v) {
		if (now_ns() > deadline)
			return child_fail("futex trial", -ETIMEDOUT);
		futex_wait(&ws->word, v, WATCH_TIMEOUT_MS * NSEC_PER_MSEC);
	}
	atomic_store(&ws->woke_ns, now_ns());
	return 0;
}

static int watch_trial(local_session *s, uint32_t phase)
{
	static LOCAL_OPTS(local_key_info, info);
	uint64_t t;
	int err;

	err = local_info(s, KEY_WATCH, &info);
	if (err)
		return child_fail("local_info", err);
	atomic_store(&ws->armed, phase + 1);
	err = local_watch(s, KEY_WATCH, info.modify_index, WATCH_TIMEOUT_MS, &info);
	t = now_ns();
	if (err)
		return child_fail("local_watch", err);
	atomic_store(&ws->woke_ns, t);
	return 0;
}

static int watcher_child(int idx)
{
	local_session *s;
	uint32_t p;
	int err;

	(void)idx;
	err = open_session(&s);
	if (err)
		return child_fail("session open", err);
	for (p = 0; p < 2 * WATCH_TRIALS; p++) {
		if (wait_go(p))
			return 1;
		err = p % 2 == PHASE_FUTEX ? futex_trial(p) : watch_trial(s, p);
		if (err)
			return err;
	}
	err = local_session_close(s);
	return err ? child_fail("session close", err) : 0;
}

/* One phase: let the child arm, wait until it sleeps, change, time it. */
static double run_phase(local_session *s, pid_t child, uint32_t phase)
{
	static const LOCAL_OPTS(local_acquire_opts, try_once, .timeout_ms = 0);
	bool watch = phase % 2 == PHASE_WATCH;
	const char *what = watch ? "watch trial" : "futex trial";
	uint64_t t0, deadline;
	int err;

	atomic_store(&ws->woke_ns, 0);
	atomic_store(&ws->armed, 0);
	atomic_store(&ws->go, phase + 1);
	futex_wake(&ws->go, INT_MAX);
	wait_flag(&ws->armed, child, what);
	wait_sleeping(child, what);
	sleep_ns(PARK_SETTLE_NS);
	t0 = now_ns();
	if (watch) {
		err = local_lock(s, KEY_WATCH, &try_once, NULL);
		if (err)
			fatal("watch: local_lock: %s", local_strerror(err));
	} else {
		atomic_fetch_add(&ws->word, 1);
		futex_wake(&ws->word, 1);
	}
	deadline = now_ns() + STEP_TIMEOUT_MS * NSEC_PER_MSEC;
	while (!atomic_load(&ws->woke_ns)) {
		if (now_ns() > deadline)
			fatal("%s %u: the child did not wake in %d ms (%s)", what, phase / 2,
			      STEP_TIMEOUT_MS, child_error());
		sleep_ns(5 * NSEC_PER_USEC);
	}
	/* Release only after the watcher returned: it reads the next index
	 * fresh, so this release never wakes a later trial. */
	if (watch && (err = local_release(s, KEY_WATCH)))
		fatal("watch: local_release: %s", local_strerror(err));
	return (double)(atomic_load(&ws->woke_ns) - t0) / (double)NSEC_PER_USEC;
}

void bench_watch(void)
{
	double fx_us[WATCH_TRIALS], w_us[WATCH_TRIALS];
	struct latency fx, w;
	local_session *s;
	pid_t child;
	uint32_t p;
	int err;

	err = open_session(&s);
	if (err)
		fatal("session open: %s", local_strerror(err));
	ws = shared_map(sizeof(*ws));
	reset_shared();
	child = spawn(watcher_child, 0);
	for (p = 0; p < 2 * WATCH_TRIALS; p++) {
		double us = run_phase(s, child, p);

		if (p % 2 == PHASE_WATCH)
			w_us[p / 2] = us;
		else
			fx_us[p / 2] = us;
	}
	reap_ok(child, "watcher");
	local_session_close(s);
	shared_unmap(ws, sizeof(*ws));
	ws = NULL;
	fx = summarize(fx_us, WATCH_TRIALS);
	w = summarize(w_us, WATCH_TRIALS);

	printf("\n6. Watch wake-up latency: a key changes -> the watcher returns\n");
	printf("   (microseconds from just before the change to the return of the\n"
	       "   sleeping process; %d trials each, interleaved; the watcher is seen\n"
	       "   asleep (state S) + %llu ms before each change. liblocal: local_watch()\n"
	       "   on the key, the change is another process's local_lock(timeout_ms=0);\n"
	       "   futex: FUTEX_WAIT on a shared word, the change is a store + FUTEX_WAKE)\n\n",
	       WATCH_TRIALS, PARK_SETTLE_NS / NSEC_PER_MSEC);
	printf("  %-36s %9s %9s %9s %9s\n", "mechanism", "min us", "median us", "p90 us", "max us");
	print_latency_row("plain futex wake-up", fx);
	print_latency_row("liblocal local_watch()", w);
	printf("\n  local_watch / futex: median %.2fx, p90 %.2fx\n", w.median / fx.median,
	       w.p90 / fx.p90);
	add_target(w.median <= 2 * fx.median, "watch wake-up median <= 2x plain futex (%.2fx)",
		   w.median / fx.median);
	add_target(w.p90 < 1000, "watch wake-up p90 under 1 ms (%.0f us)", w.p90);
}
