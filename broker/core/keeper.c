// SPDX-License-Identifier: MIT
/*
 * The keeper: a small process that holds the segment's memfd while no broker
 * runs, and hands it to the next broker (and to `shmlockd --check`).
 *
 * Why: the segment is a sealed memfd (shm.c), which has no name to reopen,
 * and a named /dev/shm file cannot be sealed (the kernel presets
 * F_SEAL_SEAL on it). Under systemd the fd store keeps it across restarts;
 * the keeper is what keeps it without a service manager, the way the name in
 * /dev/shm used to. It is forked by the broker that made or adopted the
 * segment (detached: its own session, no other fd, no mapping) and serves a
 * Unix socket next to the control socket, PATH.keep, bound the same safe way.
 * It answers only its own user and root (SO_PEERCRED). It exits when told to
 * ('Q', a broker run with --destroy-segment-on-exit), on SIGTERM or SIGINT,
 * or once its socket file is gone or replaced, since nobody can reach it then.
 *
 * Protocol: keeper_proto.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <syslog.h>
#include <unistd.h>

#include "broker.h"
#include "keeper_proto.h"

#define KEEPER_POLL_MS 1000

/* How long the broker waits for the keeper's answer. */
#define KEEPER_CALL_S 5

int keeper_fetch(const char *path, int *fd)
{
	return keeper_exchange(path, KEEPER_GET, KEEPER_CALL_S, fd);
}

int keeper_quit(const char *path)
{
	return keeper_exchange(path, KEEPER_QUIT, KEEPER_CALL_S, NULL);
}

int segment_fd_label(int fd, char *buf, size_t size)
{
	static const char prefix[] = "/memfd:", suffix[] = " (deleted)";
	char link[64], target[512];
	size_t len;
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, target, sizeof(target) - 1);
	if (n < 0)
		return -errno;
	target[n] = '\0';
	len = (size_t)n;
	if (len >= sizeof(suffix) - 1 && !strcmp(target + len - (sizeof(suffix) - 1), suffix))
		target[len -= sizeof(suffix) - 1] = '\0';
	if (strncmp(target, prefix, sizeof(prefix) - 1))
		return -EINVAL; /* not a memfd */
	if (len - (sizeof(prefix) - 1) >= size)
		return -ENAMETOOLONG;
	memcpy(buf, target + sizeof(prefix) - 1, len - (sizeof(prefix) - 1) + 1);
	return 0;
}

int segment_fd_is_ours(struct broker *b, int fd, const char *where)
{
	char label[300];
	int err = segment_fd_label(fd, label, sizeof(label));

	/* The label is --shm-name without its slash (shm.c), set by the
	 * kernel at memfd_create(): no client can change it. */
	if (!err && !strcmp(label, b->opts.shm_name + 1))
		return 0;
	blog(LOG_ERR,
	     "%s holds the segment /%s, not --shm-name %s: another broker's lock "
	     "space, which this one must not serve. Start this broker with that broker's "
	     "--shm-name, or with a --socket of its own (its keeper lives beside it)",
	     where, err ? "(not a segment of this broker's kind)" : label, b->opts.shm_name);
	b->exit_code = EXIT_SEG_FOREIGN;
	return -EEXIST;
}

/* The keeper's socket file is still the one it bound (same inode). */
static bool still_ours(const char *path, const struct stat *bound)
{
	struct stat st;

	return lstat(path, &st) == 0 && st.st_ino == bound->st_ino && st.st_dev == bound->st_dev;
}

static void serve(int conn, int memfd, const char *path)
{
	struct timeval tv = { .tv_sec = 1 };
	struct ucred cred;
	socklen_t len = sizeof(cred);
	char cmd = 0, ans = KEEPER_OK;

	/* Our own user and root only: the fd is every lock. */
	if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
	    (cred.uid != geteuid() && cred.uid != 0))
		return;
	/* A peer that sends nothing must not hold us for long. */
	setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (recv(conn, &cmd, 1, 0) != 1)
		return;
	if (cmd == KEEPER_GET) {
		send_with_fd(conn, &ans, 1, memfd, MSG_NOSIGNAL);
	} else if (cmd == KEEPER_QUIT) {
		unlink(path);
		send(conn, &ans, 1, MSG_NOSIGNAL);
		close(conn);
		_exit(0);
	}
}

static void __attribute__((noreturn))
keeper_main(int lfd, int memfd, const char *path, const struct stat *bound)
{
	sigset_t none;
	int fd, sfd;

	/* Nothing of the broker's but these two: no lock, no other socket.
	 * Out of the way first: either may sit on the other's number. */
	lfd = fcntl(lfd, F_DUPFD_CLOEXEC, 100);
	memfd = fcntl(memfd, F_DUPFD_CLOEXEC, 100);
	if (lfd < 0 || memfd < 0 || dup3(lfd, 3, O_CLOEXEC) != 3 || dup3(memfd, 4, O_CLOEXEC) != 4)
		_exit(1);
	lfd = 3;
	memfd = 4;
	fd = open("/dev/null", O_RDWR);
	if (fd >= 0) {
		dup2(fd, 0);
		dup2(fd, 1);
		dup2(fd, 2);
	}
	syscall(SYS_close_range, 5u, ~0u, 0u);
	/* SIGTERM and SIGINT, an operator's way to drop the segment, arrive
	 * through the poll below: the socket file goes with us, so that the
	 * next broker does not take an orderly exit for a keeper that was
	 * killed (which makes it count processes it cannot inspect). */
	sigemptyset(&none);
	sigaddset(&none, SIGTERM);
	sigaddset(&none, SIGINT);
	sigprocmask(SIG_SETMASK, &none, NULL);
	sfd = signalfd(-1, &none, SFD_CLOEXEC);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGHUP, SIG_IGN); /* no terminal to lose; a reload is nothing to it */
	prctl(PR_SET_NAME, "shmlockd-keeper");
	for (;;) {
		struct pollfd p[2] = { { .fd = lfd, .events = POLLIN },
				       { .fd = sfd, .events = POLLIN } };
		int conn;

		if (poll(p, sfd >= 0 ? 2 : 1, KEEPER_POLL_MS) <= 0) {
			if (!still_ours(path, bound))
				_exit(0);
			continue;
		}
		if (p[1].revents) {
			if (still_ours(path, bound))
				unlink(path);
			_exit(0);
		}
		if (!p[0].revents)
			continue;
		conn = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (conn < 0)
			continue;
		serve(conn, memfd, path);
		close(conn);
	}
}

int keeper_start(struct broker *b, int memfd)
{
	char path[sizeof(b->opts.socket_path) + 8];
	struct stat bound;
	pid_t pid;
	int lfd, err, status;

	err = keeper_path(b->opts.socket_path, path, sizeof(path));
	if (err) {
		blog(LOG_ERR, "--socket %s: too long for the keeper's socket beside it",
		     b->opts.socket_path);
		return err;
	}
	lfd = safe_bind_unix(b, path, SOCK_SEQPACKET, "keeper socket");
	if (lfd < 0)
		return lfd;
	if (listen(lfd, 16) < 0 || lstat(path, &bound) < 0) {
		err = -errno;
		goto fail;
	}
	/* Twice, so that the keeper is nobody's child here: its exit must
	 * not reach the broker's loop as SIGCHLD or a zombie. */
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		err = -errno;
		goto fail;
	}
	if (pid == 0) {
		/* Its own session: a ^C at the broker's terminal must not end it. */
		setsid();
		if (fork() == 0) {
			if (b->mem)
				munmap(b->mem, b->mem_size); /* not a user in /proc maps */
			keeper_main(lfd, memfd, path, &bound);
		}
		_exit(0);
	}
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	close(lfd);
	b->keeper = true;
	blog(LOG_INFO, "keeper holds the segment at %s", path);
	return 0;
fail:
	blog(LOG_ERR, "cannot start the segment's keeper at %s: %s", path, strerror(-err));
	close(lfd);
	unlink(path);
	return err;
}

void keeper_stop(struct broker *b)
{
	char path[sizeof(b->opts.socket_path) + 8];

	if (!b->keeper || keeper_path(b->opts.socket_path, path, sizeof(path)))
		return;
	if (keeper_quit(path))
		blog(LOG_WARNING, "the segment's keeper at %s did not answer", path);
	b->keeper = false;
}
