// SPDX-License-Identifier: MIT
/*
 * A minimal client of dflockd's TCP line protocol for the tests
 * (tests/it_tcp.c, tests/it_tcp_signal.c): connect on loopback, send one
 * three-line request, read one reply line with a deadline.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "net_fixture.h"
#include "tcp_fixture.h"

int try_connect(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		close(fd);
		return -1;
	}
	return fd;
}

void tsend(int fd, const char *cmd, const char *key, const char *arg)
{
	char *buf = strf("%s\n%s\n%s\n", cmd, key, arg);
	size_t n = strlen(buf);

	if (send(fd, buf, n, MSG_NOSIGNAL) != (ssize_t)n)
		FAIL_AT("send: %s", strerror(errno));
	free(buf);
}

/* One reply line (without '\n'), or "<EOF>"; fails after @timeout_ms. */
char *tline_within(int fd, int timeout_ms)
{
	static char line[1 << 16];
	size_t n = 0;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&p, 1, timeout_ms) != 1)
			FAIL_AT("no reply within %d ms (got \"%.*s\")", timeout_ms, (int)n, line);
		r = recv(fd, line + n, 1, 0);
		if (r <= 0) {
			snprintf(line, sizeof(line), "<EOF>");
			return line;
		}
		if (line[n] == '\n') {
			line[n] = '\0';
			return line;
		}
		if (++n >= sizeof(line) - 1)
			FAIL_AT("reply too long");
	}
}

char *tline(int fd)
{
	return tline_within(fd, 10000);
}

char *treq(int fd, const char *cmd, const char *key, const char *arg)
{
	tsend(fd, cmd, key, arg);
	return tline(fd);
}
