// SPDX-License-Identifier: MIT
/*
 * dflockd's TCP line protocol (broker/tcp_*.c, docs/tcp-protocol.md) against
 * a real shmlockd on a free loopback port, with a minimal client of our own:
 * every command, reply and error string, bearer tokens, FIFO shared with
 * HTTP, liblocal and the CLI, disconnects during waits, lease expiry, the line limit,
 * the connection cap, the read timeout, authentication, and shutdown.
 *
 * Waits are confirmed queued by watching the key's waiter count through
 * liblocal (local_info()), never by sleeping.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/ssl.h>

#include "broker_fixture.h"
#include "harness.h"
#include "net_fixture.h"
#include "tcp_fixture.h"

struct tb {
	struct broker_proc b;
	int port;
	char listen[32];
	char dir[64];
	char http_sock[100];
	const char *args[16];
};

static int tconnect(const struct tb *t)
{
	return tcp_connect(t->port);
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
	if (!WAIT_FOR((fd = tcp_try_connect(t->port)) >= 0, 5000))
		FAIL_AT("no TCP listener on %s (log %s)", t->listen, t->b.log);
	close(fd);
}

static void tb_stop(struct tb *t)
{
	broker_stop_clean(&t->b);
	unlink(t->http_sock);
	rmdir(t->dir);
}

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
	static LOCAL_OPTS(local_key_info, ki);

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
		{ "x", "k", "0" },     /* unknown command */
		{ "L", "k", "0" },     /* commands are case-sensitive */
		{ "l", "", "0" },      /* empty key */
		{ "l", "a b", "0" },   /* space in key */
		{ "l", "a\tb", "0" },  /* TAB in key */
		{ "l", "k", "" },      /* no timeout */
		{ "l", "k", "1 2 3" }, /* too many fields */
		{ "l", "k", "x" },     /* invalid integer */
		{ "l", "k", "1.5" },   /* invalid integer */
		{ "l", "k", "-1" },    /* negative timeout */
		{ "l", "k", "0 0" },   /* lease <= 0 */
		{ "l", "k", "0 -3" },  /* lease <= 0 */
		{ "sl", "k", "0" },    /* no limit */
		{ "sl", "k", "0 0" },  /* limit <= 0 */
		{ "r", "k", "   " },   /* empty token */
		{ "n", "k", "" },      /* no token */
		{ "n", "k", "a b c" }, /* too many fields */
		{ "e", "k", "10 20" }, /* e takes one integer */
		{ "se", "k", "" },     /* no limit */
		{ "w", "k", "" },      /* no timeout */
		{ "w", "k", "1 2" },   /* one integer only */
		{ "auth", "", "x" },   /* no token configured */
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
	/* A NUL in a key or token would cut it short of what was sent. */
	CHECK_EQ(send(a, "l\nab\0c\n0\n", 9, 0), 9);
	CHECK_STR(tline(a), "error");
	CHECK_EQ(send(a, "r\nab\n\0x\n", 8, 0), 8);
	CHECK_STR(tline(a), "error");
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
	CHECK(strstr(r,
		     "\"semaphores\":[{\"key\":\"sem\",\"limit\":3,\"holders\":1,\"waiters\":0}]"));
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

	tb_start(&t, true,
		 (const char *const[]){ "--max-keys", "2", "--max-waiters", "1", "--gc-idle", "0",
					NULL });
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

/* ---- FIFO across transports --------------------------------------------------------- */

/* Send an HTTP/1.1 request over the broker's HTTP Unix socket; the
 * connection, whose answer is read with http_answer(). */
static int http_send(const struct tb *t, const char *method, const char *path, const char *sess,
		     const char *body)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char buf[1024];
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), n;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", t->http_sock);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
		FAIL_AT("connect %s: %s", t->http_sock, strerror(errno));
	n = snprintf(buf, sizeof(buf),
		     "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
		     "Content-Type: application/json\r\n%s%s%sContent-Length: %zu\r\n\r\n%s",
		     method, path, sess ? "X-Dflockd-Session: " : "", sess ? sess : "",
		     sess ? "\r\n" : "", strlen(body), body);
	if (send(fd, buf, (size_t)n, MSG_NOSIGNAL) != n)
		FAIL_AT("send: %s", strerror(errno));
	return fd;
}

/* The whole answer (to EOF), body after the blank line. */
static char *http_answer(int fd)
{
	static char buf[8192];
	size_t n = 0;
	char *body;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&p, 1, 10000) != 1)
			FAIL_AT("no HTTP answer");
		r = recv(fd, buf + n, sizeof(buf) - 1 - n, 0);
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	buf[n] = '\0';
	close(fd);
	body = strstr(buf, "\r\n\r\n");
	return body ? body + 4 : buf;
}

/* A JSON string field's value in @json (enough for flat answers). */
static char *json_field(const char *json, const char *name)
{
	static char val[128];
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":\"", name);
	p = strstr(json, pat);
	if (!p)
		snprintf(pat, sizeof(pat), "\"%s\": \"", name), p = strstr(json, pat);
	if (!p || sscanf(p + strlen(pat), "%127[^\"]", val) != 1)
		FAIL_AT("no \"%s\" in %s", name, json);
	return val;
}

TEST(tcp, one_fifo_with_http_liblocal_and_the_cli, 40)
{
	struct tb t;
	local_session *holder, *later, *obs;
	char sid[64], body[128], *tok;
	const char *cli = getenv("SHMLOCK_CLI_BIN");
	char sockarg[200];
	uint64_t ltok = 0;
	int granted_now = -1, a, h, status;
	pid_t clipid;

	if (!cli)
		FAIL_AT("SHMLOCK_CLI_BIN is not set (run through 'make test')");
	tb_start(&t, true, NULL);
	holder = open_session(&t.b, "holder", 0, 0);
	later = open_session(&t.b, "later", 0, 0);
	obs = open_session(&t.b, "observer", 0, 0);
	CHECK_OK(local_lock(holder, "k", NULL, NULL));
	/* Queue: TCP, then HTTP, then liblocal. */
	a = tconnect(&t);
	tsend(a, "l", "k", "30");
	CHECK(WAIT_FOR(WAITERS(obs, "k") == 1, 5000));
	snprintf(sid, sizeof(sid), "%s",
		 json_field(http_answer(http_send(&t, "POST", "/v1/sessions", NULL, "{}")),
			    "session_id"));
	h = http_send(&t, "POST", "/v1/locks/k", sid, "{\"acquire_timeout_s\":30}");
	CHECK(WAIT_FOR(WAITERS(obs, "k") == 2, 5000));
	CHECK_OK(local_enqueue(later, "k", 0, NULL, &granted_now, NULL));
	CHECK_EQ(granted_now, 0);
	CHECK_EQ(WAITERS(obs, "k"), 3);
	/* Then the CLI, running a command under the lock. */
	snprintf(sockarg, sizeof(sockarg), "-socket=%s", t.b.sock);
	fflush(NULL);
	clipid = fork();
	CHECK(clipid >= 0);
	if (clipid == 0) {
		execl(cli, cli, "lock", sockarg, "-lock-delay=0", "k", "true", (char *)NULL);
		_exit(127);
	}
	CHECK(WAIT_FOR(WAITERS(obs, "k") == 4, 5000));
	/* liblocal lets go: TCP is first. */
	CHECK_OK(local_release(holder, "k"));
	tok = granted(tline(a), "ok", 33);
	CHECK_EQ(info(obs, "k")->token, fence_of(tok));
	/* TCP lets go: HTTP is next (its long poll answered). */
	CHECK_STR(treq(a, "r", "k", tok), "ok");
	snprintf(body, sizeof(body), "{\"token\":\"%s\"}", json_field(http_answer(h), "token"));
	CHECK_EQ(WAITERS(obs, "k"), 2);
	/* HTTP lets go: liblocal, then the CLI (its command runs, it exits 0). */
	CHECK(strstr(http_answer(http_send(&t, "POST", "/v1/locks/k/release", sid, body)), "") !=
	      NULL);
	CHECK_OK(local_wait(later, "k", 5000, &ltok));
	CHECK_EQ(info(obs, "k")->token, ltok);
	CHECK_OK(local_release(later, "k"));
	CHECK_EQ(waitpid(clipid, &status, 0), clipid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK_OK(local_lock(later, "k", NULL, &ltok));
	/* And back: a TCP waiter behind liblocal, granted by its release. */
	tsend(a, "l", "k", "30");
	CHECK(WAIT_FOR(WAITERS(obs, "k") == 1, 5000));
	CHECK_OK(local_release(later, "k"));
	free(granted(tline(a), "ok", 33));
	close(a);
	local_session_close(holder);
	local_session_close(later);
	local_session_close(obs);
	tb_stop(&t);
}

/* ---- the connection owns its session ----------------------------------------------- */

TEST(tcp, closing_the_connection_releases_and_cancels, 30)
{
	struct tb t;
	local_session *s, *obs;
	uint64_t tok = 0;
	int a, b, c;

	tb_start(&t, true, NULL);
	s = open_session(&t.b, "local", 0, 0);
	obs = open_session(&t.b, "observer", 0, 0);
	/* Holds of a closed connection are released. */
	a = tconnect(&t);
	free(granted(treq(a, "l", "k", "0"), "ok", 33));
	free(granted(treq(a, "sl", "sem", "0 2"), "ok", 33));
	CHECK_EQ(HOLDERS(obs, "k"), 1);
	close(a);
	CHECK(WAIT_FOR(HOLDERS(obs, "k") == 0 && HOLDERS(obs, "sem") == 0, 5000));
	/* A connection closed during its wait leaves the queue. */
	CHECK_OK(local_lock(s, "k", NULL, NULL));
	b = tconnect(&t);
	tsend(b, "l", "k", "30");
	c = tconnect(&t);
	CHECK_STR(treq(c, "e", "k", ""), "queued");
	tsend(c, "w", "k", "30");
	CHECK(WAIT_FOR(WAITERS(obs, "k") == 2, 5000));
	close(b);
	CHECK(WAIT_FOR(WAITERS(obs, "k") == 1, 5000));
	close(c);
	CHECK(WAIT_FOR(WAITERS(obs, "k") == 0, 5000));
	/* Nothing stranded: the next local waiter gets the key at once. */
	CHECK_OK(local_release(s, "k"));
	CHECK_OK(local_lock(obs, "k",
			    &(struct local_acquire_opts){ .sz = sizeof(struct local_acquire_opts),
							  .timeout_ms = 0 },
			    &tok));
	local_session_close(s);
	local_session_close(obs);
	tb_stop(&t);
}

TEST(tcp, leases_expire_and_hand_over, 30)
{
	struct tb t;
	local_session *obs;
	char *tok, arg[64];
	int a, b;

	tb_start(&t, true, NULL);
	obs = open_session(&t.b, "observer", 0, 0);
	a = tconnect(&t);
	b = tconnect(&t);
	tok = granted(treq(a, "l", "k", "0 1"), "ok", 1);
	tsend(b, "l", "k", "20");
	/* a never renews: its lease ends and b is granted. */
	free(granted(tline(b), "ok", 33));
	snprintf(arg, sizeof(arg), "%s 5", tok);
	CHECK_STR(treq(a, "n", "k", arg), "error"); /* never resurrected */
	CHECK_STR(treq(a, "r", "k", tok), "error");
	CHECK_EQ(HOLDERS(obs, "k"), 1);
	close(a);
	close(b);
	local_session_close(obs);
	tb_stop(&t);
}

/* An acquire of a key the connection holds sets its lease to the new L
 * (the broker renews only then, not on a new grant, which has L already). */
TEST(tcp, acquiring_a_held_key_again_sets_its_lease_to_the_new_one, 30)
{
	struct tb t;
	char *tok, *tok2;
	int a, b;

	tb_start(&t, true, NULL);
	a = tconnect(&t);
	b = tconnect(&t);
	tok = granted(treq(a, "l", "k", "0 100"), "ok", 100);
	tok2 = granted(treq(a, "l", "k", "0 1"), "ok", 1);
	CHECK_STR(tok2, tok); /* the same hold */
	tsend(b, "l", "k", "20");
	/* Its lease is 1 s now, not 100: b is granted when it ends. */
	free(granted(tline(b), "ok", 33));
	free(tok);
	free(tok2);
	close(a);
	close(b);
	tb_stop(&t);
}

/* ---- limits ------------------------------------------------------------------------- */

TEST(tcp, a_line_too_long_is_answered_error_and_closed, 30)
{
	struct tb t;
	char buf[600];
	int a;

	tb_start(&t, true, NULL);
	a = tconnect(&t);
	/* 256 bytes of content (with the '\r') is the most a line may have. */
	memset(buf, 'k', sizeof(buf));
	memcpy(buf, "stats\n", 6);
	buf[6 + 255] = '\r';
	buf[6 + 256] = '\n';
	memcpy(buf + 6 + 257, "x\n", 2);
	CHECK_EQ(send(a, buf, 6 + 259, 0), 6 + 259);
	CHECK_PREFIX(tline(a), "ok {");
	/* 257: error, then closed. */
	memset(buf, 'k', sizeof(buf));
	memcpy(buf, "l\n", 2);
	buf[2 + 257] = '\n';
	CHECK_EQ(send(a, buf, 2 + 258, 0), 2 + 258);
	CHECK_STR(tline(a), "error");
	CHECK_STR(tline(a), "<EOF>");
	close(a);
	tb_stop(&t);
}

static bool conns_are(int fd, int n)
{
	char want[64];

	snprintf(want, sizeof(want), "ok {\"connections\":%d,", n);
	return !strncmp(treq(fd, "stats", "", ""), want, strlen(want));
}

TEST(tcp, connections_over_the_cap_are_closed_at_once, 30)
{
	struct tb t;
	int a, b, c, d;

	tb_start(&t, true, (const char *const[]){ "--tcp-max-connections", "2", NULL });
	a = tconnect(&t);
	CHECK(WAIT_FOR(conns_are(a, 1), 5000)); /* tb_start()'s probe is gone */
	b = tconnect(&t);
	CHECK(WAIT_FOR(conns_are(a, 2), 5000));
	c = tconnect(&t);
	CHECK_STR(tline(c), "<EOF>"); /* no reply, just closed */
	close(c);
	CHECK(conns_are(b, 2));
	close(a);
	/* A place freed is taken again. */
	CHECK(WAIT_FOR(conns_are(b, 1), 5000));
	d = tconnect(&t);
	CHECK(WAIT_FOR(conns_are(d, 2), 5000));
	close(b);
	close(d);
	tb_stop(&t);
}

TEST(tcp, a_silent_connection_times_out_but_not_while_it_waits, 30)
{
	struct tb t;
	local_session *s;
	int a, b;

	tb_start(&t, true, (const char *const[]){ "--tcp-read-timeout", "1", NULL });
	s = open_session(&t.b, "local", 0, 0);
	a = tconnect(&t);
	CHECK_STR(tline(a), "error");
	CHECK_STR(tline(a), "<EOF>");
	close(a);
	/* A wait of 3 s outlives the 1 s read timeout: answered timeout. */
	CHECK_OK(local_lock(s, "k", NULL, NULL));
	b = tconnect(&t);
	tsend(b, "l", "k", "3");
	CHECK_STR(tline(b), "timeout");
	CHECK_STR(tline(b), "error"); /* then silent again */
	CHECK_STR(tline(b), "<EOF>");
	close(b);
	local_session_close(s);
	tb_stop(&t);
}

/* ---- authentication ----------------------------------------------------------------- */

TEST(tcp, auth_is_the_mandatory_first_request, 30)
{
	struct tb t;
	int a;

	/* The token alone: root, the test's user, is not admitted by its uid. */
	tb_start(&t, false,
		 (const char *const[]){ "--auth-token", "s3cret", "--token-only", NULL });
	a = tconnect(&t);
	CHECK_STR(treq(a, "stats", "", ""), "error_auth");
	CHECK_STR(tline(a), "<EOF>");
	close(a);
	a = tconnect(&t);
	CHECK_STR(treq(a, "auth", "_", "s3cre"), "error_auth");
	CHECK_STR(tline(a), "<EOF>");
	close(a);
	a = tconnect(&t);
	CHECK_STR(treq(a, "auth", "x", "s3cret1"), "error_auth");
	close(a);
	a = tconnect(&t);
	CHECK_EQ(send(a, "auth\n_\ns3cret\0x\n", 16, 0), 16); /* not "s3cret" */
	CHECK_STR(tline(a), "error_auth");
	close(a);
	a = tconnect(&t);
	CHECK_STR(treq(a, "auth", "", "  s3cret \r"), "ok"); /* the key line is ignored */
	CHECK_STR(treq(a, "auth", "_", "s3cret"), "error");  /* once only */
	free(granted(treq(a, "l", "k", "0"), "ok", 33));
	close(a);
	tb_stop(&t);
}

TEST(tcp, no_tcp_without_a_token_or_the_insecure_flag, 30)
{
	struct broker_proc b;
	char port[32];

	snprintf(port, sizeof(port), "127.0.0.1:%d", free_port());
	broker_start(&b, NULL);
	broker_stop(&b);
	CHECK_EQ(broker_refuses(&b, (const char *const[]){ "--tcp-listen", port, NULL }, 5000), 1);
}

TEST(tcp, shutdown_answers_waits_error, 30)
{
	struct tb t;
	local_session *s;
	int a;

	tb_start(&t, true, NULL);
	s = open_session(&t.b, "local", 0, 0);
	CHECK_OK(local_lock(s, "k", NULL, NULL));
	a = tconnect(&t);
	tsend(a, "l", "k", "30");
	CHECK(WAIT_FOR(WAITERS(s, "k") == 1, 5000));
	kill(t.b.pid, SIGTERM);
	CHECK_STR(tline(a), "error");
	CHECK_STR(tline(a), "<EOF>");
	close(a);
	local_session_close(s);
	tb_stop(&t);
}

/* ---- socket activation ------------------------------------------------------------- */

TEST(tcp, a_socket_activated_fd_named_tcp_is_served, 30)
{
	struct tb t;
	int fd;

	memset(&t, 0, sizeof(t));
	broker_spawn_activated(&t.b, "tcpact", "tcp", &t.port,
			       (const char *const[]){ "--tcp-insecure-no-auth",
						      "--destroy-segment-on-exit", NULL });
	/* The backlog is ours until the broker serves it. */
	fd = tconnect(&t);
	free(granted(treq(fd, "l", "k", "0"), "ok", 33));
	close(fd);
	broker_stop_clean(&t.b);
}

TEST(tcp, connections_get_at_most_half_the_session_table, 30)
{
	struct tb t;
	local_session *s;
	int a, b, c;

	tb_start(&t, true, (const char *const[]){ "--max-sessions", "4", NULL });
	a = tconnect(&t);
	b = tconnect(&t);
	c = tconnect(&t);
	free(granted(treq(a, "l", "k1", "0"), "ok", 33));
	free(granted(treq(b, "l", "k2", "0"), "ok", 33));
	CHECK_STR(treq(c, "l", "k3", "0"), "error");
	CHECK_PREFIX(treq(c, "stats", "", ""), "ok {"); /* still served */
	s = open_session(&t.b, "local", 0, 0);		/* local clients are not shut out */
	close(a);
	CHECK(WAIT_FOR(!strncmp(treq(c, "l", "k3", "0"), "ok ", 3), 5000));
	local_session_close(s);
	close(b);
	close(c);
	tb_stop(&t);
}

static int holder_id(const struct local_holder *hl, void *arg)
{
	snprintf(arg, LOCAL_SESSION_ID_LEN + 1, "%s", hl->session);
	return 1;
}

TEST(tcp, a_connection_whose_session_an_operator_ended_starts_afresh, 30)
{
	struct tb t;
	local_session *obs;
	char id[LOCAL_SESSION_ID_LEN + 1] = "", *tok;
	int a;

	tb_start(&t, true, NULL);
	obs = open_session(&t.b, "operator", 0, 0);
	a = tconnect(&t);
	tok = granted(treq(a, "l", "k", "0"), "ok", 33);
	CHECK(local_holders(obs, "k", holder_id, id) >= 0 && id[0]); /* 1: stopped by us */
	CHECK_OK(local_admin_session_destroy(t.b.sock, id));
	CHECK_EQ(HOLDERS(obs, "k"), 0);
	CHECK_STR(treq(a, "r", "k", tok), "error"); /* gone with its session */
	free(granted(treq(a, "l", "k", "0"), "ok", 33));
	CHECK_EQ(HOLDERS(obs, "k"), 1);
	close(a);
	CHECK(WAIT_FOR(HOLDERS(obs, "k") == 0, 5000));
	local_session_close(obs);
	tb_stop(&t);
}

/* ---- TLS -------------------------------------------------------------------------- */

static SSL *tls_connect(const struct tb *t, SSL_CTX *ctx)
{
	SSL *ssl = SSL_new(ctx);

	CHECK(ssl != NULL);
	CHECK_EQ(SSL_set_fd(ssl, tconnect(t)), 1);
	if (SSL_connect(ssl) != 1)
		FAIL_AT("TLS handshake with 127.0.0.1:%d failed", t->port);
	return ssl;
}

static void tls_send(SSL *ssl, const char *text)
{
	CHECK_EQ(SSL_write(ssl, text, (int)strlen(text)), (int)strlen(text));
}

static char *tls_line(SSL *ssl)
{
	static char line[1 << 16];
	size_t n = 0;

	for (;;) {
		struct pollfd p = { .fd = SSL_get_fd(ssl), .events = POLLIN };

		if (!SSL_pending(ssl) && poll(&p, 1, 10000) != 1)
			FAIL_AT("no TLS reply within 10 s");
		if (SSL_read(ssl, line + n, 1) != 1) {
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

TEST(tcp, tls_on_every_connection_when_given_a_certificate, 40)
{
	char dir[64], cert[128], key[128], cmd[512], req[128], *tok;
	struct broker_proc plain;
	local_session *obs;
	SSL_CTX *ctx;
	SSL *a, *b;
	struct tb t;
	int p;

	snprintf(dir, sizeof(dir), "/tmp/shmlock-test-%d-XXXXXX", (int)getpid());
	CHECK(mkdtemp(dir) != NULL);
	snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
	snprintf(key, sizeof(key), "%s/key.pem", dir);
	snprintf(cmd, sizeof(cmd),
		 "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
		 "-keyout '%s' -out '%s' -days 1 -subj /CN=localhost 2>/dev/null",
		 key, cert);
	if (system(cmd) != 0)
		FAIL_AT("openssl could not make a certificate (package openssl)");
	tb_start(&t, true,
		 (const char *const[]){ "--tcp-tls-cert", cert, "--tcp-tls-key", key, NULL });
	obs = open_session(&t.b, "observer", 0, 0);
	ctx = SSL_CTX_new(TLS_client_method());
	CHECK(ctx != NULL);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
	a = tls_connect(&t, ctx);
	b = tls_connect(&t, ctx);
	tls_send(a, "l\nk\n0\n");
	tok = granted(tls_line(a), "ok", 33);
	/* b's wait, and a request pipelined behind it in the same record:
	 * served once the wait ends, though the socket has nothing new. */
	tls_send(b, "l\nk\n20\nstats\n\n\n");
	CHECK(WAIT_FOR(WAITERS(obs, "k") == 1, 5000));
	snprintf(req, sizeof(req), "r\nk\n%s\n", tok);
	tls_send(a, req);
	CHECK_STR(tls_line(a), "ok");
	free(granted(tls_line(b), "ok", 33));
	CHECK_PREFIX(tls_line(b), "ok {\"connections\":2,");
	/* No plaintext on a TLS listener: nothing answered, closed. */
	p = tconnect(&t);
	tsend(p, "l", "k2", "0");
	CHECK_STR(tline(p), "<EOF>");
	close(p);
	CHECK_EQ(HOLDERS(obs, "k2"), 0);
	SSL_free(a);
	SSL_free(b);
	SSL_CTX_free(ctx);
	local_session_close(obs);
	tb_stop(&t);
	/* A certificate without its key is refused. */
	broker_start(&plain, (const char *const[]){ "--tcp-insecure-no-auth", NULL });
	broker_stop(&plain);
	snprintf(req, sizeof(req), "127.0.0.1:%d", free_port());
	CHECK_EQ(broker_refuses(
			 &plain,
			 (const char *const[]){ "--tcp-listen", req, "--tcp-tls-cert", cert, NULL },
			 5000),
		 1);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK_EQ(system(cmd), 0);
}

/* ---- the broker's cost per request ------------------------------------------- */

/* Context switches of @pid's threads other than its main (event-loop) one. */
static unsigned long long helper_thread_switches(pid_t pid)
{
	char path[96], line[128];
	unsigned long long v, sum = 0;
	struct dirent *d;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	dir = opendir(path);
	if (!dir)
		FAIL_AT("opendir %s: %s", path, strerror(errno));
	while ((d = readdir(dir))) {
		FILE *f;

		if (d->d_name[0] == '.' || atoi(d->d_name) == (int)pid)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%d/status", (int)pid, atoi(d->d_name));
		f = fopen(path, "re");
		if (!f)
			continue; /* a thread that just ended */
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "voluntary_ctxt_switches: %llu", &v) == 1 ||
			    sscanf(line, "nonvoluntary_ctxt_switches: %llu", &v) == 1)
				sum += v;
		fclose(f);
	}
	closedir(dir);
	return sum;
}

/*
 * Every TCP acquire takes a lease, which the broker's own session noted by
 * ringing the segment's doorbell: its doorbell thread woke (a futex wake, an
 * eventfd write, a nanosleep, an eventfd read on the loop) per acquire. The
 * loop now sees its own rings at the end of the turn: acquires and releases
 * over TCP wake no other thread of the broker. Paced, so that each acquire
 * of the old code found the doorbell thread asleep.
 */
TEST(tcp, acquires_wake_no_helper_thread_of_the_broker, 30)
{
	struct tb t;
	unsigned long long before, after;
	struct timespec pause = { 0, 2000000 };
	char *tok;
	int fd, i;

	tb_start(&t, true, NULL);
	fd = tconnect(&t);
	tok = granted(treq(fd, "l", "k", "0"), "ok", 33); /* the session opens */
	CHECK_STR(treq(fd, "r", "k", tok), "ok");
	free(tok);
	nanosleep(&pause, NULL);
	before = helper_thread_switches(t.b.pid);
	for (i = 0; i < 20; i++) {
		tok = granted(treq(fd, "l", "k", "0"), "ok", 33);
		CHECK_STR(treq(fd, "r", "k", tok), "ok");
		free(tok);
		nanosleep(&pause, NULL);
	}
	after = helper_thread_switches(t.b.pid);
	/* The old code: at least two per acquire (40); a stray wake-up of
	 * liburcu's or the doorbell thread's is not one per request. */
	if (after - before >= 10)
		FAIL_AT("the broker's other threads switched %llu times for 20 acquires",
			after - before);
	close(fd);
	tb_stop(&t);
}

/*
 * A connection that waits keeps EPOLLIN on (no epoll_ctl() per wait); what
 * it sends while it waits is read and served in order once the wait is
 * answered, including a request that itself waits.
 */
TEST(tcp, requests_sent_during_a_wait_are_served_after_it, 30)
{
	struct tb t;
	local_session *s;
	char *tok, *tok2;
	int a, b;

	tb_start(&t, true, NULL);
	s = open_session(&t.b, "observer", 0, 0);
	a = tconnect(&t);
	b = tconnect(&t);
	tok = granted(treq(a, "l", "k", "0"), "ok", 33);
	tok2 = granted(treq(a, "l", "k2", "0"), "ok", 33);
	tsend(b, "l", "k", "10");
	if (!WAIT_FOR(WAITERS(s, "k") == 1, 5000))
		FAIL_AT("b never queued on k");
	/* Pipelined behind the wait: one served at once after it, one that
	 * waits in turn, one behind that. */
	tsend(b, "l", "free", "0");
	tsend(b, "l", "k2", "10");
	tsend(b, "l", "free2", "0");
	CHECK_STR(treq(a, "r", "k", tok), "ok");
	free(granted(tline(b), "ok", 33)); /* k */
	free(granted(tline(b), "ok", 33)); /* free */
	if (!WAIT_FOR(WAITERS(s, "k2") == 1, 5000))
		FAIL_AT("b never queued on k2");
	CHECK_STR(treq(a, "r", "k2", tok2), "ok");
	free(granted(tline(b), "ok", 33)); /* k2 */
	free(granted(tline(b), "ok", 33)); /* free2 */
	/* And a hang-up while waiting still cancels the wait. */
	tok = granted(treq(a, "l", "k3", "0"), "ok", 33);
	tsend(b, "l", "k3", "10");
	if (!WAIT_FOR(WAITERS(s, "k3") == 1, 5000))
		FAIL_AT("b never queued on k3");
	close(b);
	if (!WAIT_FOR(WAITERS(s, "k3") == 0, 5000))
		FAIL_AT("b's wait outlived its connection");
	CHECK_STR(treq(a, "r", "k3", tok), "ok");
	free(tok);
	free(tok2);
	close(a);
	local_session_close(s);
	tb_stop(&t);
}
