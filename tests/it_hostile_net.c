// SPDX-License-Identifier: MIT
/*
 * A hostile peer on the control socket (the segment-side attacks are in it_hostile.c):
 * connections that never send, closing sessions one may not, names that
 * try to forge log lines. Each against a real shmlockd.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "broker_fixture.h"
#include "harness.h"
#include "net_fixture.h"
#include "proto.h"

#define NOBODY 65534u

/* utime + stime of @pid, in ms. */
static double cpu_ms(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut = 0, st = 0;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		FAIL_AT("open %s: %s", path, strerror(errno));
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		FAIL_AT("read %s", path);
	buf[n] = '\0';
	p = strrchr(buf, ')');
	if (!p ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		FAIL_AT("parse %s", path);
	return (double)(ut + st) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
}

static off_t file_size(const char *path)
{
	struct stat st;

	return stat(path, &st) ? 0 : st.st_size;
}

/* Has the broker closed @fd (EOF or reset)? */
static bool closed_by_peer(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char c;

	if (poll(&p, 1, 0) <= 0)
		return false;
	return recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

/* Open (and close) a session in a child; true when it did within @ms. */
static bool session_opens_within(const struct broker_proc *b, int ms)
{
	pid_t pid;
	int status = 0;
	bool done;

	fflush(NULL);
	pid = fork();
	if (pid < 0)
		FAIL_AT("fork: %s", strerror(errno));
	if (pid == 0) {
		struct local_session_opts o;
		local_session *s;

		local_session_opts_init(&o);
		o.socket_path = b->sock;
		o.name = "well-behaved";
		if (local_session_open(&o, &s))
			_exit(1);
		local_session_close(s);
		_exit(0);
	}
	done = WAIT_FOR(waitpid(pid, &status, WNOHANG) == pid, ms);
	if (!done) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		return false;
	}
	return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

#define BROKER_NOFILE 64
#define ATTACK_CONNS 400
#define WINDOW_MS 2000

/*
 * Item 8: a peer opens more connections than the broker has fds, sends
 * nothing and holds them. The broker must keep serving (a well-behaved
 * client opens a session), not spin (its CPU over the window stays well
 * under one CPU), not flood its log, and close the silent connections.
 * @at_start: the broker starts with the low limit (its caps follow from
 * it); else the limit is lowered under a running broker (prlimit), whose
 * caps are then above what it has, so accept() meets EMFILE.
 */
static void silent_flood(bool at_start)
{
	static int fds[ATTACK_CONNS];
	struct rlimit old, low = { BROKER_NOFILE, BROKER_NOFILE };
	struct broker_proc b;
	double cpu0, cpu1;
	off_t log0, log1;
	uint64_t t0;
	int n = 0, i, open_left;

	CHECK_OK(getrlimit(RLIMIT_NOFILE, &old));
	if (at_start) {
		/* Inherited through fork and exec; only the soft limit, so
		 * that ours can be raised back. */
		low.rlim_max = old.rlim_max;
		CHECK_OK(setrlimit(RLIMIT_NOFILE, &low));
		broker_start(&b, NULL);
		CHECK_OK(setrlimit(RLIMIT_NOFILE, &old));
	} else {
		broker_start(&b, NULL);
		CHECK_OK(prlimit(b.pid, RLIMIT_NOFILE, &low, NULL));
	}

	log0 = file_size(b.log);
	cpu0 = cpu_ms(b.pid);
	t0 = now_ms();
	for (i = 0; i < ATTACK_CONNS; i++) {
		int fd = unix_try_connect(b.sock, SOCK_SEQPACKET | SOCK_NONBLOCK);

		if (fd < 0)
			break; /* the backlog is full */
		fds[n++] = fd;
	}
	CHECK(n > BROKER_NOFILE);
	/* Someone else still gets a session, promptly. */
	CHECK(session_opens_within(&b, 5000));
	/* The measuring window itself (not a wait for a condition). */
	while (now_ms() < t0 + WINDOW_MS)
		usleep(50 * 1000);
	cpu1 = cpu_ms(b.pid);
	log1 = file_size(b.log);
	fprintf(stderr, "  %d silent connections: broker CPU %.0f ms in %llu ms, log +%lld bytes\n",
		n, cpu1 - cpu0, (unsigned long long)(now_ms() - t0), (long long)(log1 - log0));
	/* Spinning on a failing accept() costs a whole CPU: ~WINDOW_MS. */
	CHECK(cpu1 - cpu0 < WINDOW_MS / 2);
	/* ... and wrote ~20 MB/s of the same line. */
	CHECK(log1 - log0 < 64 * 1024);

	/* Every silent connection is closed: evicted, or timed out. */
	open_left = n;
	CHECK(WAIT_FOR(({
			       for (i = 0; i < n; i++)
				       if (fds[i] >= 0 && closed_by_peer(fds[i])) {
					       close(fds[i]);
					       fds[i] = -1;
					       open_left--;
				       }
			       open_left == 0;
		       }),
		       10000));
	CHECK(session_opens_within(&b, 5000));
	CHECK(file_size(b.log) < 64 * 1024);
	broker_stop(&b);
}

TEST(hostile_net, silent_connections_are_capped_and_timed_out, 60)
{
	silent_flood(true);
}

TEST(hostile_net, accept_out_of_fds_neither_spins_nor_floods, 60)
{
	silent_flood(false);
}

/* Send MSG_CLOSE for @id as uid NOBODY; the reply's status (or 1/2 on
 * failure to connect / to get a reply). */
static int close_as_nobody(const struct broker_proc *b, const uint8_t id[16])
{
	struct child c = { .rd = -1, .wr = -1 };
	int status;

	fflush(NULL);
	c.pid = fork();
	if (c.pid == 0) {
		struct proto_session_id req;
		struct proto_reply rep;
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		int fd;

		if (setgroups(0, NULL) || setgid(NOBODY) || setuid(NOBODY))
			_exit(99);
		fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%.107s", b->sock);
		if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
			_exit(1);
		memset(&req, 0, sizeof(req));
		proto_init_hdr(&req.hdr, MSG_CLOSE, sizeof(req));
		memcpy(req.id, id, 16);
		if (send(fd, &req, sizeof(req), 0) != (ssize_t)sizeof(req) ||
		    recv(fd, &rep, sizeof(rep), 0) != (ssize_t)sizeof(rep))
			_exit(2);
		_exit(rep.status == 0 ? 0 : rep.status == -LOCAL_EDENIED ? 3 : 4);
	}
	status = child_wait(&c, 10000);
	CHECK(WIFEXITED(status));
	return WEXITSTATUS(status);
}

static int find_id(const struct local_session_info *si, void *arg)
{
	return !strcmp(si->id, (const char *)arg);
}

/*
 * Item 9: a session id is visible to anyone who maps the segment; MSG_CLOSE
 * with it used to close the session for any peer that could connect, allow
 * lists or not. A peer refused sessions gets LOCAL_EDENIED and the session
 * lives on.
 */
TEST(hostile_net, close_by_id_is_checked_against_the_allow_lists, 30)
{
	static const char *const flags[] = { "--socket-group", "65534", "--allow-uid", "4242",
					     NULL };
	struct broker_proc b;
	local_session *victim;
	char hex[LOCAL_SESSION_ID_LEN + 1];
	uint8_t id[16];
	int i;

	broker_start(&b, flags);
	CHECK_OK(chmod(b.dir, 0755)); /* the socket's group decides who connects */
	victim = open_session(&b, "victim", 0, 0);
	CHECK_OK(local_lock(victim, "hostile/held", NULL, NULL));
	snprintf(hex, sizeof(hex), "%s", local_session_id(victim));
	for (i = 0; i < 16; i++)
		sscanf(hex + 2 * i, "%2hhx", &id[i]);
	CHECK_EQ(close_as_nobody(&b, id), 3);
	CHECK_EQ(local_sessions(victim, find_id, hex), 1); /* still there */
	{
		LOCAL_OPTS(local_key_info, ki);

		CHECK_OK(local_info(victim, "hostile/held", &ki));
		CHECK_EQ(ki.holders, 1);
	}
	local_session_close(victim);
	broker_stop(&b);
}

/* Does @path hold byte @c anywhere? */
static bool file_has_byte(const char *path, int c)
{
	FILE *f = fopen(path, "re");
	int ch;
	bool found = false;

	if (!f)
		return false;
	while ((ch = fgetc(f)) != EOF)
		if (ch == c) {
			found = true;
			break;
		}
	fclose(f);
	return found;
}

/* Does a line of @path start with @prefix, or contain @text? */
static bool file_line(const char *path, const char *prefix, const char *text)
{
	FILE *f = fopen(path, "re");
	char line[4096];
	bool found = false;

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = (prefix && !strncmp(line, prefix, strlen(prefix))) ||
			(text && strstr(line, text));
	fclose(f);
	return found;
}

/*
 * Item 13: a session name and a key with ESC and a newline, both logged by
 * the broker (at debug level: the session opening; at notice: the lease of
 * the key running out). No raw ESC reaches the log, no line is forged, and
 * both are there, escaped.
 */
TEST(hostile_net, names_cannot_forge_log_lines, 30)
{
	static const char *const flags[] = { "--log-level", "debug", NULL };
	static const char name[] = "evil\x1b[2J\nshmlockd: error: FORGED NAME";
	static const char key[] = "k\x1b]0;pwned\x07\nshmlockd: error: FORGED KEY";
	LOCAL_OPTS(local_acquire_opts, ao, .timeout_ms = 0, .lease_ms = 50);
	struct broker_proc b;
	local_session *s;

	broker_start(&b, flags);
	s = open_session(&b, name, 0, 0);
	CHECK_OK(local_lock(s, key, &ao, NULL));
	CHECK(WAIT_FOR(file_line(b.log, NULL, "expired"), 5000));
	local_session_close(s);
	broker_signal_wait(&b, SIGTERM);
	CHECK(!file_has_byte(b.log, 0x1b));
	CHECK(!file_has_byte(b.log, 0x07));
	CHECK(!file_line(b.log, "shmlockd: error: FORGED", NULL));
	CHECK(file_line(b.log, NULL, "evil\\x1b[2J\\nshmlockd: error: FORGED NAME"));
	CHECK(file_line(b.log, NULL, "k\\x1b]0;pwned\\x07\\nshmlockd: error: FORGED KEY"));
	broker_stop(&b);
}

/* Count the lines of @path containing @text. */
static int count_lines(const char *path, const char *text)
{
	FILE *f = fopen(path, "re");
	char line[4096];
	int n = 0;

	while (f && fgets(line, sizeof(line), f))
		n += strstr(line, text) != NULL;
	if (f)
		fclose(f);
	return n;
}

#define REFUSALS 600

/*
 * Item 8's log flood, at its root: a line any peer can trigger at will (a
 * refused session) is written at most BLOG_SIMILAR_BURST (100) times a
 * second; the rest are counted in one summary line.
 */
TEST(hostile_net, repeated_log_lines_are_summarised, 60)
{
	static const char *const flags[] = { "--socket-group", "65534", "--allow-uid", "4242",
					     NULL };
	struct child c = { .rd = -1, .wr = -1 };
	struct broker_proc b;
	int status, refused;

	broker_start(&b, flags);
	CHECK_OK(chmod(b.dir, 0755));
	fflush(NULL);
	c.pid = fork();
	if (c.pid == 0) {
		struct local_session_opts o;
		local_session *s;
		int i, denied = 0;

		if (setgroups(0, NULL) || setgid(NOBODY) || setuid(NOBODY))
			_exit(99);
		local_session_opts_init(&o);
		o.socket_path = b.sock;
		o.broker_wait_ms = 0;
		for (i = 0; i < REFUSALS; i++)
			denied += local_session_open(&o, &s) == -LOCAL_EDENIED;
		_exit(denied == REFUSALS ? 0 : 1);
	}
	status = child_wait(&c, 30000);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* The summary comes when the window ends (within about a second). */
	CHECK(WAIT_FOR(count_lines(b.log, "more lines like this") > 0, 5000));
	refused = count_lines(b.log, "refused a session to uid 65534");
	fprintf(stderr, "  %d refusals: %d lines of them, %d summaries\n", REFUSALS, refused,
		count_lines(b.log, "more lines like this"));
	/* 600 in well under a few seconds: a few windows of 100 at most. */
	CHECK(refused < REFUSALS);
	broker_stop(&b);
}
