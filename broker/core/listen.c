// SPDX-License-Identifier: MIT
/* The control socket: from systemd socket activation when present ("control",
 * or the only listening SOCK_SEQPACKET socket passed), else bound at --socket. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <syslog.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "broker.h"
#include "paths.h"

/*
 * The passed socket named "control", else the only listening SOCK_SEQPACKET
 * Unix socket passed: other fds may come along (the segment from the fd
 * store, later an HTTP socket), and a socket unit without
 * FileDescriptorName= names its fds after the unit.
 */
static int activated_fd(void)
{
	char **names = NULL;
	int n, i, fd = -1, named = -1, seqpackets = 0;

	n = sd_listen_fds_with_names(0, &names); /* kept: http.c looks too */
	for (i = 0; i < n; i++) {
		int cand = SD_LISTEN_FDS_START + i;

		if (sd_is_socket_unix(cand, SOCK_SEQPACKET, 1, NULL, 0) <= 0)
			continue;
		seqpackets++;
		if (fd < 0)
			fd = cand;
		if (named < 0 && names && !strcmp(names[i], "control"))
			named = cand;
	}
	if (names) {
		for (i = 0; i < n; i++)
			free(names[i]);
		free(names);
	}
	if (named >= 0)
		fd = named;
	else if (seqpackets > 1)
		fd = -1; /* several and none named: refuse to guess */
	/* systemd-socket-activate passes a blocking socket; accepting until
	 * EAGAIN must never block the event loop. */
	if (fd >= 0 && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0)
		fd = -1;
	return fd;
}

/*
 * Where a socket may live. A privileged broker that binds, chmods or chowns by
 * path in a directory another user can write follows whatever that user puts
 * there (a symlink to /etc/shadow, swapped in between bind() and chmod()).
 * So every directory on the way must be one nobody else can change: owned by
 * root or by us, and not writable by group or others, except a sticky one
 * (/tmp) on the way, where others cannot rename or remove our entries. The
 * socket's own directory must not be writable by anyone else at all: in a
 * sticky directory another user could still pre-create the name. A symlink on
 * the way is followed only if root or we own it. Missing directories are
 * created 0755 (the socket's own mode guards it) and owned by us.
 */
static int unsafe_dir(const struct stat *st, bool last, const char **why)
{
	uid_t me = geteuid();

	if (!S_ISDIR(st->st_mode))
		*why = "not a directory";
	else if (st->st_uid != 0 && st->st_uid != me)
		*why = "owned by another user";
	else if ((st->st_mode & (S_IWGRP | S_IWOTH)) && (last || !(st->st_mode & S_ISVTX)))
		*why = "writable by other users";
	else
		return 0;
	return -EPERM;
}

/* Step from @dirfd into @name (created if missing and @may_create); returns
 * an O_PATH fd. */
static int step_into(int dirfd, const char *name, bool last, bool may_create, const char **why)
{
	struct stat st;
	int fd;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		if (errno != ENOENT)
			return -errno;
		if (!may_create) {
			*why = "missing (directories are created only below the runtime directory)";
			return -ENOENT;
		}
		if (mkdirat(dirfd, name, 0755) < 0 && errno != EEXIST)
			return -errno;
		/* Opened without following links: the directory we made. */
		fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		if (fstat(fd, &st) == 0 && st.st_uid == geteuid())
			fchmod(fd, 0755); /* whatever the umask */
		close(fd);
		if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			return -errno;
	}
	if (S_ISLNK(st.st_mode) && st.st_uid != 0 && st.st_uid != geteuid()) {
		*why = "a symbolic link owned by another user";
		return -EPERM;
	}
	fd = openat(dirfd, name, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || unsafe_dir(&st, last, why)) {
		close(fd);
		return -EPERM;
	}
	return fd;
}

/* Below the runtime directory ($XDG_RUNTIME_DIR, else /run for root and
 * /run/user/UID for others): where the broker may create directories. A
 * --socket elsewhere must name a directory that exists: a typo must not
 * leave a tree of ours in /var or /home. */
static bool may_create(const char *path)
{
	char rt[sizeof(((struct sockaddr_un *)0)->sun_path)];
	size_t n;

	if (paths_runtime_dir(rt, sizeof(rt)) || rt[0] != '/')
		return false;
	n = strlen(rt);
	while (n > 1 && rt[n - 1] == '/')
		rt[--n] = '\0';
	return !strncmp(path, rt, n) && path[n] == '/' && !strstr(path + n, "/..");
}

/*
 * Open the directory @dir (absolute, or relative to the working directory)
 * as an O_PATH fd after checking every directory on the way; @bad receives
 * the component refused and @why the reason.
 */
static int open_safe_dir(const char *dir, char *bad, size_t bad_size, const char **why)
{
	char buf[sizeof(((struct sockaddr_un *)0)->sun_path)], *p, *next;
	struct stat st;
	int fd, nfd;

	snprintf(buf, sizeof(buf), "%s", dir);
	fd = open(buf[0] == '/' ? "/" : ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	snprintf(bad, bad_size, "%s", buf[0] == '/' ? "/" : ".");
	if (fstat(fd, &st) < 0 || unsafe_dir(&st, !*buf || !strcmp(buf, "/"), why)) {
		close(fd);
		return -EPERM;
	}
	for (p = buf; *p == '/'; p++)
		;
	while (*p) {
		next = strchr(p, '/');
		if (next)
			*next++ = '\0';
		while (next && *next == '/')
			next++;
		snprintf(bad, bad_size, "%.*s%s", (int)(p - buf), dir, p);
		nfd = step_into(fd, p, !next || !*next, may_create(bad), why);
		close(fd);
		if (nfd < 0)
			return nfd;
		fd = nfd;
		p = next && *next ? next : p + strlen(p);
	}
	return fd;
}

/* A socket file nobody answers on is left over from a dead broker. */
static int probe(const struct sockaddr_un *sa, int type)
{
	int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0), r;

	if (fd < 0)
		return -errno;
	/* Only a refusal means nobody is there: any other answer keeps it. */
	r = connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) < 0 && errno == ECONNREFUSED;
	close(fd);
	return r ? 0 : -EADDRINUSE;
}

static int refuse(struct broker *b, const char *what, const char *path, const char *bad,
		  const char *why)
{
	blog(LOG_ERR,
	     "refusing %s %s: %s is %s; use a directory only this user (uid %u) or "
	     "root can change, e.g. one it creates itself",
	     what, path, bad, why, (unsigned)geteuid());
	b->exit_code = EXIT_UNSAFE_PATH;
	return -EPERM;
}

int safe_bind_unix(struct broker *b, const char *path, int type, const char *what)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char dir[sizeof(sa.sun_path)], bad[sizeof(sa.sun_path) + 8];
	const char *base, *why = "unusable";
	struct stat st;
	mode_t old_mask;
	int dirfd, fd, err;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	strcpy(dir, path);
	base = strrchr(path, '/');
	if (base) {
		dir[base - path] = '\0';
		if (base == path)
			strcpy(dir, "/");
		base++;
	} else {
		strcpy(dir, "");
		base = path;
	}
	if (!*base)
		return -EINVAL;
	dirfd = open_safe_dir(dir, bad, sizeof(bad), &why);
	if (dirfd == -EPERM)
		return refuse(b, what, path, bad, why);
	if (dirfd == -ENOENT && strstr(why, "runtime directory")) {
		blog(LOG_ERR,
		     "cannot bind %s %s: %s is %s; create it first, or use a path "
		     "under the runtime directory",
		     what, path, bad, why);
		return dirfd;
	}
	if (dirfd < 0) {
		blog(LOG_ERR, "cannot reach the directory of %s %s: %s", what, path,
		     strerror(-dirfd));
		return dirfd;
	}
	/* Nobody else can change this directory now: what we find is ours. */
	if (fstatat(dirfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (!S_ISSOCK(st.st_mode) || st.st_uid != geteuid()) {
			close(dirfd);
			blog(LOG_ERR,
			     "refusing %s %s: the name is taken by %s owned by uid %u; "
			     "remove it if no server of ours is meant to be there",
			     what, path,
			     S_ISSOCK(st.st_mode) ? "a socket" : "a file that is no socket",
			     (unsigned)st.st_uid);
			b->exit_code = EXIT_UNSAFE_PATH;
			return -EPERM;
		}
		err = probe(&sa, type);
		if (err) {
			close(dirfd);
			blog(LOG_ERR, "another server is listening on %s", path);
			return err;
		}
		unlinkat(dirfd, base, 0);
	}
	fd = socket(AF_UNIX, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		close(dirfd);
		return -errno;
	}
	/* Born 0660: no chmod by path afterwards. */
	old_mask = umask(0117);
	err = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0;
	umask(old_mask);
	if (!err && (fstatat(dirfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISSOCK(st.st_mode) ||
		     (st.st_mode & 0777) != 0660))
		err = -EIO;
	if (!err && b->opts.have_group &&
	    fchownat(dirfd, base, (uid_t)-1, b->opts.group, AT_SYMLINK_NOFOLLOW) < 0)
		err = -errno;
	close(dirfd);
	if (err) {
		blog(LOG_ERR, "cannot bind %s %s: %s", what, path, strerror(-err));
		close(fd);
		return err;
	}
	return fd;
}

void listen_use_activated_path(struct broker *b)
{
	struct sockaddr_un sa;
	socklen_t len = sizeof(sa);
	int fd = activated_fd();
	size_t n;

	if (fd < 0)
		return;
	memset(&sa, 0, sizeof(sa));
	if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0 || sa.sun_family != AF_UNIX ||
	    len <= offsetof(struct sockaddr_un, sun_path) || !sa.sun_path[0]) {
		/* Abstract or unnamed: there is no directory to keep beside. */
		blog(LOG_WARNING,
		     "the socket-activated control socket has no path; the "
		     "segment's keeper stays beside %s",
		     b->opts.socket_path);
		return;
	}
	n = strnlen(sa.sun_path, len - offsetof(struct sockaddr_un, sun_path));
	if (n >= sizeof(b->opts.socket_path))
		return;
	if (strncmp(b->opts.socket_path, sa.sun_path, sizeof(b->opts.socket_path)))
		blog(LOG_INFO,
		     "serving the socket-activated %.*s (not %s): the segment's keeper "
		     "sits beside it",
		     (int)n, sa.sun_path, b->opts.socket_path);
	memcpy(b->opts.socket_path, sa.sun_path, n);
	b->opts.socket_path[n] = '\0';
}

int listen_setup(struct broker *b)
{
	int fd, err;

	fd = activated_fd();
	if (fd >= 0) {
		b->listen_fd = fd;
		b->listen_owned = false;
		blog(LOG_INFO, "using socket-activated control socket");
		return 0;
	}
	fd = safe_bind_unix(b, b->opts.socket_path, SOCK_SEQPACKET, "control socket");
	if (fd < 0)
		return fd;
	if (listen(fd, 128) < 0) {
		err = -errno;
		blog(LOG_ERR, "cannot listen on %s: %s", b->opts.socket_path, strerror(-err));
		close(fd);
		return err;
	}
	b->listen_fd = fd;
	b->listen_owned = true;
	return 0;
}

void listen_teardown(struct broker *b)
{
	if (b->listen_fd < 0)
		return;
	close(b->listen_fd);
	if (b->listen_owned)
		unlink(b->opts.socket_path);
	b->listen_fd = -1;
}

ssize_t send_with_fd(int sock, const void *buf, size_t len, int fd, int flags)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { (void *)buf, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (fd >= 0) {
		struct cmsghdr *c;

		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = sizeof(ctl.buf);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	return sendmsg(sock, &mh, flags);
}
