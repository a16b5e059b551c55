// SPDX-License-Identifier: MIT
/*
 * Loopback listeners admit local users by uid (broker/net/net_peer.c): the
 * kernel names the owner of a loopback peer's socket, and the listener
 * admits exactly the users the control socket admits, with no token and no
 * --*-insecure-no-auth flag (before, such a broker refused to start). The
 * test runs as root, whom the control socket (0660, root's) admits; nobody
 * is refused. A browser runs as its user too: what a web page could make
 * it send is refused when the user is all that admits a request.
 */
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker_fixture.h"
#include "harness.h"
#include "net_fixture.h"

struct ports {
	int http, consul, tcp;
};

static void wait_listening(int port)
{
	int fd = -1;

	if (!WAIT_FOR((fd = tcp_connect_from(NULL, port)) >= 0, 5000))
		FAIL_AT("nothing listens on port %d", port);
	close(fd);
}

/* HTTP, Consul and TCP on loopback; no token, no insecure flag; --allow-uid
 * narrows the control socket's users to root, the broker's own and 4242. */
static void start(struct broker_proc *b, struct ports *p, const char *const *more)
{
	const char *args[16];
	int n = 0;

	p->http = free_port();
	p->consul = free_port();
	p->tcp = free_port();
	args[n++] = "--http-listen";
	args[n++] = strf("127.0.0.1:%d", p->http);
	args[n++] = "--consul-listen";
	args[n++] = strf("127.0.0.1:%d", p->consul);
	args[n++] = "--tcp-listen";
	args[n++] = strf("127.0.0.1:%d", p->tcp);
	args[n++] = "--allow-uid";
	args[n++] = "4242";
	while (more && *more && n < 15)
		args[n++] = *more++;
	args[n] = NULL;
	broker_start(b, args);
	wait_listening(p->http);
	wait_listening(p->consul);
	wait_listening(p->tcp);
}

static long http_status(const char *method, const char *url, const char *const *headers,
			const char *body)
{
	struct http_req q = { .method = method, .url = url, .headers = headers, .body = body };
	struct http_reply r;
	long status;

	http_do(&q, &r);
	status = r.status;
	if (status >= 400)
		fprintf(stderr, "    %s %s: %ld %s\n", method, url, status, r.body);
	http_reply_free(&r);
	return status;
}

static const char *const json_content[] = { "Content-Type: application/json", NULL };

/* A lock over TCP with no "auth": the first reply line ("" if none). */
static void tcp_lock(int port, char *line, size_t size)
{
	int fd = tcp_connect_from(NULL, port);
	size_t n = 0;

	line[0] = '\0';
	if (fd < 0)
		return;
	if (send(fd, "l\nuid-key\n5\n", 12, MSG_NOSIGNAL) == 12)
		while (n + 1 < size) {
			struct pollfd p = { .fd = fd, .events = POLLIN };

			if (poll(&p, 1, 5000) != 1 || recv(fd, line + n, 1, 0) != 1 ||
			    line[n] == '\n')
				break;
			n++;
		}
	line[n] = '\0';
	close(fd);
}

/* As nobody: what each listener answers; exit 0 when every one refused. */
static void as_nobody(void *arg, int in, int out)
{
	const struct ports *p = arg;
	long h, c;
	char t[64];

	(void)in;
	become_nobody();
	h = http_status("POST", strf("http://127.0.0.1:%d/v1/sessions", p->http), json_content,
			"{}");
	c = http_status("PUT", strf("http://127.0.0.1:%d/v1/session/create", p->consul), NULL,
			"{}");
	tcp_lock(p->tcp, t, sizeof(t));
	say(out, "http %ld consul %ld tcp '%s'", h, c, t);
	_exit(h == 401 && c == 403 && strncmp(t, "ok", 2) ? 0 : 1);
}

TEST(net_uid, loopback_listeners_admit_the_control_sockets_users_without_a_token, 60)
{
	struct broker_proc b;
	struct ports p;
	struct child c;
	char line[128];
	int status;

	start(&b, &p, NULL);
	/* Root: admitted by the control socket, so by every listener. */
	CHECK_EQ(http_status("POST", strf("http://127.0.0.1:%d/v1/sessions", p.http), json_content,
			     "{}"),
		 200);
	CHECK_EQ(http_status("PUT", strf("http://127.0.0.1:%d/v1/session/create", p.consul), NULL,
			     "{}"),
		 200);
	tcp_lock(p.tcp, line, sizeof(line));
	fprintf(stderr, "  root over TCP: '%s'\n", line);
	CHECK(!strncmp(line, "ok ", 3));
	/* Nobody: not admitted by the control socket, so by none. */
	child_spawn(&c, as_nobody, &p);
	CHECK_OK(child_read(&c, line, sizeof(line), 20000));
	status = child_wait(&c, 5000);
	fprintf(stderr, "  nobody: %s\n", line);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	broker_stop(&b);
}

/* With a token: it still admits whoever has it, and a local user the
 * control socket admits needs none (as a local Consul agent's client
 * expects); nobody without it is refused. */
TEST(net_uid, a_token_and_the_uid_both_admit, 60)
{
	const char *const bearer[] = { "Authorization: Bearer tok",
				       "Content-Type: application/json", NULL };
	struct broker_proc b;
	struct ports p;
	struct child c;
	char line[128];
	int status;

	start(&b, &p, (const char *const[]){ "--auth-token", "tok", NULL });
	CHECK_EQ(http_status("POST", strf("http://127.0.0.1:%d/v1/sessions", p.http), bearer, "{}"),
		 200);
	CHECK_EQ(http_status("POST", strf("http://127.0.0.1:%d/v1/sessions", p.http), json_content,
			     "{}"),
		 200);
	CHECK_EQ(http_status("PUT", strf("http://127.0.0.1:%d/v1/session/create", p.consul), NULL,
			     "{}"),
		 200);
	child_spawn(&c, as_nobody, &p);
	CHECK_OK(child_read(&c, line, sizeof(line), 20000));
	status = child_wait(&c, 5000);
	fprintf(stderr, "  nobody: %s\n", line);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	broker_stop(&b);
}

/*
 * A web page in root's browser: a foreign Origin, or a POST it could send
 * without a preflight (text/plain, a form, no Content-Type), is refused to
 * a request admitted by uid alone; an Origin named in
 * --http-cors-allowed-origins is served.
 */
TEST(net_uid, requests_a_web_page_could_send_are_refused_to_the_uid_alone, 60)
{
	const char *const evil[] = { "Origin: http://evil.example",
				     "Content-Type: application/json", NULL };
	const char *const good[] = { "Origin: http://good.example",
				     "Content-Type: application/json", NULL };
	const char *const text[] = { "Content-Type: text/plain;charset=UTF-8", NULL };
	const char *const form[] = { "Content-Type: application/x-www-form-urlencoded", NULL };
	const char *const evil_put[] = { "Origin: http://evil.example", NULL };
	struct broker_proc b;
	struct ports p;
	char *sessions;

	start(&b, &p,
	      (const char *const[]){ "--http-cors-allowed-origins", "http://good.example", NULL });
	sessions = strf("http://127.0.0.1:%d/v1/sessions", p.http);
	CHECK_EQ(http_status("POST", sessions, evil, "{}"), 403);
	CHECK_EQ(http_status("POST", sessions, text, "{}"), 403);
	CHECK_EQ(http_status("POST", sessions, form, "{}"), 403);
	CHECK_EQ(http_status("POST", sessions, NULL, "{}"), 403);
	CHECK_EQ(http_status("POST", sessions, good, "{}"), 200);
	CHECK_EQ(http_status("POST", sessions, json_content, "{}"), 200);
	/* Consul's API alike. */
	CHECK_EQ(http_status("PUT", strf("http://127.0.0.1:%d/v1/session/create", p.consul),
			     evil_put, "{}"),
		 403);
	CHECK_EQ(http_status("POST", strf("http://127.0.0.1:%d/v1/txn", p.consul), text, "[]"),
		 403);
	/* DNS rebinding: a Host that is no local name stays refused. */
	CHECK_EQ(http_status("GET", strf("http://127.0.0.1:%d/v1/stats", p.http),
			     (const char *const[]){ "Host: evil.example", NULL }, NULL),
		 421);
	broker_stop(&b);
}

/* Debian's python3-consul sends no token: against a loopback Consul
 * listener with no token and no insecure flag, it works as root. */
TEST(net_uid, python3_consul_without_a_token_works_locally, 90)
{
	struct broker_proc b;
	struct ports p;
	char *script = strf("tests/consul_client.py");
	int status;

	if (access("/usr/bin/python3", X_OK) ||
	    system("/usr/bin/python3 -c 'import consul' 2>/dev/null")) {
		fprintf(stderr, "  skipped: python3-consul is not installed\n");
		return;
	}
	if (access(script, R_OK))
		script = strf("%.*s/consul_client.py", (int)(strrchr(__FILE__, '/') - __FILE__),
			      __FILE__);
	start(&b, &p, NULL);
	status = system(strf("/usr/bin/python3 %s %d >&2", script, p.consul));
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	broker_stop(&b);
}

/* Off loopback nothing names the user: without a token it takes the
 * insecure flag, as before. */
TEST(net_uid, a_listener_off_loopback_still_needs_a_token, 30)
{
	struct broker_proc b;
	char *any = strf("0.0.0.0:%d", free_port());

	broker_names(&b, "");
	CHECK(broker_refuses(&b, (const char *const[]){ "--http-listen", any, NULL }, 10000) != 0);
	CHECK(broker_refuses(&b, (const char *const[]){ "--tcp-listen", any, NULL }, 10000) != 0);
}

/* As nobody: GET @arg (a URL) without a token; exit 0 when refused 401. */
static void nobody_gets_401(void *arg, int in, int out)
{
	long s;

	(void)in;
	become_nobody();
	s = http_status("GET", arg, NULL, NULL);
	say(out, "%ld", s);
	_exit(s == 401 ? 0 : 1);
}

/* The kernel names the user over IPv6 loopback, and for an IPv4 client of
 * an IPv6 listener (a v4-mapped peer, whose socket is AF_INET). */
TEST(net_uid, ipv6_and_v4_mapped_loopback_peers_are_named_too, 60)
{
	struct broker_proc b;
	struct child c;
	char line[32];
	int port = free_port(), port2 = free_port(), status, fd = -1;
	char *v6 = strf("http://[::1]:%d/v1/stats", port);

	broker_start(&b, (const char *const[]){ "--http-listen", strf("[::1]:%d", port),
						"--consul-listen", strf("[::]:%d", port2),
						"--auth-token", "tok", NULL });
	if (!WAIT_FOR((fd = tcp_connect_from(NULL, port2)) >= 0, 5000))
		FAIL_AT("nothing listens on port %d", port2);
	close(fd);
	CHECK_EQ(http_status("GET", v6, NULL, NULL), 200);
	/* Consul on [::], reached over 127.0.0.1: 404 (no such key), not 403. */
	CHECK_EQ(http_status("GET", strf("http://127.0.0.1:%d/v1/kv/x", port2), NULL, NULL), 404);
	child_spawn(&c, nobody_gets_401, v6);
	CHECK_OK(child_read(&c, line, sizeof(line), 20000));
	status = child_wait(&c, 5000);
	fprintf(stderr, "  nobody over ::1: %s\n", line);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	broker_stop(&b);
}

struct as_user {
	const char *url;
	uid_t uid; /* and its gid, with no other group */
};

/* As @arg's user: GET its URL without a token; say the status. */
static void user_gets(void *arg, int in, int out)
{
	const struct as_user *u = arg;

	(void)in;
	if (setgroups(0, NULL) || setgid(u->uid) || setuid(u->uid))
		_exit(99);
	say(out, "%ld", http_status("GET", u->url, NULL, NULL));
	_exit(0);
}

static long user_status(const char *url, uid_t uid)
{
	struct as_user u = { url, uid };
	struct child c;
	char line[32];

	child_spawn(&c, user_gets, &u);
	CHECK_OK(child_read(&c, line, sizeof(line), 20000));
	child_wait(&c, 5000);
	return atol(line);
}

static long nobody_status(const char *url)
{
	return user_status(url, 65534);
}

/* Exactly the control socket's users: nobody in the socket's group (and
 * able to reach it) is admitted; --allow-uid then narrows it as it narrows
 * the Unix socket. */
TEST(net_uid, the_sockets_group_and_the_allow_lists_decide_as_on_the_unix_socket, 60)
{
	struct broker_proc b;
	int port = free_port(), fd = -1;
	char *url = strf("http://127.0.0.1:%d/v1/stats", port);
	char *listen = strf("127.0.0.1:%d", port);

	broker_start(&b, (const char *const[]){ "--http-listen", listen, "--socket-group", "65534",
						NULL });
	CHECK_OK(chmod(b.dir, 0755)); /* nobody may reach the socket */
	if (!WAIT_FOR((fd = tcp_connect_from(NULL, port)) >= 0, 5000))
		FAIL_AT("nothing listens on port %d", port);
	close(fd);
	CHECK_EQ(nobody_status(url), 200);
	/* The directory shut: nobody cannot reach the socket, nor the API. */
	CHECK_OK(chmod(b.dir, 0700));
	CHECK_EQ(nobody_status(url), 401);
	CHECK_OK(chmod(b.dir, 0755));
	broker_stop(&b);

	broker_start(&b, (const char *const[]){ "--http-listen", listen, "--socket-group", "65534",
						"--allow-uid", "4242", NULL });
	CHECK_OK(chmod(b.dir, 0755));
	if (!WAIT_FOR((fd = tcp_connect_from(NULL, port)) >= 0, 5000))
		FAIL_AT("nothing listens on port %d", port);
	close(fd);
	CHECK_EQ(nobody_status(url), 401);
	CHECK_EQ(http_status("GET", url, NULL, NULL), 200); /* root always */
	broker_stop(&b);
}

/* The user database's answers are kept a few seconds per uid (net_peer.c):
 * two users taking turns are each judged by their own groups, nobody in the
 * socket's group and a uid the database does not know (no groups: the
 * socket's "other" bits, none). */
TEST(net_uid, users_taking_turns_are_each_judged_by_their_own_groups, 60)
{
	struct broker_proc b;
	int port = free_port(), fd = -1, i;
	char *url = strf("http://127.0.0.1:%d/v1/stats", port);

	broker_start(&b, (const char *const[]){ "--http-listen", strf("127.0.0.1:%d", port),
						"--socket-group", "65534", NULL });
	CHECK_OK(chmod(b.dir, 0755));
	if (!WAIT_FOR((fd = tcp_connect_from(NULL, port)) >= 0, 5000))
		FAIL_AT("nothing listens on port %d", port);
	close(fd);
	for (i = 0; i < 2; i++) {
		CHECK_EQ(nobody_status(url), 200);
		CHECK_EQ(user_status(url, 4242), 401);
	}
	CHECK_EQ(http_status("GET", url, NULL, NULL), 200); /* root always */
	broker_stop(&b);
}
