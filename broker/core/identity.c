// SPDX-License-Identifier: MIT
/*
 * What the kernel says of a process, for deciding whether a session slot
 * read back from the segment (which every client can write) names the
 * process that opened it: its effective uid, and whether it maps a file.
 */
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "broker.h"

int proc_euid(pid_t pid, uid_t *out)
{
	char path[64], line[256];
	unsigned long r, e;
	int err = -ENOENT;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Uid: %lu %lu", &r, &e) == 2) {
			*out = (uid_t)e;
			err = 0;
			break;
		}
	fclose(f);
	return err;
}

int proc_maps_fd(pid_t pid, int fd)
{
	unsigned long long ino;
	unsigned maj, min;
	char path[64], line[512];
	struct stat st;
	int found = 0;
	FILE *f;

	if (fstat(fd, &st) < 0)
		return -errno;
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (!found && fgets(line, sizeof(line), f))
		found = sscanf(line, "%*x-%*x %*s %*x %x:%x %llu", &maj, &min, &ino) == 3 &&
			ino == (unsigned long long)st.st_ino && maj == major(st.st_dev) &&
			min == minor(st.st_dev);
	fclose(f);
	return found;
}
