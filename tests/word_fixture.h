/* SPDX-License-Identifier: MIT */
/*
 * A client that writes into lock words, as an attacker (or a test staging
 * a stall) does: finding a key's entry without any lock, and stopped
 * clients of a broker to name as owners.
 */
#ifndef SHMLOCK_TEST_WORD_FIXTURE_H
#define SHMLOCK_TEST_WORD_FIXTURE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "broker_fixture.h"
#include "client.h"
#include "harness.h"

/* @key's used entry in @s's segment, which must exist (no lock taken). */
struct seg_key *entry_of(local_session *s, const char *key);
/* Make @key exist, free (a lock taken and released within 5 s). */
void make_key(local_session *s, const char *key);
/* Leave @k as a client stopped inside key_lock() would: its lock word
 * naming @owner, and the fast path shut (key_lock() sets SLOW first). */
void stall_key(struct seg_key *k, uint32_t owner);
/* Is @pid stopped (state T)? */
bool is_stopped(pid_t pid);
/* A child with a session of @b that stops itself and stays stopped: an
 * admitted owner that never lets go. Returns its pid once it is stopped;
 * child_kill(@c) ends it. */
pid_t sitter_start(struct child *c, const struct broker_proc *b);

#endif
