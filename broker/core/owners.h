/* SPDX-License-Identifier: MIT */
/*
 * Who may hold a lock word, as the broker judges it (owners.c): the broker
 * itself and the live processes of the sessions it admitted, by their pids
 * as the kernel gave them, never as the segment says.
 */
#ifndef SHMLOCK_BROKER_OWNERS_H
#define SHMLOCK_BROKER_OWNERS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct broker;
struct proto_reply;

/*
 * Make b->seg judge lock-word owners by the broker's own table (lockword.h),
 * after the segment is bound. Idempotent. Returns 0 or -ENOMEM.
 */
int owners_attach(struct broker *b);

/* Fill what a session-open reply tells the client about lock words: its
 * own pid as seen here (@pid, from SO_PEERCRED) and our pid namespace. */
void owners_open_reply(const struct broker *b, pid_t pid, struct proto_reply *rep);

/*
 * The operator's `shmlock reset KEY` on an entry that is not quarantined:
 * if its lock word names an owner that is gone (dead, or no process of any
 * session: forged), break the word and repair the key. Returns 0 when it
 * did, -ENOENT when there is nothing to break (no such key, or its word is
 * free), -EBUSY when a live process of a session holds the word (*@owner
 * names it), -ETIMEDOUT when the broken word could not be taken now.
 */
int owners_reset_word(struct broker *b, const char *key, size_t len, uint32_t *owner);

#endif
