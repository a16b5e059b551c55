// SPDX-License-Identifier: MIT
/*
 * Unauthenticated connections against the TCP protocol (broker/net/): ones
 * that never send "auth" filled --tcp-max-connections and kept every
 * authenticated client out, stayed until the read timeout, and a wrong
 * token was answered at once (11 578 guesses a second). The attacker runs
 * as nobody, whom the control socket does not admit, so only the token
 * could let it in; the clients run as root, whom it admits.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker_fixture.h"
#include "harness.h"
#include "net_fixture.h"

static void start(struct broker_proc *b, int port, const char *const *more)
{
	const char *args[16] = { "--tcp-listen", strf("127.0.0.1:%d", port), "--auth-token",
				 "tok" };
	int n = 4, fd = -1;

	while (more && *more && n < 15)
		args[n++] = *more++;
	broker_start(b, args);
	/* The control socket answers before the listeners are up. */
	if (!WAIT_FOR((fd = tcp_connect_from(NULL, port)) >= 0, 5000))
		FAIL_AT("nothing listens on port %d", port);
	close(fd);
}

/* One reply line on @fd within @ms into @buf; false on EOF or timeout. */
static bool reply(int fd, char *buf, size_t size, int ms)
{
	size_t n = 0;
	uint64_t end = now_ms() + (uint64_t)ms;

	while (n + 1 < size) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int64_t left = (int64_t)(end - now_ms());

		if (left <= 0 || poll(&p, 1, (int)left) != 1 || recv(fd, buf + n, 1, 0) != 1)
			return false;
		if (buf[n] == '\n')
			break;
		n++;
	}
	buf[n] = '\0';
	return true;
}

/* An authenticated client takes and releases a lock: served? */
static bool client_served(int port, const char *key)
{
	char line[128], req[256];
	int fd = tcp_connect_from(NULL, port);
	bool ok;

	if (fd < 0)
		return false;
	snprintf(req, sizeof(req), "auth\n_\ntok\nl\n%s\n5\n", key);
	ok = send(fd, req, strlen(req), MSG_NOSIGNAL) == (ssize_t)strlen(req) &&
	     reply(fd, line, sizeof(line), 5000) && !strcmp(line, "ok") &&
	     reply(fd, line, sizeof(line), 5000) && !strncmp(line, "ok ", 3);
	close(fd);
	return ok;
}

/* As nobody: open @n connections that never authenticate, say "ready",
 * then hold them until told to go. */
static void silent_holder(void *arg, int in, int out)
{
	int port = *(int *)arg, i, fds[64];
	char line[16];

	become_nobody();
	for (i = 0; i < 12; i++)
		fds[i] = tcp_connect_from(NULL, port);
	say(out, "ready");
	hear(in, line, sizeof(line));
	for (i = 0; i < 12; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

TEST(net_tcp, unauthenticated_connections_keep_no_client_out, 60)
{
	int port = free_port(), i, served = 0;
	struct broker_proc b;
	struct child att;

	start(&b, port, (const char *const[]){ "--tcp-max-connections", "8", NULL });
	child_spawn(&att, silent_holder, &port);
	child_expect(&att, "ready", 10000);
	for (i = 0; i < 6; i++)
		served += client_served(port, strf("k%d", i));
	fprintf(stderr, "  %d of 6 clients served beside 12 silent connections (cap 8)\n", served);
	child_send(&att, "go");
	child_wait(&att, 5000);
	CHECK(served >= 5);
	broker_stop(&b);
}

/* As nobody: connect, send nothing; exit 0 if the broker closes the
 * connection within 14 s (--tcp-auth-timeout: 10 by default), 1 if not. */
static void waits_for_close(void *arg, int in, int out)
{
	int port = *(int *)arg, fd;
	uint64_t t0;

	(void)in;
	become_nobody();
	fd = tcp_connect_from(NULL, port);
	if (fd < 0)
		_exit(2);
	t0 = now_ms();
	while (!tcp_peer_closed(fd) && now_ms() - t0 < 14000) {
		struct pollfd p = { .fd = fd, .events = POLLIN | POLLRDHUP };

		poll(&p, 1, 200);
	}
	say(out, "%llu", (unsigned long long)(now_ms() - t0));
	_exit(tcp_peer_closed(fd) ? 0 : 1);
}

TEST(net_tcp, a_connection_that_does_not_authenticate_is_closed_at_its_deadline, 60)
{
	int port = free_port(), status;
	struct broker_proc b;
	struct child c;
	char line[32];

	/* The deadline by default; reading alone would wait 60 s. */
	start(&b, port, (const char *const[]){ "--tcp-read-timeout", "60", NULL });
	child_spawn(&c, waits_for_close, &port);
	CHECK_OK(child_read(&c, line, sizeof(line), 25000));
	status = child_wait(&c, 5000);
	fprintf(stderr, "  silent connection: %s after %s ms\n",
		WIFEXITED(status) && !WEXITSTATUS(status) ? "closed" : "still open", line);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	broker_stop(&b);
}

/*
 * As nobody: 8 connections at once, each sending a wrong token and, when
 * answered (and closed), connecting again with the next guess, for 2 s.
 * Says how many answers came.
 */
static void guesser(void *arg, int in, int out)
{
	int port = *(int *)arg, fd[8], i, answers = 0;
	uint64_t end;

	(void)in;
	become_nobody();
	signal(SIGPIPE, SIG_IGN);
	for (i = 0; i < 8; i++) {
		fd[i] = tcp_connect_from(NULL, port);
		if (fd[i] >= 0)
			send(fd[i], "auth\n_\nguess\n", 13, MSG_NOSIGNAL);
	}
	end = now_ms() + 2000;
	while (now_ms() < end) {
		struct pollfd p[8];

		for (i = 0; i < 8; i++)
			p[i] = (struct pollfd){ .fd = fd[i], .events = POLLIN };
		if (poll(p, 8, 100) <= 0)
			continue;
		for (i = 0; i < 8; i++) {
			char buf[64];

			if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			if (recv(fd[i], buf, sizeof(buf), MSG_DONTWAIT) > 0 &&
			    !strncmp(buf, "error_auth", 10))
				answers++;
			close(fd[i]);
			fd[i] = tcp_connect_from(NULL, port);
			if (fd[i] >= 0)
				send(fd[i], "auth\n_\nguess\n", 13, MSG_NOSIGNAL);
		}
	}
	say(out, "%d", answers);
}

/* Wrong tokens are answered one per delay from one peer, however many
 * connections it guesses over, and the loop serves others meanwhile. */
TEST(net_tcp, wrong_tokens_are_answered_slowly, 60)
{
	int port = free_port(), answers, served = 0, i;
	struct broker_proc b;
	struct child g;
	char line[32];

	start(&b, port, NULL);
	child_spawn(&g, guesser, &port);
	for (i = 0; i < 3; i++) /* others are served meanwhile */
		served += client_served(port, strf("g%d", i));
	CHECK_OK(child_read(&g, line, sizeof(line), 15000));
	answers = atoi(line);
	child_wait(&g, 5000);
	fprintf(stderr,
		"  %d wrong tokens answered in 2 s over 8 connections; %d of 3 clients "
		"served meanwhile\n",
		answers, served);
	/* One a quarter second: 8 in 2 s; before, thousands. */
	CHECK(answers <= 40);
	CHECK(served == 3);
	broker_stop(&b);
}
