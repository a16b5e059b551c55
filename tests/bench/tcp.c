// SPDX-License-Identifier: MIT
/*
 * 11. dflockd's TCP line protocol: acquire+release on TCP to 127.0.0.1,
 *     against a broker of its own started with --tcp-listen on a free port.
 *
 * One op = "l\n<key>\n0\n" -> "ok <token> <lease>", then
 * "r\n<key>\n<token>\n" -> "ok", timed together (two round trips: the
 * release needs the token). Each client is a thread with one connection
 * (so one session) and its own key: nothing contends in the lock table;
 * what is measured is the TCP path of the broker (one event-loop thread).
 * Broker CPU per op is utime+stime of the broker process over the timed
 * run (/proc/PID/stat, clock-tick resolution).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#define TCP_RUN_NS (2 * NSEC_PER_SEC)
#define TCP_WARM_OPS 200
#define TCP_IO_TIMEOUT_S 5

static const int tcp_clients[] = { 1, 10, 50 };
#define TCP_NCONFIGS ((int)(sizeof(tcp_clients) / sizeof(tcp_clients[0])))

struct tclient {
	pthread_t thread;
	int idx, fd;
	char in[256];
	size_t in_len;
	double *lat;
	size_t nlat, cap;
	uint64_t last_end;
	char err[200];
};

struct tcp_run {
	int n;
	uint64_t ns, ops;
	double ops_s, p50, p99, max, broker_us, broker_pct;
};

static struct broker tb;
static int tcp_port;
static _Atomic uint32_t t_ready, t_start, t_stop;

static int tconnect(struct tclient *c)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)tcp_port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct timeval tv = { .tv_sec = TCP_IO_TIMEOUT_S };
	int one = 1;

	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return -1;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa))) {
		close(c->fd);
		c->fd = -1;
		return -1;
	}
	return 0;
}

/* Send @req (one write), read one reply line into c->in (no '\n'). */
static int exchange(struct tclient *c, const char *req, size_t len)
{
	char *nl;

	if (send(c->fd, req, len, MSG_NOSIGNAL) != (ssize_t)len) {
		snprintf(c->err, sizeof(c->err), "send: %s", strerror(errno));
		return -1;
	}
	c->in_len = 0;
	while (!(nl = memchr(c->in, '\n', c->in_len))) {
		ssize_t n = recv(c->fd, c->in + c->in_len, sizeof(c->in) - 1 - c->in_len, 0);

		if (n <= 0 || c->in_len + (size_t)n >= sizeof(c->in) - 1) {
			snprintf(c->err, sizeof(c->err), "recv: %s",
				 n < 0 ? strerror(errno) : "closed or too long");
			return -1;
		}
		c->in_len += (size_t)n;
	}
	*nl = '\0';
	return 0;
}

static int one_op(struct tclient *c)
{
	char req[128], tok[64];
	int n = snprintf(req, sizeof(req), "l\nbench-tcp-%d\n0\n", c->idx);

	if (exchange(c, req, (size_t)n))
		return -1;
	if (sscanf(c->in, "ok %63s", tok) != 1) {
		snprintf(c->err, sizeof(c->err), "acquire answered \"%.80s\"", c->in);
		return -1;
	}
	n = snprintf(req, sizeof(req), "r\nbench-tcp-%d\n%s\n", c->idx, tok);
	if (exchange(c, req, (size_t)n))
		return -1;
	if (strcmp(c->in, "ok")) {
		snprintf(c->err, sizeof(c->err), "release answered \"%.80s\"", c->in);
		return -1;
	}
	return 0;
}

static void *client_main(void *arg)
{
	struct tclient *c = arg;
	int i;

	if (tconnect(c)) {
		snprintf(c->err, sizeof(c->err), "connect: %s", strerror(errno));
		goto out;
	}
	for (i = 0; i < TCP_WARM_OPS; i++)
		if (one_op(c))
			goto out;
	atomic_fetch_add(&t_ready, 1);
	while (!atomic_load(&t_start))
		futex_wait(&t_start, 0, 100 * NSEC_PER_MSEC);
	while (!atomic_load_explicit(&t_stop, memory_order_relaxed)) {
		uint64_t t0 = now_ns(), t1;

		if (one_op(c))
			break;
		t1 = now_ns();
		if (c->nlat == c->cap) {
			size_t cap = c->cap ? c->cap * 2 : 4096;
			double *v = realloc(c->lat, cap * sizeof(*v));

			if (!v) {
				snprintf(c->err, sizeof(c->err), "out of memory");
				break;
			}
			c->lat = v;
			c->cap = cap;
		}
		c->lat[c->nlat++] = (double)(t1 - t0) / (double)NSEC_PER_USEC;
		c->last_end = t1;
	}
out:
	if (c->err[0])
		atomic_fetch_add(&t_ready, 1);
	return NULL;
}

static void run_config(int n, struct tcp_run *r)
{
	struct tclient *cl = calloc((size_t)n, sizeof(*cl));
	uint64_t t0, t_end = 0, deadline;
	size_t total = 0, k;
	double broker0, *all;
	int i;

	if (!cl)
		fatal("out of memory");
	atomic_store(&t_ready, 0);
	atomic_store(&t_start, 0);
	atomic_store(&t_stop, 0);
	for (i = 0; i < n; i++) {
		cl[i].idx = i;
		cl[i].fd = -1;
		if (pthread_create(&cl[i].thread, NULL, client_main, &cl[i]))
			fatal("pthread_create: %s", strerror(errno));
	}
	deadline = now_ns() + END_TIMEOUT_MS * NSEC_PER_MSEC;
	while (atomic_load(&t_ready) < (uint32_t)n && now_ns() < deadline)
		sleep_ns(200 * NSEC_PER_USEC);
	broker0 = proc_cpu_ms(tb.pid) * 1000.0;
	t0 = now_ns();
	atomic_store(&t_start, 1);
	futex_wake(&t_start, n);
	sleep_until_ns(t0 + TCP_RUN_NS);
	atomic_store(&t_stop, 1);
	for (i = 0; i < n; i++)
		pthread_join(cl[i].thread, NULL);
	r->broker_us = proc_cpu_ms(tb.pid) * 1000.0 - broker0;
	for (i = 0; i < n; i++) {
		if (cl[i].err[0]) {
			broker_stop(&tb, true);
			fatal("TCP client %d (%d clients): %s", i, n, cl[i].err);
		}
		total += cl[i].nlat;
		if (cl[i].last_end > t_end)
			t_end = cl[i].last_end;
	}
	if (!total)
		fatal("TCP: no op completed");
	all = malloc(total * sizeof(*all));
	if (!all)
		fatal("out of memory");
	for (i = 0, k = 0; i < n; i++) {
		memcpy(all + k, cl[i].lat, cl[i].nlat * sizeof(*all));
		k += cl[i].nlat;
		free(cl[i].lat);
		close(cl[i].fd);
	}
	r->n = n;
	r->ops = total;
	r->ns = t_end - t0;
	r->ops_s = (double)total * (double)NSEC_PER_SEC / (double)r->ns;
	r->p50 = percentile(all, (int)total, 50);
	r->p99 = percentile(all, (int)total, 99);
	r->max = all[total - 1];
	r->broker_pct = r->broker_us * 100.0 * 1000.0 / (double)r->ns;
	r->broker_us /= (double)total;
	free(all);
	free(cl);
}

static int free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    getsockname(fd, (struct sockaddr *)&sa, &len))
		fatal("finding a free TCP port: %s", strerror(errno));
	close(fd);
	return ntohs(sa.sin_port);
}

static void wait_tcp_up(void)
{
	uint64_t deadline = now_ns() + STEP_TIMEOUT_MS * NSEC_PER_MSEC;
	struct tclient c;

	for (;;) {
		int status;

		memset(&c, 0, sizeof(c));
		if (!tconnect(&c)) {
			close(c.fd);
			return;
		}
		if (waitpid(tb.pid, &status, WNOHANG) == tb.pid) {
			tb.pid = 0;
			broker_stop(&tb, true);
			fatal("TCP broker exited at start (status 0x%x)", status);
		}
		if (now_ns() > deadline)
			fatal("TCP protocol on 127.0.0.1:%d did not answer in %d ms", tcp_port,
			      STEP_TIMEOUT_MS);
		sleep_ns(2 * NSEC_PER_MSEC);
	}
}

void bench_tcp(void)
{
	/* No token: the bench's own loopback broker, for the duration of the run. */
	const char *extra[4] = { "--tcp-listen", NULL, "--tcp-insecure-no-auth", NULL };
	struct tcp_run runs[TCP_NCONFIGS];
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	char listen[32];
	int i;

	tcp_port = free_port();
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", tcp_port);
	extra[1] = listen;
	broker_start(&tb, "tcp", extra);
	wait_tcp_up();
	for (i = 0; i < TCP_NCONFIGS; i++)
		run_config(tcp_clients[i], &runs[i]);
	broker_stop(&tb, false);

	printf("\n11. dflockd's TCP protocol: acquire+release on TCP 127.0.0.1\n");
	printf("   (own broker: --tcp-listen %s; one op = \"l <key> 0\" -> \"ok <token> 33\",\n"
	       "   then \"r <key> <token>\" -> \"ok\"; each client a thread with one connection\n"
	       "   and its own key; after %d warm-up ops each, %llu ms timed; latency per op\n"
	       "   in us; brk CPU = us of broker CPU (utime+stime, all threads) per op;\n"
	       "   brk busy = broker CPU time / wall time, 100%% = one CPU; %ld CPUs shared\n"
	       "   by broker and clients)\n\n",
	       listen, TCP_WARM_OPS, (unsigned long long)(TCP_RUN_NS / NSEC_PER_MSEC), ncpu);
	printf("  %-22s %9s %8s %8s %8s %8s %8s\n", "client", "ops/s", "p50 us", "p99 us",
	       "max us", "brk CPU", "brk busy");
	for (i = 0; i < TCP_NCONFIGS; i++) {
		char name[48];

		snprintf(name, sizeof(name), "%d client%s", runs[i].n, runs[i].n > 1 ? "s" : "");
		printf("  %-22s %9.0f %8.1f %8.1f %8.0f %8.1f %7.0f%%\n", name, runs[i].ops_s,
		       runs[i].p50, runs[i].p99, runs[i].max, runs[i].broker_us,
		       runs[i].broker_pct);
	}
	printf("  dflockd's published figures (its own protocol, Apple M1): ~13k ops/s for\n"
	       "  one client, ~90k ops/s at 200 clients.\n");
}
