// SPDX-License-Identifier: MIT
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include "harness.h"

uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void child_spawn(struct child *c, void (*fn)(void *arg, int in, int out), void *arg)
{
	int up[2], down[2];

	if (pipe(up) || pipe(down))
		FAIL_AT("pipe: %s", strerror(errno));
	fflush(NULL);
	c->pid = fork();
	if (c->pid < 0)
		FAIL_AT("fork: %s", strerror(errno));
	if (c->pid == 0) {
		close(up[0]);
		close(down[1]);
		fn(arg, down[0], up[1]);
		_exit(0);
	}
	close(up[1]);
	close(down[0]);
	c->rd = up[0];
	c->wr = down[1];
}

int child_read(struct child *c, char *buf, size_t size, int timeout_ms)
{
	uint64_t end = now_ms() + (uint64_t)timeout_ms;
	size_t n = 0;

	while (n + 1 < size) {
		struct pollfd p = { .fd = c->rd, .events = POLLIN };
		int64_t left = (int64_t)(end - now_ms());
		char ch;

		if (left <= 0 || poll(&p, 1, (int)left) != 1)
			return -ETIMEDOUT;
		if (read(c->rd, &ch, 1) != 1)
			return -EPIPE;
		if (ch == '\n')
			break;
		buf[n++] = ch;
	}
	buf[n] = '\0';
	return 0;
}

void child_expect(struct child *c, const char *want, int timeout_ms)
{
	char buf[256];
	int r = child_read(c, buf, sizeof(buf), timeout_ms);

	if (r)
		FAIL_AT("child %d: expected \"%s\", got %s", (int)c->pid, want,
			r == -ETIMEDOUT ? "nothing in time" : "end of pipe");
	if (strcmp(buf, want))
		FAIL_AT("child %d: expected \"%s\", got \"%s\"", (int)c->pid, want, buf);
}

void child_send(struct child *c, const char *line)
{
	size_t n = strlen(line);

	if (write(c->wr, line, n) != (ssize_t)n || write(c->wr, "\n", 1) != 1)
		FAIL_AT("write to child %d: %s", (int)c->pid, strerror(errno));
}

int pid_wait(pid_t pid, int timeout_ms)
{
	uint64_t end = now_ms() + (uint64_t)timeout_ms;
	int fd = (int)syscall(SYS_pidfd_open, pid, 0), status;
	struct pollfd p = { .fd = fd, .events = POLLIN };

	/* A pidfd turns readable at exit. Without one (valgrind does not know
	 * the call), poll waitpid() against the same deadline. */
	if (fd >= 0) {
		int ready = poll(&p, 1, timeout_ms);

		close(fd);
		if (ready != 1) {
			kill(pid, SIGKILL);
			FAIL_AT("process %d did not exit within %d ms", (int)pid, timeout_ms);
		}
	}
	for (;;) {
		pid_t r = waitpid(pid, &status, fd >= 0 ? 0 : WNOHANG);

		if (r == pid)
			return status;
		if (r < 0)
			FAIL_AT("waitpid %d: %s", (int)pid, strerror(errno));
		if (now_ms() >= end) {
			kill(pid, SIGKILL);
			FAIL_AT("process %d did not exit within %d ms", (int)pid, timeout_ms);
		}
		usleep(1000);
	}
}

int child_wait(struct child *c, int timeout_ms)
{
	int status = pid_wait(c->pid, timeout_ms);

	close(c->rd);
	close(c->wr);
	c->pid = 0;
	return status;
}

void child_kill(struct child *c)
{
	kill(c->pid, SIGKILL);
}

void say(int fd, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	if (n < 0 || n >= (int)sizeof(buf) - 1)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	if (write(fd, buf, (size_t)n) != n)
		_exit(3);
}

int hear(int fd, char *buf, size_t size)
{
	size_t n = 0;
	char ch;

	while (n + 1 < size) {
		if (read(fd, &ch, 1) != 1)
			return -1;
		if (ch == '\n')
			break;
		buf[n++] = ch;
	}
	buf[n] = '\0';
	return 0;
}
