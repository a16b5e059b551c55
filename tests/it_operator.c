// SPDX-License-Identifier: MIT
/*
 * The operator's tools against a real broker:
 *
 *  - `shmlockd --check` calls a busy, healthy broker healthy: every kind of
 *    session (process-checked, without a process check, with a TTL, HTTP)
 *    and of hold (lock, semaphore, queued waiter, lease, value);
 *  - a quarantined key is listed by name (keys, info, status) and
 *    `shmlock reset KEY` brings it back, touching nothing else;
 *  - with the session table full, inspection and operator commands still
 *    work: they are served by the broker without a session of their own.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "broker_fixture.h"
#include "client.h"
#include "harness.h"
#include "net_fixture.h"

/* ---- running shmlockd --check and shmlock ------------------------------------ */

/* Run @argv (argv[0] a path) with stdout and stderr in @out; its exit status. */
static int run(const char *const *argv, char *out, size_t size)
{
	int p[2], status;
	size_t len = 0;
	uint64_t end = now_ms() + 20000;
	pid_t pid;

	CHECK(pipe(p) == 0);
	fflush(NULL);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		dup2(p[1], 1);
		dup2(p[1], 2);
		close(p[0]);
		close(p[1]);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(p[1]);
	for (;;) {
		struct pollfd pf = { .fd = p[0], .events = POLLIN };
		ssize_t n;

		if (now_ms() >= end || poll(&pf, 1, (int)(end - now_ms())) <= 0)
			break;
		n = read(p[0], out + len, size - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
		if (len == size - 1)
			break;
	}
	out[len] = '\0';
	close(p[0]);
	status = pid_wait(pid, 10000);
	if (!WIFEXITED(status))
		FAIL_AT("%s did not exit normally:\n%s", argv[0], out);
	return WEXITSTATUS(status);
}

static int run_check(const struct broker_proc *b, char *out, size_t size)
{
	const char *argv[] = { getenv("SHMLOCK_BROKER_BIN"), "--check", "--shm-name", b->shm,
			       NULL };

	return run(argv, out, size);
}

/* shmlock CMD [ARG...] -socket SOCK; NULL-terminated arguments after @b. */
static int shmlock(const struct broker_proc *b, char *out, size_t size, ...)
{
	const char *argv[16];
	const char *bin = getenv("SHMLOCK_CLI_BIN");
	va_list ap;
	int n = 0;

	if (!bin)
		FAIL_AT("SHMLOCK_CLI_BIN is not set (run through 'make test')");
	argv[n++] = bin;
	va_start(ap, size);
	while (n < 12 && (argv[n] = va_arg(ap, const char *)))
		n++;
	va_end(ap);
	argv[n++] = "-socket";
	argv[n++] = b->sock;
	argv[n] = NULL;
	return run(argv, out, size);
}

/* ---- HTTP, just enough for a session and a lock ------------------------------- */

/* An HTTP socket in a directory of our own: the broker refuses to bind in
 * one that others can write, such as /tmp itself. */
static void http_sock_path(char *out, size_t size)
{
	char dir[] = "/tmp/shmlock-op-XXXXXX";

	CHECK(mkdtemp(dir) != NULL);
	snprintf(out, size, "%s/http.sock", dir);
}

static void http_sock_remove(char *path)
{
	unlink(path);
	*strrchr(path, '/') = '\0';
	rmdir(path);
}

/* POST @body to @path on the HTTP socket @sock (as session @session, or
 * none): the status, the reply's first 1023 bytes in @reply. */
static long http_post(const char *sock, const char *path, const char *session, const char *body,
		      char *reply)
{
	const char *const headers[] = { "Content-Type: application/json",
					session ? strf("X-Dflockd-Session: %s", session) : NULL,
					NULL };

	return http_fetch(&(struct http_req){ .method = "POST",
					      .url = strf("http://localhost%s", path),
					      .unix_socket = sock,
					      .headers = headers,
					      .body = body,
					      .timeout_ms = 10000 },
			  reply, 1024);
}

/* ---- sessions of every kind ---------------------------------------------------- */

static local_session *open_flags(const struct broker_proc *b, const char *name, unsigned flags,
				 uint32_t ttl_ms)
{
	struct local_session_opts o;
	local_session *s;

	local_session_opts_init(&o);
	o.socket_path = b->sock;
	o.name = name;
	o.lock_delay_ms = 0;
	o.flags = flags;
	o.ttl_ms = ttl_ms;
	CHECK_OK(local_session_open(&o, &s));
	return s;
}

static uint32_t waiters_of(local_session *s, const char *key)
{
	LOCAL_OPTS(local_key_info, ki);

	CHECK_OK(local_info(s, key, &ki));
	return ki.waiters;
}

struct waiter_arg {
	const struct broker_proc *b;
	const char *key;
};

/* Child: queue on a lock (no deadline) until the test ends it. */
static void waiter(void *p, int in, int out)
{
	const struct waiter_arg *a = p;
	local_session *s = open_session(a->b, "waiter", 0, 0);
	int rc;

	(void)in;
	say(out, "open");
	rc = local_lock(s, a->key, NULL, NULL);
	say(out, "rc %d", rc);
	pause();
}

/* ---- item 6: --check on a healthy, busy broker ---------------------------------- */

TEST(operator, check_calls_every_kind_of_session_and_hold_healthy, 40)
{
	static char out[16384];
	struct broker_proc b;
	char http_sock[160], reply[1024], id[LOCAL_SESSION_ID_LEN + 1];
	const char *extra[] = { "--http-socket", http_sock, NULL };
	LOCAL_OPTS(local_acquire_opts, lease, .timeout_ms = 0, .lease_ms = 60000);
	LOCAL_OPTS(local_acquire_opts, value, .timeout_ms = 0, .value = "leader-1", .value_len = 8);
	struct waiter_arg wa;
	local_session *plain, *nocheck, *ttl;
	struct child w;
	char *p;
	int rc;

	http_sock_path(http_sock, sizeof(http_sock));
	broker_start(&b, extra);
	wa.b = &b;
	wa.key = "op/lock";
	plain = open_session(&b, "plain", 0, 0);
	nocheck = open_flags(&b, "nocheck", LOCAL_SESSION_NO_PROCESS_CHECK, 0);
	ttl = open_flags(&b, "ttl", 0, 60000);
	CHECK_OK(local_lock(plain, "op/lock", NULL, NULL));
	CHECK_OK(local_lock(plain, "op/value", &value, NULL));
	CHECK_OK(local_sem_acquire(nocheck, "op/sem", 3, NULL, NULL));
	CHECK_OK(local_sem_acquire(ttl, "op/sem", 3, NULL, NULL));
	CHECK_OK(local_lock(ttl, "op/lease", &lease, NULL));
	child_spawn(&w, waiter, &wa);
	child_expect(&w, "open", 5000);
	CHECK(WAIT_FOR(waiters_of(plain, "op/lock") == 1, 5000));
	/* An HTTP session holding a lock. */
	CHECK_EQ(http_post(http_sock, "/v1/sessions", NULL, "{}", reply), 200);
	p = strstr(reply, "\"session_id\"");
	CHECK(p && sscanf(p, "\"session_id\": \"%32[0-9a-f]\"", id) == 1);
	CHECK_EQ(http_post(http_sock, "/v1/locks/op-http", id, "{\"acquire_timeout_s\": 1}", reply),
		 200);

	rc = run_check(&b, out, sizeof(out));
	if (rc != 0 || strstr(out, "DAMAGED") || strstr(out, "problem:"))
		FAIL_AT("--check exited %d on a healthy broker:\n%s", rc, out);
	CHECK(strstr(out, "healthy"));

	child_kill(&w);
	child_wait(&w, 5000);
	local_session_close(plain);
	local_session_close(nocheck);
	local_session_close(ttl);
	broker_stop_clean(&b);
	http_sock_remove(http_sock);
}

/* ---- item 4: the operator is never locked out ------------------------------------- */

/* The session table full of sessions without a process check (leaked by
 * processes long gone): every inspection and operator command still works. */
TEST(operator, a_full_session_table_locks_no_operator_out, 60)
{
	static char out[65536];
	static const char *const caps[] = { "--max-sessions", "4", NULL };
	struct broker_proc b;
	local_session *s[4], *extra;
	struct local_session_opts o;
	uint64_t tok;
	int i;

	broker_start(&b, caps);
	for (i = 0; i < 4; i++)
		s[i] = open_flags(&b, "leaked", LOCAL_SESSION_NO_PROCESS_CHECK, 0);
	CHECK_OK(local_lock(s[0], "op/full", NULL, &tok));
	CHECK_OK(local_sem_acquire(s[1], "op/full-sem", 2, NULL, NULL));
	local_session_opts_init(&o);
	o.socket_path = b.sock;
	o.broker_wait_ms = 0;
	CHECK_RC(local_session_open(&o, &extra), -LOCAL_EMAXSESSIONS);

	if (shmlock(&b, out, sizeof(out), "status", NULL) || !strstr(out, "4 / 4"))
		FAIL_AT("shmlock status with a full table:\n%s", out);
	if (shmlock(&b, out, sizeof(out), "keys", NULL) || !strstr(out, "op/full-sem") ||
	    !strstr(out, "leaked"))
		FAIL_AT("shmlock keys with a full table:\n%s", out);
	if (shmlock(&b, out, sizeof(out), "sessions", NULL) || !strstr(out, local_session_id(s[3])))
		FAIL_AT("shmlock sessions with a full table:\n%s", out);
	if (shmlock(&b, out, sizeof(out), "info", "op/full", NULL) ||
	    !strstr(out, local_session_id(s[0])))
		FAIL_AT("shmlock info with a full table:\n%s", out);
	if (shmlock(&b, out, sizeof(out), "release", "-force", "op/full", NULL))
		FAIL_AT("shmlock release -force with a full table:\n%s", out);
	CHECK_RC(local_held(s[0], "op/full", NULL), -LOCAL_ENOTHELD);
	if (shmlock(&b, out, sizeof(out), "session", "destroy", local_session_id(s[3]), NULL))
		FAIL_AT("shmlock session destroy with a full table:\n%s", out);
	CHECK_RC(local_held(s[3], "op/full", NULL), -LOCAL_ESESSION);
	/* The slot it freed is a client's again. */
	CHECK_OK(local_session_open(&o, &extra));
	CHECK_OK(local_session_close(extra));
	for (i = 0; i < 3; i++)
		local_session_close(s[i]);
	local_session_close(s[3]);
	broker_stop_clean(&b);
}

/* A process sits in a key's mutex (stopped inside its critical section):
 * inspection answers anyway, and says the key is busy. */
TEST(operator, inspection_does_not_wait_for_a_stalled_key, 30)
{
	static char out[65536];
	struct broker_proc b;
	local_session *a, *me;
	struct seg_key *k;
	LOCAL_OPTS(local_key_info, ki);
	unsigned kf = 0;
	uint64_t t0;

	broker_start(&b, NULL);
	a = open_session(&b, "holder", 0, 0);
	me = open_session(&b, "stalled", 0, 0);
	CHECK_OK(local_lock(a, "op/stalled", NULL, NULL));
	CHECK_OK(local_lock(a, "op/fine", NULL, NULL));
	/* This process now holds the key's mutex, as a stopped one would. */
	CHECK_OK(keytab_find(me->seg, "op/stalled", strlen("op/stalled"), false, &k));
	t0 = now_ms();
	if (shmlock(&b, out, sizeof(out), "keys", NULL) || !strstr(out, "lock (busy)") ||
	    !strstr(out, "op/fine"))
		FAIL_AT("shmlock keys with a stalled key:\n%s", out);
	if (shmlock(&b, out, sizeof(out), "info", "op/stalled", NULL) || !strstr(out, "busy"))
		FAIL_AT("shmlock info of a stalled key:\n%s", out);
	CHECK_OK(local_admin_info(b.sock, "op/stalled", &ki, &kf));
	CHECK_EQ(kf, LOCAL_KEY_BUSY);
	CHECK_EQ(ki.holders, 1);
	CHECK(!strcmp(ki.holder_session, local_session_id(a)));
	CHECK(now_ms() - t0 < 10000);
	key_unlock(k);
	CHECK_OK(local_admin_info(b.sock, "op/stalled", &ki, &kf));
	CHECK_EQ(kf, 0);
	local_session_close(me);
	local_session_close(a);
	broker_stop_clean(&b);
}

/* ---- item 5: a quarantined key is listed, and reset --------------------------------- */

/* GET @path on the HTTP socket: the body (malloc'ed). */
static char *http_get(const char *sock, const char *path)
{
	struct http_reply r;

	CHECK_EQ(http_do(&(struct http_req){ .url = strf("http://localhost%s", path),
					     .unix_socket = sock,
					     .timeout_ms = 10000 },
			 &r),
		 0);
	CHECK_EQ(r.status, 200);
	free(r.headers);
	return r.body;
}

TEST(operator, a_quarantined_key_is_listed_and_reset, 60)
{
	static char out[65536];
	struct broker_proc b;
	char http_sock[160], line[64], *body, reply[1024], id[LOCAL_SESSION_ID_LEN + 1];
	/* quarantined_keys is a --http-extensions field of /v1/stats */
	const char *extra[] = { "--http-socket", http_sock, "--http-extensions", NULL };
	LOCAL_OPTS(local_key_info, ki);
	struct waiter_arg wa;
	local_session *a, *other, *obs;
	uint64_t other_tok, tok, t;
	struct seg_key *k;
	struct child w;
	unsigned kf = 0;
	int rc;

	http_sock_path(http_sock, sizeof(http_sock));
	broker_start(&b, extra);
	a = open_session(&b, "holder", 0, 0);
	other = open_session(&b, "other", 0, 0);
	obs = open_session(&b, "obs", 0, 0);
	CHECK_OK(local_lock(a, "op/q", NULL, &tok));
	CHECK_OK(local_lock(other, "op/other", NULL, &other_tok));
	wa.b = &b;
	wa.key = "op/q";
	child_spawn(&w, waiter, &wa);
	child_expect(&w, "open", 5000);
	CHECK(WAIT_FOR(waiters_of(obs, "op/q") == 1, 5000));

	/* Damage a field of the entry, as a stray write would: the next
	 * locker quarantines it. */
	CHECK_OK(keytab_find(obs->seg, "op/q", 4, false, &k));
	k->kind = 9;
	key_unlock(k);
	CHECK_RC(local_info(obs, "op/q", &ki), -LOCAL_ECORRUPT);

	/* Listed by name: keys, keys -quarantined, info, status, HTTP. */
	if (shmlock(&b, out, sizeof(out), "keys", NULL) || !strstr(out, "op/q ") ||
	    !strstr(out, "QUARANTINED") || !strstr(out, "op/other"))
		FAIL_AT("shmlock keys does not list the quarantined key:\n%s", out);
	if (shmlock(&b, out, sizeof(out), "keys", "-quarantined", NULL) || !strstr(out, "op/q ") ||
	    strstr(out, "op/other"))
		FAIL_AT("shmlock keys -quarantined:\n%s", out);
	if (shmlock(&b, out, sizeof(out), "info", "op/q", NULL) || !strstr(out, "quarantined"))
		FAIL_AT("shmlock info of the quarantined key:\n%s", out);
	CHECK_OK(local_admin_info(b.sock, "op/q", &ki, &kf));
	CHECK_EQ(kf, LOCAL_KEY_QUARANTINED);
	CHECK_EQ(ki.holders, 1);
	CHECK_EQ(ki.waiters, 1);
	if (shmlock(&b, out, sizeof(out), "status", NULL) || !strstr(out, "quarantined keys") ||
	    !strstr(out, "op/q"))
		FAIL_AT("shmlock status does not name the quarantined key:\n%s", out);
	body = http_get(http_sock, "/v1/stats");
	if (!strstr(body, "\"quarantined_keys\"") || !strstr(body, "\"op/q\""))
		FAIL_AT("/v1/stats does not name the quarantined key:\n%s", body);
	free(body);
	CHECK_EQ(http_post(http_sock, "/v1/sessions", NULL, "{}", reply), 200);
	CHECK(sscanf(strstr(reply, "\"session_id\""), "\"session_id\": \"%32[0-9a-f]\"", id) == 1);
	CHECK_EQ(http_post(http_sock, "/v1/locks/op%2Fq", id, "{\"acquire_timeout_s\": 0}", reply),
		 500);
	if (!strstr(reply, "quarantined") || !strstr(reply, "shmlock reset"))
		FAIL_AT("HTTP on a quarantined key:\n%s", reply);
	body = http_get(http_sock, "/metrics");
	if (!strstr(body, "shmlock_quarantined_keys 1") ||
	    !strstr(body, "shmlock_quarantined_total 1"))
		FAIL_AT("/metrics does not count the quarantined key:\n%s", body);
	free(body);
	/* The broker's log names it (within its one-second scan). */
	CHECK(WAIT_FOR(broker_log_has(&b, "'op/q' (entry"), 5000));
	if (shmlock(&b, out, sizeof(out), "release", "-force", "op/q", NULL) != 1 ||
	    !strstr(out, "shmlock reset op/q"))
		FAIL_AT("release -force of a quarantined key should point to reset:\n%s", out);

	/* Reset: the holder loses it, the waiter's call returns, and the key
	 * locks again; the other key is untouched. */
	if (shmlock(&b, out, sizeof(out), "reset", "op/q", NULL))
		FAIL_AT("shmlock reset failed:\n%s", out);
	if (child_read(&w, line, sizeof(line), 5000) || sscanf(line, "rc %d", &rc) != 1)
		FAIL_AT("the waiter did not return after the reset");
	CHECK_RC(rc, -LOCAL_ECORRUPT);
	CHECK_RC(local_held(a, "op/q", NULL), -LOCAL_ENOTHELD);
	CHECK_RC(local_release(a, "op/q"), -LOCAL_ENOTHELD);
	CHECK_OK(local_lock(obs, "op/q", NULL, &t));
	CHECK(t > tok);
	CHECK_OK(local_held(other, "op/other", &t));
	CHECK_EQ(t, other_tok);
	CHECK(broker_log_has(&b, "reset quarantined key 'op/q'"));
	CHECK_OK(local_admin_info(b.sock, "op/q", &ki, &kf));
	CHECK_EQ(kf, 0);
	CHECK_EQ(ki.holders, 1);
	CHECK(!strcmp(ki.holder_session, local_session_id(obs)));
	/* Nothing quarantined any more: a second reset says so. */
	CHECK_EQ(shmlock(&b, out, sizeof(out), "reset", "op/q", NULL), 1);
	CHECK(strstr(out, "not quarantined"));
	if (run_check(&b, out, sizeof(out)) != 0)
		FAIL_AT("--check after the reset:\n%s", out);

	child_kill(&w);
	child_wait(&w, 5000);
	local_session_close(a);
	local_session_close(other);
	local_session_close(obs);
	broker_stop_clean(&b);
	http_sock_remove(http_sock);
}

/* ---- listings come in pages ----------------------------------------------------- */

struct tally {
	unsigned n, dup, holders;
	const char *holders_of; /* prefix of the keys whose holders count */
	unsigned char seen[512];
};

static int count_key_holder(const char *key, const struct local_holder *h, void *arg)
{
	struct tally *t = arg;

	(void)h;
	t->holders += !strncmp(key, t->holders_of, strlen(t->holders_of));
	return 0;
}

static int count_key(const char *key, const struct local_key_info *ki, unsigned kf, void *arg)
{
	struct tally *t = arg;
	unsigned i;

	(void)kf;
	if (sscanf(key + 200, "%u", &i) == 1 && i < 512 && ki->kind == LOCAL_KIND_SEMAPHORE) {
		t->dup += t->seen[i]++;
		t->n++;
	}
	return 0;
}

static int count_holder(const struct local_holder *h, void *arg)
{
	struct tally *t = arg;

	(void)h;
	t->n++;
	return 0;
}

static int count_session(const struct local_session_info *si, void *arg)
{
	struct tally *t = arg;

	t->n += !strcmp(si->name, "many");
	return 0;
}

/* More keys, holders and sessions than one reply holds: each is reported
 * once, whatever the page boundaries. */
TEST(operator, listings_span_pages, 120)
{
	static const char *const caps[] = { "--max-sessions", "512", NULL };
	enum { N = 400 };
	static local_session *s[N];
	struct broker_proc b;
	struct tally t;
	char key[256];
	int i;

	broker_start(&b, caps);
	for (i = 0; i < N; i++) {
		s[i] = open_session(&b, "many", 0, 0);
		CHECK_OK(local_sem_acquire(s[i], "op/many", N, NULL, NULL));
		/* 200-byte names: a key record is ~360 bytes, ~90 a page. */
		snprintf(key, sizeof(key), "%0200d%d", 0, i);
		CHECK_OK(local_sem_acquire(s[i], key, 1, NULL, NULL));
	}
	memset(&t, 0, sizeof(t));
	CHECK_OK(local_admin_keys(b.sock, "0", 0, count_key, NULL, &t));
	CHECK_EQ(t.n, N);
	CHECK_EQ(t.dup, 0);
	/* With their holders, one each, in the same pages. */
	memset(&t, 0, sizeof(t));
	t.holders_of = "0";
	CHECK_OK(local_admin_keys(b.sock, "0", 0, count_key, count_key_holder, &t));
	CHECK_EQ(t.n, N);
	CHECK_EQ(t.holders, N);
	/* A key with more holders than come along: fetched on their own. */
	memset(&t, 0, sizeof(t));
	t.holders_of = "op/many";
	CHECK_OK(local_admin_keys(b.sock, "op/", 0, count_key, count_key_holder, &t));
	CHECK_EQ(t.holders, N);
	memset(&t, 0, sizeof(t));
	CHECK_OK(local_admin_holders(b.sock, "op/many", count_holder, &t));
	CHECK_EQ(t.n, N);
	memset(&t, 0, sizeof(t));
	CHECK_OK(local_admin_sessions(b.sock, count_session, &t));
	CHECK_EQ(t.n, N);
	for (i = 0; i < N; i++)
		local_session_close(s[i]);
	broker_stop_clean(&b);
}

/* ---- the allow lists apply ------------------------------------------------------------ */

#define NOBODY 65534u

static int no_key(const char *key, const struct local_key_info *ki, unsigned kf, void *arg)
{
	(void)key;
	(void)ki;
	(void)kf;
	(void)arg;
	return 0;
}

static int no_session(const struct local_session_info *si, void *arg)
{
	(void)si;
	(void)arg;
	return 0;
}

/* As uid/gid NOBODY: exit 0 when every operator call was refused with
 * LOCAL_EDENIED, else 1 + the index of the first that was not. */
static int operator_calls_as_nobody(const struct broker_proc *b)
{
	struct child c = { .rd = -1, .wr = -1 };
	int status;

	c.pid = fork();
	if (c.pid == 0) {
		static LOCAL_OPTS(local_key_info, ki);
		LOCAL_OPTS(local_stats, st);
		int r[6], i;

		if (setgroups(0, NULL) || setgid(NOBODY) || setuid(NOBODY))
			_exit(99);
		r[0] = local_admin_stats(b->sock, &st, NULL);
		r[1] = local_admin_keys(b->sock, NULL, 0, no_key, NULL, NULL);
		r[2] = local_admin_info(b->sock, "op/k", &ki, NULL);
		r[3] = local_admin_sessions(b->sock, no_session, NULL);
		r[4] = local_admin_force_release(b->sock, "op/k", NULL);
		r[5] = local_admin_reset(b->sock, "op/k");
		for (i = 0; i < 6; i++)
			if (r[i] != -LOCAL_EDENIED)
				_exit(1 + i);
		_exit(0);
	}
	status = child_wait(&c, 20000);
	CHECK(WIFEXITED(status));
	CHECK(WEXITSTATUS(status) != 99);
	return WEXITSTATUS(status);
}

TEST(operator, operator_requests_obey_the_allow_lists, 40)
{
	static const char *const flags[] = { "--socket-group", "65534", "--allow-uid", "4242",
					     NULL };
	struct broker_proc b;
	LOCAL_OPTS(local_stats, st);
	local_session *root;

	broker_start(&b, flags);
	CHECK_OK(chmod(b.dir, 0755)); /* the socket's group decides */
	root = open_session(&b, "root", 0, 0);
	CHECK_OK(local_lock(root, "op/k", NULL, NULL));
	CHECK_EQ(operator_calls_as_nobody(&b), 0);
	CHECK_OK(local_held(root, "op/k", NULL));
	CHECK_OK(local_admin_stats(b.sock, &st, NULL)); /* root is always allowed */
	CHECK_EQ(st.holds, 1);
	local_session_close(root);
	broker_stop_clean(&b);
}
