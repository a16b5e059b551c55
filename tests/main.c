// SPDX-License-Identifier: MIT
/*
 * Test runner: every registered test becomes a CUnit test whose body runs in
 * a forked child, in its own process group, under a deadline. On a timeout
 * the whole group (the test and any broker or client it started) is killed
 * and the test fails; the suite goes on.
 *
 * Usage: shmlock-tests [SUITE[/TEST]]...   (default: all)
 */
#include <CUnit/Basic.h>
#include <errno.h>
#include <glob.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/wait.h>

#include "harness.h"

#define MAX_TESTS 512

static const struct test_case *tests[MAX_TESTS];
static size_t ntests;

void test_register(const struct test_case *tc)
{
	if (ntests < MAX_TESTS)
		tests[ntests++] = tc;
}

static const struct test_case *current_case(void)
{
	CU_pTest t = CU_get_current_test();
	CU_pSuite s = CU_get_current_suite();
	size_t i;

	for (i = 0; t && s && i < ntests; i++)
		if (!strcmp(tests[i]->name, t->pName) && !strcmp(tests[i]->suite, s->pName))
			return tests[i];
	return NULL;
}

/* Remove the segments and directories a test named after its pid left
 * behind when it was killed or failed before its own clean-up. */
static void sweep_leftovers(pid_t pid)
{
	char pattern[96], cmd[256];
	glob_t g;
	size_t i;

	snprintf(pattern, sizeof(pattern), "/dev/shm/shmlock-test-%d-*", (int)pid);
	if (glob(pattern, 0, NULL, &g) == 0) {
		for (i = 0; i < g.gl_pathc; i++)
			unlink(g.gl_pathv[i]);
		globfree(&g);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf /tmp/shmlock-test-%d-*", (int)pid);
	if (system(cmd) != 0)
		fprintf(stderr, "    could not remove /tmp/shmlock-test-%d-*\n", (int)pid);
}

/*
 * A test that used more than a third of its deadline is one slow machine
 * (CI's, a TSan or ASan build, a loaded host) away from timing out: say so
 * in every run, with the figure. $SHMLOCK_TEST_TIMES=1 prints every test's.
 */
static void report_time(const struct test_case *tc, uint64_t took_ms, int timeout_s)
{
	const char *all = getenv("SHMLOCK_TEST_TIMES");

	if (took_ms * 3 > (uint64_t)timeout_s * 1000)
		fprintf(stderr, "    slow: %s/%s took %.1f s of its %d s deadline\n", tc->suite,
			tc->name, (double)took_ms / 1000, timeout_s);
	else if (all && *all && strcmp(all, "0"))
		fprintf(stderr, "    time: %s/%s took %.1f s of its %d s deadline\n", tc->suite,
			tc->name, (double)took_ms / 1000, timeout_s);
}

static void run_forked(void)
{
	const struct test_case *tc = current_case();
	char msg[256];
	int status = 0, pidfd, r, timeout_s;
	uint64_t t0;
	pid_t pid;

	CU_ASSERT_PTR_NOT_NULL_FATAL(tc);
	timeout_s = tc->timeout_s;
	/* $SHMLOCK_TEST_TIMEOUT_S lengthens every deadline (a long soak, e.g.
	 * SHMLOCK_CLUSTER_SOAK_S: scripts/cluster-soak.sh); it never shortens one. */
	if (getenv("SHMLOCK_TEST_TIMEOUT_S") && atoi(getenv("SHMLOCK_TEST_TIMEOUT_S")) > timeout_s)
		timeout_s = atoi(getenv("SHMLOCK_TEST_TIMEOUT_S"));
	fflush(NULL);
	t0 = now_ms();
	pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0) {
		setpgid(0, 0);
		alarm((unsigned)timeout_s + 5); /* belt and braces */
		tc->fn();
		_exit(0);
	}
	setpgid(pid, pid);
	pidfd = (int)pidfd_open(pid, 0);
	if (pidfd >= 0) {
		struct pollfd p = { .fd = pidfd, .events = POLLIN };

		do
			r = poll(&p, 1, timeout_s * 1000);
		while (r < 0 && errno == EINTR);
		close(pidfd);
		if (r == 0) {
			kill(-pid, SIGKILL);
			waitpid(pid, &status, 0);
			sweep_leftovers(pid);
			snprintf(msg, sizeof(msg), "%s/%s timed out after %d s", tc->suite, tc->name,
				 timeout_s);
			fprintf(stderr, "    %s\n", msg);
			CU_FAIL(msg);
			return;
		}
	}
	waitpid(pid, &status, 0);
	report_time(tc, now_ms() - t0, timeout_s);
	kill(-pid, SIGKILL); /* whatever the test left running */
	sweep_leftovers(pid);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return;
	if (WIFSIGNALED(status))
		snprintf(msg, sizeof(msg), "%s/%s killed by signal %d", tc->suite, tc->name,
			 WTERMSIG(status));
	else
		snprintf(msg, sizeof(msg), "%s/%s failed (exit %d)", tc->suite, tc->name,
			 WEXITSTATUS(status));
	CU_FAIL(msg);
}

static int selected(const struct test_case *tc, int argc, char **argv)
{
	char full[256];
	int i;

	if (argc < 2)
		return 1;
	snprintf(full, sizeof(full), "%s/%s", tc->suite, tc->name);
	for (i = 1; i < argc; i++)
		if (!strcmp(argv[i], tc->suite) || !strcmp(argv[i], full))
			return 1;
	return 0;
}

int main(int argc, char **argv)
{
	unsigned failed;
	size_t i;

	signal(SIGPIPE, SIG_IGN);
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 2;
	for (i = 0; i < ntests; i++) {
		CU_pSuite s;

		if (!selected(tests[i], argc, argv))
			continue;
		s = CU_get_suite(tests[i]->suite);
		if (!s)
			s = CU_add_suite(tests[i]->suite, NULL, NULL);
		if (!s || !CU_add_test(s, tests[i]->name, run_forked))
			return 2;
	}
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	failed = CU_get_number_of_tests_failed() + CU_get_number_of_failures();
	if (!CU_get_number_of_tests_run())
		failed = 1;
	CU_cleanup_registry();
	return failed ? 1 : 0;
}
