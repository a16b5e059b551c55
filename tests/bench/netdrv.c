// SPDX-License-Identifier: MIT
/* The client driver of the network sections: see netdrv.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "netdrv.h"

const int net_clients[] = { 1, 10, 50, 200 };
const int net_nclients = (int)(sizeof(net_clients) / sizeof(net_clients[0]));

static _Atomic uint32_t n_ready, n_start, n_stop;

int net_fail(struct net_client *c, const char *fmt, ...)
{
	va_list ap;

	if (!c->err[0]) {
		va_start(ap, fmt);
		vsnprintf(c->err, sizeof(c->err), fmt, ap);
		va_end(ap);
	}
	return -1;
}

int net_free_port(void)
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

int net_connect(struct net_client *c, int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct timeval tv = { .tv_sec = NET_IO_TIMEOUT_S };
	int one = 1;

	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return net_fail(c, "socket: %s", strerror(errno));
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa))) {
		int err = errno;

		close(c->fd);
		c->fd = -1;
		errno = err;
		return net_fail(c, "connect: %s", strerror(err));
	}
	return 0;
}

int net_send_all(struct net_client *c, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = send(c->fd, buf, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return net_fail(c, "send: %s", n ? strerror(errno) : "closed");
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

void net_key(const struct net_client *c, const char *prefix, char *out, size_t size)
{
	if (c->shared)
		snprintf(out, size, "%s-shared", prefix);
	else
		snprintf(out, size, "%s-%d", prefix, c->idx);
}

void net_wait_up(struct broker *b, const char *what, int port,
		 bool (*up)(int port, char *err, size_t size))
{
	uint64_t deadline = now_ns() + STEP_TIMEOUT_MS * NSEC_PER_MSEC;
	char err[200] = "";
	int status;

	while (!up(port, err, sizeof(err))) {
		if (waitpid(b->pid, &status, WNOHANG) == b->pid) {
			b->pid = 0;
			broker_stop(b, true);
			fatal("%s broker exited at start (status 0x%x)", what, status);
		}
		if (now_ns() > deadline) {
			broker_stop(b, true);
			fatal("%s on 127.0.0.1:%d did not answer in %d ms: %s", what, port,
			      STEP_TIMEOUT_MS, err);
		}
		sleep_ns(2 * NSEC_PER_MSEC);
	}
}

bool net_wanted(int n, bool shared)
{
	const char *counts = getenv("SHMLOCK_BENCH_NET_CLIENTS");
	const char *keys = getenv("SHMLOCK_BENCH_NET_KEYS");

	if (keys && *keys && strcmp(keys, shared ? "shared" : "own"))
		return false;
	return !counts || !*counts || number_listed(counts, n);
}

static double self_cpu_us(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* Context switches (voluntary + not) of @pid's main thread: the loop's. */
static double loop_switches(pid_t pid)
{
	char path[64], line[128];
	unsigned long long v, sum = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "voluntary_ctxt_switches: %llu", &v) == 1 ||
		    sscanf(line, "nonvoluntary_ctxt_switches: %llu", &v) == 1)
			sum += v;
	fclose(f);
	return (double)sum;
}

struct thread_arg {
	const struct net_proto *p;
	struct net_client *c;
};

static void *client_main(void *arg)
{
	struct thread_arg *a = arg;
	struct net_client *c = a->c;
	int i, warm = c->shared ? a->p->warm_ops / 10 : a->p->warm_ops;

	if (a->p->open(c))
		goto out;
	for (i = 0; i < warm; i++)
		if (a->p->op(c))
			goto out;
	atomic_fetch_add(&n_ready, 1);
	while (!atomic_load(&n_start))
		futex_wait(&n_start, 0, 100 * NSEC_PER_MSEC);
	while (!atomic_load_explicit(&n_stop, memory_order_relaxed)) {
		uint64_t t0 = now_ns(), t1;

		if (a->p->op(c))
			break;
		t1 = now_ns();
		if (c->nlat == c->cap) {
			size_t cap = c->cap ? c->cap * 2 : 4096;
			double *v = realloc(c->lat, cap * sizeof(*v));

			if (!v) {
				net_fail(c, "%s", "out of memory");
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
		atomic_fetch_add(&n_ready, 1); /* do not keep the barrier waiting */
	return NULL;
}

#define CLIENT(base, size, i) ((struct net_client *)((char *)(base) + (size_t)(i) * (size)))

void net_run_config(const struct net_proto *p, pid_t broker_pid, int n, bool shared,
		    uint64_t run_ns, void (*on_fatal)(void), struct net_run *r)
{
	char *base = calloc((size_t)n, p->client_size);
	struct thread_arg *args = calloc((size_t)n, sizeof(*args));
	double broker0, self0, csw0, *all;
	size_t total = 0, k;
	uint64_t t0, t_end = 0, deadline;
	int i;

	if (!base || !args)
		fatal("out of memory");
	atomic_store(&n_ready, 0);
	atomic_store(&n_start, 0);
	atomic_store(&n_stop, 0);
	for (i = 0; i < n; i++) {
		struct net_client *c = CLIENT(base, p->client_size, i);

		c->idx = i;
		c->shared = shared;
		c->fd = -1;
		args[i] = (struct thread_arg){ p, c };
		if (pthread_create(&c->thread, NULL, client_main, &args[i]))
			fatal("pthread_create: %s", strerror(errno));
	}
	deadline = now_ns() + 3 * END_TIMEOUT_MS * NSEC_PER_MSEC;
	while (atomic_load(&n_ready) < (uint32_t)n && now_ns() < deadline)
		sleep_ns(200 * NSEC_PER_USEC);
	broker0 = proc_cpu_ms(broker_pid) * 1000.0;
	csw0 = loop_switches(broker_pid);
	self0 = self_cpu_us();
	t0 = now_ns();
	atomic_store(&n_start, 1);
	futex_wake(&n_start, n);
	sleep_until_ns(t0 + run_ns);
	atomic_store(&n_stop, 1);
	for (i = 0; i < n; i++)
		pthread_join(CLIENT(base, p->client_size, i)->thread, NULL);
	r->broker_us = proc_cpu_ms(broker_pid) * 1000.0 - broker0;
	r->client_us = self_cpu_us() - self0;
	r->broker_csw = loop_switches(broker_pid) - csw0;
	for (i = 0; i < n; i++) {
		struct net_client *c = CLIENT(base, p->client_size, i);

		if (c->err[0]) {
			if (on_fatal)
				on_fatal();
			fatal("%s client %d (%d clients, %s keys): %s", p->name, i, n,
			      shared ? "shared" : "distinct", c->err);
		}
		total += c->nlat;
		if (c->last_end > t_end)
			t_end = c->last_end;
	}
	if (!total)
		fatal("%s: no op completed in %llu ms", p->name,
		      (unsigned long long)(run_ns / NSEC_PER_MSEC));
	all = malloc(total * sizeof(*all));
	if (!all)
		fatal("out of memory");
	for (i = 0, k = 0; i < n; i++) {
		struct net_client *c = CLIENT(base, p->client_size, i);

		memcpy(all + k, c->lat, c->nlat * sizeof(*all));
		k += c->nlat;
	}
	r->n = n;
	r->shared = shared;
	r->ops = total;
	r->ns = t_end - t0;
	r->ops_s = (double)total * (double)NSEC_PER_SEC / (double)r->ns;
	r->p50 = percentile(all, (int)total, 50);
	r->p99 = percentile(all, (int)total, 99);
	r->max = all[total - 1];
	r->broker_pct = r->broker_us * 100.0 * 1000.0 / (double)r->ns;
	r->broker_us /= (double)total;
	r->client_us /= (double)total;
	r->broker_csw /= (double)total;
	free(all);
	for (i = 0; i < n; i++) {
		struct net_client *c = CLIENT(base, p->client_size, i);

		p->close(c);
		if (c->fd >= 0)
			close(c->fd);
		free(c->lat);
	}
	free(args);
	free(base);
}

void net_print_header(bool with_client)
{
	printf("  %-26s %9s %8s %8s %8s %8s %8s", "client", "ops/s", "p50 us", "p99 us", "max us",
	       "brk CPU", "brk busy");
	if (with_client)
		printf(" %8s", "cli CPU");
	printf(" %7s\n", "brk csw");
}

void net_print_row(const char *label, const struct net_run *r, bool with_client)
{
	char name[64];

	snprintf(name, sizeof(name), "%s%s%d client%s, %s", label, label[0] ? ", " : "", r->n,
		 r->n > 1 ? "s" : "", r->shared ? "1 key" : "own keys");
	printf("  %-26s %9.0f %8.1f %8.1f %8.0f %8.1f %7.0f%%", name, r->ops_s, r->p50, r->p99,
	       r->max, r->broker_us, r->broker_pct);
	if (with_client)
		printf(" %8.1f", r->client_us);
	printf(" %7.2f\n", r->broker_csw);
}

void net_print_above_floor(const char *what, const struct net_run *runs, int nruns,
			   const struct net_run *floor, int nfloor)
{
	int s, i, j, shown;

	for (s = 0; s < 2; s++) {
		shown = 0;
		for (i = 0; i < nruns; i++) {
			if (runs[i].shared != s)
				continue;
			for (j = 0; j < nfloor; j++)
				if (floor[j].shared == s && floor[j].n == runs[i].n)
					break;
			if (j == nfloor)
				continue;
			if (!shown++)
				printf("  %s broker CPU per op above the floor, %s, by clients:",
				       what, s ? "1 key" : "own keys");
			printf(" %d: %+.1f", runs[i].n, runs[i].broker_us - floor[j].broker_us);
		}
		if (shown)
			printf(" us\n");
	}
}

void net_cpu_targets(const char *what, const struct net_run *runs, int nruns, double max_us)
{
	int s, i;

	for (s = 0; s < 2; s++) {
		const struct net_run *worst = NULL;

		for (i = 0; i < nruns; i++)
			if (runs[i].shared == s && (!worst || runs[i].broker_us > worst->broker_us))
				worst = &runs[i];
		if (worst)
			add_target(
				worst->broker_us <= max_us,
				"%s broker CPU per acquire+release <= %.0f us, %s (worst: %.1f us "
				"at %d client%s)",
				what, max_us, s ? "1 key" : "own keys", worst->broker_us, worst->n,
				worst->n > 1 ? "s" : "");
	}
}
