/* SPDX-License-Identifier: MIT */
/*
 * Validation of segment records that more than one party reads: the broker
 * (before it trusts a slot) and shmlockd --check (before it calls a segment
 * healthy) use the same functions, so a field added to the format is added
 * here once and neither side can call the other's records damaged.
 */
#ifndef SHMLOCK_SEG_CHECK_H
#define SHMLOCK_SEG_CHECK_H

#include <stdbool.h>

#include "segment.h"

/*
 * What is wrong with the fields of an ACTIVE or CLOSING session slot: a
 * static phrase ("unknown flag bits", ...), or NULL when they are in range.
 * Reads the slot without a lock: call it on a slot whose state word said
 * ACTIVE or CLOSING (the broker writes the fields before it publishes it).
 */
const char *seg_session_problem(const struct seg_session *s);

static inline bool seg_session_sane(const struct seg_session *s)
{
	return seg_session_problem(s) == NULL;
}

#endif
