/* SPDX-License-Identifier: MIT */
/* Growable public structs: sizes checked, options defaulted (abi.c). */
#ifndef SHMLOCK_ABI_H
#define SHMLOCK_ABI_H

#include <stddef.h>

#include "liblocal.h"

/* The caller's struct at @p says its size: -EINVAL when it is smaller than
 * its sz member; *n the bytes both sides know. */
int abi_size(const void *p, size_t ours, size_t *n);
/* Copy the options at @in over the defaults in @copy (@ours bytes): -EINVAL
 * (sz unset), -E2BIG (non-zero bytes past @ours). copy->sz becomes the
 * bytes taken. */
int abi_opts_in(const void *in, void *copy, size_t ours);
/* *opts (NULL: the defaults) checked and copied to @copy, which *opts then
 * points to (local_acquire_opts: stays NULL when NULL). */
int abi_session_opts(const struct local_session_opts **opts, struct local_session_opts *copy);
int abi_acquire_opts(const struct local_acquire_opts **opts, struct local_acquire_opts *copy);
/* A caller's struct local_key_info: its size and value buffer into @full
 * (zeroed), to fill; then abi_key_info_out() hands back what it knows. */
int abi_key_info_in(const struct local_key_info *out, struct local_key_info *full);
void abi_key_info_out(struct local_key_info *out, const struct local_key_info *full);

#endif
