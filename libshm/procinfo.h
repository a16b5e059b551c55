/* SPDX-License-Identifier: MIT */
/* Process identity beyond the pid, so a reused pid is never mistaken for the
 * process that opened a session. */
#ifndef SHMLOCK_PROCINFO_H
#define SHMLOCK_PROCINFO_H

#include <stdint.h>
#include <sys/types.h>

/* Field 22 of /proc/PID/stat (clock ticks since boot). 0 or -errno. */
int proc_start_time(pid_t pid, uint64_t *out);

/* Field 4 of /proc/PID/stat: the parent's pid. 0 or -errno. */
int proc_parent(pid_t pid, pid_t *out);

#endif
