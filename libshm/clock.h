/* SPDX-License-Identifier: MIT */
/* CLOCK_MONOTONIC in nanoseconds: one clock for every process on the host,
 * so deadlines stored in the segment mean the same to all of them. */
#ifndef SHMLOCK_CLOCK_H
#define SHMLOCK_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* clock_gettime(), straight into the vDSO where there is one (clock.c). */
extern int (*clock__coarse)(clockid_t, struct timespec *);

/* CLOCK_MONOTONIC_COARSE in nanoseconds: the time of the kernel's last tick,
 * never ahead of mono_ns() and behind it by at most a few ticks (see
 * CLUSTER_FAST_SLACK_NS in keyops.h); a fifth of mono_ns()'s cost (no
 * counter read: 6.5 against 31 ns, best runs on this project's VM). */
static inline uint64_t mono_coarse_ns(void)
{
	struct timespec ts;

	/* Unreadable: the latest time there is, so that a deadline checked
	 * against it has passed (the lock-free path then leaves the grant to
	 * the mutex path and its precise clock). */
	if (__builtin_expect(clock__coarse(CLOCK_MONOTONIC_COARSE, &ts) != 0, 0))
		return UINT64_MAX;
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* now + ms, saturating; ms < 0 means "no deadline" (0). */
static inline uint64_t deadline_after_ms(int64_t ms)
{
	uint64_t now = mono_ns();

	if (ms < 0)
		return 0;
	if ((uint64_t)ms > (UINT64_MAX - now) / 1000000ull)
		return UINT64_MAX;
	return now + (uint64_t)ms * 1000000ull;
}

#endif
