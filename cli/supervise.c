// SPDX-License-Identifier: MIT
/*
 * The supervisor: a forked copy of the holder (lock_run.c) that sits
 * between it and the child. The holder is multi-threaded when it forks, so
 * everything here must be async-signal-safe: system calls only, no stdio,
 * no malloc.
 *
 * Why a process in between, rather than PR_SET_PDEATHSIG on the child
 * alone: the death signal reaches only the child, while a shell's own
 * children (and theirs) would go on running without the lock. The
 * supervisor leads the child's process group and is the subreaper of the
 * child's whole tree, so it can kill the group when the holder dies, stop
 * what escaped the group, and it knows when the last process of the tree
 * has exited: only then does the holder release the hold.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lock.h"

/* Signals the supervisor must survive: the stop signals the holder sends
 * to the whole group, and job control meant for the child. */
static const int shielded[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU };
#define NSHIELDED (sizeof(shielded) / sizeof(shielded[0]))

static void report(int sock, int type, int value)
{
	struct job_msg m = { type, value };

	/* Nothing to do on failure: the holder is gone, and the group with it. */
	(void)!send(sock, &m, sizeof(m), MSG_NOSIGNAL);
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

__attribute__((noreturn)) static void exec_child(const struct job_spec *spec, int sock, pid_t sup,
						 const struct sigaction *saved)
{
	size_t i;
	int fd;

	/* If the supervisor dies (only SIGKILL can make it), so does the
	 * child. Set after fork, so check that the parent did not die before
	 * it was in place. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != sup)
		_exit(127);
	for (i = 0; i < NSHIELDED; i++)
		sigaction(shielded[i], &saved[i], NULL);
	sigprocmask(SIG_SETMASK, &spec->child_mask, NULL);
	if (!spec->pass_stdin) {
		fd = open("/dev/null", O_RDONLY);
		if (fd < 0 || dup2(fd, 0) < 0) {
			report(sock, JOB_EXEC_FAILED, errno);
			_exit(127);
		}
		if (fd)
			close(fd);
	}
	execvpe(spec->argv[0], spec->argv, spec->envp);
	report(sock, JOB_EXEC_FAILED, errno);
	_exit(127);
}

/* Reap every exited child; report the main one. Returns whether the
 * main child is done (now or before). */
static bool reap(int sock, pid_t child, bool done)
{
	int status;
	pid_t r;

	while ((r = waitpid(-1, &status, WNOHANG)) > 0)
		if (r == child) {
			report(sock, JOB_EXITED, status);
			done = true;
		}
	return done;
}

/* Is any child of ours left (alive: reap() took the zombies)? Our children
 * are the child and, through our subreaping, every orphan of its tree,
 * whatever process group or session it moved to. */
static bool children_left(void)
{
	siginfo_t si = { 0 };

	return waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) == 0;
}

/*
 * SIGTERM, once each, to the processes that escaped the child's group
 * (setsid(), setpgid()) and became ours when their parent died; @termed
 * remembers whom. A full list only means a second SIGTERM to some.
 */
static void term_escapees(pid_t self, pid_t *termed, size_t *nterm, size_t max)
{
	pid_t kids[128];
	size_t n = proc_children(self, kids, sizeof(kids) / sizeof(kids[0])), i, j;

	for (i = 0; i < n; i++) {
		/* The group had its SIGTERM. */
		if (getpgid(kids[i]) == self)
			continue;
		for (j = 0; j < *nterm && termed[j] != kids[i]; j++)
			;
		if (j < *nterm)
			continue;
		if (*nterm < max)
			termed[(*nterm)++] = kids[i];
		kill(kids[i], SIGTERM);
	}
}

/* SIGKILL to everything below us. It ends this process too (we lead the
 * group): the holder above us is a subreaper as well, and kills and reaps
 * whatever orphans we leave. */
/*
 * SIGKILL the child's whole tree and exit only once it is gone. The holder
 * bound us to its session (local_session_bind_process()), so when it has
 * been killed, our exit is what releases the hold: every descendant,
 * escapees of the group included, must be dead by then. As a subreaper we
 * inherit each generation as the one above it dies; kill ours until none
 * is left. Each round waits for a SIGCHLD (or 50 ms), and each kills a whole
 * generation, so this ends as soon as the tree does.
 */
__attribute__((noreturn)) static void kill_all(pid_t self, int sfd)
{
	struct signalfd_siginfo si;

	for (;;) {
		struct pollfd p = { .fd = sfd, .events = POLLIN };

		proc_signal_children(self, SIGKILL);
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
		if (!children_left())
			_exit(127);
		poll(&p, 1, 50);
		while (read(sfd, &si, sizeof(si)) == sizeof(si))
			;
	}
}

void supervise(const struct job_spec *spec, int sock, pid_t parent)
{
	struct sigaction ign = { .sa_handler = SIG_IGN }, saved[NSHIELDED];
	pid_t self = getpid(), child, termed[256];
	size_t nterm = 0;
	int64_t kill_at = -1;
	sigset_t set;
	bool done = false;
	size_t i;
	int sfd;

	setpgid(0, 0);
	prctl(PR_SET_NAME, "shmlock-super"); /* for ps */
	/* Orphans of the child become ours, so we can wait for them. */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	for (i = 0; i < NSHIELDED; i++)
		sigaction(shielded[i], &ign, &saved[i]);
	if (spec->take_tty)
		tcsetpgrp(0, self); /* SIGTTOU is ignored right above */
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigprocmask(SIG_BLOCK, &set, NULL);
	sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	/* The holder may have died before we could notice: then kill nothing
	 * but ourselves, the child does not exist yet. */
	if (sfd < 0 || getppid() != parent) {
		report(sock, JOB_EXEC_FAILED, sfd < 0 ? errno : ESRCH);
		_exit(127);
	}
	/* Start the child only once the holder has bound us to its session
	 * (job_go()): from then on the hold outlives whichever of the two is
	 * killed first, so no command ever runs without it. EOF: the holder
	 * died first; nothing was started. */
	if (recv(sock, &(char){ 0 }, 1, 0) != 1) {
		report(sock, JOB_EXEC_FAILED, ESRCH);
		_exit(127);
	}
	child = fork();
	if (child < 0) {
		report(sock, JOB_EXEC_FAILED, errno);
		_exit(127);
	}
	if (child == 0)
		exec_child(spec, sock, self, saved);
	report(sock, JOB_STARTED, child);
	for (;;) {
		struct pollfd p[2] = {
			{ .fd = sock, .events = POLLIN },
			{ .fd = sfd, .events = POLLIN },
		};
		struct signalfd_siginfo si;
		int timeout = -1;

		if (kill_at >= 0) {
			int64_t left = kill_at - now_ms();

			timeout = left > 0 ? (int)(left < 60000 ? left : 60000) : 0;
		}
		if (poll(p, 2, timeout) < 0 && errno != EINTR)
			break;
		/* The holder never writes: readable means it has gone (only
		 * SIGKILL does that), and the hold with it. The child must not
		 * run on without the lock. */
		if (p[0].revents)
			kill_all(self, sfd);
		while (read(sfd, &si, sizeof(si)) == sizeof(si))
			;
		done = reap(sock, child, done);
		if (done && !children_left())
			_exit(0);
		if (done && kill_at < 0) {
			/* The child left processes behind, in its group or
			 * out of it: they would run on without the lock. */
			kill(-self, SIGTERM);
			kill_at = now_ms() + spec->grace_ms;
		}
		if (kill_at >= 0 && now_ms() >= kill_at)
			kill_all(self, sfd);
		/* At every wake-up: escapees keep coming to us as their
		 * parents die. */
		if (kill_at >= 0)
			term_escapees(self, termed, &nterm, sizeof(termed) / sizeof(termed[0]));
	}
	kill_all(self, sfd);
}
