// SPDX-License-Identifier: MIT
/*
 * dflockd's TCP line protocol (broker/tcp_*.c, docs/tcp-protocol.md) against
 * a real shmlockd on a free loopback port, with a minimal client of our own:
 * every command, reply and error string, bearer tokens, FIFO shared with
 * HTTP and liblocal, disconnects during waits, lease expiry, the line limit,
 * the connection cap, the read timeout, authentication, and shutdown.
 *
 * Waits are confirmed queued by watching the key's waiter count through
 * liblocal (local_info()), never by sleeping.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "broker_fixture.h"
#include "harness.h"

struct tb {
	struct broker_proc b;
	int port;
	char listen[32];
	char dir[64];
	char http_sock[160];
	const char *args[16];
};

static int free_port(void)
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

static int try_connect(int port)
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

static int tconnect(const struct tb *t)
{
	int fd = try_connect(t->port);

	if (fd < 0)
		FAIL_AT("connect 127.0.0.1:%d: %s", t->port, strerror(errno));
	return fd;
}

/* Start a broker with the TCP protocol (and HTTP on a Unix socket). */
static void tb_start(struct tb *t, bool insecure, const char *const *extra)
{
	int n = 0, i, fd = -1;

	memset(t, 0, sizeof(*t));
	t->port = free_port();
	snprintf(t->listen, sizeof(t->listen), "127.0.0.1:%d", t->port);
	/* Named after the test process: the runner sweeps it if we die. */
	snprintf(t->dir, sizeof(t->dir), "/tmp/shmlock-test-%d-XXXXXX", (int)getpid());
	if (!mkdtemp(t->dir))
		FAIL_AT("mkdtemp: %s", strerror(errno));
	snprintf(t->http_sock, sizeof(t->http_sock), "%s/http.sock", t->dir);
	t->args[n++] = "--tcp-listen";
	t->args[n++] = t->listen;
	t->args[n++] = "--http-socket";
	t->args[n++] = t->http_sock;
	if (insecure)
		t->args[n++] = "--tcp-insecure-no-auth";
	for (i = 0; extra && extra[i]; i++)
		t->args[n++] = extra[i];
	t->args[n] = NULL;
	broker_start(&t->b, t->args);
	if (!WAIT_FOR((fd = try_connect(t->port)) >= 0, 5000))
		FAIL_AT("no TCP listener on %s (log %s)", t->listen, t->b.log);
	close(fd);
}

static void tb_stop(struct tb *t)
{
	broker_stop_clean(&t->b);
	unlink(t->http_sock);
	rmdir(t->dir);
}

static void tsend(int fd, const char *cmd, const char *key, const char *arg)
{
	char buf[2048];
	int n = snprintf(buf, sizeof(buf), "%s\n%s\n%s\n", cmd, key, arg);

	if (send(fd, buf, (size_t)n, MSG_NOSIGNAL) != n)
		FAIL_AT("send: %s", strerror(errno));
}

/* One reply line (without '\n'), or "<EOF>"; fails after @timeout_ms. */
static char *tline_within(int fd, int timeout_ms)
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

static char *tline(int fd)
{
	return tline_within(fd, 10000);
}

static char *treq(int fd, const char *cmd, const char *key, const char *arg)
{
	tsend(fd, cmd, key, arg);
	return tline(fd);
}

#define CHECK_STR(a, b)                                                                   \
	do {                                                                               \
		const char *sa_ = (a), *sb_ = (b);                                         \
		if (strcmp(sa_, sb_))                                                      \
			FAIL_AT("%s == \"%s\" failed: got \"%s\"", #a, sb_, sa_);          \
	} while (0)

#define CHECK_PREFIX(a, p)                                                                \
	do {                                                                               \
		const char *sa_ = (a), *sp_ = (p);                                         \
		if (strncmp(sa_, sp_, strlen(sp_)))                                        \
			FAIL_AT("%s starts with \"%s\" failed: got \"%s\"", #a, sp_, sa_); \
	} while (0)

/* "ok TOKEN L" / "acquired TOKEN L": check the shape, return the token. */
static char *granted(const char *reply, const char *word, unsigned lease)
{
	static char tok[64];
	char w[16];
	unsigned l = 0;
	size_t i;

	if (sscanf(reply, "%15s %63s %u", w, tok, &l) != 3 || strcmp(w, word) || l != lease ||
	    strlen(tok) != 32)
		FAIL_AT("expected \"%s <32 hex> %u\", got \"%s\"", word, lease, reply);
	for (i = 0; i < 32; i++)
		if (!strchr("0123456789abcdef", tok[i]))
			FAIL_AT("token \"%s\" is not lowercase hex", tok);
	return strdup(tok);
}

static uint64_t fence_of(const char *tok)
{
	char hi[17];

	memcpy(hi, tok, 16);
	hi[16] = '\0';
	return strtoull(hi, NULL, 16);
}

static struct local_key_info *info(local_session *s, const char *key)
{
	static struct local_key_info ki;

	CHECK_OK(local_info(s, key, &ki));
	return &ki;
}

#define WAITERS(s, k) (info((s), (k))->waiters)
#define HOLDERS(s, k) (info((s), (k))->holders)

/* ---- every command, reply and error string ------------------------------------ */

TEST(tcp, locks_release_renew_and_their_errors, 30)
{
	struct tb t;
	local_session *s;
	char *tok, *tok2, arg[128];
	uint64_t fence = 0;
	int a, b;

	tb_start(&t, true, NULL);
	s = open_session(&t.b, "observer", 0, 0);
	a = tconnect(&t);
	b = tconnect(&t);
	tok = granted(treq(a, "l", "k", "0"), "ok", 33); /* default lease */
	/* The token carries the fencing token liblocal sees. */
	CHECK_EQ(info(s, "k")->token, fence_of(tok));
	CHECK_STR(treq(b, "l", "k", "0"), "timeout");
	/* Renew: the new full TTL; the default when none is given. */
	snprintf(arg, sizeof(arg), "%s 100", tok);
	CHECK_STR(treq(a, "n", "k", arg), "ok 100");
	CHECK_STR(treq(a, "n", "k", tok), "ok 33");
	CHECK_STR(treq(a, "sn", "k", arg), "ok 100");
	/* A wrong token, a wrong key, a malformed one: error. */
	snprintf(arg, sizeof(arg), "%.16s%016llx", tok, 12345ull);
	CHECK_STR(treq(a, "r", "k", arg), "error");
	CHECK_STR(treq(a, "n", "k", arg), "error");
	CHECK_STR(treq(a, "r", "other", tok), "error");
	CHECK_STR(treq(a, "r", "k", "nothex"), "error");
	/* Tokens are bearer capabilities: another connection may release. */
	snprintf(arg, sizeof(arg), "  %s  ", tok);
	CHECK_STR(treq(b, "r", "k", arg), "ok");
	CHECK_EQ(HOLDERS(s, "k"), 0);
	CHECK_STR(treq(a, "r", "k", tok), "error"); /* released already */
	CHECK_STR(treq(a, "n", "k", tok), "error");
	/* A custom lease; every grant a fresh, greater token. */
	tok2 = granted(treq(a, "l", "k", "5 7"), "ok", 7);
	CHECK(strcmp(tok, tok2));
	CHECK(fence_of(tok2) > fence_of(tok));
	CHECK_STR(treq(a, "sr", "k", tok2), "ok");
	/* Limits: a lock is a semaphore of 1; another limit is a mismatch. */
	free(granted(treq(a, "sl", "k", "0 1"), "ok", 33));
	CHECK_STR(treq(b, "sl", "k", "0 3"), "error_limit_mismatch");
	tok = granted(treq(b, "sl", "sem", "0 2 9"), "ok", 9);
	CHECK_STR(treq(b, "l", "sem", "0"), "error_limit_mismatch");
	CHECK_STR(treq(b, "sl", "sem", "0 3"), "error_limit_mismatch");
	free(granted(treq(a, "sl", "sem", "0 2"), "ok", 33));
	CHECK_STR(treq(tconnect(&t), "sl", "sem", "0 2"), "timeout");
	CHECK_EQ(info(s, "sem")->holders, 2);
	CHECK_STR(treq(a, "sr", "sem", tok), "ok"); /* b's slot, released by a */
	CHECK_EQ(info(s, "sem")->holders, 1);
	(void)fence;
	close(a);
	close(b);
	local_session_close(s);
	tb_stop(&t);
}

TEST(tcp, enqueue_and_wait, 30)
{
	struct tb t;
	local_session *s;
	char *tok, *tok2, want[64];
	int a, b, c;

	tb_start(&t, true, NULL);
	s = open_session(&t.b, "observer", 0, 0);
	a = tconnect(&t);
	b = tconnect(&t);
	c = tconnect(&t);
	CHECK_STR(treq(a, "w", "k", "1"), "error_not_enqueued");
	tok = granted(treq(a, "e", "k", ""), "acquired", 33);
	CHECK_STR(treq(a, "e", "k", "5"), "error_already_enqueued");
	CHECK_STR(treq(b, "e", "k", "12"), "queued");
	CHECK_STR(treq(b, "e", "k", "12"), "error_already_enqueued");
	CHECK_STR(treq(c, "se", "k", "1"), "queued");
	CHECK_EQ(WAITERS(s, "k"), 2);
	/* w after acquired: the same token, its lease reset. */
	snprintf(want, sizeof(want), "ok %s 33", tok);
	CHECK_STR(treq(a, "w", "k", "0"), want);
	CHECK_STR(treq(a, "w", "k", "0"), "error_not_enqueued"); /* consumed */
	/* c's wait of 0 times out and leaves the queue. */
	CHECK_STR(treq(c, "sw", "k", "0"), "timeout");
	CHECK_EQ(WAITERS(s, "k"), 1);
	CHECK_STR(treq(c, "w", "k", "1"), "error_not_enqueued");
	/* b waits (suspended) and is granted when a releases. */
	tsend(b, "w", "k", "20");
	CHECK_STR(treq(a, "r", "k", tok), "ok");
	tok2 = granted(tline(b), "ok", 12);
	CHECK(fence_of(tok2) > fence_of(tok));
	/* A queued request granted before its w: w answers at once. */
	CHECK_STR(treq(c, "e", "k", ""), "queued");
	CHECK_STR(treq(b, "r", "k", tok2), "ok");
	CHECK(WAIT_FOR(HOLDERS(s, "k") == 1 && WAITERS(s, "k") == 0, 5000));
	free(granted(treq(c, "w", "k", "0"), "ok", 33));
	/* A w that times out while queued. */
	CHECK_STR(treq(a, "e", "k", "5"), "queued");
	CHECK_STR(treq(a, "w", "k", "1"), "timeout");
	CHECK_EQ(WAITERS(s, "k"), 0);
	/* An immediate grant whose lease lapsed before w. */
	tok = granted(treq(a, "se", "sem", "2 1"), "acquired", 1);
	CHECK(WAIT_FOR(HOLDERS(s, "sem") == 0, 5000));
	CHECK_STR(treq(a, "sw", "sem", "1"), "error_lease_expired");
	CHECK_STR(treq(a, "sw", "sem", "1"), "error_not_enqueued");
	/* Limits on enqueue too. */
	CHECK_STR(treq(a, "e", "sem", ""), "error_limit_mismatch");
	close(a);
	close(b);
	close(c);
	local_session_close(s);
	tb_stop(&t);
}

TEST(tcp, parse_errors_keep_the_connection, 30)
{
	static const char *const bad[][3] = {
		{ "x", "k", "0" },	   /* unknown command */
		{ "L", "k", "0" },	   /* commands are case-sensitive */
		{ "l", "", "0" },	   /* empty key */
		{ "l", "a b", "0" },	   /* space in key */
		{ "l", "a\tb", "0" },	   /* TAB in key */
		{ "l", "k", "" },	   /* no timeout */
		{ "l", "k", "1 2 3" },	   /* too many fields */
		{ "l", "k", "x" },	   /* invalid integer */
		{ "l", "k", "1.5" },	   /* invalid integer */
		{ "l", "k", "-1" },	   /* negative timeout */
		{ "l", "k", "0 0" },	   /* lease <= 0 */
		{ "l", "k", "0 -3" },	   /* lease <= 0 */
		{ "sl", "k", "0" },	   /* no limit */
		{ "sl", "k", "0 0" },	   /* limit <= 0 */
		{ "r", "k", "   " },	   /* empty token */
		{ "n", "k", "" },	   /* no token */
		{ "n", "k", "a b c" },	   /* too many fields */
		{ "e", "k", "10 20" },	   /* e takes one integer */
		{ "se", "k", "" },	   /* no limit */
		{ "w", "k", "" },	   /* no timeout */
		{ "w", "k", "1 2" },	   /* one integer only */
		{ "auth", "", "x" },	   /* no token configured */
	};
	struct tb t;
	char longkey[300];
	size_t i;
	int a;

	tb_start(&t, true, NULL);
	a = tconnect(&t);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *reply = treq(a, bad[i][0], bad[i][1], bad[i][2]);

		if (strcmp(reply, "error"))
			FAIL_AT("request %zu (%s/%s/%s): \"%s\", expected \"error\"", i, bad[i][0],
				bad[i][1], bad[i][2], reply);
	}
	/* A key of 256 bytes fits the line but not a key: error, still open. */
	memset(longkey, 'k', 256);
	longkey[256] = '\0';
	CHECK_STR(treq(a, "l", longkey, "0"), "error");
	/* Still served; CRLF, signs and spaces as dflockd (Go's Atoi, Fields). */
	free(granted(treq(a, "l\r", "crlf\r", " +0\t 4 \r"), "ok", 4));
	CHECK_PREFIX(treq(a, "stats", "", ""), "ok {");
	/* Pipelined requests come back in order. */
	tsend(a, "l", "p1", "0");
	tsend(a, "x", "p1", "0");
	tsend(a, "l", "p2", "0 8");
	free(granted(tline(a), "ok", 33));
	CHECK_STR(tline(a), "error");
	free(granted(tline(a), "ok", 8));
	close(a);
	tb_stop(&t);
}

TEST(tcp, stats_in_dflockds_shape, 30)
{
	struct tb t;
	char *r;
	int a, b;

	tb_start(&t, true, NULL);
	a = tconnect(&t);
	b = tconnect(&t);
	free(granted(treq(a, "l", "held", "0"), "ok", 33));
	tsend(b, "l", "held", "20");
	free(granted(treq(a, "sl", "sem", "0 3"), "ok", 33));
	r = treq(a, "stats", "ignored", "ignored");
	CHECK_PREFIX(r, "ok {\"connections\":2,");
	CHECK(strstr(r, "{\"key\":\"held\",\"owner_conn_id\":"));
	CHECK(strstr(r, "\"waiters\":1}"));
	CHECK(strstr(r, "\"semaphores\":[{\"key\":\"sem\",\"limit\":3,\"holders\":1,\"waiters\":0}]"));
	CHECK(strstr(r, "\"idle_locks\":["));
	CHECK(strstr(r, "\"idle_semaphores\":["));
	close(a);
	free(granted(tline(b), "ok", 33));
	close(b);
	tb_stop(&t);
}

TEST(tcp, full_tables_answer_max_locks_and_max_waiters, 30)
{
	struct tb t;
	int a, b, c;

	tb_start(&t, true, (const char *const[]){ "--max-keys", "2", "--max-waiters", "1",
						  "--gc-idle", "0", NULL });
	a = tconnect(&t);
	b = tconnect(&t);
	c = tconnect(&t);
	free(granted(treq(a, "l", "k1", "0"), "ok", 33));
	free(granted(treq(a, "l", "k2", "0"), "ok", 33));
	CHECK_STR(treq(a, "l", "k3", "0"), "error_max_locks");
	CHECK_STR(treq(a, "e", "k3", ""), "error_max_locks");
	CHECK_STR(treq(b, "e", "k1", ""), "queued");
	CHECK_STR(treq(c, "l", "k1", "5"), "error_max_waiters");
	CHECK_STR(treq(c, "e", "k2", ""), "error_max_waiters");
	close(a);
	close(b);
	close(c);
	tb_stop(&t);
}
