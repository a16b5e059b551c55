// SPDX-License-Identifier: MIT
/*
 * 11. dflockd's TCP line protocol: acquire+release on TCP to 127.0.0.1,
 *     against a broker of its own started with --tcp-listen on a free port.
 *
 * One op = "l\n<key>\n<timeout>\n" -> "ok <token> <lease>", then
 * "r\n<key>\n<token>\n" -> "ok", timed together (two round trips: the
 * release needs the token). Each client is a thread with one connection
 * (so one session), run with 1, 10, 50 and 200 clients, each on its own
 * key (timeout 0: nothing contends in the lock table, what is measured is
 * the broker's TCP path) and all on one key (timeout NET_SHARED_WAIT_S:
 * they queue in FIFO order, and each release hands the key to the next).
 * Broker CPU per op is utime+stime of the broker process (all threads,
 * /proc/PID/stat, clock-tick resolution) over the timed run; the client
 * driver is netdrv.c, shared with section 8.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "common.h"
#include "netdrv.h"

#define TCP_RUN_NS (2 * NSEC_PER_SEC)

static struct broker tb;
static int tcp_port;

struct tclient {
	struct net_client c; /* first */
	char key[64];
};

/* Send @req (one write), read one reply line into c->in (no '\n'). */
static int exchange(struct net_client *c, const char *req, size_t len)
{
	char *nl;

	if (net_send_all(c, req, len))
		return -1;
	c->in_len = 0;
	while (!(nl = memchr(c->in, '\n', c->in_len))) {
		ssize_t n = recv(c->fd, c->in + c->in_len, sizeof(c->in) - 1 - c->in_len, 0);

		if (n <= 0 || c->in_len + (size_t)n >= sizeof(c->in) - 1)
			return net_fail(c, "recv: %s",
					n < 0 ? strerror(errno) : "closed or too long");
		c->in_len += (size_t)n;
	}
	*nl = '\0';
	return 0;
}

static int tcp_open(struct net_client *c)
{
	struct tclient *t = (struct tclient *)c;

	net_key(c, "bench-tcp", t->key, sizeof(t->key));
	return net_connect(c, tcp_port);
}

static int tcp_op(struct net_client *c)
{
	struct tclient *t = (struct tclient *)c;
	char req[160], tok[64];
	int n = snprintf(req, sizeof(req), "l\n%s\n%d\n", t->key,
			 c->shared ? NET_SHARED_WAIT_S : 0);

	if (exchange(c, req, (size_t)n))
		return -1;
	if (sscanf(c->in, "ok %63s", tok) != 1)
		return net_fail(c, "acquire answered \"%.80s\"", c->in);
	n = snprintf(req, sizeof(req), "r\n%s\n%s\n", t->key, tok);
	if (exchange(c, req, (size_t)n))
		return -1;
	if (strcmp(c->in, "ok"))
		return net_fail(c, "release answered \"%.80s\"", c->in);
	return 0;
}

static void tcp_close(struct net_client *c)
{
	(void)c; /* closing the connection ends its session */
}

static const struct net_proto tcp_proto = {
	.name = "TCP",
	.client_size = sizeof(struct tclient),
	.warm_ops = 200,
	.open = tcp_open,
	.op = tcp_op,
	.close = tcp_close,
};

/*
 * The floor: a server of a few lines on the same epoll, recv() and send()
 * pattern as the broker's (level-triggered, one recv per readable socket,
 * one send per answer) that answers every request without doing anything
 * ("ok <32 zeros> 33" to an acquire, "ok" to the rest). Its CPU per op is
 * what the kernel charges any server for this traffic on this machine
 * (system calls, loopback TCP, waking the client, being woken): the part
 * of the broker's figure that no server code can remove. With one shared
 * key it keeps the least a lock server must: one holder and a FIFO of the
 * connections waiting, each answered when the one before it releases, so
 * that its row shows what the handoff pattern itself costs the kernel
 * (fewer requests ready per wake-up than on own keys).
 */
static int floor_fd;
static bool floor_shared;

static int floor_main(int idx)
{
	static const char tok[] = "ok 00000000000000000000000000000000 33\n";
	struct epoll_event ev = { .events = EPOLLIN }, evs[64];
	int ep = epoll_create1(EPOLL_CLOEXEC), n, i, holder = -1;
	static char pend[65536][2]; /* per fd: the first letter, lines seen */
	static int fifo[65536];	    /* shared key: the fds waiting, in order */
	unsigned head = 0, tail = 0;

	(void)idx;
	ev.data.fd = floor_fd;
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, floor_fd, &ev))
		return -1;
	for (;;) {
		n = epoll_wait(ep, evs, 64, -1);
		for (i = 0; i < n; i++) {
			int fd = evs[i].data.fd;
			char buf[4096];
			ssize_t r;

			if (fd == floor_fd) {
				int c = accept4(floor_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
				int one = 1;

				if (c < 0 || c >= 65536) {
					if (c >= 0)
						close(c);
					continue;
				}
				setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
				ev.data.fd = c;
				epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
				pend[c][0] = pend[c][1] = 0;
				continue;
			}
			r = recv(fd, buf, sizeof(buf), 0);
			if (r <= 0) {
				close(fd);
				continue;
			}
			for (ssize_t k = 0; k < r; k++) {
				if (!pend[fd][1] && !pend[fd][0])
					pend[fd][0] = buf[k];
				if (buf[k] != '\n' || ++pend[fd][1] < 3)
					continue;
				if (pend[fd][0] == 'l' && floor_shared && holder >= 0) {
					fifo[tail++ % 65536] = fd; /* answered when granted */
				} else if (pend[fd][0] == 'l') {
					holder = fd;
					send(fd, tok, sizeof(tok) - 1, MSG_NOSIGNAL);
				} else {
					send(fd, "ok\n", 3, MSG_NOSIGNAL);
					holder = head != tail ? fifo[head++ % 65536] : -1;
					if (floor_shared && holder >= 0)
						send(holder, tok, sizeof(tok) - 1, MSG_NOSIGNAL);
				}
				pend[fd][0] = pend[fd][1] = 0;
			}
		}
	}
}

static bool tcp_up(int port, char *err, size_t size)
{
	struct net_client c;

	memset(&c, 0, sizeof(c));
	if (net_connect(&c, port)) {
		snprintf(err, size, "%s", c.err);
		return false;
	}
	close(c.fd);
	return true;
}

/* The floor runs, against floor_main() in a child of ours (one per key mode). */
static int run_floor(struct net_run *out)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int i, s, n = 0;
	pid_t pid;

	for (s = 0; s < 2; s++) {
		sa.sin_port = 0;
		floor_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (floor_fd < 0 || bind(floor_fd, (struct sockaddr *)&sa, sizeof(sa)) ||
		    getsockname(floor_fd, (struct sockaddr *)&sa, &len) || listen(floor_fd, 512))
			fatal("floor server socket: %s", strerror(errno));
		tcp_port = ntohs(sa.sin_port);
		floor_shared = s;
		pid = spawn(floor_main, 0);
		close(floor_fd);
		for (i = 0; i < net_nclients; i++)
			if (net_wanted(net_clients[i], s))
				net_run_config(&tcp_proto, pid, net_clients[i], s, TCP_RUN_NS, NULL,
					       &out[n++]);
		kill(pid, SIGKILL);
		reap(pid, STEP_TIMEOUT_MS);
	}
	return n;
}

static void stop_with_log(void)
{
	broker_stop(&tb, true);
}

void bench_tcp(void)
{
	/* No token: the bench's own loopback broker, for the duration of the run. */
	const char *extra[4] = { "--tcp-listen", NULL, "--tcp-insecure-no-auth", NULL };
	struct net_run runs[2 * 8], floor[2 * 8];
	int nfloor;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	char listen[32];
	int i, s, nruns = 0;

	tcp_port = net_free_port();
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", tcp_port);
	extra[1] = listen;
	broker_start(&tb, "tcp", extra);
	net_wait_up(&tb, "TCP protocol", tcp_port, tcp_up);
	for (s = 0; s < 2; s++)
		for (i = 0; i < net_nclients; i++)
			if (net_wanted(net_clients[i], s))
				net_run_config(&tcp_proto, tb.pid, net_clients[i], s, TCP_RUN_NS,
					       stop_with_log, &runs[nruns++]);
	broker_stop(&tb, false);
	nfloor = run_floor(floor);

	printf("\n11. dflockd's TCP protocol: acquire+release on TCP 127.0.0.1\n");
	printf("   (own broker: --tcp-listen %s; one op = \"l <key> <timeout>\" ->\n"
	       "   \"ok <token> 33\", then \"r <key> <token>\" -> \"ok\"; each client a thread\n"
	       "   with one connection; own keys: a key each, timeout 0; 1 key: all on one\n"
	       "   key, timeout %d s (FIFO handoffs); after %d warm-up ops each (1 key: %d),\n"
	       "   %llu ms timed; latency per op in us; brk CPU / cli CPU = us of CPU per op\n"
	       "   used by the broker process (utime+stime, all threads) / by the client\n"
	       "   threads; brk busy = broker CPU time / wall time, 100%% = one CPU; %ld\n"
	       "   CPUs shared by broker and clients)\n\n",
	       listen, NET_SHARED_WAIT_S, tcp_proto.warm_ops, tcp_proto.warm_ops / 10,
	       (unsigned long long)(TCP_RUN_NS / NSEC_PER_MSEC), ncpu);
	net_print_header(true);
	for (i = 0; i < nruns; i++)
		net_print_row("", &runs[i], true);
	for (i = 0; i < nfloor; i++)
		net_print_row("floor", &floor[i], true);
	if (nfloor)
		printf("  (floor: a server that answers without doing anything, on the same\n"
		       "  system calls per request: the kernel's share of the broker's figure;\n"
		       "  on 1 key it keeps only a holder and a FIFO of waiting connections)\n");
	net_print_above_floor("TCP", runs, nruns, floor, nfloor);
	printf("  dflockd v1.10 measured on this machine with its own Go client: ~11k ops/s\n"
	       "  for 1 client, 25-39k for 10-200 clients on own keys, 14k on one key, at\n"
	       "  26-67 us of server CPU per op; the target here is <= 10 us of\n"
	       "  broker CPU per op. It counts the kernel's share: where the floor alone is\n"
	       "  above it (on the 2-CPU development VM it is), only the part above the\n"
	       "  floor is the broker's to cut (docs/architecture.md, \"Broker CPU per\n"
	       "  network op\").\n");
	net_cpu_targets("TCP", runs, nruns, 10.0);
}
