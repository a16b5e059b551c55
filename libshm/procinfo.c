// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "procinfo.h"

int proc_start_time(pid_t pid, uint64_t *out)
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
	for (field = 3; field < 22 && p; field++)
		p = strchr(p + 1, ' ');
	if (!p)
		return -EIO;
	*out = strtoull(p + 1, NULL, 10);
	return 0;
}
