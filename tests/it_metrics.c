// SPDX-License-Identifier: MIT
/*
 * The metrics-only listener (shmlockd --metrics-listen): GET /metrics in
 * Prometheus text format and nothing of the lock API; build info, counters
 * and the wait and hold time histograms move with real operations.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker_fixture.h"
#include "harness.h"
#include "keeper_proto.h"
#include "net_fixture.h"

/* The broker's socket answers before its loop has started the metrics
 * listener: connection refused means "not yet", for up to 10 s. */
static int connect_retry(const struct sockaddr_in *a)
{
	uint64_t end = now_ms() + 10000;

	for (;;) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

		CHECK(fd >= 0);
		if (!connect(fd, (const struct sockaddr *)a, sizeof(*a)))
			return fd;
		if (errno != ECONNREFUSED || now_ms() >= end)
			FAIL_AT("cannot connect to the metrics listener on port %d: %s",
				ntohs(a->sin_port), strerror(errno));
		close(fd);
		usleep(10000);
	}
}

/* One HTTP/1.0 request to 127.0.0.1:@port; the whole answer in a malloc'd
 * string (headers and body), the status in *status. */
static char *http(int port, const char *method, const char *path, int *status)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct timeval tv = { .tv_sec = 10 };
	size_t len = 0, cap = 1 << 16;
	char *buf = malloc(cap), req[256];
	int fd = connect_retry(&a);
	ssize_t n;

	CHECK(buf);
	CHECK(!setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
	n = snprintf(req, sizeof(req), "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", method, path);
	CHECK(write(fd, req, (size_t)n) == n);
	while ((n = read(fd, buf + len, cap - len - 1)) > 0) {
		len += (size_t)n;
		if (cap - len < 4096) {
			cap *= 2;
			buf = realloc(buf, cap);
			CHECK(buf);
		}
	}
	CHECK(n == 0); /* not a timeout */
	buf[len] = '\0';
	close(fd);
	CHECK(sscanf(buf, "HTTP/1.%*d %d", status) == 1);
	return buf;
}

/* The value of the sample line starting with @name (labels included). */
static double sample(const char *text, const char *name)
{
	size_t n = strlen(name);
	const char *p = text;

	while ((p = strstr(p, name))) {
		if ((p == text || p[-1] == '\n') && p[n] == ' ')
			return strtod(p + n + 1, NULL);
		p += n;
	}
	FAIL_AT("no sample %s in:\n%s", name, text);
	return 0;
}

static char *scrape(int port)
{
	int status = 0;
	char *t = http(port, "GET", "/metrics", &status);

	if (status != 200)
		FAIL_AT("GET /metrics answered %d:\n%s", status, t);
	if (!strstr(t, "Content-Type: text/plain; version=0.0.4"))
		FAIL_AT("not the Prometheus text format:\n%.300s", t);
	return t;
}

static void start_with_metrics(struct broker_proc *b, int *port, const char **flags)
{
	static char spec[32];

	*port = free_port();
	snprintf(spec, sizeof(spec), "127.0.0.1:%d", *port);
	flags[0] = "--metrics-listen";
	flags[1] = spec;
	broker_start(b, flags);
}

TEST(metrics, listener_serves_metrics_and_no_lock_api, 30)
{
	static const char *const lock_api[][2] = {
		{ "POST", "/v1/session" },
		{ "POST", "/v1/lock" },
		{ "GET", "/v1/stats" },
		{ "GET", "/v1/locks/k" },
		{ "PUT", "/v1/kv/k" },
		{ "GET", "/health" },
		{ "GET", "/" },
		{ "GET", "/metrics/x" },
	};
	const char *flags[4] = { NULL };
	struct broker_proc b;
	char want[128], *t;
	int port, status;
	size_t i;

	start_with_metrics(&b, &port, flags);
	t = scrape(port);
	snprintf(want, sizeof(want), "shmlock_build_info{version=\"%s\"", SHMLOCK_VERSION);
	CHECK(strstr(t, want));
	CHECK(strstr(t, "# TYPE shmlock_wait_seconds histogram"));
	CHECK(strstr(t, "# TYPE shmlock_hold_seconds histogram"));
	sample(t, "shmlock_quarantined_keys");
	sample(t, "shmlock_quarantined_total");
	sample(t, "shmlock_repairs_total");
	sample(t, "shmlock_handoffs_total");
	sample(t, "shmlock_sessions_opened_total");
	sample(t, "shmlock_sessions_closed_total");
	sample(t, "shmlock_wait_seconds_bucket{le=\"+Inf\"}");
	sample(t, "shmlock_hold_seconds_count");
	free(t);
	/* Nothing of the lock API, whatever the method. */
	for (i = 0; i < sizeof(lock_api) / sizeof(lock_api[0]); i++) {
		t = http(port, lock_api[i][0], lock_api[i][1], &status);
		if (status != 404)
			FAIL_AT("%s %s on the metrics listener answered %d, not 404",
				lock_api[i][0], lock_api[i][1], status);
		free(t);
	}
	t = http(port, "POST", "/metrics", &status);
	CHECK_EQ(status, 405);
	CHECK(strstr(t, "Allow: GET, HEAD"));
	free(t);
	broker_stop(&b);
}

struct waiter {
	local_session *s;
	int rc;
};

static void *wait_for_lock(void *arg)
{
	struct waiter *w = arg;
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 10000);

	w->rc = local_lock(w->s, "m/k", &o, NULL);
	return NULL;
}

static unsigned waiters_of(local_session *s, const char *key)
{
	LOCAL_OPTS(local_key_info, ki);

	return local_info(s, key, &ki) ? 0 : ki.waiters;
}

TEST(metrics, counters_and_histograms_move, 30)
{
	const char *flags[4] = { NULL };
	LOCAL_OPTS(local_acquire_opts, try, .timeout_ms = 0);
	LOCAL_OPTS(local_acquire_opts, briefly, .timeout_ms = 1);
	struct waiter w = { NULL, -1 };
	struct broker_proc b;
	local_session *a, *c;
	double opened, closed, handoffs, waits, holds, wait_inf, hold_inf, timeouts;
	pthread_t t;
	char *m;
	int port, granted = -1;

	start_with_metrics(&b, &port, flags);
	m = scrape(port);
	opened = sample(m, "shmlock_sessions_opened_total");
	closed = sample(m, "shmlock_sessions_closed_total");
	handoffs = sample(m, "shmlock_handoffs_total");
	timeouts = sample(m, "shmlock_timeouts_total");
	waits = sample(m, "shmlock_wait_seconds_count");
	wait_inf = sample(m, "shmlock_wait_seconds_bucket{le=\"+Inf\"}");
	holds = sample(m, "shmlock_hold_seconds_count");
	hold_inf = sample(m, "shmlock_hold_seconds_bucket{le=\"+Inf\"}");
	free(m);

	a = open_session(&b, "a", 0, 0);
	c = open_session(&b, "c", 0, 0);
	w.s = c;
	/* Uncontended: not timed. */
	CHECK_OK(local_lock(a, "m/free", &try, NULL));
	CHECK_OK(local_release(a, "m/free"));
	/* Contended: c queues behind a, and is handed the lock. */
	CHECK_OK(local_lock(a, "m/k", &try, NULL));
	CHECK_EQ(pthread_create(&t, NULL, wait_for_lock, &w), 0);
	CHECK(WAIT_FOR(waiters_of(a, "m/k") == 1, 10000));
	CHECK_OK(local_release(a, "m/k"));
	CHECK_EQ(pthread_join(t, NULL), 0);
	CHECK_OK(w.rc);
	/* a queues behind c and gives up: a wait that timed out. */
	CHECK_RC(local_lock(a, "m/k", &briefly, NULL), -ETIMEDOUT);
	CHECK_OK(local_release(c, "m/k"));
	/* Two-phase: c queues with local_enqueue(), is granted in local_wait(). */
	CHECK_OK(local_lock(a, "m/2p", &try, NULL));
	CHECK_OK(local_enqueue(c, "m/2p", 0, NULL, &granted, NULL));
	CHECK_EQ(granted, 0);
	CHECK_OK(local_release(a, "m/2p"));
	CHECK_OK(local_wait(c, "m/2p", 10000, NULL));
	CHECK_OK(local_release(c, "m/2p"));
	CHECK_OK(local_session_close(a));
	CHECK_OK(local_session_close(c));

	m = scrape(port);
	CHECK_EQ(sample(m, "shmlock_sessions_opened_total"), opened + 2);
	CHECK_EQ(sample(m, "shmlock_sessions_closed_total"), closed + 2);
	CHECK(sample(m, "shmlock_handoffs_total") >= handoffs + 1);
	CHECK(sample(m, "shmlock_timeouts_total") >= timeouts + 1);
	/* Three waits (two granted, one timed out), two holds that had waited. */
	CHECK_EQ(sample(m, "shmlock_wait_seconds_count"), waits + 3);
	CHECK_EQ(sample(m, "shmlock_wait_seconds_bucket{le=\"+Inf\"}"), wait_inf + 3);
	CHECK_EQ(sample(m, "shmlock_hold_seconds_count"), holds + 2);
	CHECK_EQ(sample(m, "shmlock_hold_seconds_bucket{le=\"+Inf\"}"), hold_inf + 2);
	/* Buckets are cumulative and end at the count. */
	CHECK(sample(m, "shmlock_wait_seconds_bucket{le=\"0.0001\"}") <=
	      sample(m, "shmlock_wait_seconds_bucket{le=\"300\"}"));
	CHECK(sample(m, "shmlock_wait_seconds_bucket{le=\"300\"}") <=
	      sample(m, "shmlock_wait_seconds_count"));
	CHECK(sample(m, "shmlock_wait_seconds_sum") > 0);
	free(m);
	broker_stop(&b);
}

/* A listening TCP socket on 127.0.0.1, as a service manager would pass it. */
static int tcp_listener(int *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	CHECK(fd >= 0);
	CHECK(!bind(fd, (struct sockaddr *)&a, sizeof(a)));
	CHECK(!listen(fd, 16));
	CHECK(!getsockname(fd, (struct sockaddr *)&a, &len));
	*port = ntohs(a.sin_port);
	return fd;
}

TEST(metrics, socket_activated_metrics_fd, 30)
{
	const char *bin = getenv("SHMLOCK_BROKER_BIN");
	char dir[] = "/tmp/shmlock-metrics-XXXXXX", sock[128], logf[128], keep[140], shm[64], *m;
	int port, lfd, status;
	pid_t pid;

	if (!bin)
		FAIL_AT("SHMLOCK_BROKER_BIN is not set (run through 'make test')");
	CHECK(mkdtemp(dir));
	snprintf(sock, sizeof(sock), "%s/sock", dir);
	snprintf(logf, sizeof(logf), "%s/log", dir);
	CHECK_OK(keeper_path(sock, keep, sizeof(keep)));
	snprintf(shm, sizeof(shm), "/shmlock-metrics-%d", (int)getpid());
	lfd = tcp_listener(&port);
	pid = fork();
	CHECK(pid >= 0);
	if (!pid) {
		char v[32];
		int log = open(logf, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		if (log >= 0)
			dup2(log, 2);
		if (lfd != 3) {
			dup2(lfd, 3);
			close(lfd);
		}
		snprintf(v, sizeof(v), "%d", (int)getpid());
		setenv("LISTEN_PID", v, 1);
		setenv("LISTEN_FDS", "1", 1);
		setenv("LISTEN_FDNAMES", "metrics", 1);
		execl(bin, bin, "--socket", sock, "--shm-name", shm, "--destroy-segment-on-exit",
		      (char *)NULL);
		_exit(127);
	}
	close(lfd);
	m = scrape(port);
	CHECK(strstr(m, "shmlock_build_info{version=\""));
	free(m);
	CHECK(!kill(pid, SIGTERM));
	CHECK_EQ(waitpid(pid, &status, 0), pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	unlink(sock);
	unlink(keep);
	unlink(logf);
	rmdir(dir);
}
