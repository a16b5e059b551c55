// SPDX-License-Identifier: MIT
/*
 * dflockd's signals on the TCP protocol (broker/faces/tcp/tcp_signal.c,
 * docs/tcp-protocol.md): listen / unlisten / signal / ping with dflockd's wire
 * format, NATS-style wildcards, queue groups round-robin, the limits as
 * distinct replies, subscriptions gone with their connection, and
 * dflockd-client-ts's own publish() and SignalConnection against the broker.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker_fixture.h"
#include "harness.h"
#include "net_fixture.h"
#include "tcp_fixture.h"

struct sb {
	struct broker_proc b;
	int port;
	char listen[32];
	const char *args[8];
	char http[160]; /* --http-socket, for sb_start_http() */
};

static void sb_start_with(struct sb *t, const char *http)
{
	int fd = -1;

	memset(t, 0, sizeof(*t));
	t->port = free_port();
	snprintf(t->listen, sizeof(t->listen), "127.0.0.1:%d", t->port);
	t->args[0] = "--tcp-listen";
	t->args[1] = t->listen;
	t->args[2] = "--tcp-insecure-no-auth";
	t->args[3] = NULL;
	if (http) {
		snprintf(t->http, sizeof(t->http), "%s", http);
		t->args[3] = "--http-socket";
		t->args[4] = t->http;
		t->args[5] = NULL;
	}
	broker_start(&t->b, t->args);
	if (!WAIT_FOR((fd = try_connect(t->port)) >= 0, 5000))
		FAIL_AT("no TCP listener on %s (log %s)", t->listen, t->b.log);
	close(fd);
}

static void sb_start(struct sb *t)
{
	sb_start_with(t, NULL);
}

static int conn(const struct sb *t)
{
	int fd = try_connect(t->port);

	if (fd < 0)
		FAIL_AT("connect: %s", strerror(errno));
	return fd;
}

/* Nothing more to read on @fd right now (a round trip on it proves it). */
static bool quiet(int fd)
{
	tsend(fd, "ping", "_", "");
	return !strcmp(tline(fd), "ok");
}

TEST(tcp_signal, listen_signal_and_the_push_format, 30)
{
	struct sb t;
	int sub, pub;

	sb_start(&t);
	sub = conn(&t);
	pub = conn(&t);
	CHECK_STR(treq(pub, "ping", "_", ""), "ok");
	CHECK_STR(treq(pub, "signal", "events.user.login", "{\"user\":\"alice\"}"), "ok 0");
	CHECK_STR(treq(sub, "listen", "events.>", ""), "ok");
	CHECK_STR(treq(pub, "signal", "events.user.login", "{\"user\": \"alice\"}"), "ok 1");
	CHECK_STR(tline(sub), "sig events.user.login {\"user\": \"alice\"}");
	/* '*' is one token, '>' one or more; an exact pattern only itself. */
	CHECK_STR(treq(sub, "listen", "jobs.*.done", ""), "ok");
	CHECK_STR(treq(pub, "signal", "jobs.a.b.done", "x"), "ok 0");
	CHECK_STR(treq(pub, "signal", "jobs.a.done", "y"), "ok 1");
	CHECK_STR(tline(sub), "sig jobs.a.done y");
	CHECK_STR(treq(pub, "signal", "events", "z"), "ok 0");
	/* A second connection on an overlapping pattern: both get it. */
	{
		int sub2 = conn(&t);

		CHECK_STR(treq(sub2, "listen", "events.user.login", ""), "ok");
		CHECK_STR(treq(pub, "signal", "events.user.login", "two"), "ok 2");
		CHECK_STR(tline(sub), "sig events.user.login two");
		CHECK_STR(tline(sub2), "sig events.user.login two");
		close(sub2);
	}
	/* unlisten: no more; the connection's replies and pushes stay apart. */
	CHECK_STR(treq(sub, "unlisten", "events.>", ""), "ok");
	CHECK_STR(treq(pub, "signal", "events.user.login", "three"), "ok 0");
	CHECK(quiet(sub));
	/* A connection can listen to what it publishes. */
	CHECK_STR(treq(pub, "listen", "self", ""), "ok");
	tsend(pub, "signal", "self", "me");
	CHECK_STR(tline(pub), "sig self me");
	CHECK_STR(tline(pub), "ok 1");
	close(sub);
	close(pub);
	broker_stop_clean(&t.b);
}

/* Does stats show the "workers" group of "tasks.>" with @n members? */
static bool workers_left(int pub, int n)
{
	const char *s = treq(pub, "stats", "_", "");

	return strstr(s, strf("{\"pattern\": \"tasks.>\", \"group\": \"workers\", "
			      "\"listeners\": %d}",
			      n)) ||
	       strstr(s,
		      strf("{\"pattern\":\"tasks.>\",\"group\":\"workers\",\"listeners\":%d}", n));
}

TEST(tcp_signal, queue_groups_take_turns, 30)
{
	struct sb t;
	int w1, w2, plain, pub, i, got1 = 0, got2 = 0;

	sb_start(&t);
	w1 = conn(&t);
	w2 = conn(&t);
	plain = conn(&t);
	pub = conn(&t);
	CHECK_STR(treq(w1, "listen", "tasks.>", "workers"), "ok");
	CHECK_STR(treq(w2, "listen", "tasks.>", "workers"), "ok");
	CHECK_STR(treq(plain, "listen", "tasks.>", ""), "ok");
	for (i = 0; i < 4; i++) {
		char *p = strf("job-%d", i);

		/* One group member and the plain listener. */
		CHECK_STR(treq(pub, "signal", "tasks.process", p), "ok 2");
		CHECK_STR(tline(plain), strf("sig tasks.process %s", p));
		free(p);
	}
	/* Round-robin: two each, in turn. */
	while (got1 + got2 < 4) {
		struct pollfd p[2] = { { .fd = w1, .events = POLLIN },
				       { .fd = w2, .events = POLLIN } };

		CHECK(poll(p, 2, 10000) > 0);
		if (p[0].revents) {
			tline(w1);
			got1++;
		}
		if (p[1].revents) {
			tline(w2);
			got2++;
		}
	}
	CHECK_EQ(got1, 2);
	CHECK_EQ(got2, 2);
	/* stats names the channels, as dflockd's signal_channels. */
	CHECK(strstr(treq(pub, "stats", "_", ""), "\"signal_channels\"") != NULL);
	CHECK(workers_left(pub, 2));
	/* A member that hangs up leaves the group: once the broker has seen
	 * the hang-up (until then a signal may still go to w1, and w2 would
	 * wait for nothing), the group's signals go to w2. */
	close(w1);
	CHECK(WAIT_FOR(workers_left(pub, 1), 5000));
	CHECK_STR(treq(pub, "signal", "tasks.x", "a"), "ok 2");
	CHECK_STR(tline(plain), "sig tasks.x a");
	CHECK_STR(tline(w2), "sig tasks.x a");
	close(w2);
	close(plain);
	close(pub);
	broker_stop_clean(&t.b);
}

TEST(tcp_signal, bad_requests_and_limits_are_told_apart, 30)
{
	struct sb t;
	int fd, i;
	char *big;

	sb_start(&t);
	fd = conn(&t);
	/* dflockd's protocol errors: wildcards in a channel, an empty payload,
	 * a malformed pattern. The connection goes on. */
	CHECK_STR(treq(fd, "signal", "events.*", "x"), "error");
	CHECK_STR(treq(fd, "signal", "events.>", "x"), "error");
	CHECK_STR(treq(fd, "signal", "events", "  "), "error");
	CHECK_STR(treq(fd, "listen", "a.>.b", ""), "error");
	CHECK_STR(treq(fd, "listen", "a..b", ""), "error");
	CHECK_STR(treq(fd, "listen", "a.b*", ""), "error");
	CHECK_STR(treq(fd, "ping", "_", ""), "ok");
	/* Subscriptions per connection: a limit of its own. */
	for (i = 0; i < 64; i++)
		CHECK_STR(treq(fd, "listen", strf("c.%d", i), ""), "ok");
	CHECK_STR(treq(fd, "listen", "c.again", ""), "error_max_listeners");
	CHECK_STR(treq(fd, "listen", "c.0", ""), "ok"); /* the same again: no new one */
	/* A payload of the longest size is delivered; one byte more is its own
	 * error, and the connection closes (the rest cannot be framed). */
	big = malloc(3072 + 2);
	memset(big, 'p', 3072);
	big[3072] = '\0';
	CHECK_STR(treq(fd, "listen", "big", ""), "error_max_listeners");
	CHECK_STR(treq(fd, "unlisten", "c.1", ""), "ok");
	CHECK_STR(treq(fd, "listen", "big", ""), "ok");
	tsend(fd, "signal", "big", big);
	CHECK_STR(tline(fd), strf("sig big %s", big));
	CHECK_STR(tline(fd), "ok 1");
	big[3072] = 'p';
	big[3073] = '\0';
	CHECK_STR(treq(fd, "signal", "big", big), "error_payload_too_large");
	CHECK_STR(tline(fd), "<EOF>");
	close(fd);
	free(big);
	broker_stop_clean(&t.b);
}

/* POST /v1/signals/{channel} on the HTTP API: the answer, "STATUS BODY". */
static char *http_publish(const struct sb *t, const char *channel, const char *body)
{
	struct http_reply r;
	char *out;

	http_do(
		&(struct http_req){
			.method = "POST",
			.url = strf("http://localhost/v1/signals/%s", channel),
			.unix_socket = t->http,
			.headers = (const char *const[]){ "Content-Type: application/json", NULL },
			.body = body },
		&r);
	out = strf("%ld %s", r.status, r.body ? r.body : "");
	http_reply_free(&r);
	return out;
}

TEST(tcp_signal, http_publishes_to_tcp_listeners, 30)
{
	char dir[] = "/tmp/shmlock-test-sig-XXXXXX", *big;
	struct sb t;
	int sub;

	if (!mkdtemp(dir))
		FAIL_AT("mkdtemp: %s", strerror(errno));
	sb_start_with(&t, strf("%s/http.sock", dir));
	sub = conn(&t);
	CHECK_STR(http_publish(&t, "events.a", "{\"payload\": \"nobody\"}"),
		  "200 {\"delivered\":0}");
	CHECK_STR(treq(sub, "listen", "events.*", "g"), "ok");
	CHECK_STR(http_publish(&t, "events.a", "{\"payload\": \"{\\\"user\\\":1}\"}"),
		  "200 {\"delivered\":1}");
	CHECK_STR(tline(sub), "sig events.a {\"user\":1}");
	/* What a TCP listener could not take, and a limit of its own. */
	CHECK(!strncmp(http_publish(&t, "events.*", "{\"payload\": \"x\"}"), "400 ", 4));
	CHECK(!strncmp(http_publish(&t, "events.a", "{\"payload\": \"a\\nb\"}"), "400 ", 4));
	CHECK(!strncmp(http_publish(&t, "events.a", "{\"payload\": \"\"}"), "400 ", 4));
	CHECK(!strncmp(http_publish(&t, "events.a", "{\"payload\": 5}"), "400 ", 4));
	big = malloc(3073 + 1);
	memset(big, 'p', 3073);
	big[3073] = '\0';
	CHECK(strstr(http_publish(&t, "events.a", strf("{\"payload\": \"%s\"}", big)),
		     "413 {\"error\":\"payload_too_large\"") != NULL);
	big[3072] = '\0';
	CHECK_STR(http_publish(&t, "events.a", strf("{\"payload\": \"%s\"}", big)),
		  "200 {\"delivered\":1}");
	CHECK_STR(tline(sub), strf("sig events.a %s", big));
	CHECK(quiet(sub));
	free(big);
	close(sub);
	broker_stop_clean(&t.b);
	unlink(t.http);
	rmdir(dir);
}

/* ---- dflockd-client-ts's own code ---------------------------------------------------- */

/*
 * The client is not ours to ship: $SHMLOCK_DFLOCKD_TS names a built
 * dflockd-client-ts (its dist/client.js), as scripts/dflockd-client-ts.sh
 * makes one from the project's repository. Without node the test is skipped;
 * without the client too, saying how to get it.
 */
static const char node_script[] =
	"const [mod, port] = process.argv.slice(2);\n"
	"const { publish, SignalConnection } = await import(mod);\n"
	"const net = await import('node:net');\n"
	"const sub = await SignalConnection.connect({ port: +port, heartbeatIntervalMs: 0 });\n"
	"const got = new Promise((res) => sub.onSignal(res));\n"
	"await sub.listen('orders.>');\n"
	"const sock = net.connect(+port, '127.0.0.1');\n"
	"await new Promise((res, rej) => { sock.once('connect', res); sock.once('error', rej); "
	"});\n"
	"const n = await publish(sock, 'orders.created', 'order-456');\n"
	"const sig = await got;\n"
	"const m = await sub.emit('orders.more', 'x');\n"
	"console.log(`delivered=${n} channel=${sig.channel} payload=${sig.payload} emit=${m}`);\n"
	"sock.destroy(); sub.close();\n";

TEST(tcp_signal, dflockd_client_ts_publish_and_listen, 60)
{
	const char *client = getenv("SHMLOCK_DFLOCKD_TS");
	char script[] = "/tmp/shmlock-test-dflockd-XXXXXX.mjs", out[512] = "";
	struct sb t;
	FILE *f, *p;
	int fd;

	if (system("node --version >/dev/null 2>&1")) {
		printf("SKIPPED: node is not installed: dflockd-client-ts cannot run ");
		return;
	}
	if (!client || access(client, R_OK)) {
		printf("SKIPPED: $SHMLOCK_DFLOCKD_TS does not name dflockd-client-ts's built "
		       "dist/client.js (scripts/dflockd-client-ts.sh DIR builds one) ");
		return;
	}
	fd = mkstemps(script, 4);
	CHECK(fd >= 0);
	f = fdopen(fd, "w");
	fputs(node_script, f);
	fclose(f);
	sb_start(&t);
	p = popen(strf("node %s %s %d 2>&1", script, client, t.port), "r");
	CHECK(p != NULL);
	if (!fgets(out, sizeof(out), p))
		out[0] = '\0';
	CHECK_EQ(pclose(p), 0);
	unlink(script);
	CHECK_STR(out, "delivered=1 channel=orders.created payload=order-456 emit=1\n");
	broker_stop_clean(&t.b);
}
