/* SPDX-License-Identifier: MIT */
/* Shared (never FUTEX_PRIVATE_FLAG) futex wait and wake on segment words. */
#ifndef SHMLOCK_FUTEX_H
#define SHMLOCK_FUTEX_H

#include <errno.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/*
 * Sleep while *word == expected, until @deadline_ns (CLOCK_MONOTONIC,
 * absolute; 0 = forever). FUTEX_WAIT_BITSET takes an absolute time, so
 * spurious wake-ups never stretch the total wait. Returns 0 (woken, or the
 * word had changed), -ETIMEDOUT or -EINTR.
 */
static inline int futex_wait_until(_Atomic uint32_t *word, uint32_t expected, uint64_t deadline_ns)
{
	struct timespec ts, *tsp = NULL;
	long r;

	if (deadline_ns) {
		ts.tv_sec = (time_t)(deadline_ns / 1000000000ull);
		ts.tv_nsec = (long)(deadline_ns % 1000000000ull);
		tsp = &ts;
	}
	r = syscall(SYS_futex, word, FUTEX_WAIT_BITSET, expected, tsp, NULL,
		    FUTEX_BITSET_MATCH_ANY);
	if (r == 0 || errno == EAGAIN)
		return 0;
	return -errno;
}

static inline void futex_wake(_Atomic uint32_t *word, int n)
{
	syscall(SYS_futex, word, FUTEX_WAKE, n, NULL, NULL, 0);
}

#endif
