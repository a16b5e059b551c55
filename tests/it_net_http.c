// SPDX-License-Identifier: MIT
/*
 * Slow request heads against the HTTP listeners (broker/net/net_conns.c,
 * applied to every listener of the HTTP engine, net/http_engine.c):
 * libmicrohttpd's timeout counts inactivity only, so a client sending a
 * header byte a second kept its connection for ever, and 40 such clients
 * spread over 127.0.0.2-4 (three "addresses" to a per-address cap) kept an
 * authenticated client out. Now the whole head has a deadline, a local
 * peer is one peer whatever 127/8 address it sends from, and an unfinished
 * head makes room for a new connection at a cap.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "broker_fixture.h"
#include "harness.h"
#include "net_fixture.h"

#define PROBES 5

struct trickle {
	int port;
	int n;
};

static int open_one(const struct trickle *t, int i)
{
	char src[16];

	snprintf(src, sizeof(src), "127.0.0.%d", 2 + i % 3);
	return tcp_connect_from(src, t->port);
}

/*
 * The attacker (a child): @n connections spread over 127.0.0.2-4, each
 * sending one byte of an endless request head a second; one that is
 * closed is opened again at once. Says "ready" when all are open, then
 * runs until killed. (The second between bytes is the attack's pace, not
 * a wait for the broker.)
 */
static void trickler(void *arg, int in, int out)
{
	static const char head[] = "GET /metrics HTTP/1.1\r\nHost: localhost\r\nX-Slow: ";
	const struct trickle *t = arg;
	int fd[128];
	size_t sent[128];
	int i;

	(void)in;
	signal(SIGPIPE, SIG_IGN);
	for (i = 0; i < t->n; i++) {
		fd[i] = open_one(t, i);
		sent[i] = 0;
	}
	say(out, "ready");
	for (;;) {
		for (i = 0; i < t->n; i++) {
			char c = sent[i] < sizeof(head) - 1 ? head[sent[i]] : 'a';

			if (fd[i] < 0 || tcp_peer_closed(fd[i]) ||
			    send(fd[i], &c, 1, MSG_NOSIGNAL) != 1) {
				if (fd[i] >= 0)
					close(fd[i]);
				fd[i] = open_one(t, i);
				sent[i] = 0;
				continue;
			}
			sent[i]++;
		}
		poll(NULL, 0, 1000);
	}
}

/* The broker answers on its control socket before its listeners are up. */
static void wait_listening(int port)
{
	int fd = -1;

	if (!WAIT_FOR((fd = tcp_connect_from(NULL, port)) >= 0, 5000))
		FAIL_AT("nothing listens on port %d", port);
	close(fd);
}

/* Of PROBES requests for @url (with @authz when not NULL), how many were
 * answered 200 within @within_ms each. */
static int probes_served(const char *url, const char *authz, long within_ms)
{
	const char *hdrs[] = { authz, NULL };
	int i, served = 0;

	for (i = 0; i < PROBES; i++) {
		struct http_req q = { .url = url,
				      .headers = authz ? hdrs : NULL,
				      .timeout_ms = within_ms };
		struct http_reply r;
		uint64_t t0 = now_ms();

		http_do(&q, &r);
		fprintf(stderr, "    probe %d: status %ld after %llu ms\n", i + 1, r.status,
			(unsigned long long)(now_ms() - t0));
		served += r.status == 200;
		http_reply_free(&r);
	}
	return served;
}

/*
 * 40 connections trickling a header byte a second from 127.0.0.2-4 against
 * --http-max-connections 40 and a 3 s --http-connection-timeout: an
 * authenticated client is still served (before: kept out, every probe
 * refused).
 */
TEST(net_http, slow_heads_from_many_loopback_addresses_keep_no_client_out, 90)
{
	struct trickle t = { .port = free_port(), .n = 40 };
	char listen[32], url[64];
	struct broker_proc b;
	struct child att;
	int served;

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", t.port);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/stats", t.port);
	broker_start(&b, (const char *const[]){ "--http-listen", listen, "--auth-token", "tok",
						"--http-max-connections", "40",
						"--http-connection-timeout", "3", NULL });
	wait_listening(t.port);
	child_spawn(&att, trickler, &t);
	child_expect(&att, "ready", 20000);
	served = probes_served(url, "Authorization: Bearer tok", 4000);
	fprintf(stderr, "  HTTP: %d of %d probes served under 40 slow heads\n", served, PROBES);
	child_kill(&att);
	CHECK(served >= PROBES - 1);
	broker_stop(&b);
}

/* The same against the metrics listener (64 connections at most): 70 slow
 * heads left no room for Prometheus. */
TEST(net_http, slow_heads_keep_no_scraper_from_the_metrics_listener, 90)
{
	struct trickle t = { .port = free_port(), .n = 70 };
	char listen[32], url[64];
	struct broker_proc b;
	struct child att;
	int served;

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", t.port);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/metrics", t.port);
	broker_start(&b, (const char *const[]){ "--metrics-listen", listen, NULL });
	wait_listening(t.port);
	child_spawn(&att, trickler, &t);
	child_expect(&att, "ready", 20000);
	served = probes_served(url, NULL, 4000);
	fprintf(stderr, "  metrics: %d of %d probes served under 70 slow heads\n", served, PROBES);
	child_kill(&att);
	CHECK(served >= PROBES - 1);
	broker_stop(&b);
}

/*
 * One byte a second is activity to libmicrohttpd, but the head is not
 * finished within --http-connection-timeout: the connection is closed.
 * @listen_flag names the listener (any face the HTTP engine serves);
 * true when it was closed in time.
 */
static bool trickled_head_closed(const char *listen_flag)
{
	int port = free_port(), fd;
	char listen[32];
	struct broker_proc b;
	const char *head =
		"GET /v1/stats HTTP/1.1\r\nHost: localhost\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaa";
	uint64_t t0, took;
	size_t i;
	bool closed = false;

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	broker_start(&b, (const char *const[]){ listen_flag, listen, "--auth-token", "tok",
						"--http-connection-timeout", "2", NULL });
	CHECK(WAIT_FOR((fd = tcp_connect_from(NULL, port)) >= 0, 5000));
	CHECK(fd >= 0);
	t0 = now_ms();
	/* A byte a second for up to 10 s; the deadline is 2 s (the broker
	 * looks every quarter second). */
	for (i = 0; i < 10 && !closed; i++) {
		struct pollfd p = { .fd = fd, .events = POLLRDHUP };

		if (send(fd, head + i, 1, MSG_NOSIGNAL) != 1 || tcp_peer_closed(fd)) {
			closed = true;
			break;
		}
		closed = poll(&p, 1, 1000) == 1;
	}
	took = now_ms() - t0;
	fprintf(stderr, "  %s: closed: %s after %llu ms\n", listen_flag, closed ? "yes" : "no",
		(unsigned long long)took);
	close(fd);
	broker_stop(&b);
	return closed && took < 6000;
}

TEST(net_http, a_head_trickled_past_its_deadline_is_closed, 60)
{
	CHECK(trickled_head_closed("--http-listen"));
}

/* The Consul API's listener is the HTTP engine's too, and inherits the
 * deadline from it (not from the HTTP API's face). */
TEST(net_http, a_head_trickled_past_its_deadline_is_closed_on_the_consul_listener, 60)
{
	CHECK(trickled_head_closed("--consul-listen"));
}
