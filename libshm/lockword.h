/* SPDX-License-Identifier: MIT */
/*
 * Robust lock words: the key and table locks of the segment.
 *
 * Every admitted client can write the whole segment, so a lock that lives
 * there must not store or follow any process's pointers. glibc's robust
 * mutexes do both: the owning thread links them into its robust list through
 * words inside the mutex (__data.__list) and, on unlock, writes through the
 * pointers it reads back from there. A peer that rewrites those words picks
 * the address and the value of a write in the unlocking process (the broker
 * included). So a lock here is one 32-bit futex word:
 *
 *   bit 31  LW_WAITERS  someone may sleep on the word: the unlocker wakes one
 *   bit 30  LW_DIED     the owner died inside: the next taker must repair
 *   0..29   the owner's pid, as the broker sees it (0: free)
 *
 * A dead owner is found two ways. The broker watches every client process
 * through a pidfd, and when one exits it marks the words that process held
 * (lw_reap()). And a waiter that has waited LW_CHECK_NS for the same owner
 * asks the kernel whether that pid still runs (pidfd_open(), then a poll:
 * a zombie counts as dead); that covers processes the broker did not see
 * (a broker that is down, a test). A pid the waiter cannot judge (another pid
 * namespace than the broker's) is left to the broker. Taking a word marked
 * LW_DIED returns LW_RECOVER, the analogue of EOWNERDEAD: the taker repairs
 * what the dead owner left half done before anyone else looks.
 *
 * A pid that was reused can only make a waiter wait longer (the new process
 * looks alive), never take a live owner's lock: the broker reaps a pid only
 * when the pidfd it holds for that very process says it exited.
 */
#ifndef SHMLOCK_LOCKWORD_H
#define SHMLOCK_LOCKWORD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define LW_WAITERS (1u << 31)
#define LW_DIED (1u << 30)
#define LW_OWNER_MASK (LW_DIED - 1)
#define LW_OWNER(v) ((v)&LW_OWNER_MASK)

/* A waiter checks its lock's owner for life after this long without a change. */
#define LW_CHECK_NS 50000000ull

/* lw_lock()'s "you own it now, but its last owner died inside": repair. */
#define LW_RECOVER 1

/*
 * Take @w for @self (a pid), waiting until @deadline_ns (CLOCK_MONOTONIC,
 * absolute; 0: as long as it takes). @judge: this process may decide from
 * its own view of pids whether an owner is alive (it shares the broker's pid
 * namespace). Returns 0, LW_RECOVER, or -ETIMEDOUT.
 */
int lw_lock(_Atomic uint32_t *w, uint32_t self, uint64_t deadline_ns, bool judge);

/* Take @w if free (or its owner is known dead): 0, LW_RECOVER, or -EBUSY. */
int lw_trylock(_Atomic uint32_t *w, uint32_t self);

/* Release @w, waking one sleeper if there may be one. */
void lw_unlock(_Atomic uint32_t *w);

/*
 * The broker: @pid has exited (its pidfd said so). If it owns @w, mark it
 * LW_DIED and wake every sleeper, so the next taker repairs. Returns true
 * when it did.
 */
bool lw_reap(_Atomic uint32_t *w, uint32_t pid);

/* Has process @pid exited (or does it not exist)? false when unsure. */
bool lw_pid_gone(uint32_t pid);

/*
 * If @w is held by a process that no longer runs, mark it LW_DIED (as
 * lw_reap()): true when the word now needs a repair by its next taker.
 */
bool lw_reap_if_gone(_Atomic uint32_t *w);

#endif
