// SPDX-License-Identifier: MIT
/*
 * The network faces' listeners: a TCP socket bound from a [HOST:]PORT flag,
 * or the stream socket a service manager passed under the face's name, and
 * the cap on a listener's connections. (The control socket, a Unix socket
 * of the core's, is bound in broker/core/listen.c.)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <syslog.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "core/broker.h"
#include "net.h"

/* Split [HOST:]PORT (HOST defaults to 127.0.0.1; IPv6 in brackets). */
static int split_spec(const char *spec, char *host, size_t hsize, char *port, size_t psize)
{
	const char *colon = strrchr(spec, ':');

	snprintf(host, hsize, "127.0.0.1");
	if (!colon) {
		if (strlen(spec) >= psize)
			return -EINVAL;
		strcpy(port, spec);
	} else {
		size_t n = (size_t)(colon - spec);

		if (n >= hsize || strlen(colon + 1) >= psize)
			return -EINVAL;
		if (n) {
			memcpy(host, spec, n);
			host[n] = '\0';
		}
		if (host[0] == '[' && n > 2 && host[n - 1] == ']') { /* [::1]:8080 */
			memmove(host, host + 1, n - 2);
			host[n - 2] = '\0';
		}
		strcpy(port, colon + 1);
	}
	return 0;
}

int listen_spec_loopback(const char *spec)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC,
				  .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *ai = NULL, *a;
	char host[128], port[16];
	int loop = 1;

	if (split_spec(spec, host, sizeof(host), port, sizeof(port)) ||
	    getaddrinfo(host, port, &hints, &ai))
		return 0; /* not ours to judge: listen_tcp_spec() says why */
	for (a = ai; a; a = a->ai_next) {
		if (a->ai_family == AF_INET) {
			const struct sockaddr_in *in = (const void *)a->ai_addr;

			loop &= (ntohl(in->sin_addr.s_addr) >> 24) == 127;
		} else if (a->ai_family == AF_INET6) {
			const struct sockaddr_in6 *in6 = (const void *)a->ai_addr;
			const uint8_t *v = in6->sin6_addr.s6_addr;

			loop &= IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) ||
				(IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && v[12] == 127);
		} else {
			loop = 0;
		}
	}
	freeaddrinfo(ai);
	return loop;
}

/*
 * A listening TCP socket for @spec, [HOST:]PORT (HOST defaults to 127.0.0.1;
 * an IPv6 address in brackets), non-blocking. @flag and @what name it in
 * errors. The fd, or a negative errno.
 */
int listen_tcp_spec(const char *spec, const char *flag, const char *what)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC,
				  .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *ai = NULL;
	char host[128], port[16];
	int fd, err, one = 1;

	if (split_spec(spec, host, sizeof(host), port, sizeof(port)))
		return -EINVAL;
	err = getaddrinfo(host, port, &hints, &ai);
	if (err) {
		blog(LOG_ERR, "%s %s: %s", flag, spec, gai_strerror(err));
		return -EINVAL;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
			bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 4096))) {
		err = -errno;
		close(fd);
		fd = err;
	} else if (fd < 0) {
		fd = -errno;
	}
	freeaddrinfo(ai);
	if (fd < 0)
		blog(LOG_ERR, "cannot serve %s on %s: %s", what, spec, strerror(-fd));
	return fd;
}

int activated_stream_fd(const char *name)
{
	char **names = NULL;
	int n, i, fd = -1;

	n = sd_listen_fds_with_names(0, &names);
	for (i = 0; i < n; i++) {
		if (fd < 0 && names && !strcmp(names[i], name) &&
		    sd_is_socket(SD_LISTEN_FDS_START + i, 0, SOCK_STREAM, 1) > 0)
			fd = SD_LISTEN_FDS_START + i;
		if (names)
			free(names[i]);
	}
	free(names);
	/* Passed in blocking mode by some managers: accepting must not block. */
	if (fd >= 0 && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0)
		fd = -1;
	return fd;
}

unsigned listen_max_connections(unsigned configured)
{
	struct rlimit rl;
	uint64_t n = 1024;

	if (configured)
		return configured;
	if (!getrlimit(RLIMIT_NOFILE, &rl))
		n = rl.rlim_cur;
	n /= 4;
	return (unsigned)(n < 16 ? 16 : n > 16384 ? 16384 : n);
}
