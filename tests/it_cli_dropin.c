// SPDX-License-Identifier: MIT
/*
 * What a newcomer meets first with the CLI: `shmlock status` names every
 * listener the broker serves (metrics and the Consul API as well as HTTP
 * and TCP), and a command that finds no broker says so on a terminal after
 * a moment, instead of waiting in silence (and says nothing of it to a
 * pipe, where scripts read).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker_fixture.h"
#include "harness.h"
#include "net_fixture.h"

static const char *cli_bin(void)
{
	const char *bin = getenv("SHMLOCK_CLI_BIN");

	if (!bin)
		FAIL_AT("SHMLOCK_CLI_BIN is not set (run through 'make test')");
	return bin;
}

/* Run the CLI with @args, stdout and stderr into one pipe; its output. */
static char *run_piped(const char *const *args, int *status)
{
	static char out[16384];
	const char *argv[16];
	int p[2], n = 0;
	size_t len = 0;
	pid_t pid;

	argv[n++] = cli_bin();
	while (*args && n < 15)
		argv[n++] = *args++;
	argv[n] = NULL;
	if (pipe2(p, O_CLOEXEC))
		FAIL_AT("pipe: %s", strerror(errno));
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		dup2(p[1], 1);
		dup2(p[1], 2);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(p[1]);
	for (;;) {
		ssize_t r = read(p[0], out + len, sizeof(out) - 1 - len);

		if (r <= 0)
			break;
		len += (size_t)r;
	}
	out[len] = '\0';
	close(p[0]);
	*status = pid_wait(pid, 10000);
	return out;
}

TEST(cli_dropin, status_lists_the_metrics_and_consul_listeners, 30)
{
	struct broker_proc b;
	char *metrics = strf("127.0.0.1:%d", free_port()), *consul, *out;
	int status;

	consul = strf("127.0.0.1:%d", free_port());
	if (!strcmp(metrics, consul))
		consul = strf("127.0.0.1:%d", free_port());
	broker_start(&b, (const char *const[]){ "--metrics-listen", metrics, "--consul-listen",
						consul, "--http-insecure-no-auth", NULL });
	setenv("SHMLOCK_SOCKET", b.sock, 1);
	out = run_piped((const char *const[]){ "status", NULL }, &status);
	CHECK_EQ(status, 0);
	if (!strstr(out, strf("http://%s", metrics)))
		FAIL_AT("status names no metrics listener %s:\n%s", metrics, out);
	if (!strstr(out, strf("http://%s", consul)))
		FAIL_AT("status names no Consul listener %s:\n%s", consul, out);
	out = run_piped((const char *const[]){ "status", "-json", NULL }, &status);
	CHECK_EQ(status, 0);
	if (!strstr(out, "\"metrics\": {") || !strstr(out, "\"consul\": {") ||
	    !strstr(out, strf("\"listen\": \"%s\"", metrics)) ||
	    !strstr(out, strf("\"listen\": \"%s\"", consul)))
		FAIL_AT("status -json lacks the listeners:\n%s", out);
	broker_stop_clean(&b);
}

/* Read the pty until @want appears or @timeout_ms pass; all read so far. */
static char *pty_until(int fd, const char *want, int timeout_ms)
{
	static char buf[8192];
	size_t len = 0;
	uint64_t end = now_ms() + (uint64_t)timeout_ms;

	buf[0] = '\0';
	while (!strstr(buf, want) && now_ms() < end) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&p, 1, (int)(end - now_ms())) != 1)
			break;
		r = read(fd, buf + len, sizeof(buf) - 1 - len);
		if (r <= 0)
			break;
		len += (size_t)r;
		buf[len] = '\0';
	}
	return buf;
}

TEST(cli_dropin, waiting_for_a_broker_is_said_on_a_terminal, 30)
{
	char dir[] = "/tmp/shmlock-test-nobroker-XXXXXX", *sock, *out, *seen;
	int master, status;
	pid_t pid;

	if (!mkdtemp(dir))
		FAIL_AT("mkdtemp: %s", strerror(errno));
	sock = strf("%s/none.sock", dir);
	setenv("SHMLOCK_SOCKET", sock, 1);
	setenv("SHMLOCK_BROKER_WAIT_MS", "8000", 1);
	fflush(NULL);
	pid = forkpty(&master, NULL, NULL, NULL);
	if (pid < 0)
		FAIL_AT("forkpty: %s", strerror(errno));
	if (pid == 0) {
		execl(cli_bin(), cli_bin(), "keys", (char *)NULL);
		_exit(127);
	}
	/* Said while it still waits (the wait is 8 s), naming the socket. */
	seen = pty_until(master, "SHMLOCK_BROKER_WAIT_MS", 6000);
	if (!strstr(seen, strf("waiting for a broker at %s", sock)))
		FAIL_AT("no word of the wait on the terminal within 6 s (got \"%s\")", seen);
	CHECK(kill(pid, 0) == 0); /* still waiting, not given up */
	kill(pid, SIGKILL);
	pid_wait(pid, 10000);
	close(master);
	/* To a pipe: only the outcome, as scripts expect. */
	setenv("SHMLOCK_BROKER_WAIT_MS", "1500", 1);
	out = run_piped((const char *const[]){ "keys", NULL }, &status);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) != 0);
	if (strstr(out, "waiting for a broker"))
		FAIL_AT("the wait was announced to a pipe: \"%s\"", out);
	rmdir(dir);
}
