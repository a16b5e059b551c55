// SPDX-License-Identifier: MIT
/*
 * shmlockd as a systemd service, without systemd: socket activation through
 * systemd-socket-activate, a stand-in $NOTIFY_SOCKET (READY, STATUS,
 * WATCHDOG, STOPPING, the fd store), sockets and stored fds passed the way
 * the service manager passes them, restarts that lose nothing, --check, and
 * systemd-analyze verify on the installed units.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "broker_fixture.h"
#include "harness.h"
#include "net_fixture.h"
#include "invariants.h"

/* ---- plumbing ------------------------------------------------------------ */

static void print_file(const char *path);

/* The log of the broker the test started last, shown when it misbehaves. */
static const char *last_log;

/* Names like broker_start()'s (the runner sweeps what a killed test left),
 * without starting anything. */
static void names_init(struct broker_proc *b)
{
	broker_names(b, "sd");
	shm_unlink(b->shm);
	last_log = b->log;
}

static const char *broker_bin(void)
{
	const char *bin = getenv("SHMLOCK_BROKER_BIN");

	if (!bin)
		FAIL_AT("SHMLOCK_BROKER_BIN is not set (run through 'make check')");
	return bin;
}

/* @name on $PATH, or NULL. */
static const char *find_tool(const char *name, char *buf, size_t size)
{
	const char *path = getenv("PATH");
	char dirs[4096], *dir, *save = NULL;

	snprintf(dirs, sizeof(dirs), "%s", path && *path ? path : "/usr/bin:/bin");
	for (dir = strtok_r(dirs, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		snprintf(buf, size, "%s/%s", dir, name);
		if (access(buf, X_OK) == 0)
			return buf;
	}
	return NULL;
}

/* Does the file (its first 64 KiB: a log) contain @text? */
static bool file_has(const char *path, const char *text)
{
	static char buf[65536];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	return strstr(buf, text) != NULL;
}

/* Is there a segment for @b, held by its keeper (it has no name)? */
static bool seg_exists(const struct broker_proc *b)
{
	int fd = keeper_segment_fd(b);

	if (fd < 0)
		return false;
	close(fd);
	return true;
}

static int exit_status_after(pid_t pid, int sig)
{
	if (sig)
		kill(pid, sig);
	return pid_wait(pid, 10000);
}

#define CHECK_EXITED_0(status)                                                          \
	do {                                                                            \
		int st_ = (status);                                                     \
		if (!WIFEXITED(st_) || WEXITSTATUS(st_) != 0) {                         \
			print_file(last_log);                                           \
			FAIL_AT("broker ended with wait status 0x%x, not exit 0", st_); \
		}                                                                       \
	} while (0)

/* How the service manager would start the broker. */
struct launch {
	const char *env[6]; /* NAME=VALUE, NULL-terminated */
	int fds[4];	    /* passed as SD_LISTEN_FDS_START.. */
	int nfds;
	const char *fdnames; /* LISTEN_FDNAMES */
	const char *extra[4];
	bool no_socket_flag; /* as a unit without --socket: only the activated one */
};

static pid_t launch(struct broker_proc *b, const struct launch *l)
{
	const char *more[8] = { "--log-level", "info" };
	int n = 2, i;

	for (i = 0; i < 6 && l->env[i]; i++)
		b->env[i] = l->env[i];
	b->env[i] = NULL;
	for (i = 0; i < l->nfds && i < 4; i++)
		b->listen_fds[i] = l->fds[i];
	b->nlisten = l->nfds;
	b->listen_names = l->fdnames;
	b->no_socket_flag = l->no_socket_flag;
	for (i = 0; l->extra[i] && i < 4; i++)
		more[n++] = l->extra[i];
	more[n] = NULL;
	broker_spawn(b, more);
	/* This start's only: a restart is a plain one. */
	memset(b->env, 0, sizeof(b->env));
	b->nlisten = 0;
	b->listen_names = NULL;
	b->no_socket_flag = false;
	return b->pid;
}

/* ---- the stand-in NOTIFY_SOCKET ----------------------------------------- */

struct sink {
	int fd;
	char env[160];	 /* NOTIFY_SOCKET=... */
	char seen[8192]; /* every message so far, in order */
};

static void sink_open(struct sink *k, const struct broker_proc *b)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	memset(k, 0, sizeof(*k));
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/notify", b->dir);
	snprintf(k->env, sizeof(k->env), "NOTIFY_SOCKET=%s", sa.sun_path);
	k->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	CHECK(k->fd >= 0);
	CHECK_OK(bind(k->fd, (struct sockaddr *)&sa, sizeof(sa)));
}

/* The next message within @timeout_ms (0, text in @buf, a passed fd in *fd
 * if any, else -1) or -ETIMEDOUT. */
static int sink_recv(struct sink *k, char *buf, size_t size, int *fd, int timeout_ms)
{
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct pollfd p = { .fd = k->fd, .events = POLLIN };
	struct iovec iov = { buf, size - 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *c;
	ssize_t n;

	if (fd)
		*fd = -1;
	if (poll(&p, 1, timeout_ms) != 1)
		return -ETIMEDOUT;
	mh.msg_control = ctl.buf;
	mh.msg_controllen = sizeof(ctl.buf);
	n = recvmsg(k->fd, &mh, MSG_CMSG_CLOEXEC);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			int got;

			memcpy(&got, CMSG_DATA(c), sizeof(int));
			if (fd && *fd < 0)
				*fd = got;
			else
				close(got);
		}
	if (strlen(k->seen) + (size_t)n + 2 < sizeof(k->seen)) {
		strcat(k->seen, buf);
		strcat(k->seen, "\n");
	}
	return 0;
}

/* Does message @msg hold the line @line (an exact line, or a prefix ending
 * in '=' or a space)? */
static bool has_line(const char *msg, const char *line)
{
	size_t n = strlen(line);
	const char *p = msg;

	for (;;) {
		const char *end = strchr(p, '\n');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		if (len == n ? !memcmp(p, line, n)
			     : len > n && n && (line[n - 1] == '=' || line[n - 1] == ' ') &&
				       !memcmp(p, line, n))
			return true;
		if (!end)
			return false;
		p = end + 1;
	}
}

/* Wait for a message holding @line; the message is left in @buf. */
static void sink_expect(struct sink *k, const char *line, char *buf, size_t size, int timeout_ms)
{
	uint64_t end = now_ms() + (uint64_t)timeout_ms;

	for (;;) {
		int left = (int)(end - now_ms());

		if (left <= 0 || sink_recv(k, buf, size, NULL, left)) {
			print_file(last_log);
			FAIL_AT("no \"%s\" from the broker within %d ms; got:\n%s", line,
				timeout_ms, k->seen);
		}
		if (has_line(buf, line))
			return;
	}
}

/* ---- child processes ---------------------------------------------------- */

struct role {
	const struct broker_proc *b;
	const char *key;
	const char *name;
	int lock_delay_ms;
	uint32_t ttl_ms;
};

/* Child: open a session, take the key, report the token; release on
 * "release". */
static void lock_role(void *p, int in, int out)
{
	const struct role *r = p;
	local_session *s = open_session(r->b, r->name, r->lock_delay_ms, r->ttl_ms);
	char buf[32];
	uint64_t tok;

	say(out, "open");
	CHECK_OK(local_lock(s, r->key, NULL, &tok));
	say(out, "got %llu", (unsigned long long)tok);
	while (hear(in, buf, sizeof(buf)) == 0)
		if (!strcmp(buf, "release"))
			say(out, "released %d", local_release(s, r->key));
}

static void spawn_role(struct child *c, struct role *r)
{
	child_spawn(c, lock_role, r);
	child_expect(c, "open", 5000);
}

static uint64_t expect_grant(struct child *c, int timeout_ms)
{
	unsigned long long tok;
	char line[64];

	if (child_read(c, line, sizeof(line), timeout_ms))
		FAIL_AT("child %d: no grant within %d ms", (int)c->pid, timeout_ms);
	if (sscanf(line, "got %llu", &tok) != 1)
		FAIL_AT("child %d: expected a grant, got \"%s\"", (int)c->pid, line);
	return tok;
}

static void end_child(struct child *c)
{
	if (c->pid > 0) {
		child_kill(c);
		child_wait(c, 5000);
	}
}

static struct local_key_info key_info(local_session *s, const char *key)
{
	LOCAL_OPTS(local_key_info, info);

	CHECK_OK(local_info(s, key, &info));
	return info;
}

/* ---- socket activation -------------------------------------------------- */

TEST(systemd, socket_activation_serves_the_first_client, 20)
{
	struct broker_proc b, kb;
	char tool[512], unused[160], comm[32] = "", path[64];
	local_session *s1, *s2;
	uint64_t tok;
	FILE *f;

	if (!find_tool("systemd-socket-activate", tool, sizeof(tool))) {
		printf("SKIPPED: systemd-socket-activate is not installed (package systemd) ");
		return;
	}
	names_init(&b);
	snprintf(unused, sizeof(unused), "%s/unused.sock", b.dir);
	b.launcher = (const char *const[]){ tool, "--seqpacket", "-l", b.sock, NULL };
	b.no_socket_flag = true;
	broker_spawn(&b, (const char *const[]){ "--socket", unused, "--log-level", "info", NULL });
	/* The tool says so once it listens; the socket file appears earlier,
	 * at bind(), and a probe connection would itself start the broker. */
	CHECK(WAIT_FOR(file_has(b.log, "Listening on"), 5000));
	/* Nothing runs yet: the broker starts with the first connection. Its
	 * keeper sits beside the socket it serves, the activated one, not
	 * beside --socket, which it does not bind. */
	kb = b;
	strcpy(kb.sock, unused);
	CHECK(!seg_exists(&b));
	s1 = open_session(&b, "first", 0, 0);
	CHECK(seg_exists(&b));
	CHECK(!seg_exists(&kb));
	CHECK_OK(local_lock(s1, "sa/k", NULL, &tok));
	/* More clients after the first: the passed socket must not block the
	 * loop (systemd-socket-activate passes it in blocking mode). */
	s2 = open_session(&b, "second", 0, 0);
	CHECK_RC(local_lock(s2, "sa/k",
			    &(struct local_acquire_opts){ .sz = sizeof(struct local_acquire_opts),
							  .timeout_ms = 0 },
			    NULL),
		 -EBUSY);
	CHECK_OK(local_session_close(s2));
	CHECK_EQ(access(unused, F_OK), -1); /* --socket was not bound */
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)b.pid);
	f = fopen(path, "r");
	CHECK(f && fgets(comm, sizeof(comm), f));
	fclose(f);
	CHECK(!strncmp(comm, "shmlockd", 8)); /* the tool exec'd the broker in place */
	CHECK_EXITED_0(exit_status_after(b.pid, SIGTERM));
	b.pid = 0;
	/* Stopped: the segment and the hold stay. */
	CHECK_EQ(key_info(s1, "sa/k").holders, 1);
	CHECK_EQ(key_info(s1, "sa/k").token, tok);
	CHECK_OK(keeper_end(&b));
	broker_stop(&b);
}

/*
 * A unit without --socket: the keeper goes beside the activated socket
 * (its path from the socket itself), not beside the default path, so a
 * restart on that socket finds the segment whatever the default is then,
 * and holders keep their holds.
 */
TEST(systemd, socket_activated_restart_keeps_every_hold, 30)
{
	struct broker_proc b;
	struct launch l = {
		.env = { NULL }, .nfds = 1, .fdnames = "control", .no_socket_flag = true
	};
	char def1[200], def2[200];
	struct role rh;
	struct child h;
	local_session *s;
	uint64_t tok;
	int lfd;

	names_init(&b);
	/* The default --socket, kept inside the test's directory. */
	snprintf(def1, sizeof(def1), "SHMLOCK_SOCKET=%s/default1.sock", b.dir);
	snprintf(def2, sizeof(def2), "SHMLOCK_SOCKET=%s/default2.sock", b.dir);
	lfd = unix_listener(b.sock, SOCK_SEQPACKET, 64);
	l.env[0] = def1;
	l.fds[0] = lfd;
	b.pid = launch(&b, &l);
	rh = (struct role){ &b, "sar/k", "holder", 0, 0 };
	spawn_role(&h, &rh);
	tok = expect_grant(&h, 5000);
	CHECK(seg_exists(&b)); /* beside the activated socket */
	CHECK_EQ(WTERMSIG(exit_status_after(b.pid, SIGKILL)), SIGKILL);
	/* Activated again, under another default. */
	l.env[0] = def2;
	b.pid = launch(&b, &l);
	s = open_session(&b, "late", 0, 0);
	CHECK_EQ(key_info(s, "sar/k").holders, 1);
	CHECK_EQ(key_info(s, "sar/k").token, tok);
	CHECK_EQ(key_info(s, "sar/k").holder_pid, h.pid);
	CHECK(file_has(b.log, "from its keeper"));
	CHECK_OK(local_session_close(s));
	CHECK_EXITED_0(exit_status_after(b.pid, SIGTERM));
	b.pid = 0;
	close(lfd);
	CHECK_OK(keeper_end(&b));
	end_child(&h);
	broker_stop(&b);
}

/*
 * Two activated brokers without --socket, each with its --shm-name, and the
 * same default path: before, both put their keeper there and the second
 * attached the first's segment (two lock spaces merged). Each keeps its own
 * now; and a broker whose --shm-name is not the name of the segment the
 * keeper beside its socket holds refuses to start (exit 4).
 */
TEST(systemd, brokers_with_different_shm_names_never_share_a_segment, 30)
{
	struct broker_proc a, c, other;
	struct launch l = {
		.env = { NULL }, .nfds = 1, .fdnames = "control", .no_socket_flag = true
	};
	char def[200];
	local_session *sa, *sc;
	int lfa, lfc, status;

	names_init(&a);
	names_init(&c);
	snprintf(def, sizeof(def), "SHMLOCK_SOCKET=%s/default.sock", a.dir);
	l.env[0] = def;
	lfa = unix_listener(a.sock, SOCK_SEQPACKET, 64);
	l.fds[0] = lfa;
	a.pid = launch(&a, &l);
	sa = open_session(&a, "on-a", 0, 0);
	CHECK_OK(local_lock(sa, "merge/k", NULL, NULL));
	CHECK_EXITED_0(exit_status_after(a.pid, SIGTERM));
	a.pid = 0;
	/* The second: same default, its own socket and name. */
	lfc = unix_listener(c.sock, SOCK_SEQPACKET, 64);
	l.fds[0] = lfc;
	last_log = c.log;
	c.pid = launch(&c, &l);
	sc = open_session(&c, "on-c", 0, 0);
	CHECK_EQ(key_info(sc, "merge/k").holders, 0);
	CHECK(!file_has(c.log, "attached existing segment"));
	CHECK_OK(local_session_close(sc));
	CHECK_EXITED_0(exit_status_after(c.pid, SIGTERM));
	c.pid = 0;
	/* A's socket with another --shm-name: refused, A's segment kept. */
	close(lfa);
	other = a;
	snprintf(other.shm, sizeof(other.shm), "%s", c.shm);
	l = (struct launch){ .env = { NULL } };
	status = exit_status_after(launch(&other, &l), 0);
	CHECK(WIFEXITED(status));
	CHECK_EQ(WEXITSTATUS(status), 4);
	CHECK(file_has(a.log, "not --shm-name"));
	CHECK_EQ(key_info(sa, "merge/k").holders, 1); /* read in the segment */
	close(lfc);
	CHECK_OK(keeper_end(&a));
	CHECK_OK(keeper_end(&c));
	broker_stop(&a);
	broker_stop(&c);
}

/* One HTTP/1.0 GET over the Unix socket @path; the whole answer in @out. */
static int http_get_unix(const char *path, const char *url, char *out, size_t size, int timeout_ms)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct pollfd p = { .events = POLLIN };
	size_t used = 0;
	char req[256];
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ssize_t n;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\n\r\n", url);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    write(fd, req, strlen(req)) != (ssize_t)strlen(req)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	p.fd = fd;
	while (used + 1 < size && poll(&p, 1, timeout_ms) == 1 &&
	       (n = read(fd, out + used, size - 1 - used)) > 0)
		used += (size_t)n;
	out[used] = '\0';
	close(fd);
	return 0;
}

TEST(systemd, socket_activation_of_the_http_api, 20)
{
	struct broker_proc b;
	char tool[512], http[160], answer[1024];
	local_session *s;

	if (!find_tool("systemd-socket-activate", tool, sizeof(tool))) {
		printf("SKIPPED: systemd-socket-activate is not installed (package systemd) ");
		return;
	}
	names_init(&b);
	snprintf(http, sizeof(http), "%s/http.sock", b.dir);
	/* Only the HTTP socket is passed: the control socket is bound at
	 * --socket as usual (the broker takes SEQPACKET ones only). */
	b.launcher = (const char *const[]){ tool, "-l", http, "--fdname=http", NULL };
	broker_spawn(&b, (const char *const[]){ "--log-level", "info", NULL });
	CHECK(WAIT_FOR(file_has(b.log, "Listening on"), 5000));
	CHECK(!seg_exists(&b));
	/* The first HTTP client starts the broker and is served by it. */
	CHECK_OK(http_get_unix(http, "/health", answer, sizeof(answer), 5000));
	CHECK(strstr(answer, " 200 ") != NULL);
	CHECK(strstr(answer, "\"ok\"") != NULL);
	CHECK(file_has(b.log, "socket-activated"));
	s = open_session(&b, "after-http", 0, 0);
	CHECK_OK(local_session_close(s));
	CHECK_EXITED_0(exit_status_after(b.pid, SIGTERM));
	b.pid = 0;
	broker_stop(&b);
}

/* ---- sd_notify ------------------------------------------------------------ */

TEST(systemd, notify_ready_status_and_stopping, 20)
{
	struct broker_proc b;
	struct launch l = { .env = { NULL } };
	struct role rw;
	struct sink k;
	struct child w;
	local_session *s1, *s2;
	char msg[512];

	names_init(&b);
	sink_open(&k, &b);
	l.env[0] = k.env;
	b.pid = launch(&b, &l);
	sink_expect(&k, "READY=1", msg, sizeof(msg), 5000);
	/* Ready means usable: no retry, no wait. */
	CHECK(unix_answers(b.sock, SOCK_SEQPACKET));
	s1 = open_session(&b, "s1", 0, 0);
	CHECK(has_line(k.seen, "STATUS=0 sessions, 0 keys, 0 holds, 0 waiters"));
	s2 = open_session(&b, "s2", 0, 0);
	CHECK_OK(local_lock(s1, "n/a", NULL, NULL));
	CHECK_OK(local_lock(s2, "n/b", NULL, NULL));
	rw = (struct role){ &b, "n/a", "waiter", 0, 0 };
	spawn_role(&w, &rw);
	CHECK(WAIT_FOR(key_info(s1, "n/a").waiters == 1, 5000));
	/* Refreshed every 2 s from the loop. */
	sink_expect(&k, "STATUS=3 sessions, 2 keys, 2 holds, 1 waiters", msg, sizeof(msg), 5000);
	kill(b.pid, SIGTERM);
	sink_expect(&k, "STOPPING=1", msg, sizeof(msg), 5000);
	CHECK_EXITED_0(exit_status_after(b.pid, 0));
	b.pid = 0;
	/* No WATCHDOG_USEC, no pings; no fd store request without the flag
	 * to remove the segment. */
	CHECK(!strstr(k.seen, "WATCHDOG=1"));
	CHECK(!strstr(strstr(k.seen, "STOPPING=1"), "FDSTOREREMOVE"));
	end_child(&w);
	broker_stop(&b);
}

TEST(systemd, watchdog_pings_at_half_the_interval, 15)
{
	struct broker_proc b;
	enum { PINGS = 16 };
	struct launch l = { .env = { NULL, "WATCHDOG_USEC=200000", NULL } };
	uint64_t at[PINGS], gap[PINGS - 1], end;
	unsigned pings = 0, i, j;
	struct sink k;
	char msg[512];

	names_init(&b);
	sink_open(&k, &b);
	l.env[0] = k.env;
	b.pid = launch(&b, &l);
	sink_expect(&k, "READY=1", msg, sizeof(msg), 5000);
	/* 200 ms watchdog: a ping every 100 ms. */
	end = now_ms() + 10000;
	while (pings < PINGS && now_ms() < end) {
		if (sink_recv(&k, msg, sizeof(msg), NULL, (int)(end - now_ms())))
			continue;
		if (has_line(msg, "WATCHDOG=1"))
			at[pings++] = now_ms();
	}
	if (pings < PINGS)
		FAIL_AT("%u watchdog pings in 10 s", pings);
	for (i = 0; i + 1 < PINGS; i++) {
		uint64_t g = at[i + 1] - at[i];

		for (j = i; j > 0 && gap[j - 1] > g; j--)
			gap[j] = gap[j - 1];
		gap[j] = g;
	}
	/*
	 * The typical gap, not the longest: the broker arms each ping from the
	 * last, so a ping every 200 ms (the whole interval) or more never has
	 * a median gap below 200 ms, while one held off the CPU on a loaded
	 * machine stretches a few gaps only. (This required every gap of a
	 * 1.5 s window to be below 200 ms: a single 100 ms stall of the broker
	 * or of this process failed it.)
	 */
	fprintf(stderr, "    watchdog gaps: shortest %llu ms, median %llu ms, longest %llu ms\n",
		(unsigned long long)gap[0], (unsigned long long)gap[(PINGS - 1) / 2],
		(unsigned long long)gap[PINGS - 2]);
	if (gap[(PINGS - 1) / 2] >= 200 || gap[(PINGS - 1) / 2] < 50)
		FAIL_AT("a median gap of %llu ms between watchdog pings (want ~100: half of 200)",
			(unsigned long long)gap[(PINGS - 1) / 2]);
	CHECK_EXITED_0(exit_status_after(b.pid, SIGTERM));
	b.pid = 0;
	broker_stop(&b);
}

/* ---- the fd store and a restart behind a held socket -------------------- */

/* Child: open a session (while the broker is down it waits in the socket's
 * backlog), report what it sees of key "f/k". */
static void late_client(void *p, int in, int out)
{
	const struct broker_proc *b = p;
	LOCAL_OPTS(local_key_info, ki);
	local_session *s;

	(void)in;
	say(out, "connecting");
	s = open_session(b, "late", 0, 0);
	CHECK_OK(local_info(s, "f/k", &ki));
	say(out, "holders %u pid %d", ki.holders, ki.holder_pid);
}

TEST(systemd, fd_store_keeps_the_segment_across_a_crash, 25)
{
	struct broker_proc b;
	struct launch l = { .env = { NULL }, .nfds = 1, .fdnames = "control" };
	struct role rh;
	struct sink k;
	struct child h, late;
	struct stat st_fd, st_kept;
	char msg[512], want[64];
	int lfd, segfd = -1, fd;

	names_init(&b);
	sink_open(&k, &b);
	lfd = unix_listener(b.sock, SOCK_SEQPACKET, 64);
	l.env[0] = k.env;
	l.fds[0] = lfd;
	b.pid = launch(&b, &l);
	/* Before READY=1, the segment goes to the store. */
	for (;;) {
		if (sink_recv(&k, msg, sizeof(msg), &fd, 5000))
			FAIL_AT("no READY=1; got:\n%s", k.seen);
		if (has_line(msg, "FDSTORE=1")) {
			CHECK(has_line(msg, "FDNAME=segment"));
			CHECK(fd >= 0);
			segfd = fd;
		} else if (fd >= 0) {
			close(fd);
		}
		if (has_line(msg, "READY=1"))
			break;
	}
	CHECK(segfd >= 0);
	CHECK_OK(fstat(segfd, &st_fd));
	/* The sealed segment its keeper holds too. */
	CHECK_EQ(fcntl(segfd, F_GET_SEALS) & (F_SEAL_SHRINK | F_SEAL_GROW),
		 F_SEAL_SHRINK | F_SEAL_GROW);
	fd = keeper_segment_fd(&b);
	CHECK(fd >= 0);
	CHECK_OK(fstat(fd, &st_kept));
	close(fd);
	CHECK_EQ(st_fd.st_ino, st_kept.st_ino);
	rh = (struct role){ &b, "f/k", "holder", 0, 0 };
	spawn_role(&h, &rh);
	expect_grant(&h, 5000);

	/* Crash, and lose the keeper, as systemd ends every process of the
	 * service before it restarts it. */
	CHECK_EQ(WTERMSIG(exit_status_after(b.pid, SIGKILL)), SIGKILL);
	CHECK_OK(keeper_end(&b));
	/* A client arriving now waits in the socket's backlog. */
	child_spawn(&late, late_client, &b);
	child_expect(&late, "connecting", 5000);

	/* Restart the way systemd does: the socket and the stored fd. */
	l.nfds = 2;
	l.fds[1] = segfd;
	l.fdnames = "control:segment";
	k.seen[0] = '\0';
	b.pid = launch(&b, &l);
	sink_expect(&k, "READY=1", msg, sizeof(msg), 5000);
	CHECK(!strstr(k.seen, "FDSTORE=1")); /* the manager has it already */
	snprintf(want, sizeof(want), "holders 1 pid %d", (int)h.pid);
	child_expect(&late, want, 10000);
	/* Served the stored one, made no new one, and keeps that one. */
	CHECK(file_has(b.log, "from the fd store"));
	fd = keeper_segment_fd(&b);
	CHECK(fd >= 0);
	CHECK_OK(fstat(fd, &st_kept));
	close(fd);
	CHECK_EQ(st_fd.st_ino, st_kept.st_ino);
	CHECK_EXITED_0(exit_status_after(b.pid, SIGTERM));

	/* With --destroy-segment-on-exit the stored fd is dropped as well. */
	l.extra[0] = "--destroy-segment-on-exit";
	b.pid = launch(&b, &l);
	sink_expect(&k, "READY=1", msg, sizeof(msg), 5000);
	kill(b.pid, SIGTERM);
	sink_expect(&k, "STOPPING=1", msg, sizeof(msg), 5000);
	CHECK(has_line(msg, "FDSTOREREMOVE=1"));
	CHECK(has_line(msg, "FDNAME=segment"));
	CHECK_EXITED_0(exit_status_after(b.pid, 0));
	b.pid = 0;
	end_child(&late);
	end_child(&h);
	close(segfd);
	close(lfd);
	broker_stop(&b);
}

/* ---- restarts ------------------------------------------------------------ */

#define DELAY_MS 1500
#define TTL_MS 3000

/*
 * Holders, a FIFO of waiters, a lock-delay running and a TTL pending when
 * the broker stops; during the outage a holder and a waiter die and another
 * client locks and unlocks. After the restart: the same holder and token,
 * the queue in the same order without the dead waiter, the dead holder
 * cleaned up, the lock-delay and the TTL ending when they were due, tokens
 * still increasing. (Semaphores and leases have their own restart cases.)
 */
static void restart_matrix(int sig)
{
	struct broker_proc b;
	struct role rq[4], rd, rwd, rc, rt;
	struct child h, w[3], d, wd, c, t;
	uint64_t th, td, last, tok, twd, t1, t3, delay_end, t_spawn, t_open, at, up_at, due, t_rel;
	LOCAL_OPTS(local_key_info, ki);
	local_session *obs;
	int i;

	broker_start(&b, NULL);
	obs = open_session(&b, "obs", 0, 0);
	for (i = 0; i < 4; i++)
		rq[i] = (struct role){ &b, "m/q", i ? "waiter" : "holder", 0, 0 };
	spawn_role(&h, &rq[0]);
	th = expect_grant(&h, 5000);
	for (i = 0; i < 3; i++) {
		spawn_role(&w[i], &rq[i + 1]);
		CHECK(WAIT_FOR(key_info(obs, "m/q").waiters == (uint32_t)i + 1, 5000));
	}
	rd = (struct role){ &b, "m/d", "delayed", DELAY_MS, 0 };
	spawn_role(&d, &rd);
	td = expect_grant(&d, 5000);
	rwd = (struct role){ &b, "m/d", "after-delay", 0, 0 };
	spawn_role(&wd, &rwd);
	CHECK(WAIT_FOR(key_info(obs, "m/d").waiters == 1, 5000));
	rc = (struct role){ &b, "m/c", "dies-in-outage", 0, 0 };
	spawn_role(&c, &rc);
	expect_grant(&c, 5000);
	rt = (struct role){ &b, "m/t", "ttl", 0, TTL_MS };
	t_spawn = now_ms();
	spawn_role(&t, &rt);
	t_open = now_ms();
	expect_grant(&t, 5000);

	/* A lock-delay in progress. */
	t_rel = now_ms();
	end_child(&d);
	CHECK(WAIT_FOR(key_info(obs, "m/d").holders == 0, 5000));
	ki = key_info(obs, "m/d");
	delay_end = now_ms() + ki.lock_delay_remaining_ms;
	/* Running, with its waiter held back, if we look before it can have
	 * ended. (It was "more than half left": a 750 ms stall here failed
	 * it. After a stall of 1.5 s the delay is over before the outage, the
	 * waiter granted, and the checks below still hold.) */
	if (now_ms() + 1 < t_rel + DELAY_MS) {
		CHECK(ki.lock_delay_remaining_ms > 0);
		CHECK_EQ(ki.waiters, 1);
	}

	/* Tokens rise per key (they are not ordered across keys). */
	CHECK_OK(local_lock(obs, "m/free", NULL, &last));
	CHECK_OK(local_release(obs, "m/free"));
	broker_signal_wait(&b, sig);
	/* The outage: uncontended locking goes on... */
	for (i = 0; i < 500; i++) {
		CHECK_OK(local_lock(obs, "m/free", NULL, &tok));
		CHECK(tok > last);
		last = tok;
		CHECK_OK(local_release(obs, "m/free"));
	}
	/* ...and a holder and a queued waiter die with nobody to notice. */
	end_child(&c);
	end_child(&w[1]);
	CHECK_EQ(key_info(obs, "m/c").holders, 1);
	CHECK_EQ(key_info(obs, "m/q").waiters, 3);

	broker_restart(&b);
	up_at = now_ms();
	CHECK(WAIT_FOR(key_info(obs, "m/c").holders == 0, 5000));
	CHECK(WAIT_FOR(key_info(obs, "m/q").waiters == 2, 5000));
	ki = key_info(obs, "m/q");
	CHECK_EQ(ki.holder_pid, h.pid);
	CHECK_EQ(ki.token, th);
	CHECK_EQ(segment_violations(obs), 0);

	/*
	 * The lock-delay ends when it was due, not at the restart: never
	 * before. How late is a figure: the restart itself may take longer
	 * than the delay had left on a slow machine (an ASan build), and a
	 * delay due while no broker ran ends once one does. (A bound of
	 * 500 ms past the due time failed such runs.)
	 */
	due = delay_end > up_at ? delay_end : up_at;
	twd = expect_grant(&wd, (int)(due > now_ms() ? due - now_ms() : 0) + 10000);
	at = now_ms();
	fprintf(stderr,
		"    lock-delay ended %lld ms after it was due (broker back %lld ms "
		"after)\n",
		(long long)at - (long long)delay_end, (long long)up_at - (long long)delay_end);
	if (at + 15 < delay_end)
		FAIL_AT("lock-delay ended %lld ms before it was due",
			(long long)delay_end - (long long)at);
	CHECK(twd > td);
	CHECK_OK(local_lock(obs, "m/free", NULL, &tok));
	CHECK(tok > last);
	CHECK_OK(local_release(obs, "m/free"));
	/* The TTL too: never before it was due; how late is a figure. */
	due = t_open + TTL_MS > up_at ? t_open + TTL_MS : up_at;
	CHECK(WAIT_FOR(key_info(obs, "m/t").holders == 0,
		       (int)(due > now_ms() ? due - now_ms() : 0) + 10000));
	at = now_ms();
	fprintf(stderr, "    TTL expired %lld ms after it was due\n",
		(long long)at - (long long)(t_open + TTL_MS));
	if (at + 15 < t_spawn + TTL_MS)
		FAIL_AT("TTL expired %lld ms before it was due",
			(long long)(t_spawn + TTL_MS) - (long long)at);

	/* The queue kept its order: w[0], then w[2]. */
	child_send(&h, "release");
	child_expect(&h, "released 0", 5000);
	t1 = expect_grant(&w[0], 5000);
	CHECK(t1 > th);
	child_send(&w[0], "release");
	child_expect(&w[0], "released 0", 5000);
	t3 = expect_grant(&w[2], 5000);
	CHECK(t3 > t1);
	CHECK_EQ(segment_violations(obs), 0);

	/* The re-adopted sessions are still watched. */
	end_child(&h);
	end_child(&w[0]);
	end_child(&w[2]);
	end_child(&wd);
	end_child(&t);
	CHECK(WAIT_SESSIONS(obs, 1, 5000));
	CHECK_EQ(used_nodes(obs), 0);
	broker_stop(&b);
}

TEST(systemd, restart_matrix_after_sigterm, 30)
{
	restart_matrix(SIGTERM);
}

TEST(systemd, restart_matrix_after_sigkill, 30)
{
	restart_matrix(SIGKILL);
}

/* ---- --check ------------------------------------------------------------- */

/* Run shmlockd --check on the segment of the broker at @sock; its output in
 * @out. Returns the exit status. */
static int run_check(const struct broker_proc *b, const char *sock, char *out, size_t size)
{
	char path[160];
	struct child c = { .rd = -1, .wr = -1 };
	int status, fd;
	ssize_t n;

	snprintf(path, sizeof(path), "%s/check.out", b->dir);
	fflush(NULL);
	c.pid = fork();
	if (c.pid == 0) {
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(fd, 1);
		dup2(fd, 2);
		execl(broker_bin(), "shmlockd", "--check", "--socket", sock, "--shm-name", b->shm,
		      (char *)NULL);
		_exit(127);
	}
	status = child_wait(&c, 10000);
	fd = open(path, O_RDONLY);
	n = fd >= 0 ? read(fd, out, size - 1) : -1;
	out[n > 0 ? n : 0] = '\0';
	if (fd >= 0)
		close(fd);
	CHECK(WIFEXITED(status));
	return WEXITSTATUS(status);
}

static char *slurp_segment(const struct broker_proc *b, size_t *len)
{
	struct stat st;
	char *buf;
	int fd = keeper_segment_fd(b);

	CHECK(fd >= 0 && fstat(fd, &st) == 0);
	buf = malloc((size_t)st.st_size);
	/* pread: the keeper's description, and so its offset, is shared. */
	CHECK(buf && pread(fd, buf, (size_t)st.st_size, 0) == st.st_size);
	close(fd);
	*len = (size_t)st.st_size;
	return buf;
}

#define CHECK_RUN(b, sock, want, out)                                                 \
	do {                                                                          \
		int rc_ = run_check(b, sock, out, sizeof(out));                       \
		if (rc_ != (want))                                                    \
			FAIL_AT("--check exited %d, want %d:\n%s", rc_, (want), out); \
	} while (0)

TEST(systemd, check_tells_healthy_from_damaged, 20)
{
	struct broker_proc b, nb;
	struct role rw;
	struct child w;
	struct seg_key *k;
	struct segment *seg;
	local_session *obs;
	static char out[16384];
	char *before, *after, nosock[128];
	size_t len, len2;

	broker_start(&b, NULL);
	obs = open_session(&b, "obs", 0, 0);
	CHECK_OK(local_lock(obs, "c/held", NULL, NULL));
	CHECK_OK(local_lock(obs, "c/q", NULL, NULL));
	CHECK_OK(local_lock(obs, "c/bad", NULL, NULL));
	rw = (struct role){ &b, "c/q", "waiter", 0, 0 };
	spawn_role(&w, &rw);
	CHECK(WAIT_FOR(key_info(obs, "c/q").waiters == 1, 5000));
	/* Healthy, with a broker running. */
	CHECK_RUN(&b, b.sock, 0, out);
	CHECK(strstr(out, "healthy"));
	CHECK(strstr(out, "a broker is running"));

	/* Healthy with work pending: a waiter died while no broker ran. */
	broker_signal_wait(&b, SIGKILL);
	end_child(&w);
	CHECK_RUN(&b, b.sock, 0, out);
	CHECK(strstr(out, "note: session slot"));
	CHECK(strstr(out, "its process is gone"));

	/* Damage: fields out of range on one key, a count that lies on another. */
	seg = obs->seg;
	CHECK_OK(keytab_find(seg, "c/bad", 5, false, &k));
	k->kind = 99;
	key_unlock(k);
	CHECK_OK(keytab_find(seg, "c/q", 3, false, &k));
	k->waiters = 5;
	key_unlock(k);
	before = slurp_segment(&b, &len);
	CHECK_RUN(&b, b.sock, 2, out);
	CHECK(strstr(out, "problem: key entry"));
	CHECK(strstr(out, "'c/bad'"));
	CHECK(strstr(out, "key 'c/q'"));
	CHECK(strstr(out, "DAMAGED"));
	/* ...and it changed nothing. */
	after = slurp_segment(&b, &len2);
	CHECK_EQ(len, len2);
	CHECK(!memcmp(before, after, len));
	free(before);
	free(after);
	/* A header that does not add up. */
	seg->hdr->index_size = 3;
	CHECK_RUN(&b, b.sock, 2, out);
	CHECK(strstr(out, "header invalid"));
	/* Without the broker's socket, found by its label in /proc (the
	 * keeper's descriptor), as --shm-name alone found it by name. */
	snprintf(nosock, sizeof(nosock), "%s/no-broker.sock", b.dir);
	CHECK_RUN(&b, nosock, 2, out);
	CHECK(strstr(out, "header invalid"));
	/* No segment at all. */
	nb = b;
	strcpy(nb.shm, "/shmlock-test-no-such-segment");
	CHECK_RUN(&nb, nosock, 1, out);
	broker_stop(&b);
}

/* ---- the units ----------------------------------------------------------- */

/* Run @argv with @env_extra set; output to @log. Returns the wait status. */
static int run_cmd(const char *const *argv, const char *env_extra, const char *log)
{
	struct child c = { .rd = -1, .wr = -1 };
	int fd;

	fflush(NULL);
	c.pid = fork();
	if (c.pid == 0) {
		fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		dup2(fd, 1);
		dup2(fd, 2);
		if (env_extra)
			putenv((char *)env_extra);
		/* Under `make check` the outer make's flags and jobserver would
		 * leak into ours. */
		unsetenv("MAKEFLAGS");
		unsetenv("MFLAGS");
		unsetenv("MAKELEVEL");
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	return child_wait(&c, 25000);
}

static void print_file(const char *path)
{
	if (!path)
		return;
	char buf[4096];
	ssize_t n;
	int fd = open(path, O_RDONLY);

	while (fd >= 0 && (n = read(fd, buf, sizeof(buf))) > 0)
		fwrite(buf, 1, (size_t)n, stderr);
	if (fd >= 0)
		close(fd);
}

/* The first file named @name under @dir (by find(1)), in @out. */
static bool find_file(const char *dir, const char *name, char *out, size_t size)
{
	char cmd[512];
	FILE *p;
	bool ok;

	snprintf(cmd, sizeof(cmd), "find '%s' -name '%s' -type f", dir, name);
	p = popen(cmd, "r");
	ok = p && fgets(out, (int)size, p);
	if (p)
		pclose(p);
	if (ok)
		out[strcspn(out, "\n")] = '\0';
	return ok;
}

TEST(systemd, installed_units_pass_systemd_analyze_verify, 30)
{
	struct broker_proc b;
	char tool[512], man[512], bin[512], sbindir[600], destdir[200], odir[200], log[200];
	char service[600], socket_unit[600], http_unit[600], sysusers[600], manpath[300];
	char cmd[1200];
	const char *verify[9];
	int n = 0, status;

	if (!find_tool("systemd-analyze", tool, sizeof(tool))) {
		printf("SKIPPED: systemd-analyze is not installed (package systemd) ");
		return;
	}
	if (access("Makefile", R_OK) || access("systemd/shmlockd.service.in", R_OK))
		FAIL_AT("run from the source tree (make test does): needs ./Makefile and "
			"./systemd/");
	names_init(&b);
	snprintf(bin, sizeof(bin), "%s", broker_bin());
	snprintf(sbindir, sizeof(sbindir), "SBINDIR=%s", dirname(bin));
	snprintf(destdir, sizeof(destdir), "DESTDIR=%s/root", b.dir);
	snprintf(odir, sizeof(odir), "O=%s/o", b.dir); /* keep the build's O untouched */
	snprintf(log, sizeof(log), "%s/verify.log", b.dir);
	/* ExecStart= must name a binary that exists: install the units for
	 * the broker under test. */
	status = run_cmd((const char *const[]){ "make", "-s", "--no-print-directory",
						"install-units", destdir, odir, sbindir, NULL },
			 NULL, log);
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		print_file(log);
		FAIL_AT("make install-units failed");
	}
	snprintf(cmd, sizeof(cmd), "%s/root", b.dir);
	CHECK(find_file(cmd, "shmlockd.service", service, sizeof(service)));
	CHECK(find_file(cmd, "shmlockd.socket", socket_unit, sizeof(socket_unit)));
	CHECK(find_file(cmd, "shmlockd-http.socket", http_unit, sizeof(http_unit)));
	CHECK(find_file(cmd, "shmlock.conf", sysusers, sizeof(sysusers)));
	/* Documentation=man:shmlockd(8) is checked against the page we ship. */
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s/man/man8' && cp docs/shmlockd.8 '%s/man/man8/'",
		 b.dir, b.dir);
	CHECK_EQ(system(cmd), 0);
	snprintf(manpath, sizeof(manpath), "MANPATH=%s/man", b.dir);
	verify[n++] = tool;
	verify[n++] = "verify";
	if (!find_tool("man", man, sizeof(man))) {
		printf("(man is not installed: Documentation= not checked) ");
		verify[n++] = "--man=no";
	}
	verify[n++] = socket_unit;
	verify[n++] = http_unit;
	verify[n++] = service;
	verify[n] = NULL;
	status = run_cmd(verify, manpath, log);
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		print_file(log);
		FAIL_AT("systemd-analyze verify failed");
	}
	if (find_tool("systemd-sysusers", tool, sizeof(tool))) {
		snprintf(cmd, sizeof(cmd), "--root=%s/root", b.dir);
		status = run_cmd((const char *const[]){ tool, "--dry-run", cmd, sysusers, NULL },
				 NULL, log);
		if (!WIFEXITED(status) || WEXITSTATUS(status)) {
			print_file(log);
			FAIL_AT("systemd-sysusers --dry-run failed on %s", sysusers);
		}
	}
	broker_stop(&b);
}
