// SPDX-License-Identifier: MIT
/*
 * `shmlock lock` killed, or starved of CPU, while the next holder waits:
 * the next holder's command must never start while anything the old child
 * started still runs, a child that escaped its process group with setsid()
 * included.
 *
 * The "child" of every test below is a shell that starts a setsid()
 * grandchild and then becomes `sleep`; both append their pids to a file.
 * The next holder's command is a shell that, the moment it starts, looks up
 * each of those pids in /proc and records any that still runs: it judges
 * at the only instant that matters, without the test racing it.
 *
 * Starvation is simulated, not hoped for: the test SIGSTOPs the old
 * wrapper's own processes (everything between the shmlock the user started
 * and the child) just before SIGKILLing that shmlock, so they get no CPU
 * for as long as the next holder might take to get in: until whatever could
 * let it in has acted (starve_window()), not for a fixed time.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "broker_fixture.h"
#include "harness.h"

#define MAX_PROCS 64

static const char *cli_bin(void)
{
	const char *bin = getenv("SHMLOCK_CLI_BIN");

	if (!bin)
		FAIL_AT("SHMLOCK_CLI_BIN is not set (run through 'make test')");
	return bin;
}

static const char *scratch_dir(void)
{
	static char dir[64];

	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/tmp/shmlock-test-%d-wrapXXXXXX", (int)getpid());
		if (!mkdtemp(dir))
			FAIL_AT("mkdtemp: %s", strerror(errno));
	}
	return dir;
}

/* A file of this test's scratch directory, for round @round. */
static const char *scratch(const char *name, int round)
{
	static char paths[8][160];
	static int next;
	char *p = paths[next++ % 8];

	snprintf(p, 160, "%s/%s.%d", scratch_dir(), name, round);
	return p;
}

static bool exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

static size_t read_file(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY);
	ssize_t n = fd >= 0 ? read(fd, buf, size - 1) : 0;

	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = '\0';
	return n > 0 ? (size_t)n : 0;
}

/* Start shmlock with @args, stdin from @in_fd (-1: /dev/null), stdout and
 * stderr appended to @log, or stderr to @err_fd if it is not -1. */
static pid_t cli_spawn_err(const char *const *args, int in_fd, const char *log, int err_fd)
{
	const char *argv[32];
	pid_t pid;
	int n = 0;

	argv[n++] = cli_bin();
	while (*args && n < 31)
		argv[n++] = *args++;
	argv[n] = NULL;
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		FAIL_AT("fork: %s", strerror(errno));
	if (pid == 0) {
		int out = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		int in = in_fd >= 0 ? in_fd : open("/dev/null", O_RDONLY);

		if (out < 0 || in < 0)
			_exit(127);
		dup2(in, 0);
		dup2(out, 1);
		dup2(err_fd >= 0 ? err_fd : out, 2);
		/* The runner ignores SIGPIPE; a user's shell does not. */
		signal(SIGPIPE, SIG_DFL);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	return pid;
}

static pid_t cli_spawn(const char *const *args, int in_fd, const char *log)
{
	return cli_spawn_err(args, in_fd, log, -1);
}

/* ---- /proc ---- */

struct pstat {
	pid_t pid, ppid, pgid;
	char state;
	char comm[32];
};

static bool pstat_of(pid_t pid, struct pstat *ps)
{
	char path[64], buf[512], *p, *q;
	int ppid, pgid;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (!read_file(path, buf, sizeof(buf)))
		return false;
	p = strchr(buf, '(');
	q = strrchr(buf, ')');
	if (!p || !q || q < p || sscanf(q + 2, "%c %d %d", &ps->state, &ppid, &pgid) != 3)
		return false;
	snprintf(ps->comm, sizeof(ps->comm), "%.*s", (int)(q - p - 1), p + 1);
	ps->pid = pid;
	ps->ppid = ppid;
	ps->pgid = pgid;
	return true;
}

/* Gone: no longer exists, or a zombie nobody reaped yet (it runs no code). */
static bool pid_gone(pid_t pid)
{
	struct pstat ps;

	return !pstat_of(pid, &ps) || ps.state == 'Z' || ps.state == 'X';
}

/* Every live descendant of @root (not @root itself); returns how many. */
static size_t descendants(pid_t root, pid_t *out, size_t max)
{
	static struct pstat all[4096];
	size_t n = 0, k = 0, i, j;
	struct dirent *d;
	DIR *dir = opendir("/proc");

	if (!dir)
		FAIL_AT("opendir /proc: %s", strerror(errno));
	while ((d = readdir(dir)) && n < sizeof(all) / sizeof(all[0])) {
		pid_t pid = (pid_t)atoi(d->d_name);

		if (pid > 0 && pstat_of(pid, &all[n]))
			n++;
	}
	closedir(dir);
	/* Breadth first: out[] grows while we walk it. */
	for (j = 0;; j++) {
		pid_t parent = j ? out[j - 1] : root;

		for (i = 0; i < n && k < max; i++)
			if (all[i].ppid == parent && all[i].state != 'Z')
				out[k++] = all[i].pid;
		if (j >= k)
			break;
	}
	return k;
}

/* ---- the family ---- */

/* The child: a setsid() grandchild, then itself, append their pids to
 * PIDS and sleep. The grandchild ignores SIGTERM when @stubborn. */
static void family_cmd(char *buf, size_t size, const char *pids, bool stubborn, bool wait_stdin)
{
	snprintf(buf, size,
		 "setsid sh -c '%s echo esc $$ >> %s; exec sleep 300' & "
		 "echo main $$ >> %s; %s",
		 stubborn ? "trap \"\" TERM;" : "", pids, pids,
		 wait_stdin ? "read x; exit 0" : "exec sleep 300");
}

/* The next holder's command: record every pid of PIDS that still runs a
 * `sleep`, then say it started. */
static void judge_cmd(char *buf, size_t size, const char *pids, const char *viol,
		      const char *started)
{
	snprintf(buf, size,
		 "for p in $(cat %s); do case $p in *[!0-9]*) continue;; esac; "
		 "[ -e /proc/$p/stat ] || continue; "
		 "read -r s 2>/dev/null < /proc/$p/stat || continue; "
		 "case \"${s##*) }\" in Z*|X*) continue;; esac; "
		 "case \"$s\" in *'(sleep)'*) echo \"still running: ${s%%)*})\" >> %s;; esac; "
		 "done; touch %s",
		 pids, viol, started);
}

/* The family's pids: [0] the child, [1] the setsid() grandchild, once the
 * grandchild (and the child, when it does not wait on stdin) runs `sleep`. */
static bool family_read(const char *pids, pid_t out[2])
{
	char buf[256], *p;

	read_file(pids, buf, sizeof(buf));
	p = strstr(buf, "main ");
	out[0] = p ? (pid_t)atoi(p + 5) : 0;
	p = strstr(buf, "esc ");
	out[1] = p ? (pid_t)atoi(p + 4) : 0;
	return out[0] > 0 && out[1] > 0;
}

static bool runs_sleep(pid_t pid)
{
	struct pstat ps;

	return pstat_of(pid, &ps) && !strcmp(ps.comm, "sleep");
}

static void family_pids(const char *pids, pid_t out[2], bool main_sleeps)
{
	if (!WAIT_FOR(family_read(pids, out), 10000))
		FAIL_AT("the child did not start its family");
	if (!WAIT_FOR(runs_sleep(out[1]) && (!main_sleeps || runs_sleep(out[0])), 10000))
		FAIL_AT("the family did not reach its sleep");
	CHECK(!pid_gone(out[0]));
}

static uint32_t waiters_of(local_session *s, const char *key)
{
	static LOCAL_OPTS(local_key_info, info);

	return local_info(s, key, &info) ? 999 : info.waiters;
}

/* Reap @pid if it became our child (we are a subreaper), else wait for it
 * to be gone. */
static void wait_gone(pid_t pid, int timeout_ms)
{
	struct pstat ps;

	if (pstat_of(pid, &ps) && ps.ppid == getpid())
		pid_wait(pid, timeout_ms);
	else if (!WAIT_FOR(pid_gone(pid), timeout_ms))
		FAIL_AT("process %d did not end", (int)pid);
}

/* What a round found, checked after its clean-up so that a failure on old
 * code does not leave sleeps behind. */
struct verdict {
	char viol[2048];
	bool started;
	int next_status;
};

static void check_verdict(const struct verdict *v, int round, const char *log)
{
	char out[4096];

	if (v->viol[0])
		FAIL_AT("round %d: the next holder started while the old child ran: %s", round,
			v->viol);
	if (!v->started) {
		read_file(log, out, sizeof(out));
		FAIL_AT("round %d: the next holder never started; its output: %s", round, out);
	}
	if (!WIFEXITED(v->next_status) || WEXITSTATUS(v->next_status)) {
		read_file(log, out, sizeof(out));
		FAIL_AT("round %d: the next holder ended with status 0x%x: %s", round,
			v->next_status, out);
	}
}

enum starve {
	STARVE_ALL,	   /* every process of the old wrapper but the one killed */
	STARVE_SUPERVISOR, /* only the leader of the child's process group */
	STARVE_NONE,
	STARVE_DEAD_PIPE, /* none, but -verbose to a pipe nobody reads any more */
	KILL_SUPERVISOR,  /* none, and the supervisor is killed too (killall) */
	KILL_HOLDER,	  /* the supervisor stopped, the holder killed too (pkill -9) */
	ROUND_KINDS
};

static pid_t holder_of(pid_t top);

/* Each of @pids[] but the family's two (which sleep) gone, or stopped:
 * it can no longer act. */
static bool none_acts(const pid_t *pids, size_t n, const pid_t fam[2])
{
	struct pstat ps;
	size_t i;

	for (i = 0; i < n; i++)
		if (pids[i] != fam[0] && pids[i] != fam[1] && !pid_gone(pids[i]) &&
		    (!pstat_of(pids[i], &ps) || ps.state != 'T'))
			return false;
	return true;
}

/*
 * Wait until the broker has handled every event that was pending when this
 * is called (the pidfd of a process that exited): two sessions opened one
 * after the other, each a round trip through its event loop. The second
 * request is read in a later batch of events than the one whose handling
 * answered the first, and a batch is handled whole, so whatever was ready
 * before the first was handled by then.
 */
static void broker_settle(const struct broker_proc *b)
{
	int i;

	for (i = 0; i < 2; i++)
		local_session_close(open_session(b, "settle", 0, 0));
}

/*
 * The old wrapper's processes starved, its shmlock just killed: the window
 * in which a wrong wrapper, or the broker, lets the next holder in. It ends
 * when the next holder started, or when nothing that could let it in is
 * left to act: every process of the old wrapper (@wrap, less the family
 * @fam) gone or stopped,
 * and the broker done with what their deaths told it. Had the hold moved
 * meanwhile, the next holder's command is then on its way: wait for it, so
 * that it judges while the old child still runs.
 */
static void starve_window(const struct broker_proc *b, local_session *obs, const char *key,
			  const pid_t *wrap, size_t nwrap, const pid_t fam[2], const char *started)
{
	/* A wrapper process that keeps running (not one of these rounds')
	 * gives the next holder the whole deadline to get in. */
	if (WAIT_FOR(exists(started) || none_acts(wrap, nwrap, fam), 10000) && exists(started))
		return;
	broker_settle(b);
	if (waiters_of(obs, key) != 1)
		WAIT_FOR(exists(started), 10000);
}

static void killed_round(struct broker_proc *b, local_session *obs, int round, enum starve how)
{
	const char *pids = scratch("pids", round), *viol = scratch("viol", round);
	const char *started = scratch("started", round), *log = scratch("log", round);
	char key[32], child[512], judge[1024];
	pid_t fam[2], wrap[MAX_PROCS], stopped[MAX_PROCS], top, next;
	size_t nwrap, nstopped = 0, i;
	struct verdict v = { .started = false };
	struct pstat ps;
	int err[2] = { -1, -1 };

	snprintf(key, sizeof(key), "killed/%d", round);
	family_cmd(child, sizeof(child), pids, false, false);
	judge_cmd(judge, sizeof(judge), pids, viol, started);
	if (how == STARVE_DEAD_PIPE)
		CHECK(pipe2(err, O_CLOEXEC) == 0);
	top = cli_spawn_err(
		(const char *const[]){ "lock", "-verbose", "-lock-delay=0", key, child, NULL }, -1,
		log, err[1]);
	family_pids(pids, fam, true);
	/* The reader of its stderr dies with the wrapper (a pipeline): what
	 * the holder then says must not kill it before the child's tree. */
	if (err[0] >= 0) {
		close(err[0]);
		close(err[1]);
	}
	next = cli_spawn((const char *const[]){ "lock", key, judge, NULL }, -1, log);
	if (!WAIT_FOR(waiters_of(obs, key) == 1, 10000))
		FAIL_AT("round %d: the next holder did not queue", round);

	/* The old wrapper's processes: between `top` and the family. */
	nwrap = descendants(top, wrap, MAX_PROCS);
	for (i = 0; i < nwrap; i++) {
		bool in_family = wrap[i] == fam[0] || wrap[i] == fam[1];
		bool leader = pstat_of(fam[0], &ps) && ps.pgid == wrap[i];

		if (in_family || ((how == STARVE_SUPERVISOR || how == KILL_HOLDER) && !leader) ||
		    (how >= STARVE_NONE && how != KILL_HOLDER))
			continue;
		if (!kill(wrap[i], SIGSTOP))
			stopped[nstopped++] = wrap[i];
	}
	if ((how < STARVE_NONE || how == KILL_HOLDER) && !nstopped)
		FAIL_AT("round %d: no wrapper process to stop", round);
	for (i = 0; i < nstopped; i++)
		if (!WAIT_FOR(pstat_of(stopped[i], &ps) && ps.state == 'T', 5000))
			FAIL_AT("round %d: process %d did not stop", round, (int)stopped[i]);

	if (how == KILL_SUPERVISOR) {
		if (!pstat_of(fam[0], &ps) || ps.pgid == fam[0])
			FAIL_AT("round %d: no supervisor leads the child's group", round);
		kill(ps.pgid, SIGKILL);
	}
	/* The process that holds the session: only the supervisor, bound to
	 * the session too (local_session_bind_process()), keeps it alive. */
	if (how == KILL_HOLDER)
		kill(holder_of(top), SIGKILL);
	kill(top, SIGKILL);
	pid_wait(top, 5000);
	/* Starved for as long as it takes the next holder to get in if it
	 * can; a correct wrapper keeps it out however long this lasts. */
	starve_window(b, obs, key, wrap, nwrap, fam, started);
	for (i = 0; i < nstopped; i++)
		kill(stopped[i], SIGCONT);
	v.started = WAIT_FOR(exists(started), 10000);
	v.next_status =
		v.started ? pid_wait(next, 10000) : (kill(next, SIGKILL), pid_wait(next, 5000));
	read_file(viol, v.viol, sizeof(v.viol));

	/* Clean up before judging: old code leaves the family running. */
	for (i = 0; i < 2; i++)
		if (!pid_gone(fam[i]))
			kill(fam[i], SIGKILL);
	for (i = 0; i < 2; i++)
		wait_gone(fam[i], 5000);
	for (i = 0; i < nwrap; i++)
		wait_gone(wrap[i], 10000);
	check_verdict(&v, round, log);
}

/*
 * The reproduction, made deterministic: -lock-delay=0, the next
 * holder queued, the shmlock the user started SIGKILLed while the wrapper's
 * other processes get no CPU (all of them, or only the supervisor), also
 * without any starvation, with its stderr a pipe whose reader is gone, and
 * with the supervisor SIGKILLed at the same time, and with the holder
 * itself SIGKILLed while the supervisor gets no CPU. Repeated.
 */
TEST(wrapper, killed_shmlock_never_overlaps_next_holder, 90)
{
	struct broker_proc b;
	local_session *obs;
	int round;

	/* Orphans of the killed shmlock come to us, not to init: we reap
	 * them, and their process groups are never orphaned (which would
	 * SIGCONT what we stopped). */
	CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
	broker_start(&b, NULL);
	setenv("SHMLOCK_SOCKET", b.sock, 1);
	obs = open_session(&b, "observer", 0, 0);
	for (round = 0; round < 3 * ROUND_KINDS; round++)
		killed_round(&b, obs, round, (enum starve)(round % ROUND_KINDS));
	local_session_close(obs);
	broker_stop(&b);
}

/*
 * The child exits on its own but leaves a setsid() grandchild behind,
 * outside its process group: shmlock must stop it (SIGTERM, then SIGKILL
 * after -kill-grace when it ignores SIGTERM) before it releases the hold.
 */
TEST(wrapper, setsid_leftover_stopped_before_release, 60)
{
	struct broker_proc b;
	local_session *obs;
	int round;

	CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
	broker_start(&b, NULL);
	setenv("SHMLOCK_SOCKET", b.sock, 1);
	obs = open_session(&b, "observer", 0, 0);
	for (round = 0; round < 4; round++) {
		const char *pids = scratch("pids", round), *viol = scratch("viol", round);
		const char *started = scratch("started", round), *log = scratch("log", round);
		char key[32], child[512], judge[1024];
		struct verdict v = { .started = false };
		pid_t fam[2], top, next;
		int in[2], status, i;

		snprintf(key, sizeof(key), "leftover/%d", round);
		family_cmd(child, sizeof(child), pids, round % 2, true);
		judge_cmd(judge, sizeof(judge), pids, viol, started);
		CHECK(pipe2(in, O_CLOEXEC) == 0);
		top = cli_spawn((const char *const[]){ "lock", "-lock-delay=0", "-pass-stdin",
						       "-kill-grace=300ms", key, child, NULL },
				in[0], log);
		close(in[0]);
		family_pids(pids, fam, false);
		next = cli_spawn((const char *const[]){ "lock", key, judge, NULL }, -1, log);
		if (!WAIT_FOR(waiters_of(obs, key) == 1, 10000))
			FAIL_AT("round %d: the next holder did not queue", round);
		/* The child's shell reads its line and exits 0. */
		CHECK(write(in[1], "\n", 1) == 1);
		close(in[1]);
		status = pid_wait(top, 10000);
		v.started = WAIT_FOR(exists(started), 10000);
		v.next_status = v.started ? pid_wait(next, 10000)
					  : (kill(next, SIGKILL), pid_wait(next, 5000));
		read_file(viol, v.viol, sizeof(v.viol));
		for (i = 0; i < 2; i++)
			if (!pid_gone(fam[i]))
				kill(fam[i], SIGKILL);
		for (i = 0; i < 2; i++)
			wait_gone(fam[i], 5000);
		check_verdict(&v, round, log);
		if (!WIFEXITED(status) || WEXITSTATUS(status))
			FAIL_AT("round %d: shmlock ended with status 0x%x", round, status);
	}
	local_session_close(obs);
	broker_stop(&b);
}

/* The holder: the only child of the shmlock the user started. */
static pid_t holder_of(pid_t top)
{
	pid_t kids[MAX_PROCS];
	struct pstat ps;

	if (!descendants(top, kids, MAX_PROCS) || !pstat_of(kids[0], &ps) || ps.ppid != top)
		FAIL_AT("no holder under shmlock %d", (int)top);
	return kids[0];
}

static bool file_has(const char *path, const char *needle)
{
	static char buf[65536];

	read_file(path, buf, sizeof(buf));
	return strstr(buf, needle) != NULL;
}

/*
 * systemd's KillMode=control-group (or kill -TERM of every pid) sends one
 * SIGTERM to the wrapper and to the holder: that is one stop request, and
 * the child gets its -kill-grace, not the SIGKILL of a second request.
 */
TEST(wrapper, one_request_to_every_process_counts_once, 30)
{
	const char *log = scratch("log", 0);
	struct broker_proc b;
	pid_t top, holder;
	int status;

	broker_start(&b, NULL);
	setenv("SHMLOCK_SOCKET", b.sock, 1);
	top = cli_spawn((const char *const[]){ "lock", "-verbose", "-kill-grace=20s", "k",
					       "trap 'sleep 0.3; echo done-$((6*7)); exit 0' TERM; "
					       "echo ready; sleep 300 & wait",
					       NULL },
			-1, log);
	if (!WAIT_FOR(file_has(log, "\nready\n"), 10000))
		FAIL_AT("the child did not start");
	holder = holder_of(top);
	kill(holder, SIGTERM);
	/* The second copy once the first was taken: sent together, the two
	 * may merge in the kernel, and nothing would be tested. */
	if (!WAIT_FOR(file_has(log, "stopping the child"), 10000))
		FAIL_AT("the holder did not take SIGTERM");
	kill(top, SIGTERM);
	status = pid_wait(top, 15000);
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGTERM)
		FAIL_AT("shmlock ended with status 0x%x, not by SIGTERM", status);
	if (!file_has(log, "done-42")) {
		static char buf[4096];

		read_file(log, buf, sizeof(buf));
		FAIL_AT("the child was killed before its grace period ended: %s", buf);
	}
	broker_stop(&b);
}

/* A second signal to shmlock, as a second Ctrl-C, SIGKILLs at once. */
TEST(wrapper, second_signal_kills_at_once, 30)
{
	const char *log = scratch("log", 0);
	struct broker_proc b;
	pid_t top;
	int status;

	broker_start(&b, NULL);
	setenv("SHMLOCK_SOCKET", b.sock, 1);
	top = cli_spawn((const char *const[]){ "lock", "-verbose", "-kill-grace=60s", "k",
					       "trap '' TERM INT; echo ready; sleep 300", NULL },
			-1, log);
	if (!WAIT_FOR(file_has(log, "\nready\n"), 10000))
		FAIL_AT("the child did not start");
	kill(top, SIGINT);
	if (!WAIT_FOR(file_has(log, "stopping the child"), 10000)) {
		static char buf[4096];

		read_file(log, buf, sizeof(buf));
		FAIL_AT("shmlock did not start stopping the child: %s", buf);
	}
	kill(top, SIGINT);
	status = pid_wait(top, 15000);
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGINT)
		FAIL_AT("shmlock ended with status 0x%x, not by SIGINT", status);
	broker_stop(&b);
}
