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
 * included). So a lock here is one 32-bit futex word, laid out in segment.h
 * (LW_WAITERS, LW_DIED, the owner's pid).
 *
 * A dead owner is found two ways. The broker watches every client process
 * through a pidfd, and when one exits it marks the words that process held.
 * And a waiter that has waited LW_CHECK_NS for the same owner asks a judge
 * whether that owner is gone (struct lw_judge), and marks the word if so.
 * Taking a word marked LW_DIED returns LW_RECOVER, the analogue of
 * EOWNERDEAD: the taker repairs what the dead owner left half done before
 * anyone else looks.
 *
 * Any admitted client can write any owner into a word, so who judges matters:
 *
 *  - The broker judges by its own table (broker/core/owners.c): a word may name
 *    the broker or a live process of a session it admitted (its pid from
 *    the kernel at the session's open, never from the segment). Anyone else
 *    is gone: a forged owner (pid 1, any long-lived stranger) is broken
 *    like a dead one, on the broker's periodic scan or its first wait.
 *  - A client that shares the broker's pid namespace judges by the kernel
 *    alone (lw_pid_judge: does that pid still run?). It cannot tell a
 *    forged owner from a live client and leaves that to the broker.
 *  - A client in another pid namespace judges nothing (judge NULL): a pid
 *    there names another process, or none.
 *
 * A pid that was reused can only make a waiter wait longer (the new process
 * looks alive), never take a live owner's lock: the broker marks a word only
 * when the pidfd it holds for that very process says it exited, or when no
 * session of its own names that pid.
 */
#ifndef SHMLOCK_LOCKWORD_H
#define SHMLOCK_LOCKWORD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "segment.h"

/* A waiter checks its lock's owner for life after this long without a change. */
#define LW_CHECK_NS 50000000ull

/* lw_lock()'s "you own it now, but its last owner died inside": repair. */
#define LW_RECOVER 1

/*
 * Who decides that a word's owner is gone, so that the word may be broken:
 * gone(ctx, owner) is true only when @owner can no longer be inside (it
 * exited, or it is nobody allowed to hold a word). Unsure is false.
 */
struct lw_judge {
	bool (*gone)(void *ctx, uint32_t owner);
	void *ctx;
};

/* The kernel's answer in this process's pid namespace (lw_pid_gone()). */
extern const struct lw_judge lw_pid_judge;

/*
 * Take @w for @self (a pid), waiting until @deadline_ns (CLOCK_MONOTONIC,
 * absolute; 0: as long as it takes). @judge: who may declare the owner gone
 * (NULL: nobody here; the broker will). Returns 0, LW_RECOVER, or
 * -ETIMEDOUT.
 */
int lw_lock(_Atomic uint32_t *w, uint32_t self, uint64_t deadline_ns, const struct lw_judge *judge);

/* Take @w if free (or its owner is known dead): 0, LW_RECOVER, or -EBUSY. */
int lw_trylock(_Atomic uint32_t *w, uint32_t self);

/* Release @w, waking one sleeper if there may be one. */
void lw_unlock(_Atomic uint32_t *w);

/* Has process @pid exited (or does it not exist)? false when unsure. */
bool lw_pid_gone(uint32_t pid);

/*
 * If @w is held by an owner @judge says is gone, mark it LW_DIED and wake
 * every sleeper: true when the word now needs a repair by its next taker.
 */
bool lw_reap_if_gone(_Atomic uint32_t *w, const struct lw_judge *judge);

#endif
