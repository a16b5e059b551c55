// SPDX-License-Identifier: MIT
/*
 * Clients in their own pid and mount namespaces (what `unshare -p -f
 * --mount-proc` makes, and a container sharing the broker's socket): they
 * must work exactly as on the host. Crash release, lock words and waits;
 * and the case where a client's pid in its namespace happens to equal the
 * one the broker sees, which must not make it judge the host's pids in its
 * own namespace (where they name nobody, or someone else).
 *
 * The tests need root (namespaces, mounting /proc, choosing a pid).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker_fixture.h"
#include "client.h"
#include "harness.h"
#include "invariants.h"
#include "lockword.h"
#include "word_fixture.h"

static const char *const small_caps[] = {
	"--max-keys", "64", "--max-holds", "16", "--max-waiters", "16", "--max-sessions", "16", NULL
};

/* ---- namespaces ---------------------------------------------------------- */

/* In a process that is in a new pid namespace: a mount namespace of its own
 * with that pid namespace's /proc, as `unshare --mount-proc` does. */
static void own_proc(void)
{
	if (unshare(CLONE_NEWNS) || mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
	    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL))
		_exit(90);
}

struct ns_job {
	void (*fn)(void *arg, int in, int out);
	void *arg;
	bool equal_pid; /* the client's pid in its namespace = the broker's view */
};

/* clone3()'s arguments up to set_tid (CLONE_ARGS_SIZE_VER1): glibc has no
 * wrapper, and <linux/sched.h> clashes with <sched.h>. */
struct clone3_args {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
	uint64_t set_tid, set_tid_size;
};

/* fork(), with pid @pid both in our children's pid namespace (one level
 * down) and in ours: -errno (EEXIST: taken in one of them). */
static pid_t fork_as(pid_t pid)
{
	pid_t tids[2] = { pid, pid }; /* innermost first */
	struct clone3_args a = { .exit_signal = SIGCHLD,
				 .set_tid = (uintptr_t)tids,
				 .set_tid_size = 2 };
	long r = syscall(SYS_clone3, &a, sizeof(a));

	return r < 0 ? -errno : (pid_t)r;
}

static pid_t host_last_pid(void)
{
	char buf[32] = "";
	int fd = open("/proc/sys/kernel/ns_last_pid", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;

	if (fd >= 0)
		close(fd);
	return n > 0 ? (pid_t)atoi(buf) : 300;
}

/*
 * Runs in the harness child (host namespaces): make a pid namespace, keep
 * its init alive, and run the job's client in it. Reports "host PID" (the
 * client's pid as the broker will see it) before the client's own lines.
 * For equal_pid, the client's pid in its namespace is made equal to its
 * host pid: clone3() with set_tid picks the same pid at both levels.
 */
static void in_pid_ns(void *arg, int in, int out)
{
	struct ns_job *job = arg;
	pid_t init, client = -1, want;
	int gate[2], st, tries;

	if (pipe(gate) || unshare(CLONE_NEWPID))
		_exit(91);
	init = fork();
	if (init == 0) {
		/* pid 1 there, with its own /proc: keeps the namespace alive. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		own_proc();
		for (;;)
			pause();
	}
	/* Above the pids in use now, and well below pid_max (32768 at
	 * least): pids wrap to 300 after it. */
	want = host_last_pid() + 1000;
	if (want > 30000)
		want = 1000;
	for (tries = 0; tries < 100; tries++) {
		fflush(NULL);
		client = job->equal_pid ? fork_as(want + 17 * tries) : fork();
		if (client != -EEXIST)
			break;
	}
	if (client == 0) {
		char go;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		/* Our "host" line goes first on the shared pipe. */
		if (read(gate[0], &go, 1) != 1)
			_exit(96);
		own_proc();
		job->fn(job->arg, in, out);
		_exit(0);
	}
	if (client < 0)
		_exit(95);
	say(out, "host %d", (int)client);
	if (write(gate[1], "g", 1) != 1)
		_exit(97);
	waitpid(client, &st, 0);
	kill(init, SIGKILL);
	_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
}

/* Start @job; returns the client's host pid. */
static pid_t ns_spawn(struct child *c, struct ns_job *job)
{
	char line[64];
	int pid = 0;

	child_spawn(c, in_pid_ns, job);
	CHECK_OK(child_read(c, line, sizeof(line), 30000));
	CHECK(sscanf(line, "host %d", &pid) == 1 && pid > 0);
	return (pid_t)pid;
}

/* ---- the clients in the namespace --------------------------------------- */

/* Locks c/k twice on command: first briefly (a live owner sits in its word:
 * -ETIMEDOUT), then patiently (the owner died: granted). Reports each
 * result, and whether its pid here is the one the broker sees. */
static void equal_pid_client(void *arg, int in, int out)
{
	LOCAL_OPTS(local_acquire_opts, brief, .timeout_ms = 1500);
	LOCAL_OPTS(local_acquire_opts, patient, .timeout_ms = 20000);
	local_session *s;
	char line[32];

	s = open_session(arg, "contained", 0, 0);
	say(out, "equal %d",
	    s->seg->sessions[s->who.slot].creator_pid == getpid() && getpid() != 1);
	hear(in, line, sizeof(line));
	say(out, "brief %d", local_lock(s, "c/k", &brief, NULL));
	hear(in, line, sizeof(line));
	say(out, "patient %d", local_lock(s, "c/k", &patient, NULL));
	local_release(s, "c/k");
	local_session_close(s);
}

TEST(containers, an_equal_pid_client_waits_for_a_live_owner, 120)
{
	struct ns_job job = { equal_pid_client, NULL, true };
	struct broker_proc b;
	struct child victim, c;
	local_session *s;
	char line[64];
	pid_t vpid;

	broker_start(&b, small_caps);
	job.arg = &b;
	s = open_session(&b, "host", 0, 0);
	make_key(s, "c/k");
	vpid = sitter_start(&victim, &b);
	/* As if it had stopped inside the key's critical section. */
	stall_key(entry_of(s, "c/k"), (uint32_t)vpid);

	ns_spawn(&c, &job);
	child_expect(&c, "equal 1", 20000);
	child_send(&c, "go");
	CHECK_OK(child_read(&c, line, sizeof(line), 20000));
	if (strcmp(line, "brief -110"))
		FAIL_AT("the contained client took a live owner's key word: %s", line);
	CHECK_EQ(LW_OWNER(atomic_load(&entry_of(s, "c/k")->lock)), (uint32_t)vpid);
	/* The owner dies: the broker breaks its word for everyone. */
	child_kill(&victim);
	child_send(&c, "go");
	child_expect(&c, "patient 0", 30000);
	CHECK_EQ(child_wait(&c, 10000), 0);
	CHECK_EQ(segment_violations(s), 0);
	CHECK_OK(local_session_close(s));
	broker_stop_clean(&b);
}

/* Holds c/h, then dies inside c/w's lock word (its word names it, as the
 * broker sees it: what dying in the critical section leaves). */
static void dies_holding(void *arg, int in, int out)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 10000);
	local_session *s = open_session(arg, "contained", 0, 0);
	char line[16];

	say(out, "self %u judge %d", s->seg->lock_self, s->seg->lock_judge != 0);
	say(out, "lock %d", local_lock(s, "c/h", &o, NULL));
	hear(in, line, sizeof(line));
	stall_key(entry_of(s, "c/w"), s->seg->lock_self);
	raise(SIGKILL);
}

TEST(containers, a_contained_client_s_crash_releases_its_holds_and_words, 90)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 20000);
	struct ns_job job = { dies_holding, NULL, false };
	struct broker_proc b;
	local_session *s;
	struct child c;
	char line[64];
	unsigned self;
	int judge;
	pid_t host;

	broker_start(&b, small_caps);
	job.arg = &b;
	s = open_session(&b, "host", 0, 0);
	make_key(s, "c/w");
	host = ns_spawn(&c, &job);
	CHECK_OK(child_read(&c, line, sizeof(line), 20000));
	CHECK(sscanf(line, "self %u judge %d", &self, &judge) == 2);
	/* It names itself as the broker sees it, and judges no pid itself. */
	CHECK_EQ(self, (unsigned)host);
	CHECK_EQ(judge, 0);
	child_expect(&c, "lock 0", 20000);
	child_send(&c, "die");
	child_wait(&c, 20000);
	CHECK_OK(local_lock(s, "c/h", &o, NULL));
	CHECK_OK(local_lock(s, "c/w", &o, NULL));
	CHECK_OK(local_release(s, "c/h"));
	CHECK_OK(local_release(s, "c/w"));
	CHECK_EQ(segment_violations(s), 0);
	CHECK_OK(local_session_close(s));
	broker_stop_clean(&b);
}

/* Waits for c/q (the host holds it), holds it, and lets the host wait. */
static void waits_then_holds(void *arg, int in, int out)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 30000);
	local_session *s = open_session(arg, "contained", 0, 0);
	char line[16];

	say(out, "waiting");
	say(out, "lock %d", local_lock(s, "c/q", &o, NULL));
	hear(in, line, sizeof(line));
	say(out, "release %d", local_release(s, "c/q"));
	local_session_close(s);
}

TEST(containers, waits_cross_the_namespace_both_ways, 90)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 30000);
	LOCAL_OPTS(local_acquire_opts, brief, .timeout_ms = 200);
	struct ns_job job = { waits_then_holds, NULL, false };
	struct broker_proc b;
	local_session *s;
	struct child c;

	broker_start(&b, small_caps);
	job.arg = &b;
	s = open_session(&b, "host", 0, 0);
	CHECK_OK(local_lock(s, "c/q", &o, NULL));
	ns_spawn(&c, &job);
	child_expect(&c, "waiting", 20000);
	/* Queued behind us (its request is a node of the key's queue). */
	CHECK(WAIT_FOR(entry_of(s, "c/q")->waiters == 1, 20000));
	CHECK_OK(local_release(s, "c/q"));
	child_expect(&c, "lock 0", 20000);
	CHECK_RC(local_lock(s, "c/q", &brief, NULL), -ETIMEDOUT);
	child_send(&c, "go");
	child_expect(&c, "release 0", 20000);
	CHECK_OK(local_lock(s, "c/q", &o, NULL));
	CHECK_OK(local_release(s, "c/q"));
	CHECK_EQ(child_wait(&c, 10000), 0);
	CHECK_EQ(segment_violations(s), 0);
	CHECK_OK(local_session_close(s));
	broker_stop_clean(&b);
}

/* The CLI under `unshare -p -f --mount-proc`, killed while it holds: the
 * broker releases the hold as for any client. */
TEST(containers, shmlock_lock_under_unshare_is_released_when_killed, 90)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 20000);
	const char *cli = getenv("SHMLOCK_CLI_BIN");
	struct broker_proc b;
	local_session *s;
	struct child c;
	int out[2];

	if (!cli)
		FAIL_AT("SHMLOCK_CLI_BIN is not set (run through 'make test')");
	broker_start(&b, small_caps);
	s = open_session(&b, "host", 0, 0);
	CHECK_OK(pipe2(out, O_CLOEXEC));
	fflush(NULL);
	c.pid = fork();
	CHECK(c.pid >= 0);
	if (c.pid == 0) {
		dup2(out[1], 1);
		execlp("unshare", "unshare", "-p", "-f", "--kill-child", "--mount-proc", cli,
		       "lock", "-socket", b.sock, "-lock-delay=0s", "c/cli", "echo held; sleep 60",
		       NULL);
		_exit(127);
	}
	close(out[1]);
	c.rd = out[0];
	c.wr = -1;
	child_expect(&c, "held", 20000);
	kill(c.pid, SIGKILL); /* --kill-child: the namespace goes with it */
	pid_wait(c.pid, 10000);
	close(c.rd);
	CHECK_OK(local_lock(s, "c/cli", &o, NULL));
	CHECK_OK(local_release(s, "c/cli"));
	CHECK_EQ(segment_violations(s), 0);
	CHECK_OK(local_session_close(s));
	broker_stop_clean(&b);
}
