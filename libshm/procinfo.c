// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "procinfo.h"

/* Numeric field @want (1-based, >= 3) of /proc/PID/stat. 0 or -errno. */
static int stat_field(pid_t pid, int want, uint64_t *out)
{
	char path[64], buf[1024], *p;
	ssize_t n;
	int fd, field;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -EIO;
	buf[n] = '\0';
	/* comm may hold spaces and parentheses: fields resume after the last ')'. */
	p = strrchr(buf, ')');
	if (!p)
		return -EIO;
	p++;
	for (field = 3; field < want && p; field++)
		p = strchr(p + 1, ' ');
	if (!p)
		return -EIO;
	*out = strtoull(p + 1, NULL, 10);
	return 0;
}

int proc_start_time(pid_t pid, uint64_t *out)
{
	return stat_field(pid, 22, out);
}

int proc_parent(pid_t pid, pid_t *out)
{
	uint64_t v;
	int err = stat_field(pid, 4, &v);

	if (!err)
		*out = (pid_t)v;
	return err;
}
