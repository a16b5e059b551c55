/* SPDX-License-Identifier: MIT */
/*
 * Bringing a quarantined key entry back into service (the operator's
 * `shmlock reset`). Repair quarantines an entry whose own fields are
 * nonsense, and from then on every call on that key fails with
 * LOCAL_ECORRUPT; a reset is the explicit decision to drop what that entry
 * still had (its holds, queued requests and watches, whose owners are told)
 * and to free it, so that the key is created afresh at its next use.
 */
#ifndef SHMLOCK_KEYRESET_H
#define SHMLOCK_KEYRESET_H

#include <stdint.h>

#include "segment.h"

struct key_reset_result {
	uint32_t holds, waiters, watchers; /* nodes dropped */
	uint32_t sessions[8], nsessions;   /* slots that lost something (first 8) */
};

/*
 * The name of entry @k as far as it can be read: its bytes up to key_len,
 * or (a damaged length) up to the first NUL, at most LOCAL_KEY_MAX. Sets
 * *len; the bytes are not NUL-terminated.
 */
const char *key_entry_name(const struct seg_key *k, size_t *len);

/*
 * Reset quarantined entry @idx: under the table mutex and the entry's own
 * (each waited for at most @timeout_ms, > 0), free every node that names it
 * (holds, queued requests, grants not yet taken up, watches) and wake the
 * sleepers among them, clear the entry, and rebuild the index without it.
 * Nothing else in the segment changes. A lock-free operation still in
 * flight on the entry is left to its thread (as repair does).
 * Returns 0, -ENOENT (@idx is not quarantined), -ETIMEDOUT (a mutex stayed
 * held: try again).
 */
int key_reset_quarantined(struct segment *seg, uint32_t idx, uint32_t timeout_ms,
			  struct key_reset_result *res);

#endif
