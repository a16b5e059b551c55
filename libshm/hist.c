// SPDX-License-Identifier: MIT
/*
 * Wait and hold time histograms (metrics). Each session counts its own
 * in its slot of the segment, and only on the contended path: the
 * lock-free acquire and release never read the clock nor write here.
 */
#include <stdatomic.h>

#include "hist.h"

const uint64_t hist_bounds_us[SEG_HIST_BUCKETS] = SEG_HIST_BOUNDS_US;

void hist_note(struct seg_hist *h, uint64_t ns)
{
	uint64_t us = ns / 1000;
	unsigned i;

	for (i = 0; i < SEG_HIST_BUCKETS; i++)
		if (us <= hist_bounds_us[i]) {
			atomic_fetch_add_explicit(&h->bucket[i], 1, memory_order_relaxed);
			break;
		}
	atomic_fetch_add_explicit(&h->sum_us, us, memory_order_relaxed);
	/* Last: a reader that sees the count sees the bucket too (release). */
	atomic_fetch_add_explicit(&h->count, 1, memory_order_release);
}
