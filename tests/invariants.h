/* SPDX-License-Identifier: MIT */
/* Whole-segment invariant checks, run from a test process that has the
 * segment mapped through one of its sessions. */
#ifndef SHMLOCK_TEST_INVARIANTS_H
#define SHMLOCK_TEST_INVARIANTS_H

#include <stdbool.h>

#include "client.h"

/*
 * Check every key: at most `limit` holders, counts equal to the nodes, the
 * FIFO in arrival order with consistent links, the holder list exact, every
 * mutex lockable (repairing it if a dead owner left it), and no node owned by
 * a session that is not active. Prints each violation; returns their number.
 */
int segment_violations(local_session *s);

/* Sessions in state ACTIVE or CLOSING. */
unsigned live_sessions(local_session *s);
/* Nodes in use (any state but free). */
unsigned used_nodes(local_session *s);

/* Wait until exactly @n sessions are live (the broker has finished cleanup). */
#define WAIT_SESSIONS(s, n, ms) WAIT_FOR(live_sessions(s) == (n), ms)

#endif
