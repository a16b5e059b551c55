// SPDX-License-Identifier: MIT
/* The parallel part of the test runner (runner.h). */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "isolate.h"
#include "runner.h"

static struct test_run *runs;
static size_t nruns;
static size_t *order; /* launch order: indexes into runs */
static size_t next_launch;
static unsigned max_jobs, running;
static double load_cap;
static bool alone_running;

static int deadline_of(const struct test_case *tc)
{
	const char *env = getenv("SHMLOCK_TEST_TIMEOUT_S");
	int t = tc->timeout_s;

	/* $SHMLOCK_TEST_TIMEOUT_S lengthens every deadline (a long soak, e.g.
	 * SHMLOCK_CLUSTER_SOAK_S: scripts/cluster-soak.sh); it never shortens one. */
	if (env && atoi(env) > t)
		t = atoi(env);
	return t;
}

/*
 * Which test to start next. The tests that must run alone go first (while
 * the machine is otherwise idle), then those with a long deadline (a minute
 * or more), longest first: one started last would leave the other workers
 * idle at the end. The rest follow in the order they are reported, so that
 * the report keeps up with the run.
 */
#define LONG_DEADLINE_S 60

static int launch_rank(const struct test_run *r)
{
	if (r->tc->flags & TEST_ALONE)
		return -1000000;
	return r->timeout_s >= LONG_DEADLINE_S ? -r->timeout_s : 0;
}

static void sort_order(void)
{
	size_t i, j;

	/* Insertion sort: stable, and a few hundred tests. */
	for (i = 1; i < nruns; i++) {
		size_t k = order[i];

		for (j = i; j > 0 && launch_rank(&runs[order[j - 1]]) > launch_rank(&runs[k]); j--)
			order[j] = order[j - 1];
		order[j] = k;
	}
}

int runner_init(const struct test_case *const *tcs, size_t n, unsigned jobs, double busy_load,
		const char *run_dir)
{
	size_t i;

	load_cap = busy_load;
	runs = calloc(n ? n : 1, sizeof(*runs));
	order = calloc(n ? n : 1, sizeof(*order));
	if (!runs || !order)
		return -ENOMEM;
	nruns = n;
	max_jobs = jobs ? jobs : 1;
	for (i = 0; i < n; i++) {
		runs[i].tc = tcs[i];
		runs[i].timeout_s = deadline_of(tcs[i]);
		runs[i].pidfd = -1;
		snprintf(runs[i].dir, sizeof(runs[i].dir), "%s/%zu", run_dir, i);
		snprintf(runs[i].out, sizeof(runs[i].out), "%s/%zu.out", run_dir, i);
		order[i] = i;
	}
	sort_order();
	return 0;
}

/* In the child: the test's output to its file, its environment, its body. */
static void __attribute__((noreturn)) child_main(const struct test_run *r)
{
	int fd, err;

	setpgid(0, 0);
	fd = open(r->out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0)
		_exit(126);
	close(fd);
	/* Unbuffered: what a test printed before _exit() is never lost, and
	 * stdout and stderr keep their order in the file. */
	setvbuf(stdout, NULL, _IONBF, 0);
	err = isolate_test(r->dir, r->tc->flags & TEST_HOST);
	if (err) {
		fprintf(stderr, "    could not give the test its own environment: %s\n",
			strerror(-err));
		_exit(1);
	}
	alarm((unsigned)r->timeout_s + 5); /* belt and braces */
	r->tc->fn();
	_exit(0);
}

static void launch(struct test_run *r)
{
	fflush(NULL);
	r->t0_ms = now_ms();
	r->pid = fork();
	if (r->pid < 0) {
		/* Counted as a failure of this test, not a hang of the run. */
		r->status = 127 << 8;
		r->done = r->started = true;
		fprintf(stderr, "    fork for %s/%s: %s\n", r->tc->suite, r->tc->name,
			strerror(errno));
		return;
	}
	if (r->pid == 0)
		child_main(r);
	setpgid(r->pid, r->pid);
	r->pidfd = (int)syscall(SYS_pidfd_open, r->pid, 0);
	r->started = true;
	running++;
	if (r->tc->flags & TEST_ALONE)
		alone_running = true;
}

/* Remove the segments and directories a test named after its pid left
 * behind when it was killed or failed before its own clean-up. */
static void sweep_leftovers(pid_t pid)
{
	const char *const dirs[] = { "/dev/shm", "/tmp" };
	char pattern[96];
	glob_t g;
	size_t i, k;

	for (k = 0; k < sizeof(dirs) / sizeof(dirs[0]); k++) {
		snprintf(pattern, sizeof(pattern), "%s/shmlock-test-%d-*", dirs[k], (int)pid);
		if (glob(pattern, GLOB_NOSORT, NULL, &g) != 0)
			continue;
		for (i = 0; i < g.gl_pathc; i++)
			isolate_remove_tree(g.gl_pathv[i]);
		globfree(&g);
	}
}

static void finish(struct test_run *r, int status, bool timed_out)
{
	r->took_ms = now_ms() - r->t0_ms;
	r->status = status;
	r->timed_out = timed_out;
	r->done = true;
	if (r->pidfd >= 0)
		close(r->pidfd);
	r->pidfd = -1;
	kill(-r->pid, SIGKILL); /* whatever the test left running */
	sweep_leftovers(r->pid);
	isolate_remove_tree(r->dir);
	running--;
	if (r->tc->flags & TEST_ALONE)
		alone_running = false;
}

/* The CPU time wait4() reports: the test's process and every descendant it
 * waited for (a broker or etcd it stopped), not one reparented to init. */
static uint64_t cpu_ms_of(const struct rusage *ru)
{
	return (uint64_t)(ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) * 1000 +
	       (uint64_t)(ru->ru_utime.tv_usec + ru->ru_stime.tv_usec) / 1000;
}

static void reap(void)
{
	uint64_t now = now_ms();
	size_t i;

	for (i = 0; i < nruns; i++) {
		struct test_run *r = &runs[i];
		struct rusage ru = { 0 };
		int status;

		if (!r->started || r->done)
			continue;
		if (wait4(r->pid, &status, WNOHANG, &ru) == r->pid) {
			r->cpu_ms = cpu_ms_of(&ru);
			finish(r, status, false);
		} else if (now >= r->t0_ms + (uint64_t)r->timeout_s * 1000) {
			kill(-r->pid, SIGKILL);
			wait4(r->pid, &status, 0, &ru);
			r->cpu_ms = cpu_ms_of(&ru);
			finish(r, status, true);
		}
	}
}

/*
 * Is the machine too busy for one more test beside those running? Tests
 * keep deadlines made for a machine that runs them: on one that others
 * load already (a shared 2-CPU box, load 15 to 25), four at once missed
 * theirs under ASan. So with the load average of the last minute above
 * @load_cap, only one test runs; $SHMLOCK_TEST_JOBS set by hand turns
 * this off (load_cap 0).
 */
static bool too_busy(void)
{
	double load;

	return load_cap > 0 && running > 0 && getloadavg(&load, 1) == 1 && load > load_cap;
}

static void launch_more(void)
{
	while (next_launch < nruns && running < max_jobs && !alone_running && !too_busy()) {
		struct test_run *r = &runs[order[next_launch]];

		if ((r->tc->flags & TEST_ALONE) && running > 0)
			return;
		next_launch++;
		launch(r);
	}
}

/* Sleep until a running test exits or the nearest deadline passes. */
static void wait_a_little(void)
{
	struct pollfd p[64];
	uint64_t now = now_ms(), nearest = now + 1000;
	nfds_t n = 0;
	bool blind = false;
	size_t i;

	for (i = 0; i < nruns; i++) {
		const struct test_run *r = &runs[i];
		uint64_t end;

		if (!r->started || r->done)
			continue;
		end = r->t0_ms + (uint64_t)r->timeout_s * 1000;
		if (end < nearest)
			nearest = end;
		if (r->pidfd >= 0 && n < sizeof(p) / sizeof(p[0]))
			p[n++] = (struct pollfd){ .fd = r->pidfd, .events = POLLIN };
		else
			blind = true;
	}
	if (!n && !blind)
		return;
	/* Without a pidfd for every child, look again every 10 ms. */
	if (blind && nearest > now + 10)
		nearest = now + 10;
	if (poll(p, n, nearest > now ? (int)(nearest - now) : 0) < 0 && errno != EINTR)
		usleep(10000);
}

const struct test_run *runner_wait(size_t i)
{
	while (!runs[i].done) {
		reap();
		launch_more();
		if (!runs[i].done)
			wait_a_little();
	}
	return &runs[i];
}

void runner_replay(size_t i, FILE *to)
{
	char buf[4096];
	size_t n;
	FILE *f = fopen(runs[i].out, "re");

	if (!f)
		return;
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		fwrite(buf, 1, n, to);
	fclose(f);
	fflush(to);
	unlink(runs[i].out);
}

size_t runner_done(void)
{
	size_t i, n = 0;

	for (i = 0; i < nruns; i++)
		n += runs[i].done;
	return n;
}

/* The @top runs done with the largest @key, largest first, each printed by @show. */
static void print_top(FILE *to, size_t top, uint64_t (*key)(const struct test_run *),
		      void (*show)(FILE *, const struct test_run *))
{
	bool *shown = calloc(nruns ? nruns : 1, sizeof(*shown));
	size_t k, i;

	if (!shown)
		return;
	for (k = 0; k < top; k++) {
		size_t best = nruns;

		for (i = 0; i < nruns; i++)
			if (runs[i].done && !shown[i] &&
			    (best == nruns || key(&runs[i]) > key(&runs[best])))
				best = i;
		if (best == nruns)
			break;
		shown[best] = true;
		show(to, &runs[best]);
	}
	free(shown);
}

static uint64_t took_of(const struct test_run *r)
{
	return r->took_ms;
}

static uint64_t cpu_of(const struct test_run *r)
{
	return r->cpu_ms;
}

static void show_took(FILE *to, const struct test_run *r)
{
	fprintf(to, "  %6.1f s  %s/%s (deadline %d s)\n", (double)r->took_ms / 1000, r->tc->suite,
		r->tc->name, r->timeout_s);
}

static void show_cpu(FILE *to, const struct test_run *r)
{
	fprintf(to, "  %6.1f s  %s/%s\n", (double)r->cpu_ms / 1000, r->tc->suite, r->tc->name);
}

void runner_print_slowest(FILE *to, size_t top)
{
	uint64_t cpu = 0;
	size_t i;

	fprintf(to, "\nSlowest tests (up to %u at once):\n", max_jobs);
	print_top(to, top, took_of, show_took);
	for (i = 0; i < nruns; i++)
		cpu += runs[i].cpu_ms;
	fprintf(to,
		"Most CPU time (user + system, with what each test waited for; %.1f s in all):\n",
		(double)cpu / 1000);
	print_top(to, top, cpu_of, show_cpu);
}

void runner_kill_all(void)
{
	size_t i;

	for (i = 0; i < nruns; i++)
		if (runs[i].started && !runs[i].done)
			kill(-runs[i].pid, SIGKILL);
}

void runner_end(void)
{
	size_t i;

	for (i = 0; i < nruns; i++)
		if (runs[i].started && !runs[i].done) {
			kill(-runs[i].pid, SIGKILL);
			waitpid(runs[i].pid, NULL, 0);
		}
	free(runs);
	free(order);
	runs = NULL;
	order = NULL;
	nruns = 0;
}
