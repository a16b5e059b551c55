// SPDX-License-Identifier: MIT
/* Shared helpers of the network listener tests (net_fixture.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "net_fixture.h"

int free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t n = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    getsockname(fd, (struct sockaddr *)&sa, &n))
		FAIL_AT("finding a free port: %s", strerror(errno));
	close(fd);
	return ntohs(sa.sin_port);
}

char *strf(const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0)
		FAIL_AT("out of memory");
	return s;
}
