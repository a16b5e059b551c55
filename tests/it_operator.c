// SPDX-License-Identifier: MIT
/*
 * The operator's tools against a real broker (issue 11, items 4 to 6):
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
#include <sys/wait.h>

#include <curl/curl.h>

#include "broker_fixture.h"
#include "client.h"
#include "harness.h"

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
static __attribute__((unused)) int shmlock(const struct broker_proc *b, char *out, size_t size, ...)
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

static size_t sink(char *p, size_t size, size_t n, void *arg)
{
	char *buf = arg;
	size_t have = strlen(buf), len = size * n;

	if (have + len < 1024) {
		memcpy(buf + have, p, len);
		buf[have + len] = '\0';
	}
	return len;
}

static long http_post(const char *sock, const char *path, const char *session, const char *body,
		      char *reply)
{
	CURL *e = curl_easy_init();
	struct curl_slist *h = NULL;
	char url[256], hdr[96];
	long status = 0;

	CHECK(e);
	reply[0] = '\0';
	snprintf(url, sizeof(url), "http://localhost%s", path);
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_UNIX_SOCKET_PATH, sock);
	h = curl_slist_append(h, "Content-Type: application/json");
	if (session) {
		snprintf(hdr, sizeof(hdr), "X-Dflockd-Session: %s", session);
		h = curl_slist_append(h, hdr);
	}
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, sink);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, reply);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 10000L);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	if (curl_easy_perform(e) == CURLE_OK)
		curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(h);
	curl_easy_cleanup(e);
	return status;
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
	struct local_key_info ki;

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
	struct local_acquire_opts lease = { .timeout_ms = 0, .lease_ms = 60000 };
	struct local_acquire_opts value = { .timeout_ms = 0, .value = "leader-1", .value_len = 8 };
	struct waiter_arg wa;
	local_session *plain, *nocheck, *ttl;
	struct child w;
	char *p;
	int rc;

	snprintf(http_sock, sizeof(http_sock), "/tmp/shmlock-op-%d.http", (int)getpid());
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
	broker_stop(&b);
	unlink(http_sock);
}
