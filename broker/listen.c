// SPDX-License-Identifier: MIT
/* The control socket: from systemd socket activation when present ("control",
 * or the only listening SOCK_SEQPACKET socket passed), else bound at --socket. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <syslog.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "broker.h"

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

/* mkdir -p for the socket's directory (0755: the socket's mode guards it). */
static void make_parent(const char *path)
{
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)], *p;

	snprintf(dir, sizeof(dir), "%s", path);
	p = strrchr(dir, '/');
	if (!p || p == dir)
		return;
	*p = '\0';
	for (p = dir + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			mkdir(dir, 0755);
			*p = '/';
		}
	mkdir(dir, 0755);
}

/* A socket file nobody answers on is left over from a dead broker. */
static int remove_stale(const struct sockaddr_un *sa)
{
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), r;

	if (fd < 0)
		return -errno;
	r = connect(fd, (const struct sockaddr *)sa, sizeof(*sa));
	close(fd);
	if (r == 0)
		return -EADDRINUSE;
	if (errno == ECONNREFUSED)
		unlink(sa->sun_path);
	return 0;
}

int listen_setup(struct broker *b)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, err;

	fd = activated_fd();
	if (fd >= 0) {
		b->listen_fd = fd;
		b->listen_owned = false;
		blog(LOG_INFO, "using socket-activated control socket");
		return 0;
	}
	if (strlen(b->opts.socket_path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, b->opts.socket_path);
	make_parent(sa.sun_path);
	err = remove_stale(&sa);
	if (err) {
		blog(LOG_ERR, "another broker is listening on %s", sa.sun_path);
		return err;
	}
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(sa.sun_path, 0660) < 0 ||
	    (b->opts.have_group && chown(sa.sun_path, (uid_t)-1, b->opts.group) < 0) ||
	    listen(fd, 128) < 0) {
		err = -errno;
		blog(LOG_ERR, "cannot listen on %s: %s", sa.sun_path, strerror(-err));
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
