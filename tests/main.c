// SPDX-License-Identifier: MIT
/*
 * Test runner: every registered test becomes a CUnit test whose body runs in
 * a forked child, in its own process group and its own environment
 * (isolate.h), under a deadline. Tests run side by side (runner.h); CUnit
 * reports them in its order, each one's output in one piece. On a timeout
 * the whole group (the test and any broker or client it started) is killed
 * and the test fails; the suite goes on.
 *
 * Usage: shmlock-tests [SUITE[/TEST]]...   (default: all)
 * $SHMLOCK_TEST_JOBS: tests at once (default: twice the online CPUs, and
 * one at a time while the load average is above that plus the CPUs, or
 * above $SHMLOCK_TEST_MAX_LOAD when that is set).
 * $SHMLOCK_TEST_TIMES=1: every test's time, not only the slow ones'.
 */
#include <CUnit/Basic.h>
#include <signal.h>
#include <string.h>

#include "harness.h"
#include "isolate.h"
#include "runner.h"

static const struct test_case **tests;
static size_t ntests, cap;

void test_register(const struct test_case *tc)
{
	if (ntests == cap) {
		size_t more = cap ? cap * 2 : 256;
		const struct test_case **t = realloc(tests, more * sizeof(*t));

		if (!t) {
			fprintf(stderr, "cannot register test %s/%s: out of memory\n", tc->suite,
				tc->name);
			_exit(2);
		}
		tests = t;
		cap = more;
	}
	tests[ntests++] = tc;
}

/* The selected tests, in the order CUnit runs them (suite by suite). */
static const struct test_case **chosen;
static size_t nchosen;
static char run_dir[256];

static size_t current_index(void)
{
	CU_pTest t = CU_get_current_test();
	CU_pSuite s = CU_get_current_suite();
	size_t i;

	for (i = 0; t && s && i < nchosen; i++)
		if (!strcmp(chosen[i]->name, t->pName) && !strcmp(chosen[i]->suite, s->pName))
			return i;
	return nchosen;
}

/*
 * A test that used more than a third of its deadline is one slow machine
 * (CI's, a TSan or ASan build, a loaded host) away from timing out: say so
 * in every run, with the figure. $SHMLOCK_TEST_TIMES=1 prints every test's.
 */
static void report_time(const struct test_run *r)
{
	const char *all = getenv("SHMLOCK_TEST_TIMES");
	double s = (double)r->took_ms / 1000;

	if (r->took_ms * 3 > (uint64_t)r->timeout_s * 1000)
		fprintf(stderr, "    slow: %s/%s took %.1f s of its %d s deadline\n", r->tc->suite,
			r->tc->name, s, r->timeout_s);
	else if (all && *all && strcmp(all, "0"))
		fprintf(stderr, "    time: %s/%s took %.1f s of its %d s deadline\n", r->tc->suite,
			r->tc->name, s, r->timeout_s);
}

/* The CUnit body of every test: wait for its run, show its output, judge. */
static void run_forked(void)
{
	size_t i = current_index();
	const struct test_run *r;
	char msg[256];

	CU_ASSERT_FATAL(i < nchosen);
	r = runner_wait(i);
	fflush(stdout);
	runner_replay(i, stderr);
	if (r->timed_out) {
		snprintf(msg, sizeof(msg), "%s/%s timed out after %d s", r->tc->suite, r->tc->name,
			 r->timeout_s);
		fprintf(stderr, "    %s\n", msg);
		CU_FAIL(msg);
		return;
	}
	report_time(r);
	if (WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0)
		return;
	if (WIFSIGNALED(r->status))
		snprintf(msg, sizeof(msg), "%s/%s killed by signal %d", r->tc->suite, r->tc->name,
			 WTERMSIG(r->status));
	else
		snprintf(msg, sizeof(msg), "%s/%s failed (exit %d)", r->tc->suite, r->tc->name,
			 WEXITSTATUS(r->status));
	CU_FAIL(msg);
}

static bool arg_selects(const char *arg, const struct test_case *tc)
{
	size_t n = strlen(tc->suite);

	return !strcmp(arg, tc->suite) ||
	       (!strncmp(arg, tc->suite, n) && arg[n] == '/' && !strcmp(arg + n + 1, tc->name));
}

static bool selected(const struct test_case *tc, int argc, char **argv)
{
	int i;

	if (argc < 2)
		return true;
	for (i = 1; i < argc; i++)
		if (arg_selects(argv[i], tc))
			return true;
	return false;
}

/* Every argument must name a suite or a test: a typo runs nothing silently. */
static int check_args(int argc, char **argv)
{
	int i, bad = 0;
	size_t k;

	for (i = 1; i < argc; i++) {
		for (k = 0; k < ntests && !arg_selects(argv[i], tests[k]); k++)
			;
		if (k == ntests) {
			fprintf(stderr, "no suite or test named \"%s\"\n", argv[i]);
			bad = 1;
		}
	}
	return bad;
}

/* The selected tests grouped by suite, suites in their first test's order. */
static int choose(int argc, char **argv)
{
	size_t i, k;

	chosen = calloc(ntests ? ntests : 1, sizeof(*chosen));
	if (!chosen)
		return -1;
	for (i = 0; i < ntests; i++) {
		bool seen = false;

		if (!selected(tests[i], argc, argv))
			continue;
		for (k = 0; k < nchosen && !seen; k++)
			seen = !strcmp(chosen[k]->suite, tests[i]->suite);
		if (seen)
			continue;
		for (k = i; k < ntests; k++)
			if (!strcmp(tests[k]->suite, tests[i]->suite) &&
			    selected(tests[k], argc, argv))
				chosen[nchosen++] = tests[k];
	}
	return 0;
}

static unsigned cpus(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n > 0 ? (unsigned)n : 1;
}

static unsigned jobs_wanted(void)
{
	const char *env = getenv("SHMLOCK_TEST_JOBS");

	if (env && atoi(env) > 0)
		return (unsigned)atoi(env);
	return 2 * cpus();
}

/* The load beyond which one test runs at a time: $SHMLOCK_TEST_MAX_LOAD
 * (0: no limit; make check, whose other steps load the machine beside the
 * tests, sets it), else our own jobs plus one per CPU; none when the jobs
 * were asked for by hand. */
static double busy_load(unsigned jobs)
{
	const char *env = getenv("SHMLOCK_TEST_JOBS");
	const char *max = getenv("SHMLOCK_TEST_MAX_LOAD");

	if (max && *max)
		return atof(max) > 0 ? atof(max) : 0;
	return env && atoi(env) > 0 ? 0 : (double)(jobs + cpus());
}

/* Ctrl-C or a kill of the run: take the tests' process groups with us
 * (their directories stay in $TMPDIR: removing them is no work for a
 * signal handler). */
static void on_stop(int sig)
{
	runner_kill_all();
	signal(sig, SIG_DFL);
	raise(sig);
}

int main(int argc, char **argv)
{
	unsigned failed, ran;
	size_t i;

	signal(SIGPIPE, SIG_IGN);
	if (check_args(argc, argv) || choose(argc, argv))
		return 2;
	if (isolate_run_dir_make(run_dir, sizeof(run_dir))) {
		perror("making the run's directory");
		return 2;
	}
	if (runner_init(chosen, nchosen, jobs_wanted(), busy_load(jobs_wanted()), run_dir))
		return 2;
	signal(SIGINT, on_stop);
	signal(SIGTERM, on_stop);
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 2;
	for (i = 0; i < nchosen; i++) {
		CU_pSuite s = CU_get_suite(chosen[i]->suite);

		if (!s)
			s = CU_add_suite(chosen[i]->suite, NULL, NULL);
		if (!s || !CU_add_test(s, chosen[i]->name, run_forked))
			return 2;
	}
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	failed = CU_get_number_of_tests_failed() + CU_get_number_of_failures();
	ran = CU_get_number_of_tests_run();
	if (!ran)
		failed = 1;
	/* The count check: every selected test ran and was judged. */
	if (ran != nchosen || runner_done() != nchosen) {
		fprintf(stderr, "\n%zu tests selected, %u reported, %zu run: some were dropped\n",
			nchosen, ran, runner_done());
		failed = 1;
	}
	runner_print_slowest(stderr, 10);
	CU_cleanup_registry();
	runner_end();
	isolate_remove_tree(run_dir);
	free(chosen);
	return failed ? 1 : 0;
}
