// SPDX-License-Identifier: MIT
/*
 * The live children of a process, from /proc. The supervisor calls this
 * after a fork() from a multi-threaded process, so it is async-signal-safe:
 * system calls and stack buffers only (no opendir, no stdio, no malloc).
 *
 * Why not /proc/PID/task/TID/children: it needs CONFIG_PROC_CHILDREN, which
 * common kernels leave out. Scanning every /proc/N/stat for its parent costs
 * one read per process, and only while a job is being ended.
 */
#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "lock.h"

struct dirent64_raw {
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

/* A decimal pid, or 0 if @s is not one. */
static pid_t parse_pid(const char *s)
{
	long v = 0;

	if (!*s)
		return 0;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || v > 0x3fffffff)
			return 0;
		v = v * 10 + (*s - '0');
	}
	return (pid_t)v;
}

/* The parent of /proc/@name (a pid), and whether it is a zombie; -1 if
 * it cannot be read (it has just gone). */
static pid_t parent_of(int proc, const char *name, bool *zombie)
{
	char path[32], buf[512], *p;
	size_t len = strlen(name);
	ssize_t n;
	long v = 0;
	int fd;

	if (len + sizeof("/stat") > sizeof(path))
		return -1;
	memcpy(path, name, len);
	memcpy(path + len, "/stat", sizeof("/stat"));
	fd = openat(proc, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	/* "pid (comm) S ppid ...": comm may hold anything, ')' included, but
	 * it is at most 16 bytes, so the last ')' ends it. */
	p = strrchr(buf, ')');
	if (!p || p[1] != ' ' || !p[2] || p[3] != ' ')
		return -1;
	*zombie = p[2] == 'Z' || p[2] == 'X';
	for (p += 4; *p >= '0' && *p <= '9'; p++)
		v = v * 10 + (*p - '0');
	return (pid_t)v;
}

size_t proc_children(pid_t parent, pid_t *out, size_t max)
{
	char buf[4096];
	size_t k = 0;
	ssize_t n;
	int proc = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (proc < 0)
		return 0;
	while (k < max && (n = getdents64(proc, buf, sizeof(buf))) > 0) {
		ssize_t off = 0;

		while (off < n && k < max) {
			struct dirent64_raw *d = (struct dirent64_raw *)(buf + off);
			bool zombie = false;
			pid_t pid = parse_pid(d->d_name);

			off += d->d_reclen;
			if (pid > 0 && parent_of(proc, d->d_name, &zombie) == parent && !zombie)
				out[k++] = pid;
		}
	}
	close(proc);
	return k;
}

void proc_signal_children(pid_t parent, int sig)
{
	pid_t kids[128];
	size_t n = proc_children(parent, kids, sizeof(kids) / sizeof(kids[0])), i;

	for (i = 0; i < n; i++)
		kill(kids[i], sig);
}
