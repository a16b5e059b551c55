/* SPDX-License-Identifier: MIT */
/* What the tests read of a key through local_info(). */
#ifndef SHMLOCK_TEST_KEY_FIXTURE_H
#define SHMLOCK_TEST_KEY_FIXTURE_H

#include "liblocal.h"

/* @key as @s sees it now; fails the test on an error. The result lives in
 * one static struct: the next call overwrites it. */
struct local_key_info *info_of(local_session *s, const char *key);
/* A zeroed info with room for the largest value (calloc'ed, freed through
 * its address); fails the test when out of memory. */
struct local_key_info *new_info(void);

#endif
