// SPDX-License-Identifier: MIT
/*
 * The shmlock CLI ($SHMLOCK_CLI_BIN) run as a real process against a real
 * broker: consul lock's own checklist, then what we promise beyond it
 * (process groups, signals, lost holds, leases, inspection output).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "broker_fixture.h"
#include "harness.h"

#define ARGS(...) ((const char *const[]){ __VA_ARGS__, NULL })
#define OUT_MAX 65536

/* ---- running the CLI ---- */

struct proc {
	pid_t pid;
	int in, out, err; /* our ends of its stdin, stdout, stderr */
};

static const char *cli_bin(void)
{
	const char *bin = getenv("SHMLOCK_CLI_BIN");

	if (!bin)
		FAIL_AT("SHMLOCK_CLI_BIN is not set (run through 'make test')");
	return bin;
}

/* Start the CLI with SIGINT and SIGQUIT ignored, as a shell starts a
 * background job; else with them at their default, whatever the test
 * runner was started with. */
static bool spawn_ignoring_int_quit;

/* Start @argv (argv[0] looked up in PATH) with pipes on its stdio. */
static void spawn(struct proc *p, const char *const *argv)
{
	int in[2], out[2], err[2];

	if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC))
		FAIL_AT("pipe: %s", strerror(errno));
	fflush(NULL);
	p->pid = fork();
	if (p->pid < 0)
		FAIL_AT("fork: %s", strerror(errno));
	if (p->pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		dup2(err[1], 2);
		signal(SIGINT, spawn_ignoring_int_quit ? SIG_IGN : SIG_DFL);
		signal(SIGQUIT, spawn_ignoring_int_quit ? SIG_IGN : SIG_DFL);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	close(err[1]);
	p->in = in[1];
	p->out = out[0];
	p->err = err[0];
}

static void cli_start(struct proc *p, const char *const *args)
{
	const char *argv[64];
	int n = 0;

	argv[n++] = cli_bin();
	while (*args && n < 63)
		argv[n++] = *args++;
	argv[n] = NULL;
	spawn(p, argv);
}

/* Read @fd to its end before @end_ms (CLOCK_MONOTONIC); returns the length. */
static size_t read_to_end(int fd, char *buf, size_t size, uint64_t end_ms)
{
	size_t n = 0;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int64_t left = (int64_t)(end_ms - now_ms());
		ssize_t r;

		if (left <= 0 || poll(&p, 1, (int)left) != 1)
			FAIL_AT("output not closed in time (so far: \"%.*s\")", (int)n, buf);
		r = read(fd, buf + n, size - 1 - n);
		if (r <= 0)
			break;
		n += (size_t)r;
		if (n == size - 1)
			break;
	}
	buf[n] = '\0';
	return n;
}

/* Collect what is left of @p's output and its exit status. */
static int cli_finish(struct proc *p, char *out, char *err, int timeout_ms)
{
	uint64_t end = now_ms() + (uint64_t)timeout_ms;
	static char scratch[OUT_MAX];
	int status;

	if (p->in >= 0)
		close(p->in);
	read_to_end(p->out, out ? out : scratch, OUT_MAX, end);
	read_to_end(p->err, err ? err : scratch, OUT_MAX, end);
	close(p->out);
	close(p->err);
	status = pid_wait(p->pid, (int)(end > now_ms() ? end - now_ms() : 1));
	/* Show what the CLI said when a check on it fails. */
	if (err && *err && getenv("SHMLOCK_TEST_VERBOSE"))
		fprintf(stderr, "    [shmlock stderr] %s", err);
	return status;
}

/* Run the CLI to its end: @input on its stdin (NULL: none). */
static int cli_run(const char *const *args, const char *input, char *out, char *err, int timeout_ms)
{
	struct proc p;

	cli_start(&p, args);
	if (input && write(p.in, input, strlen(input)) != (ssize_t)strlen(input))
		FAIL_AT("write to shmlock: %s", strerror(errno));
	close(p.in);
	p.in = -1;
	return cli_finish(&p, out, err, timeout_ms);
}

/* A running CLI as a harness child, to read its stdout line by line. */
static struct child as_child(const struct proc *p)
{
	return (struct child){ .pid = p->pid, .rd = p->out, .wr = p->in };
}

static int exit_code(int status)
{
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#define CHECK_EXIT(status, code, err)                                                  \
	do {                                                                           \
		int s_ = (status);                                                     \
		if (!WIFEXITED(s_) || WEXITSTATUS(s_) != (code))                       \
			FAIL_AT("shmlock ended with %d, expected exit %d; stderr: %s", \
				exit_code(s_), (code), (err));                         \
	} while (0)

#define CHECK_HAS(text, needle)                                               \
	do {                                                                  \
		if (!strstr((text), (needle)))                                \
			FAIL_AT("\"%s\" not found in: %s", (needle), (text)); \
	} while (0)

/* ---- the world around it ---- */

/* A process is gone once it no longer exists or is a zombie nobody reaped
 * yet (it runs no code either way). */
static bool pid_gone(pid_t pid)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return true;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return true;
	buf[n] = '\0';
	p = strrchr(buf, ')');
	return !p || p[2] == 'Z' || p[2] == 'X';
}

static uint32_t holders_of(local_session *s, const char *key)
{
	static LOCAL_OPTS(local_key_info, info);

	return local_info(s, key, &info) ? 999 : info.holders;
}

static pid_t holder_pid_of(local_session *s, const char *key)
{
	static LOCAL_OPTS(local_key_info, info);

	return local_info(s, key, &info) ? -1 : info.holder_pid;
}

static uint32_t waiters_of(local_session *s, const char *key)
{
	static LOCAL_OPTS(local_key_info, info);

	return local_info(s, key, &info) ? 999 : info.waiters;
}

/* A per-test scratch directory, removed by the runner with the test. */
static const char *scratch_dir(void)
{
	static char dir[64];

	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/tmp/shmlock-test-%d-cliXXXXXX", (int)getpid());
		if (!mkdtemp(dir))
			FAIL_AT("mkdtemp: %s", strerror(errno));
	}
	return dir;
}

static const char *scratch(const char *name)
{
	static char paths[8][128];
	static int next;
	char *p = paths[next++ % 8];

	snprintf(p, 128, "%s/%s", scratch_dir(), name);
	return p;
}

static bool exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (!f || fputs(text, f) < 0 || fclose(f))
		FAIL_AT("cannot write %s", path);
}

/* Does jq's @filter hold for @json (jq -e: the last result is true)? */
static bool jq_true(const char *json, const char *filter)
{
	const char *file = scratch("jq-input.json");
	char cmd[1024];

	write_file(file, json);
	snprintf(cmd, sizeof(cmd), "jq -e '%s' '%s' >/dev/null 2>&1", filter, file);
	return system(cmd) == 0;
}

#define CHECK_JQ(json, filter)                                                 \
	do {                                                                   \
		if (!jq_true((json), (filter)))                                \
			FAIL_AT("jq -e '%s' failed on: %s", (filter), (json)); \
	} while (0)

/* Where a source file is: under $SHMLOCK_SRCDIR, the current directory
 * (make test runs at the root), or above the binary (build/X/shmlock). */
static const char *source_path(const char *rel)
{
	static char path[600];
	const char *src = getenv("SHMLOCK_SRCDIR");
	char bin[400], *slash;

	if (src && snprintf(path, sizeof(path), "%s/%s", src, rel) > 0 && exists(path))
		return path;
	if (exists(rel))
		return rel;
	snprintf(bin, sizeof(bin), "%s", cli_bin());
	slash = strrchr(bin, '/');
	if (slash) {
		*slash = '\0';
		snprintf(path, sizeof(path), "%s/../../%s", bin, rel);
		if (exists(path))
			return path;
		snprintf(path, sizeof(path), "%s/../%s", bin, rel);
		if (exists(path))
			return path;
	}
	FAIL_AT("cannot find %s (set SHMLOCK_SRCDIR to the source tree)", rel);
}

static void use_broker(struct broker_proc *b)
{
	broker_start(b, NULL);
	setenv("SHMLOCK_SOCKET", b->sock, 1);
}

/* ---- consul lock's checklist ---- */

TEST(cli, help_has_no_tabs, 15)
{
	static const char *const cmds[] = { "lock",    "status",  "keys",     "info",
					    "leader",  "watch",	  "sessions", "release",
					    "session", "version", "help",     NULL };
	static char out[OUT_MAX], err[OUT_MAX];
	int i;

	CHECK_EXIT(cli_run(ARGS("help"), NULL, out, err, 5000), 0, err);
	CHECK(!strchr(out, '\t'));
	CHECK_HAS(out, "Usage: shmlock COMMAND");
	for (i = 0; cmds[i]; i++) {
		CHECK_EXIT(cli_run(ARGS("help", cmds[i]), NULL, out, err, 5000), 0, err);
		CHECK(!strchr(out, '\t'));
		CHECK_HAS(out, "Usage: shmlock ");
		CHECK_HAS(out, cmds[i]);
	}
	/* -h, -help and --help on a command print the same text. */
	CHECK_EXIT(cli_run(ARGS("lock", "-h"), NULL, out, err, 5000), 0, err);
	CHECK(!strchr(out, '\t'));
	CHECK_HAS(out, "Usage: shmlock lock [options] KEY CHILD...");
	CHECK_EXIT(cli_run(ARGS("keys", "--help"), NULL, out, err, 5000), 0, err);
	CHECK_HAS(out, "Usage: shmlock keys");
	/* No command: the overview, on stderr, and a failure. */
	CHECK_EXIT(cli_run(ARGS("--bogus-command"), NULL, out, err, 5000), 64, err);
	CHECK_HAS(err, "unknown command");
	CHECK_EXIT(cli_run(ARGS("version"), NULL, out, err, 5000), 0, err);
	CHECK_HAS(out, "shmlock ");
}

/* consul lock's command lines run unchanged: its API options are taken and
 * set aside, and -verbose says so. */
TEST(cli, consul_api_flags_accepted, 20)
{
	static char out[OUT_MAX], err[OUT_MAX];
	struct broker_proc b;

	use_broker(&b);
	setenv("CONSUL_HTTP_TOKEN", "secret", 1);
	CHECK_EXIT(cli_run(ARGS("lock", "-verbose", "-http-addr=127.0.0.1:8500", "-token", "t",
				"-token-file=/nonexistent", "-datacenter", "dc1", "-ca-file=/x",
				"-ca-path=/y", "-client-cert=/c", "-client-key=/k",
				"-tls-server-name=s", "-namespace=n", "-partition=p", "-stale",
				"jobs/consul", "echo ran"),
			   NULL, out, err, 10000),
		   0, err);
	CHECK_HAS(out, "ran\n");
	CHECK_HAS(err, "-http-addr is consul lock's; it does not apply to a local broker");
	CHECK_HAS(err, "-partition is consul lock's");
	CHECK_HAS(err, "-stale is consul lock's");
	CHECK_HAS(err, "CONSUL_HTTP_TOKEN does not apply to a local broker");
	/* Without -verbose, nothing is said. */
	CHECK_EXIT(cli_run(ARGS("lock", "-http-addr", "h:1", "jobs/consul", "true"), NULL, out, err,
			   10000),
		   0, err);
	CHECK(!strstr(err, "consul lock's"));
}

TEST(cli, bad_args_exit_64, 15)
{
	static const struct {
		const char *flag, *says;
	} bad[] = {
		{ "-try=blah", "invalid value \"blah\" for flag -try" },
		{ "-try=-10s", "negative duration" },
		{ "-timeout=blah", "invalid value \"blah\" for flag -timeout" },
		{ "-monitor-retry=-5", "-monitor-retry must be >= 0" },
		{ "-n=0", "holder limit must be from 1 to 4294967295" },
		{ "-n=-2", "holder limit must be from 1 to 4294967295" },
		{ "-n=99999999999", "holder limit must be from 1 to 4294967295 (got 99999999999)" },
		{ "-n=two", "invalid value \"two\" for flag -n" },
		{ "-lock-delay=61s", "-lock-delay must be at most" },
		{ "-kill-grace=5", "missing unit" },
		{ "-shell=maybe", "invalid value \"maybe\" for flag -shell" },
		{ "-no-such-flag", "flag provided but not defined: -no-such-flag" },
		{ NULL, NULL },
	};
	static char out[OUT_MAX], err[OUT_MAX];
	const char *ran = scratch("ran");
	char touch[160];
	int i;

	/* No broker: the arguments must be refused before any connection. */
	setenv("SHMLOCK_SOCKET", scratch("no-broker.sock"), 1);
	snprintf(touch, sizeof(touch), "touch %s", ran);
	for (i = 0; bad[i].flag; i++) {
		CHECK_EXIT(cli_run(ARGS("lock", bad[i].flag, "k", touch), NULL, out, err, 5000), 64,
			   err);
		CHECK_HAS(err, bad[i].says);
		CHECK_HAS(err, "shmlock help lock");
	}
	CHECK_EXIT(cli_run(ARGS("lock"), NULL, out, err, 5000), 64, err);
	CHECK_HAS(err, "missing KEY");
	CHECK_EXIT(cli_run(ARGS("lock", "k"), NULL, out, err, 5000), 64, err);
	CHECK_HAS(err, "missing the command");
	CHECK_EXIT(cli_run(ARGS("lock", "-timeout"), NULL, out, err, 5000), 64, err);
	CHECK_HAS(err, "flag needs an argument: -timeout");
	CHECK_EXIT(cli_run(ARGS("lock", "", "true"), NULL, out, err, 5000), 64, err);
	CHECK_HAS(err, "KEY must not be empty");
	CHECK(!exists(ran));
	/* A key no key can be is the same usage error from every command,
	 * refused before any connection. */
	{
		static const char *const cmds[] = { "lock", "info", "leader", "watch", NULL };
		char long_key[LOCAL_KEY_MAX + 2];

		memset(long_key, 'k', sizeof(long_key) - 1);
		long_key[sizeof(long_key) - 1] = '\0';
		for (i = 0; cmds[i]; i++) {
			/* lock takes a command after KEY; the others nothing. */
			const char *child = i ? NULL : "true";

			CHECK_EXIT(cli_run(ARGS(cmds[i], "", child), NULL, out, err, 5000), 64,
				   err);
			CHECK_HAS(err, "KEY must not be empty");
			CHECK_EXIT(cli_run(ARGS(cmds[i], long_key, child), NULL, out, err, 5000),
				   64, err);
			CHECK_HAS(err, "KEY is longer than 255 bytes");
		}
	}
}

TEST(cli, duration_and_flag_syntax, 30)
{
	static const char *const good[] = {
		"500ms",      "1s", "1m30s", "3h",  "1.5s", "2h45m", "300us",
		"1\xc2\xb5s", "0",  "+5s",   ".5s", "1.s",  "100ns", NULL,
	};
	static const char *const bad[] = {
		"1", "s", "1x", "1s ", "", "--1s", "9999999999h", "1e3s", ".s", "1s2", "h1", NULL,
	};
	static const char *const forms[][3] = {
		{ "-timeout=1s", NULL, NULL },	    { "-timeout", "1s", NULL },
		{ "--timeout=1s", NULL, NULL },	    { "--timeout", "1s", NULL },
		{ "-child-exit-code", NULL, NULL }, { "-child-exit-code=false", NULL, NULL },
		{ "--shell=0", NULL, NULL },	    { "-n", "2", NULL },
	};
	static char out[OUT_MAX], err[OUT_MAX];
	struct broker_proc b;
	char flag[64], key[32];
	size_t i;

	use_broker(&b);
	/* A duration that parses lets the child run; one that does not is a
	 * usage error. */
	for (i = 0; good[i]; i++) {
		snprintf(flag, sizeof(flag), "-kill-grace=%s", good[i]);
		CHECK_EXIT(cli_run(ARGS("lock", flag, "k", "true"), NULL, out, err, 10000), 0, err);
	}
	for (i = 0; bad[i]; i++) {
		snprintf(flag, sizeof(flag), "-kill-grace=%s", bad[i]);
		CHECK_EXIT(cli_run(ARGS("lock", flag, "k", "true"), NULL, out, err, 10000), 64,
			   err);
		if (!strstr(err, "invalid value"))
			FAIL_AT("\"%s\" was accepted: %s", bad[i], err);
	}
	for (i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
		const char *args[8] = { "lock" };
		int n = 1, j;

		for (j = 0; j < 3 && forms[i][j]; j++)
			args[n++] = forms[i][j];
		snprintf(key, sizeof(key), "form-%zu", i);
		args[n++] = key;
		args[n++] = "true";
		args[n] = NULL;
		CHECK_EXIT(cli_run(args, NULL, out, err, 10000), 0, err);
	}
	/* "--" ends the options: "-k" is then the key. */
	CHECK_EXIT(cli_run(ARGS("lock", "--", "-k", "echo $SHMLOCK_KEY"), NULL, out, err, 10000), 0,
		   err);
	CHECK(!strcmp(out, "-k\n"));
	broker_stop(&b);
}

TEST(cli, child_runs_under_the_lock, 20)
{
	static char out[OUT_MAX], err[OUT_MAX];
	struct broker_proc b;
	char cmd[512];

	use_broker(&b);
	/* The child sees its own hold through the CLI (the key is held while
	 * it runs) and the variables that describe it. */
	snprintf(cmd, sizeof(cmd),
		 "touch %s; echo \"$SHMLOCK_HELD $CONSUL_LOCK_HELD $SHMLOCK_KEY\"; "
		 "'%s' info -json jobs/a > %s",
		 scratch("ran"), cli_bin(), scratch("info.json"));
	CHECK_EXIT(cli_run(ARGS("lock", "jobs/a", cmd), NULL, out, err, 10000), 0, err);
	CHECK(exists(scratch("ran")));
	CHECK_HAS(out, "true true jobs/a\n");
	CHECK_EXIT(cli_run(ARGS("info", "-json", "jobs/a"), NULL, out, err, 5000), 0, err);
	CHECK_JQ(out, ".holder_count == 0");
	{
		FILE *f = fopen(scratch("info.json"), "r");
		static char info[OUT_MAX];
		size_t n = f ? fread(info, 1, sizeof(info) - 1, f) : 0;

		if (f)
			fclose(f);
		info[n] = '\0';
		CHECK_JQ(info, ".kind == \"lock\" and .holder_count == 1 and "
			       "(.holders[0].name | startswith(\"shmlock lock for\"))");
	}
	broker_stop(&b);
}

TEST(cli, child_runs_without_shell, 20)
{
	static char out[OUT_MAX], err[OUT_MAX];
	struct broker_proc b;

	use_broker(&b);
	CHECK_EXIT(cli_run(ARGS("lock", "-shell=false", "k", "touch", scratch("ran")), NULL, out,
			   err, 10000),
		   0, err);
	CHECK(exists(scratch("ran")));
	/* The arguments reach the program as they are: no shell joins them,
	 * and flags after KEY belong to the child. */
	CHECK_EXIT(cli_run(ARGS("lock", "-shell=false", "k", "printf", "[%s]", "a b", "-verbose"),
			   NULL, out, err, 10000),
		   0, err);
	CHECK(!strcmp(out, "[a b][-verbose]"));
	CHECK(!strstr(err, "acquired"));
	CHECK_EXIT(cli_run(ARGS("lock", "-shell=false", "k", "/nonexistent/program"), NULL, out,
			   err, 10000),
		   127, err);
	CHECK_HAS(err, "cannot run /nonexistent/program");
	broker_stop(&b);
}

TEST(cli, try_fails_fast_while_held, 20)
{
	static char out[OUT_MAX], err[OUT_MAX];
	struct broker_proc b;
	local_session *s;
	uint64_t t0, took;
	char touch[160];

	use_broker(&b);
	s = open_session(&b, "holder", 0, 0);
	CHECK_OK(local_lock(s, "busy", NULL, NULL));
	snprintf(touch, sizeof(touch), "touch %s", scratch("ran"));
	t0 = now_ms();
	CHECK_EXIT(cli_run(ARGS("lock", "-try=300ms", "busy", touch), NULL, out, err, 10000), 1,
		   err);
	took = now_ms() - t0;
	/* The message names the 300 ms it waited; how much longer the process
	 * took on this machine is a figure (a bound of 3 s failed nothing but
	 * a slow run could miss it). */
	fprintf(stderr, "    shmlock lock -try=300ms ended after %llu ms\n",
		(unsigned long long)took);
	CHECK(took >= 300);
	CHECK_HAS(err, "timed out after 300ms waiting for busy (held by holder");
	CHECK_EXIT(cli_run(ARGS("lock", "-timeout", "100ms", "busy", touch), NULL, out, err, 10000),
		   1, err);
	CHECK(!exists(scratch("ran")));
	/* Its place in the queue went with it. */
	CHECK(WAIT_FOR(waiters_of(s, "busy") == 0, 5000));
	CHECK_OK(local_release(s, "busy"));
	CHECK_EXIT(cli_run(ARGS("lock", "-try=1s", "busy", touch), NULL, out, err, 10000), 0, err);
	CHECK(exists(scratch("ran")));
	broker_stop(&b);
}

/* Read one line from any of @n processes within @timeout_ms; returns the
 * index of the one that spoke, or -1. Those whose ->out is -1 are skipped. */
static int read_any(struct proc *p, int n, char *line, size_t size, int timeout_ms)
{
	struct pollfd fds[16];
	int i;

	for (i = 0; i < n; i++)
		fds[i] = (struct pollfd){ .fd = p[i].out, .events = POLLIN };
	if (poll(fds, (nfds_t)n, timeout_ms) <= 0)
		return -1;
	for (i = 0; i < n; i++)
		if (fds[i].revents) {
			struct child c = as_child(&p[i]);

			if (child_read(&c, line, size, 1000))
				FAIL_AT("shmlock %d closed its output early", (int)p[i].pid);
			return i;
		}
	return -1;
}

TEST(cli, semaphore_admits_exactly_n, 30)
{
	enum { N = 3, PROCS = 5 };
	struct proc p[PROCS];
	bool in[PROCS] = { false };
	struct broker_proc b;
	local_session *obs;
	int i, k, inside = 0, status;
	char line[64];

	use_broker(&b);
	obs = open_session(&b, "observer", 0, 0);
	for (i = 0; i < PROCS; i++)
		cli_start(&p[i], ARGS("lock", "-n=3", "-pass-stdin", "pool", "echo in; read x"));
	while (inside < N) {
		k = read_any(p, PROCS, line, sizeof(line), 10000);
		CHECK(k >= 0);
		CHECK(!strcmp(line, "in") && !in[k]);
		in[k] = true;
		inside++;
	}
	CHECK(WAIT_FOR(waiters_of(obs, "pool") == PROCS - N, 5000));
	CHECK_EQ(holders_of(obs, "pool"), N);
	/* The others queue: nobody else starts while three run. */
	CHECK_EQ(read_any(p, PROCS, line, sizeof(line), 300), -1);
	/* One leaves: exactly one more gets in. */
	for (k = 0; !in[k]; k++)
		;
	CHECK(write(p[k].in, "\n", 1) == 1);
	status = cli_finish(&p[k], NULL, NULL, 10000);
	CHECK_EQ(exit_code(status), 0);
	p[k].out = -1; /* poll() skips it from now on */
	i = read_any(p, PROCS, line, sizeof(line), 10000);
	CHECK(i >= 0 && i != k && !in[i]);
	in[i] = true;
	CHECK_EQ(read_any(p, PROCS, line, sizeof(line), 300), -1);
	CHECK_EQ(holders_of(obs, "pool"), N);
	/* Let everyone through. */
	for (i = 0; i < PROCS; i++)
		if (i != k && write(p[i].in, "\n", 1) != 1)
			FAIL_AT("write: %s", strerror(errno));
	for (i = 0; i < PROCS; i++)
		if (i != k)
			CHECK_EQ(exit_code(cli_finish(&p[i], NULL, NULL, 10000)), 0);
	CHECK_EQ(holders_of(obs, "pool"), 0);
	broker_stop(&b);
}

TEST(cli, child_exit_code, 20)
{
	static char out[OUT_MAX], err[OUT_MAX];
	struct broker_proc b;

	use_broker(&b);
	CHECK_EXIT(cli_run(ARGS("lock", "-child-exit-code", "k", "exit 0"), NULL, out, err, 10000),
		   0, err);
	CHECK_EXIT(cli_run(ARGS("lock", "-child-exit-code", "k", "exit 1"), NULL, out, err, 10000),
		   2, err);
	CHECK_EXIT(cli_run(ARGS("lock", "-child-exit-code=true", "k", "kill -USR1 $$"), NULL, out,
			   err, 10000),
		   2, err);
	CHECK_EXIT(cli_run(ARGS("lock", "k", "exit 1"), NULL, out, err, 10000), 0, err);
	CHECK_EXIT(cli_run(ARGS("lock", "-child-exit-code=false", "k", "exit 7"), NULL, out, err,
			   10000),
		   0, err);
	broker_stop(&b);
}

/*
 * Each way of failing has its own status: a script tells a busy key (1,
 * consul lock's) from a lost hold (3), a typo on the command line (64), a
 * missing broker (69) and a child that could not be started (126 and 127,
 * as a shell).
 */
TEST(cli, exit_statuses_are_distinct, 40)
{
	static char out[OUT_MAX], err[OUT_MAX];
	const char *noexec = scratch("noexec");
	struct broker_proc b;

	write_file(noexec, "#!/bin/sh\necho ran\n");
	chmod(noexec, 0644);
	use_broker(&b);
	/* Not found, not executable: with and without a shell. */
	CHECK_EXIT(cli_run(ARGS("lock", "-shell=false", "k", "shmlock-no-such-program"), NULL, out,
			   err, 10000),
		   127, err);
	CHECK_HAS(err, "cannot run shmlock-no-such-program");
	CHECK_EXIT(cli_run(ARGS("lock", "-shell=false", "k", noexec), NULL, out, err, 10000), 126,
		   err);
	CHECK_EXIT(cli_run(ARGS("lock", "k", "shmlock-no-such-program"), NULL, out, err, 10000),
		   127, err);
	CHECK_EXIT(cli_run(ARGS("lock", "k", noexec), NULL, out, err, 10000), 126, err);
	CHECK(!strstr(out, "ran"));
	/* -timeout=0 is consul lock's "no limit", not a try: a free key is
	 * taken, a held one waited for. */
	CHECK_EXIT(cli_run(ARGS("lock", "-timeout=0", "k", "true"), NULL, out, err, 10000), 0, err);
	{
		local_session *s = open_session(&b, "holder", 0, 0);
		struct proc p;

		CHECK_OK(local_lock(s, "k", NULL, NULL));
		cli_start(&p, ARGS("lock", "-timeout=0", "k", "true"));
		CHECK(WAIT_FOR(waiters_of(s, "k") == 1, 5000));
		CHECK(!pid_gone(p.pid));
		CHECK_OK(local_release(s, "k"));
		CHECK_EXIT(cli_finish(&p, out, err, 10000), 0, err);
		local_session_close(s);
	}
	/* Usage. */
	CHECK_EXIT(cli_run(ARGS("lock", "-n=0", "k", "true"), NULL, out, err, 5000), 64, err);
	CHECK_EXIT(cli_run(ARGS("info"), NULL, out, err, 5000), 64, err);
	CHECK_EXIT(cli_run(ARGS("no-such-command"), NULL, out, err, 5000), 64, err);
	broker_stop(&b);
	/* No broker. */
	setenv("SHMLOCK_SOCKET", scratch("no-broker.sock"), 1);
	CHECK_EXIT(cli_run(ARGS("lock", "k", "true"), NULL, out, err, 15000), 69, err);
	CHECK_HAS(err, "no-broker.sock: missing"); /* every path tried, and why */
	CHECK_EXIT(cli_run(ARGS("info", "k"), NULL, out, err, 15000), 69, err);
}

/* ---- the child's process group ---- */

/* Start shmlock on @key with a child shell that starts a grandchild and
 * reports both pids; returns them. */
static void start_family(struct proc *p, const char *const *args, pid_t *child, pid_t *grandchild)
{
	char line[128];
	struct child c;
	int a, g;

	cli_start(p, args);
	c = as_child(p);
	if (child_read(&c, line, sizeof(line), 10000))
		FAIL_AT("the child did not start");
	if (sscanf(line, "%d %d", &a, &g) != 2)
		FAIL_AT("unexpected line from the child: %s", line);
	*child = a;
	*grandchild = g;
	CHECK(!pid_gone(*child) && !pid_gone(*grandchild));
}

#define FAMILY "sleep 300 & echo \"$$ $!\"; wait"
/* Both ignore SIGTERM: only SIGKILL, after the grace period, ends them. */
#define STUBBORN_FAMILY "trap '' TERM; sleep 300 & echo \"$$ $!\"; wait; wait"

TEST(cli, force_release_stops_child_and_grandchild, 20)
{
	static char out[OUT_MAX], err[OUT_MAX];
	struct broker_proc b;
	local_session *obs;
	pid_t child, grandchild;
	struct proc p;
	uint64_t t0, took;
	int status;

	use_broker(&b);
	obs = open_session(&b, "observer", 0, 0);
	start_family(&p, ARGS("lock", "-kill-grace=1s", "-lock-delay=0", "svc", STUBBORN_FAMILY),
		     &child, &grandchild);
	CHECK_EQ(holders_of(obs, "svc"), 1);
	t0 = now_ms();
	CHECK_EXIT(cli_run(ARGS("release", "-force", "svc"), NULL, out, err, 5000), 0, err);
	status = cli_finish(&p, out, err, 10000);
	took = now_ms() - t0;
	CHECK_EXIT(status, 3, err);
	CHECK_HAS(err, "lost the hold on svc");
	/* shmlock ends only once the whole group is gone: SIGKILL came after
	 * the 1 s grace (without it the family sleeps 300 s, far past
	 * cli_finish()'s deadline). How soon after is a figure. */
	CHECK(pid_gone(child) && pid_gone(grandchild));
	fprintf(stderr,
		"    the stubborn family was gone %llu ms after release -force "
		"(grace 1 s)\n",
		(unsigned long long)took);
	CHECK(took >= 900);
	/* Without a stubborn child, SIGTERM ends it at once: well inside a
	 * grace that no run reaches. */
	start_family(&p, ARGS("lock", "-kill-grace=600s", "-lock-delay=0", "svc", FAMILY), &child,
		     &grandchild);
	t0 = now_ms();
	CHECK_EXIT(cli_run(ARGS("release", "-force", "svc"), NULL, out, err, 5000), 0, err);
	CHECK_EXIT(cli_finish(&p, out, err, AT_ONCE_MS), 3, err);
	CHECK_AT_ONCE(t0);
	CHECK(pid_gone(child) && pid_gone(grandchild));
	broker_stop(&b);
}

TEST(cli, session_destroy_stops_child, 20)
{
	static char out[OUT_MAX], err[OUT_MAX];
	struct broker_proc b;
	char line[128];
	struct child c;
	struct proc p;

	use_broker(&b);
	cli_start(&p,
		  ARGS("lock", "-lock-delay=0", "svc", "echo $SHMLOCK_SESSION; exec sleep 300"));
	c = as_child(&p);
	CHECK_OK(child_read(&c, line, sizeof(line), 10000));
	CHECK_EQ(strlen(line), LOCAL_SESSION_ID_LEN);
	CHECK_EXIT(cli_run(ARGS("session", "destroy", line), NULL, out, err, 5000), 0, err);
	CHECK_EXIT(cli_finish(&p, out, err, 10000), 3, err);
	CHECK_HAS(err, "session ended");
	CHECK_EXIT(cli_run(ARGS("session", "destroy", line), NULL, out, err, 5000), 1, err);
	CHECK_HAS(err, "no session");
	broker_stop(&b);
}

static void signal_stops_group(int sig)
{
	struct broker_proc b;
	local_session *obs;
	pid_t child, grandchild;
	struct proc p;
	int status;

	use_broker(&b);
	obs = open_session(&b, "observer", 0, 0);
	start_family(&p, ARGS("lock", "-kill-grace=2s", "svc", FAMILY), &child, &grandchild);
	kill(p.pid, sig);
	status = cli_finish(&p, NULL, NULL, 10000);
	/* shmlock ends by the signal it got, after its clean-up. */
	if (!WIFSIGNALED(status) || WTERMSIG(status) != sig)
		FAIL_AT("shmlock ended with %d, not by signal %d", exit_code(status), sig);
	CHECK(pid_gone(child) && pid_gone(grandchild));
	/* A release, not a loss: no lock-delay for the next holder. */
	CHECK_EQ(holders_of(obs, "svc"), 0);
	CHECK_OK(local_lock(obs, "svc",
			    &(struct local_acquire_opts){ .sz = sizeof(struct local_acquire_opts),
							  .timeout_ms = 0 },
			    NULL));
	broker_stop(&b);
}

TEST(cli, sigterm_stops_group, 20)
{
	signal_stops_group(SIGTERM);
}

TEST(cli, sighup_stops_group, 20)
{
	signal_stops_group(SIGHUP);
}

TEST(cli, sigquit_stops_group, 20)
{
	signal_stops_group(SIGQUIT);
}

TEST(cli, sigint_is_forwarded, 20)
{
	static char out[OUT_MAX], err[OUT_MAX];
	struct broker_proc b;
	struct proc p;
	struct child c;
	int status;

	use_broker(&b);
	/* The child ignores SIGTERM, so only the forwarded SIGINT can run its
	 * trap; its background sleep ignores both and needs the SIGKILL. */
	cli_start(&p, ARGS("lock", "-kill-grace=1s", "svc",
			   "trap 'echo got-int; exit 0' INT; trap '' TERM; "
			   "echo ready; sleep 300 & wait"));
	c = as_child(&p);
	child_expect(&c, "ready", 10000);
	kill(p.pid, SIGINT);
	status = cli_finish(&p, out, err, 10000);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT);
	CHECK_HAS(out, "got-int\n");
	broker_stop(&b);
}

/*
 * A shell starts its background jobs (`shmlock lock ... &`) with SIGINT and
 * SIGQUIT ignored. shmlock takes them anyway, as consul lock does, so that
 * `kill -INT $!` stops the child and releases the hold; the child itself
 * still ignores them, as the shell arranged.
 */
static void ignored_signal_still_stops(int sig)
{
	static char out[OUT_MAX], err[OUT_MAX];
	unsigned long long ign = 0;
	struct broker_proc b;
	local_session *obs;
	char line[256];
	struct proc p;
	struct child c;
	int status;

	use_broker(&b);
	obs = open_session(&b, "observer", 0, 0);
	spawn_ignoring_int_quit = true;
	cli_start(&p, ARGS("lock", "-kill-grace=1s", "svc",
			   "grep ^SigIgn: /proc/self/status; exec sleep 300"));
	spawn_ignoring_int_quit = false;
	c = as_child(&p);
	if (child_read(&c, line, sizeof(line), 10000))
		FAIL_AT("the child did not start");
	if (sscanf(line, "SigIgn: %llx", &ign) != 1)
		FAIL_AT("unexpected line from the child: %s", line);
	/* The child ignores what the shell made it ignore. */
	CHECK(ign & (1ull << (SIGINT - 1)));
	CHECK(ign & (1ull << (SIGQUIT - 1)));
	CHECK_EQ(holders_of(obs, "svc"), 1);
	kill(p.pid, sig);
	status = cli_finish(&p, out, err, 10000);
	if (!WIFSIGNALED(status) || WTERMSIG(status) != sig)
		FAIL_AT("shmlock ended with %d, not by signal %d; stderr: %s", exit_code(status),
			sig, err);
	CHECK_EQ(holders_of(obs, "svc"), 0);
	broker_stop(&b);
}

TEST(cli, ignored_sigint_still_stops, 20)
{
	ignored_signal_still_stops(SIGINT);
}

TEST(cli, ignored_sigquit_still_stops, 20)
{
	ignored_signal_still_stops(SIGQUIT);
}

/* nohup's SIGHUP stays ignored: the child runs on. */
TEST(cli, ignored_sighup_stays_ignored, 20)
{
	struct broker_proc b;
	local_session *obs;
	struct sigaction old, ignore = { .sa_handler = SIG_IGN };
	struct proc p;
	struct child c;
	int status;

	use_broker(&b);
	obs = open_session(&b, "observer", 0, 0);
	sigaction(SIGHUP, &ignore, &old);
	cli_start(&p, ARGS("lock", "-kill-grace=1s", "-pass-stdin", "svc",
			   "echo ready; read line; echo bye"));
	sigaction(SIGHUP, &old, NULL);
	c = as_child(&p);
	child_expect(&c, "ready", 10000);
	kill(p.pid, SIGHUP);
	/* Still running, still holding: the line we send is read and
	 * answered only by a child that was not stopped. */
	CHECK(write(p.in, "go\n", 3) == 3);
	child_expect(&c, "bye", 10000);
	close(p.in);
	p.in = -1;
	status = cli_finish(&p, NULL, NULL, 10000);
	CHECK_EQ(exit_code(status), 0);
	CHECK_EQ(holders_of(obs, "svc"), 0);
	broker_stop(&b);
}

TEST(cli, sigkill_leaves_no_child_and_frees_key, 20)
{
	static char out[OUT_MAX], err[OUT_MAX];
	struct broker_proc b;
	local_session *obs;
	pid_t child, grandchild;
	struct proc p;

	use_broker(&b);
	obs = open_session(&b, "observer", 0, 0);
	start_family(&p, ARGS("lock", "-lock-delay=0", "svc", FAMILY), &child, &grandchild);
	kill(p.pid, SIGKILL);
	CHECK_EQ(exit_code(cli_finish(&p, NULL, NULL, 10000)), 128 + SIGKILL);
	CHECK(WAIT_FOR(pid_gone(child) && pid_gone(grandchild), 5000));
	CHECK(WAIT_FOR(holders_of(obs, "svc") == 0, 5000));
	CHECK_EXIT(cli_run(ARGS("lock", "-try=2s", "svc", "true"), NULL, out, err, 10000), 0, err);
	broker_stop(&b);
}

/* The process group of @pid, from /proc. */
static pid_t pgid_of(pid_t pid)
{
	char path[64], buf[512], *p;
	int pgid = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (f && fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')')))
		sscanf(p + 2, "%*c %*d %d", &pgid);
	if (f)
		fclose(f);
	return pgid;
}

TEST(cli, supervisor_killed_kills_group, 20)
{
	static char out[OUT_MAX], err[OUT_MAX];
	struct broker_proc b;
	pid_t child, grandchild, sup;
	struct proc p;

	use_broker(&b);
	start_family(&p, ARGS("lock", "-child-exit-code", "svc", FAMILY), &child, &grandchild);
	/* The supervisor leads the group: killing it must not leave the
	 * child (death signal) or the grandchild (group kill) running. */
	sup = pgid_of(child);
	CHECK(sup > 0 && sup != child && sup != p.pid);
	kill(sup, SIGKILL);
	CHECK_EXIT(cli_finish(&p, out, err, 10000), 2, err);
	CHECK(WAIT_FOR(pid_gone(child) && pid_gone(grandchild), 5000));
	broker_stop(&b);
}

TEST(cli, leftovers_stopped_when_child_exits, 20)
{
	static char out[OUT_MAX], err[OUT_MAX];
	struct broker_proc b;
	pid_t left;

	use_broker(&b);
	/* The shell exits at once, leaving a background job in its group. */
	CHECK_EXIT(cli_run(ARGS("lock", "-kill-grace=10s", "svc", "sleep 300 & echo $!"), NULL, out,
			   err, 10000),
		   0, err);
	left = (pid_t)atoi(out);
	CHECK(left > 0);
	CHECK(pid_gone(left));
	broker_stop(&b);
}

/* ---- what the child gets ---- */

TEST(cli, pass_stdin, 15)
{
	static char out[OUT_MAX], err[OUT_MAX];
	struct broker_proc b;

	use_broker(&b);
	CHECK_EXIT(cli_run(ARGS("lock", "-pass-stdin", "k", "cat"), "hello\n", out, err, 10000), 0,
		   err);
	CHECK(!strcmp(out, "hello\n"));
	/* Without it the child reads /dev/null: cat ends at once. */
	CHECK_EXIT(cli_run(ARGS("lock", "k", "cat"), "hello\n", out, err, 10000), 0, err);
	CHECK(!strcmp(out, ""));
	broker_stop(&b);
}

TEST(cli, pass_stdin_from_a_terminal, 15)
{
	static char out[OUT_MAX], err[OUT_MAX];
	struct broker_proc b;
	char cmd[512];
	struct proc p;

	use_broker(&b);
	/* script(1) runs shmlock as the foreground of a new terminal: the
	 * child's group gets the terminal to read it, and gives it back. */
	snprintf(cmd, sizeof(cmd),
		 "'%s' lock -pass-stdin k 'read x; echo got $x'; "
		 "'%s' lock k 'read y || echo no-stdin'",
		 cli_bin(), cli_bin());
	spawn(&p, ARGS("script", "-qec", cmd, "/dev/null"));
	CHECK(write(p.in, "hello-tty\n", 10) == 10);
	CHECK_EXIT(cli_finish(&p, out, err, 10000), 0, err);
	CHECK_HAS(out, "got hello-tty");
	CHECK_HAS(out, "no-stdin");
	broker_stop(&b);
}

TEST(cli, token_grows_between_holders, 15)
{
	static char out[OUT_MAX], err[OUT_MAX];
	unsigned long long t1, t2;
	char s1[64], s2[64];
	struct broker_proc b;

	use_broker(&b);
	CHECK_EXIT(cli_run(ARGS("lock", "k", "echo $SHMLOCK_TOKEN $SHMLOCK_SESSION"), NULL, out,
			   err, 10000),
		   0, err);
	CHECK(sscanf(out, "%llu %63s", &t1, s1) == 2);
	CHECK_EXIT(cli_run(ARGS("lock", "k", "echo $SHMLOCK_TOKEN $SHMLOCK_SESSION"), NULL, out,
			   err, 10000),
		   0, err);
	CHECK(sscanf(out, "%llu %63s", &t2, s2) == 2);
	CHECK(t2 > t1);
	CHECK_EQ(strlen(s1), LOCAL_SESSION_ID_LEN);
	CHECK(strcmp(s1, s2) != 0);
	broker_stop(&b);
}

TEST(cli, value_is_what_leader_prints, 20)
{
	static char out[OUT_MAX], err[OUT_MAX];
	struct broker_proc b;
	struct proc p;
	struct child c;

	use_broker(&b);
	cli_start(&p, ARGS("lock", "-value=node-a:8080", "-pass-stdin", "svc/leader",
			   "echo ready; read x"));
	c = as_child(&p);
	child_expect(&c, "ready", 10000);
	CHECK_EXIT(cli_run(ARGS("leader", "svc/leader"), NULL, out, err, 5000), 0, err);
	CHECK(!strcmp(out, "node-a:8080\n"));
	CHECK_EXIT(cli_run(ARGS("leader", "-json", "svc/leader"), NULL, out, err, 5000), 0, err);
	CHECK_JQ(out, ".value == \"node-a:8080\" and .leader.pid > 0");
	CHECK(write(p.in, "\n", 1) == 1);
	CHECK_EXIT(cli_finish(&p, out, err, 10000), 0, err);
	CHECK_EXIT(cli_run(ARGS("leader", "svc/leader"), NULL, out, err, 5000), 1, err);
	CHECK_HAS(err, "has no leader");
	CHECK_EXIT(cli_run(ARGS("leader", "-json", "svc/leader"), NULL, out, err, 5000), 1, err);
	CHECK_JQ(out, ".leader == null");
	broker_stop(&b);
}

/* ---- leases, TTLs, loss ---- */

TEST(cli, lease_outlives_the_child, 20)
{
	static char out[OUT_MAX], err[OUT_MAX];
	struct broker_proc b;
	char cmd[512];

	use_broker(&b);
	/* The child runs three leases long, and checks it still holds at the
	 * end; a TTL on the session is renewed the same way. shmlock renews
	 * three times a period: with 1 s it may be held off the CPU for 600
	 * ms. (With 200 ms a stall of 130 ms lost the session: 1 run in the
	 * whole suite under a stall injector.) */
	snprintf(cmd, sizeof(cmd), "sleep 3; '%s' info -json svc", cli_bin());
	CHECK_EXIT(cli_run(ARGS("lock", "-lease=1s", "-ttl=1s", "svc", cmd), NULL, out, err, 15000),
		   0, err);
	CHECK_JQ(out, ".holder_count == 1 and .holders[0].lease_remaining_ms > 0 and "
		      ".holders[0].lease_remaining_ms <= 1000");
	broker_stop(&b);
}

TEST(cli, lost_lease_stops_child, 20)
{
	static char out[OUT_MAX], err[OUT_MAX];
	struct broker_proc b;
	local_session *obs;
	pid_t child, grandchild, holder;
	struct proc p;

	use_broker(&b);
	obs = open_session(&b, "observer", 0, 0);
	start_family(&p, ARGS("lock", "-lease=200ms", "-lock-delay=0", "svc", FAMILY), &child,
		     &grandchild);
	/* A stopped holder (the process of the session, a child of the
	 * shmlock started) cannot renew: the broker expires the lease. */
	holder = holder_pid_of(obs, "svc");
	CHECK(holder > 0 && holder != p.pid);
	kill(holder, SIGSTOP);
	CHECK(WAIT_FOR(holders_of(obs, "svc") == 0, 5000));
	kill(holder, SIGCONT);
	CHECK_EXIT(cli_finish(&p, out, err, 10000), 3, err);
	/* "its lease expired", or "released by an operator, or expired" when
	 * the main thread's renew was first to learn of the expiry. */
	CHECK_HAS(err, "expired");
	CHECK(pid_gone(child) && pid_gone(grandchild));
	broker_stop(&b);
}

TEST(cli, broker_restart_keeps_the_hold, 20)
{
	static char out[OUT_MAX], err[OUT_MAX];
	struct broker_proc b;
	struct proc p;
	struct child c;

	use_broker(&b);
	cli_start(&p, ARGS("lock", "-pass-stdin", "svc", "echo ready; read x; echo still-here"));
	c = as_child(&p);
	child_expect(&c, "ready", 10000);
	broker_signal_wait(&b, SIGTERM);
	broker_restart(&b);
	CHECK(write(p.in, "\n", 1) == 1);
	CHECK_EXIT(cli_finish(&p, out, err, 10000), 0, err);
	CHECK_HAS(out, "still-here");
	broker_stop(&b);
}

TEST(cli, kind_and_limit_conflicts, 20)
{
	static char out[OUT_MAX], err[OUT_MAX];
	struct broker_proc b;
	local_session *s;

	use_broker(&b);
	s = open_session(&b, "holder", 0, 0);
	CHECK_OK(local_lock(s, "a-lock", NULL, NULL));
	CHECK_OK(local_sem_acquire(s, "a-sem", 2, NULL, NULL));
	CHECK_EXIT(
		cli_run(ARGS("lock", "-n=2", "-try=1s", "a-lock", "true"), NULL, out, err, 10000),
		1, err);
	CHECK_HAS(err, "a-lock is a lock");
	CHECK_EXIT(cli_run(ARGS("lock", "-n=3", "-try=1s", "a-sem", "true"), NULL, out, err, 10000),
		   1, err);
	CHECK_HAS(err, "a-sem is a semaphore with limit 2, not 3");
	CHECK_EXIT(cli_run(ARGS("lock", "-try=1s", "a-sem", "true"), NULL, out, err, 10000), 1,
		   err);
	CHECK_HAS(err, "limit 2, not 1");
	broker_stop(&b);
}

/* ---- inspection and administration ---- */

/*
 * Fencing tokens exceed 2^53, which jq 1.6 and JavaScript round: every -json
 * output gives them as strings of decimal digits, as SHMLOCK_TOKEN. A value
 * that is not UTF-8 is percent-encoded with value_encoding, never null.
 */
TEST(cli, json_is_exact, 30)
{
	static char out[OUT_MAX], err[OUT_MAX];
	LOCAL_OPTS(local_acquire_opts, v, .timeout_ms = -1, .value = "\xff\xfe:1\"x",
		   .value_len = 6);
	struct broker_proc b;
	local_session *s;
	uint64_t token = 0;
	char want[64], filter[256];

	use_broker(&b);
	s = open_session(&b, "exact", 0, 0);
	CHECK_OK(local_lock(s, "svc/exact", &v, &token));
	snprintf(want, sizeof(want), "\"%llu\"", (unsigned long long)token);
	CHECK_EXIT(cli_run(ARGS("info", "-json", "svc/exact"), NULL, out, err, 5000), 0, err);
	/* The digits as text: a number would have been rounded by now. */
	CHECK_HAS(out, want);
	snprintf(filter, sizeof(filter),
		 ".token == %s and .holders[0].token == %s and "
		 ".value == \"%%FF%%FE%%3A1%%22x\" and .value_encoding == \"percent\"",
		 want, want);
	CHECK_JQ(out, filter);
	CHECK_EXIT(cli_run(ARGS("keys", "-json", "svc/exact"), NULL, out, err, 5000), 0, err);
	snprintf(filter, sizeof(filter), ".[0].token == %s and .[0].holders[0].token == %s", want,
		 want);
	CHECK_JQ(out, filter);
	CHECK_EXIT(cli_run(ARGS("leader", "-json", "svc/exact"), NULL, out, err, 5000), 0, err);
	snprintf(filter, sizeof(filter),
		 ".leader.token == %s and .value == \"%%FF%%FE%%3A1%%22x\" and "
		 ".value_encoding == \"percent\"",
		 want);
	CHECK_JQ(out, filter);
	CHECK_EXIT(
		cli_run(ARGS("watch", "-json", "-timeout=50ms", "svc/exact"), NULL, out, err, 5000),
		0, err);
	snprintf(filter, sizeof(filter), ".token == %s and .value_encoding == \"percent\"", want);
	CHECK_JQ(out, filter);
	/* A free key: the token is a string of zeros, not a number. */
	CHECK_EXIT(cli_run(ARGS("info", "-json", "no/such/key"), NULL, out, err, 5000), 0, err);
	CHECK_JQ(out, ".token == \"0\" and .value == \"\"");
	/* The text of watch escapes the quote inside the value. */
	CHECK_EXIT(cli_run(ARGS("watch", "-timeout=50ms", "svc/exact"), NULL, out, err, 5000), 0,
		   err);
	CHECK_HAS(out, "value=\"\\xff\\xfe:1\\\"x\"");
	broker_stop(&b);
}

TEST(cli, inspection_json_parses, 30)
{
	static char out[OUT_MAX], err[OUT_MAX];
	struct broker_proc b;
	local_session *s;
	LOCAL_OPTS(local_acquire_opts, v, .timeout_ms = -1, .value = "10.0.0.1:80",
		   .value_len = 11);

	use_broker(&b);
	s = open_session(&b, "inspected", 0, 0);
	CHECK_OK(local_lock(s, "svc/leader", &v, NULL));
	CHECK_OK(local_sem_acquire(s, "svc/pool", 4, NULL, NULL));
	CHECK_EXIT(cli_run(ARGS("status", "-json"), NULL, out, err, 5000), 0, err);
	CHECK_JQ(out, ".sessions.used >= 1 and .keys.used >= 2 and .holds.used >= 2 and "
		      ".counters.grants >= 2 and .broker_pid > 0");
	CHECK_EXIT(cli_run(ARGS("keys", "-json"), NULL, out, err, 5000), 0, err);
	CHECK_JQ(out, "map(select(.key == \"svc/pool\"))[0] | .kind == \"semaphore\" and "
		      ".limit == 4 and .holders[0].name == \"inspected\"");
	CHECK_EXIT(cli_run(ARGS("keys", "-json", "svc/l"), NULL, out, err, 5000), 0, err);
	CHECK_JQ(out, "length == 1 and .[0].key == \"svc/leader\"");
	CHECK_EXIT(cli_run(ARGS("info", "svc/leader", "-json"), NULL, out, err, 5000), 0, err);
	CHECK_JQ(out, ".kind == \"lock\" and .value == \"10.0.0.1:80\" and .holder_count == 1");
	CHECK_EXIT(cli_run(ARGS("info", "-json", "no/such/key"), NULL, out, err, 5000), 0, err);
	CHECK_JQ(out, ".kind == \"none\"");
	CHECK_EXIT(cli_run(ARGS("leader", "-json", "svc/leader"), NULL, out, err, 5000), 0, err);
	CHECK_JQ(out, ".value == \"10.0.0.1:80\" and .leader.name == \"inspected\"");
	CHECK_EXIT(cli_run(ARGS("sessions", "-json"), NULL, out, err, 5000), 0, err);
	CHECK_JQ(out, "map(select(.name == \"inspected\"))[0] | .holds == 2 and .pid > 0");
	CHECK_EXIT(cli_run(ARGS("watch", "-json", "-timeout=100ms", "svc/leader"), NULL, out, err,
			   5000),
		   0, err);
	CHECK_JQ(out, ".key == \"svc/leader\" and .holder.name == \"inspected\"");
	/* The human forms: aligned tables with their headers. */
	CHECK_EXIT(cli_run(ARGS("keys"), NULL, out, err, 5000), 0, err);
	CHECK_HAS(out, "KEY");
	CHECK_HAS(out, "svc/pool    semaphore  4");
	CHECK_EXIT(cli_run(ARGS("sessions"), NULL, out, err, 5000), 0, err);
	CHECK_HAS(out, "inspected");
	CHECK_EXIT(cli_run(ARGS("status"), NULL, out, err, 5000), 0, err);
	CHECK_HAS(out, "sessions");
	CHECK_EXIT(cli_run(ARGS("info", "svc/leader"), NULL, out, err, 5000), 0, err);
	CHECK_HAS(out, "10.0.0.1:80");
	/* -socket instead of the environment. */
	unsetenv("SHMLOCK_SOCKET");
	CHECK_EXIT(cli_run(ARGS("status", "-socket", b.sock), NULL, out, err, 5000), 0, err);
	broker_stop(&b);
}

/* ---- hostile names ---- */

#define EVIL_KEY "evil\x1b[2J\nFORGED-KEY  lock  1"
#define EVIL_NAME                                   \
	"name\x1b]0;pwned\x07\nFORGED-NAME\xc2\x9b" \
	"31m"
#define EVIL_VALUE "v\x1b[31m\r\nFORGED-VALUE\"\\"
#define NOT_UTF8_KEY "bad\xff\xfe/key"

/* Human output must carry no raw control character of a name: no ESC, no
 * C1 CSI (U+009B), no BEL, and no line a name started. */
static void check_clean(const char *what, const char *text)
{
	const char *p;

	if (strchr(text, '\x1b') || strchr(text, '\x07') || strchr(text, '\r') ||
	    strstr(text, "\xc2\x9b"))
		FAIL_AT("%s: a raw control character in: %s", what, text);
	for (p = text; (p = strstr(p, "FORGED")); p++)
		if (p == text || p[-1] == '\n')
			FAIL_AT("%s: a forged line in: %s", what, text);
}

TEST(cli, hostile_names_are_escaped, 30)
{
	static char out[OUT_MAX], err[OUT_MAX];
	LOCAL_OPTS(local_acquire_opts, v, .timeout_ms = -1, .value = EVIL_VALUE,
		   .value_len = sizeof(EVIL_VALUE) - 1);
	struct broker_proc b;
	local_session *s;

	use_broker(&b);
	s = open_session(&b, EVIL_NAME, 0, 0);
	CHECK_OK(local_lock(s, EVIL_KEY, &v, NULL));
	CHECK_OK(local_lock(s, NOT_UTF8_KEY, NULL, NULL));

	CHECK_EXIT(cli_run(ARGS("keys"), NULL, out, err, 5000), 0, err);
	check_clean("keys", out);
	CHECK_HAS(out, "evil\\x1b[2J\\nFORGED-KEY");
	CHECK_HAS(out, "name\\x1b]0;pwned\\x07\\nFORGED-NAME\\xc2\\x9b31m");
	CHECK_HAS(out, "bad\\xff\\xfe/key");
	CHECK_EXIT(cli_run(ARGS("keys", "-json"), NULL, out, err, 5000), 0, err);
	CHECK_JQ(out, "map(select(.key == \"evil\\u001b[2J\\nFORGED-KEY  lock  1\"))[0] | "
		      ".holders[0].name == \"name\\u001b]0;pwned\\u0007\\nFORGED-NAME\\u009b31m\"");
	CHECK_JQ(out, "map(select(.key_encoding == \"percent\"))[0].key == \"bad%FF%FE%2Fkey\"");

	CHECK_EXIT(cli_run(ARGS("info", EVIL_KEY), NULL, out, err, 5000), 0, err);
	check_clean("info", out);
	CHECK_HAS(out, "v\\x1b[31m\\r\\nFORGED-VALUE\"\\\\");
	CHECK_EXIT(cli_run(ARGS("info", "-json", EVIL_KEY), NULL, out, err, 5000), 0, err);
	CHECK_JQ(out, ".value == \"v\\u001b[31m\\r\\nFORGED-VALUE\\\"\\\\\" and ("
		      ".holders[0].name | startswith(\"name\\u001b\"))");
	CHECK_EXIT(cli_run(ARGS("info", "-json", NOT_UTF8_KEY), NULL, out, err, 5000), 0, err);
	CHECK_JQ(out, ".key == \"bad%FF%FE%2Fkey\" and .key_encoding == \"percent\" and "
		      ".holder_count == 1");

	CHECK_EXIT(cli_run(ARGS("sessions"), NULL, out, err, 5000), 0, err);
	check_clean("sessions", out);
	CHECK_HAS(out, "FORGED-NAME");
	CHECK_EXIT(cli_run(ARGS("sessions", "-json"), NULL, out, err, 5000), 0, err);
	CHECK_JQ(out, "map(select(.name | startswith(\"name\\u001b]0;pwned\"))) | length == 1");

	CHECK_EXIT(cli_run(ARGS("leader", EVIL_KEY), NULL, out, err, 5000), 0, err);
	check_clean("leader", out);
	CHECK_EXIT(cli_run(ARGS("leader", "-json", EVIL_KEY), NULL, out, err, 5000), 0, err);
	CHECK_JQ(out, ".key == \"evil\\u001b[2J\\nFORGED-KEY  lock  1\" and "
		      "(.leader.name | endswith(\"FORGED-NAME\\u009b31m\"))");

	CHECK_EXIT(cli_run(ARGS("watch", "-timeout=50ms", EVIL_KEY), NULL, out, err, 5000), 0, err);
	check_clean("watch", out);
	/* A quote in a name or value cannot close its field either. */
	CHECK_HAS(out, "value=\"v\\x1b[31m\\r\\nFORGED-VALUE\\\"\\\\\"\n");
	CHECK_EXIT(cli_run(ARGS("watch", "-json", "-timeout=50ms", NOT_UTF8_KEY), NULL, out, err,
			   5000),
		   0, err);
	CHECK_JQ(out, ".key_encoding == \"percent\" and (.holder.name | test(\"FORGED\"))");

	/* Error messages echo the key escaped. */
	CHECK_EXIT(cli_run(ARGS("release", "-force", "gone\x1b[2J\nFORGED-ERROR"), NULL, out, err,
			   5000),
		   1, err);
	check_clean("release error", err);
	CHECK_HAS(err, "gone\\x1b[2J\\nFORGED-ERROR is not held");
	CHECK_EXIT(cli_run(ARGS("lock", "-try=100ms", EVIL_KEY, "true"), NULL, out, err, 5000), 1,
		   err);
	check_clean("lock timeout", err);
	CHECK_HAS(err, "waiting for evil\\x1b[2J\\nFORGED-KEY");
	CHECK_EXIT(cli_run(ARGS("bogus\x1b[2J\nFORGED-CMD"), NULL, out, err, 5000), 64, err);
	check_clean("unknown command", err);
	CHECK_EXIT(cli_run(ARGS("lock", "-verbose", "-name", EVIL_NAME, "k\x1b[1m", "true"), NULL,
			   out, err, 10000),
		   0, err);
	check_clean("lock -verbose", err);
	CHECK_HAS(err, "acquired k\\x1b[1m");
	local_session_close(s);
	broker_stop(&b);
}

TEST(cli, watch_prints_each_change, 20)
{
	static char out[OUT_MAX];
	struct broker_proc b;
	local_session *s;
	struct proc p;
	struct child c;
	char line[4096];

	use_broker(&b);
	s = open_session(&b, "changer", 0, 0);
	cli_start(&p, ARGS("watch", "-json", "w/key"));
	c = as_child(&p);
	CHECK_OK(child_read(&c, line, sizeof(line), 10000));
	CHECK_JQ(line, ".holder_count == 0");
	CHECK_OK(local_lock(s, "w/key",
			    &(struct local_acquire_opts){ .sz = sizeof(struct local_acquire_opts),
							  .timeout_ms = -1,
							  .value = "v1",
							  .value_len = 2 },
			    NULL));
	CHECK_OK(child_read(&c, line, sizeof(line), 5000));
	CHECK_JQ(line, ".holder_count == 1 and .value == \"v1\" and .holder.name == \"changer\"");
	CHECK_OK(local_release(s, "w/key"));
	CHECK_OK(child_read(&c, line, sizeof(line), 5000));
	CHECK_JQ(line, ".holder_count == 0");
	kill(p.pid, SIGTERM);
	cli_finish(&p, out, NULL, 5000);
	broker_stop(&b);
}

TEST(cli, admin_errors, 25)
{
	static char out[OUT_MAX], err[OUT_MAX];
	struct broker_proc b;

	use_broker(&b);
	CHECK_EXIT(cli_run(ARGS("release", "k"), NULL, out, err, 5000), 64, err);
	CHECK_HAS(err, "needs -force");
	CHECK_EXIT(cli_run(ARGS("release", "-force", "k"), NULL, out, err, 5000), 1, err);
	CHECK_HAS(err, "k is not held");
	CHECK_EXIT(cli_run(ARGS("release", "-force", "k", "-session", "xyz"), NULL, out, err, 5000),
		   64, err);
	CHECK_HAS(err, "not a session id");
	CHECK_EXIT(cli_run(ARGS("session", "destroy", "nope"), NULL, out, err, 5000), 64, err);
	CHECK_HAS(err, "not a session id");
	CHECK_EXIT(cli_run(ARGS("session", "kill", "x"), NULL, out, err, 5000), 64, err);
	CHECK_HAS(err, "unknown subcommand");
	CHECK_EXIT(cli_run(ARGS("status", "extra"), NULL, out, err, 5000), 64, err);
	broker_stop(&b);
	/* No broker: a clear error once liblocal stops waiting for one (5 s). */
	CHECK_EXIT(cli_run(ARGS("status"), NULL, out, err, 15000), 69, err);
	CHECK_HAS(err, "sock: missing"); /* status opens no session */
}

/* ---- documentation ---- */

/* An option as roff spells it: every dash escaped (\-kill\-grace). */
static void roff_option(const char *opt, char *out, size_t size)
{
	size_t n = 0;

	for (; *opt && n + 3 < size; opt++) {
		if (*opt == '-')
			out[n++] = '\\';
		out[n++] = *opt;
	}
	out[n] = '\0';
}

TEST(cli, help_matches_man_page, 15)
{
	static const char *const cmds[] = { "lock",    "status",  "keys",     "info",
					    "leader",  "watch",	  "sessions", "release",
					    "session", "version", "help",     NULL };
	static char out[OUT_MAX], err[OUT_MAX], man[4 * OUT_MAX];
	const char *path = source_path("docs/shmlock.1");
	FILE *f = fopen(path, "r");
	size_t n;
	int i;

	CHECK(f);
	n = fread(man, 1, sizeof(man) - 1, f);
	fclose(f);
	man[n] = '\0';
	for (i = 0; cmds[i]; i++) {
		char *line, *save = NULL, want[160];

		snprintf(want, sizeof(want), ".SS \"shmlock %s", cmds[i]);
		if (!strstr(man, want))
			FAIL_AT("the man page has no section for %s", cmds[i]);
		CHECK_EXIT(cli_run(ARGS("help", cmds[i]), NULL, out, err, 5000), 0, err);
		/* Every option the help lists ("  -name ...") is in the page. */
		for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
			char opt[64];
			size_t k = 0;

			if (strncmp(line, "  -", 3))
				continue;
			for (line += 2; (*line >= 'a' && *line <= 'z') || *line == '-'; line++)
				if (k < sizeof(opt) - 1)
					opt[k++] = *line;
			opt[k] = '\0';
			roff_option(opt, want, sizeof(want));
			if (!strstr(man, want))
				FAIL_AT("option %s of %s is not in the man page (%s)", opt, cmds[i],
					want);
		}
	}
	CHECK_HAS(man, ".SH EXIT STATUS");
	CHECK_HAS(man, "SHMLOCK_SOCKET");
	CHECK_HAS(man, "SHMLOCK_TOKEN");
}

TEST(cli, bash_completion, 15)
{
	static char out[OUT_MAX], err[OUT_MAX];
	const char *file = source_path("cli/shmlock.bash-completion");
	char cmd[1024];
	FILE *f;
	size_t n;

	snprintf(cmd, sizeof(cmd),
		 "bash -c 'source \"%s\"; "
		 "COMP_WORDS=(shmlock lo); COMP_CWORD=1; _shmlock; echo \"1:${COMPREPLY[*]}\"; "
		 "COMP_WORDS=(shmlock lock -child); COMP_CWORD=2; _shmlock; "
		 "echo \"2:${COMPREPLY[*]}\"; "
		 "COMP_WORDS=(shmlock session \"\"); COMP_CWORD=2; _shmlock; "
		 "echo \"3:${COMPREPLY[*]}\"; "
		 "COMP_WORDS=(shmlock keys -j); COMP_CWORD=2; _shmlock; "
		 "echo \"4:${COMPREPLY[*]}\"; complete -p shmlock' 2>&1",
		 file);
	f = popen(cmd, "r");
	CHECK(f);
	n = fread(out, 1, sizeof(out) - 1, f);
	out[n] = '\0';
	CHECK_EQ(pclose(f), 0);
	CHECK_HAS(out, "1:lock\n");
	CHECK_HAS(out, "2:-child-exit-code");
	CHECK_HAS(out, "3:destroy\n");
	CHECK_HAS(out, "4:-json\n");
	CHECK_HAS(out, "complete -F _shmlock shmlock");
	(void)err;
}
