// SPDX-License-Identifier: MIT
/*
 * The programs of docs/examples/ run against a test broker and succeed. They
 * are found in $SHMLOCK_EXAMPLES_DIR (set by `make test`), else in
 * ../examples next to this test binary (the build tree's layout).
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "broker_fixture.h"
#include "harness.h"
#include "invariants.h"

static void example_path(const char *name, char *out, size_t size)
{
	const char *dir = getenv("SHMLOCK_EXAMPLES_DIR");
	char exe[PATH_MAX];
	ssize_t n;

	if (dir && *dir) {
		snprintf(out, size, "%s/%s", dir, name);
	} else {
		n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		if (n <= 0)
			FAIL_AT("readlink /proc/self/exe: %s", strerror(errno));
		exe[n] = '\0';
		snprintf(out, size, "%s/../examples/%s", dirname(exe), name);
	}
	if (access(out, X_OK))
		FAIL_AT("%s: %s (build it with make, or set SHMLOCK_EXAMPLES_DIR)", out,
			strerror(errno));
}

/* Run example @name with $SHMLOCK_SOCKET naming the broker; its output goes
 * to a file that is printed if it fails. */
static void run_example(const char *name, int timeout_ms)
{
	char path[PATH_MAX], log[192], cmd[256];
	struct broker_proc b;
	struct child c = { .rd = -1, .wr = -1 };
	local_session *obs;
	int status;

	example_path(name, path, sizeof(path));
	broker_start(&b, NULL);
	obs = open_session(&b, "obs", 0, 0);
	snprintf(log, sizeof(log), "%s/%s.out", b.dir, name);
	fflush(NULL);
	c.pid = fork();
	CHECK(c.pid >= 0);
	if (c.pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			_exit(126);
		setenv("SHMLOCK_SOCKET", b.sock, 1);
		execl(path, name, (char *)NULL);
		_exit(127);
	}
	status = child_wait(&c, timeout_ms);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "    %s ended with wait status %#x; its output:\n", name,
			(unsigned)status);
		snprintf(cmd, sizeof(cmd), "sed 's/^/      /' '%s' >&2", log);
		if (system(cmd) != 0)
			fprintf(stderr, "      (none)\n");
		FAIL_AT("example %s failed", name);
	}
	/* Whatever its processes held, the broker has cleaned up. */
	CHECK(WAIT_SESSIONS(obs, 1, 5000));
	CHECK_EQ(segment_violations(obs), 0);
	CHECK_EQ(used_nodes(obs), 0);
	broker_stop(&b);
}

TEST(examples, leader, 30)
{
	run_example("leader", 25000);
}

TEST(examples, semaphore, 30)
{
	run_example("semaphore", 25000);
}
