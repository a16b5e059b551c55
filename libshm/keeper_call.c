// SPDX-License-Identifier: MIT
/*
 * The client side of the keeper's protocol (keeper_proto.h; the keeper is
 * broker/core/keeper.c). The broker, the CLI's offline view (cli/offline.c)
 * and the tests all ask it this way.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "keeper_proto.h"

int keeper_path(const char *socket_path, char *buf, size_t size)
{
	size_t max = sizeof(((struct sockaddr_un *)0)->sun_path);

	if (strlen(socket_path) + sizeof(KEEPER_SUFFIX) > (size < max ? size : max))
		return -ENAMETOOLONG;
	snprintf(buf, size, "%s%s", socket_path, KEEPER_SUFFIX);
	return 0;
}

int keeper_exchange(const char *path, char cmd, int timeout_s, int *fd)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = timeout_s };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	char ans = 0;
	struct iovec iov = { &ans, 1 };
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = ctl.buf,
			     .msg_controllen = sizeof(ctl.buf) };
	struct cmsghdr *c;
	int sock, err = 0, got = -1;
	ssize_t n;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (sock < 0)
		return -errno;
	setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(sock, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    send(sock, &cmd, 1, MSG_NOSIGNAL) != 1) {
		err = -errno;
		goto out;
	}
	do
		n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	for (c = n > 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
		    c->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(&got, CMSG_DATA(c), sizeof(int));
	if (n != 1 || ans != KEEPER_OK || (fd && got < 0))
		err = -EPROTO;
	else if (fd)
		*fd = got, got = -1;
out:
	if (got >= 0)
		close(got);
	close(sock);
	return err;
}
