// SPDX-License-Identifier: MIT
/*
 * The shmlock process the user started (the pid a shell's $! names): it
 * forks the holder, which takes the hold and runs the child, forwards the
 * stop signals to it, and ends as it ends.
 *
 * Why the hold is not taken here: the broker ends a session, and releases
 * its holds, the moment the process that opened it exits. Were that this
 * process, a SIGKILL of it would let the next holder in at once, while the
 * child runs on until the supervisor gets CPU to kill it: with -lock-delay=0
 * on a busy machine, two commands ran under one lock. The holder instead is
 * a process the user does not normally signal directly, a subreaper of the
 * child's tree, and it exits (releasing the hold) only once that tree is
 * gone, whatever happened to this process.
 *
 * Processes: wrapper (this, the user's pid) -> holder (the session, its
 * own process group) -> supervisor (leads the child's process group) ->
 * child -> whatever the child starts.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lock.h"

/*
 * Block the stop signals before the holder exists, so that it inherits the
 * mask and a signal forwarded before it reads its signalfd waits for it.
 *
 * A signal ignored when we start is treated by what ignored it:
 * - SIGHUP and SIGTERM ignored (nohup) stay ignored, for us, the holder and
 *   the child: blocking them would make the kernel queue them after all.
 * - SIGINT and SIGQUIT ignored are what a shell does to every background
 *   job (`shmlock lock ... &`), not a wish of the user. As consul lock (Go's
 *   signal.Notify re-enables an ignored SIGINT), shmlock takes them anyway:
 *   `kill -INT $!` stops the child and releases the hold. They are blocked
 *   and read by signalfd, which the kernel allows for an ignored signal,
 *   and their disposition stays SIG_IGN: the child, which gets our original
 *   mask back, still ignores them as the shell arranged.
 */
static int block_stop_signals(struct holder_env *env)
{
	static const int stops[] = STOP_SIGNALS;
	size_t i;

	sigemptyset(&env->stop_set);
	for (i = 0; i < sizeof(stops) / sizeof(stops[0]); i++) {
		struct sigaction sa;

		if (stops[i] != SIGINT && stops[i] != SIGQUIT &&
		    sigaction(stops[i], NULL, &sa) == 0 && sa.sa_handler == SIG_IGN)
			continue;
		sigaddset(&env->stop_set, stops[i]);
	}
	return sigprocmask(SIG_BLOCK, &env->stop_set, &env->orig_mask) ? -errno : 0;
}

/* In the holder, right after fork(). */
__attribute__((noreturn)) static void holder_main(const struct lock_opts *o, struct holder_env *env,
						  pid_t wrapper)
{
	sigset_t set;

	/* Our own group: the terminal's signals and kill(-pgrp) reach the
	 * wrapper, which forwards them, and not us a second time. */
	setpgid(0, 0);
	/* Named for ps, and so that `killall shmlock` (an exact name) ends
	 * the wrapper and the supervisor but leaves us to clean up. */
	prctl(PR_SET_NAME, "shmlock-holder");
	/* Orphans of the child's tree come to us if the supervisor dies. */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	/* Blocked, not ignored, so that the child gets them back with the
	 * original mask: a background group writing to a terminal with
	 * `stty tostop` would be stopped, and a message to a pipe whose
	 * reader died with the wrapper must not kill us (and release the
	 * hold) before the child's tree is gone. */
	sigemptyset(&set);
	sigaddset(&set, SIGTTOU);
	sigaddset(&set, SIGPIPE);
	sigprocmask(SIG_BLOCK, &set, NULL);
	env->wrapper = wrapper;
	/* The pidfd names the wrapper only if it is still our parent once
	 * opened: else it died first, and its pid may be another's. */
	env->parent_pidfd = (int)pidfd_open(wrapper, 0);
	if (env->parent_pidfd < 0) {
		errorf("cannot watch the shmlock process: %s", strerror(errno));
		exit(EXIT_FAIL);
	}
	if (getppid() != wrapper)
		_exit(EXIT_FAIL);
	exit(holder_run(o, env));
}

/* End as the holder ended: its exit status, or its death by a signal. */
__attribute__((noreturn)) static void mirror(int status)
{
	sigset_t set;
	int sig;

	if (WIFEXITED(status))
		exit(WEXITSTATUS(status));
	sig = WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL;
	fflush(NULL);
	/* Whatever the holder dumped, a core of this process is no use. */
	prctl(PR_SET_DUMPABLE, 0);
	signal(sig, SIG_DFL);
	sigemptyset(&set);
	sigaddset(&set, sig);
	sigprocmask(SIG_UNBLOCK, &set, NULL);
	raise(sig);
	_exit(128 + sig);
}

int lock_run(const struct lock_opts *o)
{
	struct holder_env env = { .parent_pidfd = -1 };
	pid_t self = getpid(), holder;
	int sfd, pidfd, err;

	err = block_stop_signals(&env);
	if (err) {
		errorf("cannot take signals: %s", strerror(-err));
		return EXIT_FAIL;
	}
	env.tty_pgrp = getpgrp();
	env.take_tty = o->pass_stdin && isatty(0) && tcgetpgrp(0) == env.tty_pgrp;
	sfd = signalfd(-1, &env.stop_set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0) {
		errorf("cannot take signals: %s", strerror(errno));
		return EXIT_FAIL;
	}
	fflush(NULL);
	holder = fork();
	if (holder < 0) {
		errorf("cannot fork: %s", strerror(errno));
		return EXIT_FAIL;
	}
	if (holder == 0) {
		close(sfd);
		holder_main(o, &env, self);
	}
	/* Both sides set the group, so that a signal forwarded right after
	 * fork() already finds it. */
	setpgid(holder, holder);
	pidfd = (int)pidfd_open(holder, 0);
	if (pidfd < 0) {
		/* Without it, a plain wait: signals are not forwarded. */
		int status = W_EXITCODE(EXIT_FAIL, 0);

		while (waitpid(holder, &status, 0) < 0 && errno == EINTR)
			;
		mirror(status);
	}
	for (;;) {
		struct pollfd p[2] = { { .fd = sfd, .events = POLLIN },
				       { .fd = pidfd, .events = POLLIN } };
		struct signalfd_siginfo si;
		siginfo_t info = { 0 };

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			continue;
		while (read(sfd, &si, sizeof(si)) == sizeof(si))
			kill(holder, (int)si.ssi_signo);
		if (!p[1].revents)
			continue;
		if (waitid(P_PIDFD, (id_t)pidfd, &info, WEXITED) < 0) {
			if (errno == EINTR)
				continue;
			errorf("cannot wait for the holder: %s", strerror(errno));
			return EXIT_FAIL;
		}
		mirror(info.si_code == CLD_EXITED ? W_EXITCODE(info.si_status, 0) : info.si_status);
	}
}
