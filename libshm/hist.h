/* SPDX-License-Identifier: MIT */
/* Wait and hold time histograms in session slots. */
#ifndef SHMLOCK_HIST_H
#define SHMLOCK_HIST_H

#include <stdint.h>

#include "segment.h"

/* Upper bounds of the buckets, in microseconds (SEG_HIST_BOUNDS_US). */
extern const uint64_t hist_bounds_us[SEG_HIST_BUCKETS];

/* Count one duration of @ns into @h (relaxed atomics: a scrape may see a
 * count one ahead of its bucket, never a torn one). */
void hist_note(struct seg_hist *h, uint64_t ns);

#endif
