// SPDX-License-Identifier: MIT
/* The child's process group, seen from the holder: start, signal, reap. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lock.h"

int job_start(struct job *j, const struct job_spec *spec)
{
	pid_t parent = getpid();
	int sv[2], err;

	memset(j, 0, sizeof(*j));
	j->pidfd = j->sock = -1;
	/* SEQPACKET keeps each message whole, whoever of the supervisor and
	 * the child writes it. */
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv))
		return -errno;
	fflush(NULL);
	j->pid = fork();
	if (j->pid < 0) {
		err = -errno;
		close(sv[0]);
		close(sv[1]);
		return err;
	}
	if (j->pid == 0) {
		/* Our end must close with the holder alone: its EOF is how the
		 * supervisor learns that the holder died. */
		close(sv[0]);
		supervise(spec, sv[1], parent);
	}
	close(sv[1]);
	j->sock = sv[0];
	/* Both sides set the group, so that a signal sent right after
	 * fork() already reaches it. */
	setpgid(j->pid, j->pid);
	j->pgid = j->pid;
	j->took_tty = spec->take_tty;
	j->tty_pgrp = spec->tty_pgrp;
	j->pidfd = (int)pidfd_open(j->pid, 0);
	if (j->pidfd < 0) {
		err = -errno;
		job_kill(j, SIGKILL);
		waitpid(j->pid, NULL, 0);
		job_close(j);
		return err;
	}
	fcntl(j->sock, F_SETFL, O_NONBLOCK);
	return 0;
}

int job_go(const struct job *j)
{
	return send(j->sock, "g", 1, MSG_NOSIGNAL) == 1 ? 0 : -errno;
}

void job_kill(const struct job *j, int sig)
{
	/* Only while the supervisor is unreaped: until then its pid, which
	 * names the group, cannot be reused. */
	if (j->pid > 0)
		kill(-j->pgid, sig);
}

void job_read(struct job *j)
{
	struct job_msg m;

	while (recv(j->sock, &m, sizeof(m), 0) == (ssize_t)sizeof(m)) {
		switch (m.type) {
		case JOB_STARTED:
			j->child = m.value;
			break;
		case JOB_EXEC_FAILED:
			j->exec_err = m.value;
			break;
		case JOB_EXITED:
			j->status = m.value;
			j->exited = true;
			break;
		}
	}
}

int job_reap(struct job *j)
{
	siginfo_t si = { 0 };

	job_read(j);
	if (waitid(P_PIDFD, (id_t)j->pidfd, &si, WEXITED) < 0)
		return W_EXITCODE(127, 0);
	j->pid = 0;
	if (si.si_code == CLD_EXITED)
		return W_EXITCODE(si.si_status, 0);
	return si.si_status; /* killed: the signal number is the status */
}

void job_close(struct job *j)
{
	if (j->took_tty) {
		sigset_t ttou, old;

		/* We are a background group: without blocking SIGTTOU,
		 * handing the terminal back would stop us. */
		sigemptyset(&ttou);
		sigaddset(&ttou, SIGTTOU);
		pthread_sigmask(SIG_BLOCK, &ttou, &old);
		tcsetpgrp(0, j->tty_pgrp);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		j->took_tty = false;
	}
	if (j->pidfd >= 0)
		close(j->pidfd);
	if (j->sock >= 0)
		close(j->sock);
	j->pidfd = j->sock = -1;
}

void job_reap_orphans(void (*tick)(void *arg), void *arg)
{
	pid_t self = getpid();
	int status;

	for (;;) {
		pid_t r;

		/* Signal before each wait: the children of those we kill
		 * come to us in turn. Only this thread reaps, so the pids we
		 * read are still our children when we signal them. */
		proc_signal_children(self, SIGKILL);
		r = waitpid(-1, &status, WNOHANG);
		if (r < 0 && errno == ECHILD)
			return;
		if (r > 0 || (r < 0 && errno == EINTR))
			continue;
		/* Some child still runs (a process in the kernel's
		 * uninterruptible sleep dies when it leaves it): the hold
		 * stays, and so does the session. */
		poll(NULL, 0, 10);
		if (tick)
			tick(arg);
	}
}
