/* SPDX-License-Identifier: MIT */
/* Default locations, shared by the broker, liblocal and the CLI so that all
 * three agree without configuration. */
#ifndef SHMLOCK_PATHS_H
#define SHMLOCK_PATHS_H

#include <stddef.h>

/* $SHMLOCK_SOCKET, else /run/shmlock/shmlockd.sock for root, else
 * $XDG_RUNTIME_DIR/shmlock/shmlockd.sock (or /tmp/shmlock-UID/...).
 * Returns 0 or -ENAMETOOLONG. */
int paths_socket(char *buf, size_t size);

/* The per-user default segment name: /shmlock (root) or /shmlock-UID. */
int paths_shm_name(char *buf, size_t size);

#endif
