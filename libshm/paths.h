/* SPDX-License-Identifier: MIT */
/* Default locations, shared by the broker, liblocal and the CLI so that all
 * three agree without configuration. See shmlock(1), "FINDING THE BROKER". */
#ifndef SHMLOCK_PATHS_H
#define SHMLOCK_PATHS_H

#include <stdbool.h>
#include <stddef.h>

#define PATHS_SYSTEM_SOCKET "/run/shmlock/shmlockd.sock"
#define PATHS_MAX 3
#define PATHS_LEN 108 /* sizeof(sun_path) */

/*
 * Where clients look for a broker, in order. @explicit_path (an option,
 * -socket=) or else $SHMLOCK_SOCKET: that path alone, trusted as given.
 * Otherwise, for root, the system broker's /run/shmlock/shmlockd.sock; for
 * other users first their own broker's, $XDG_RUNTIME_DIR/shmlock/shmlockd.sock
 * (/run/user/UID/... when the variable is unset, as under cron), then the
 * system broker's. Never a directory another user could create first: no
 * /tmp. Defaulted candidates are checked with paths_unsafe() before use.
 */
struct paths_list {
	unsigned n;
	bool given; /* from the caller or $SHMLOCK_SOCKET: not checked */
	char path[PATHS_MAX][PATHS_LEN];
};
int paths_candidates(const char *explicit_path, struct paths_list *out);

/*
 * Why the defaulted socket @path must not be trusted, or NULL: its directory
 * or that directory's parent could have been made, or be changed, by another
 * user than root and us (the parent owned by someone else or writable by
 * group or others; the directory writable by group or others). A missing
 * directory is not unsafe (there is just no broker).
 */
const char *paths_unsafe(const char *path);

/* The broker's default --socket: the first candidate of its user (root: the
 * system path; others: their runtime directory's). 0 or -ENAMETOOLONG. */
int paths_socket(char *buf, size_t size);

/* The directory under which the broker may create the directories of its
 * socket: $XDG_RUNTIME_DIR, else /run for root and /run/user/UID for others. */
int paths_runtime_dir(char *buf, size_t size);

/* The per-user default segment name: /shmlock (root) or /shmlock-UID. */
int paths_shm_name(char *buf, size_t size);

#endif
