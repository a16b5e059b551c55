/* SPDX-License-Identifier: MIT */
/*
 * Numbered crash points. In a build with -DLOCAL_CRASH_POINTS, CRASH_POINT(n)
 * ends the process with _exit(CRASH_EXIT_CODE) when n equals the number in
 * $SHMLOCK_CRASH_AT, so tests can kill a client at each step of every
 * shared-memory mutation and check the invariants afterwards. In a release
 * build it compiles to nothing. $SHMLOCK_STOP_AT=n stops the process there
 * instead (SIGSTOP), to test that others do not stall behind it.
 *
 * Every point is listed here, with where it sits; tests/it_crash_points.c walks
 * this list, so a new point fails the suite until it has a scenario.
 */
#ifndef SHMLOCK_CRASHPOINT_H
#define SHMLOCK_CRASHPOINT_H

#define CRASH_EXIT_CODE 86

#define CRASH_POINT_LIST(X)                                                                       \
	X(1, GRANT_CLAIMED, "grant under the mutex: hold node claimed, not linked")               \
	X(2, GRANT_LINKED, "grant under the mutex: hold linked, counters not updated")            \
	X(3, GRANT_DONE, "grant under the mutex: all written, mutex still held")                  \
	X(4, ENQ_CLAIMED, "enqueue: waiter node claimed, not linked")                             \
	X(5, ENQ_LINKED, "enqueue: waiter linked, count not updated")                             \
	X(6, ENQ_PARKED, "enqueue: queued and about to sleep (mutex released)")                   \
	X(7, REL_UNLINKED, "release without waiters: hold unlinked, node not freed")              \
	X(8, REL_FREED, "release without waiters: node freed, counters not updated")              \
	X(9, HANDOFF_HOLD_SET, "release with waiter: waiter's hold index written")                \
	X(10, HANDOFF_TRANSFERRED,                                                                \
	  "release with waiter: hold transferred, waiter not yet granted")                        \
	X(11, HANDOFF_GRANTED,                                                                    \
	  "release with waiter: waiter unlinked and granted, counters not updated")               \
	X(12, HANDOFF_UNLINKED, "release with waiter: hold moved, waiter unlinked, not granted")  \
	X(13, CANCEL_UNLINKED, "timeout: waiter unlinked, node not freed")                        \
	X(14, CANCEL_FREED, "timeout: waiter node freed, counters not updated")                   \
	X(15, VALUE_WRITTEN, "value update: new bytes written, not published")                    \
	X(16, GRANTED_CONSUMED, "granted waiter: hold taken, waiter node not freed")              \
	X(17, FAST_ACQ_CLAIMED, "lock-free acquire: hold node claimed, not filled in")            \
	X(18, FAST_ACQ_PUBLISHED, "lock-free acquire: fast word names the node (FAST_CLAIMED)")   \
	X(19, FAST_REL_PUBLISHED, "lock-free release: fast word cleared, node not freed")         \
	X(20, WATCH_CLAIMED, "watch: watch node recorded, watcher count not raised")              \
	X(21, UNWATCH_FREED, "watch end: watch node freed, watcher count not lowered")            \
	X(22, FOLD_NOTED, "key_lock: lock-free operations' sums noted (FOLDING), not stored")     \
	X(23, FAST_HOLD_ADOPTED, "key_lock: a lock-free hold turned NODE_HOLDING, mutex held")    \
	X(24, SEM_HOLD_LISTED,                                                                    \
	  "key_lock: a semaphore's lock-free hold listed, word still names it")                   \
	X(25, LOCK_WORD_TAKEN, "lock word: taken (owner pid stored), nothing done under it yet")  \
	X(26, LOCK_WORD_RELEASED, "lock word: released (zero stored), sleepers not yet woken")    \
	X(27, TOKEN_RESERVED,                                                                     \
	  "grant: a token range taken from the segment's counter, key not told")                  \
	X(28, TOKEN_RANGE_SET, "grant: the key's new token range stored, not yet complete")       \
	X(29, TOKEN_REMAPPED,                                                                     \
	  "grant: range mapped above a token drawn but never counted, not yet drawn")             \
	X(30, HANDOFF_UNLOCKED,                                                                   \
	  "release with waiter: key mutex released, granted waiter not yet woken")                \
	X(31, SLOT_GIVEN_NAMED, "key_unlock_giving: slots name listed holds, list not emptied")   \
	X(32, SLOT_GIVEN_UNLISTED, "key_unlock_giving: list emptied, slots not opened")           \
	X(33, SLOT_ACQ_PUBLISHED,                                                                 \
	  "lock-free acquire on slot > 0: committed, other slots not re-checked")                 \
	X(34, SLOT_YIELDED, "lock-free acquire: our slot given back to a twin's, node not freed") \
	X(35, SLOT_SETTLED, "settle under the mutex: the later of a session's two holds ended")   \
	X(36, FAST_ACQ_TAKEN,                                                                     \
	  "lock-free acquire by handle: its kept node taken back, not filled in")

enum crash_point {
#define X(n, name, what) CP_##name = n,
	CRASH_POINT_LIST(X)
#undef X
		CP_COUNT
};

#ifdef LOCAL_CRASH_POINTS
void crash_point_hit(int n);
#define CRASH_POINT(name) crash_point_hit(CP_##name)
/* $SHMLOCK_NO_FAST_PATH: send every operation through the key mutex, so the
 * mutex path's points are reachable for keys the fast path would take. */
int crash_fast_path_off(void);
#else
#define CRASH_POINT(name) ((void)0)
#define crash_fast_path_off() 0
#endif

#endif
