// SPDX-License-Identifier: MIT
/*
 * The Consul-compatible API (broker/consul_*.c) against a real shmlockd on a
 * free loopback port: every endpoint and its errors, sessions that are real
 * segment sessions, KV locks that are the segment's locks (liblocal and the
 * CLI contend on them), lock-delay after invalidation, blocking queries
 * woken by this API, by liblocal and by the CLI, the recipes of the
 * reference documents (leader election and the semaphore, step by step as
 * their curl commands show them, with contenders that die), and Debian's
 * python3-consul client.
 *
 * Blocking queries run on a thread of their own; the test waits until the
 * broker reports the query suspended (/v1/agent/self Stats) before it
 * makes the change that must wake it, never by sleeping.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "broker_fixture.h"
#include "harness.h"
#include "net_fixture.h"

#define ARGS(...) ((const char *const[]){ __VA_ARGS__, NULL })

static int port;
static bool connect_may_fail; /* while the broker starts */

/* ---- HTTP ------------------------------------------------------------------ */

struct resp {
	long status;
	char *body;
	size_t len;
	uint64_t index; /* X-Consul-Index, 0 when absent */
	bool leader_hdr;
};

/* One request; @hdr an extra header or NULL. */
static struct resp *call_h(const char *method, const char *path, const char *body, const char *hdr)
{
	const char *const headers[] = { hdr, NULL };
	struct resp *r = calloc(1, sizeof(*r));
	struct http_reply reply;
	char value[64];
	int rc;

	if (!r)
		FAIL_AT("out of memory");
	rc = http_do(&(struct http_req){ .method = method,
					 .url = strf("http://127.0.0.1:%d%s", port, path),
					 .headers = headers,
					 .body = body },
		     &reply);
	if (http_refused(rc) && connect_may_fail)
		r->status = 0; /* the listener is not up yet */
	else if (rc)
		FAIL_AT("%s %s: %s", method, path, http_error_text(rc));
	else
		r->status = reply.status;
	if (http_reply_header(&reply, "X-Consul-Index", value, sizeof(value)))
		r->index = strtoull(value, NULL, 10);
	r->leader_hdr = http_reply_header(&reply, "X-Consul-KnownLeader", value, sizeof(value));
	r->body = reply.body;
	r->len = reply.len;
	free(reply.headers);
	return r;
}

static struct resp *call(const char *method, const char *path, const char *body)
{
	return call_h(method, path, body, NULL);
}

static json_t *js(const struct resp *r)
{
	json_error_t e;
	json_t *j = json_loads(r->body, JSON_DECODE_ANY, &e);

	if (!j)
		FAIL_AT("not JSON (%ld): %s", r->status, r->body);
	return j;
}

#define CHECK_STATUS(r, want)                                                             \
	do {                                                                              \
		struct resp *r_ = (r);                                                    \
		if (r_->status != (want))                                                 \
			FAIL_AT("status %ld, want %d: %s", r_->status, (want), r_->body); \
	} while (0)

/* PUT answering true or false. */
static bool put_bool(const char *path, const char *body)
{
	struct resp *r = call("PUT", path, body);

	CHECK_STATUS(r, 200);
	if (!strcmp(r->body, "true"))
		return true;
	if (!strcmp(r->body, "false"))
		return false;
	FAIL_AT("PUT %s answered %s", path, r->body);
}

static char *session_create(const char *json)
{
	struct resp *r = call("PUT", "/v1/session/create", json);
	json_t *j;
	const char *id;

	CHECK_STATUS(r, 200);
	j = js(r);
	id = json_string_value(json_object_get(j, "ID"));
	if (!id || strlen(id) != 36)
		FAIL_AT("no session ID: %s", r->body);
	return strdup(id);
}

/* The one entry of GET /v1/kv/@key. */
static json_t *kv_entry(const char *key)
{
	struct resp *r = call("GET", strf("/v1/kv/%s", key), NULL);
	json_t *j;

	CHECK_STATUS(r, 200);
	j = js(r);
	if (json_array_size(j) != 1)
		FAIL_AT("not one entry: %s", r->body);
	return json_array_get(j, 0);
}

static const char *kv_session(const char *key)
{
	json_t *v = json_object_get(kv_entry(key), "Session");

	return v ? json_string_value(v) : "";
}

static long long jint(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);

	if (!json_is_integer(v))
		FAIL_AT("field %s is not an integer", k);
	return json_integer_value(v);
}

/* ---- the broker ---------------------------------------------------------- */

static void cstart(struct broker_proc *b, const char *token)
{
	static char portarg[32];
	const char *extra[12];
	int n = 0;
	uint64_t until;

	port = free_port();
	snprintf(portarg, sizeof(portarg), "127.0.0.1:%d", port);
	extra[n++] = "--consul-listen";
	extra[n++] = portarg;
	extra[n++] = "--consul-session-ttl-min";
	extra[n++] = "1";
	extra[n++] = "--consul-node-name";
	extra[n++] = "node1";
	if (token) { /* the token alone: root, the test's user, needs none */
		extra[n++] = "--auth-token";
		extra[n++] = token;
		extra[n++] = "--token-only";
	} else {
		extra[n++] = "--http-insecure-no-auth";
	}
	extra[n] = NULL;
	broker_start(b, extra);
	until = now_ms() + 5000;
	connect_may_fail = true;
	for (;;) {
		struct resp *r = call_h("GET", "/v1/status/leader", NULL,
					token ? strf("X-Consul-Token: %s", token) : NULL);

		if (r->status == 200) {
			connect_may_fail = false;
			break;
		}
		if (now_ms() > until)
			FAIL_AT("the Consul API does not answer");
		usleep(10000);
	}
}

static int stat_of(const char *name)
{
	struct resp *r = call("GET", "/v1/agent/self", NULL);
	json_t *j = js(r);
	const char *v = json_string_value(
		json_object_get(json_object_get(json_object_get(j, "Stats"), "shmlock"), name));

	if (!v)
		FAIL_AT("no Stats.shmlock.%s: %s", name, r->body);
	return atoi(v);
}

/* A request on a thread of its own (blocking queries). */
struct bg {
	pthread_t t;
	const char *method, *path;
	struct resp *r;
	atomic_bool answered;
};

static void *bg_main(void *arg)
{
	struct bg *g = arg;

	g->r = call(g->method, g->path, NULL);
	atomic_store(&g->answered, true);
	return NULL;
}

/* Wait until the broker counts @g's query among its suspended blocking
 * queries (the only one: the tests start one at a time). A query answered
 * without waiting (its index was already behind) is told apart from one
 * that has not reached the broker yet; the 15 s bound is for a loaded
 * machine under a sanitizer, half the test's own deadline. */
static void wait_blocked(struct bg *g)
{
	uint64_t until = now_ms() + 15000;

	while (stat_of("blocking_queries") != 1) {
		if (atomic_load(&g->answered))
			FAIL_AT("%s was answered without waiting (status %ld): %s", g->path,
				g->r->status, g->r->body);
		if (now_ms() > until)
			FAIL_AT("%s never suspended in 15 s", g->path);
		usleep(2000);
	}
}

static struct bg *bg_start(const char *path)
{
	struct bg *g = calloc(1, sizeof(*g));

	g->method = "GET";
	g->path = path;
	if (pthread_create(&g->t, NULL, bg_main, g))
		FAIL_AT("pthread_create");
	return g;
}

static struct resp *bg_join(struct bg *g)
{
	pthread_join(g->t, NULL);
	return g->r;
}

/* `curl -s ARGS` as a shell command line, its output. */
static char *curl_cmd(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *curl_cmd(const char *fmt, ...)
{
	char *args, *line, buf[4096];
	size_t n;
	va_list ap;
	FILE *f;

	va_start(ap, fmt);
	if (vasprintf(&args, fmt, ap) < 0)
		FAIL_AT("out of memory");
	va_end(ap);
	line = strf("curl -s --max-time 20 %s", args);
	f = popen(line, "r");
	if (!f)
		FAIL_AT("popen: %s", strerror(errno));
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	if (pclose(f))
		FAIL_AT("%s failed", line);
	return strdup(buf);
}

/* `shmlock lock -socket=... -lock-delay=0 -pass-stdin FLAGS... KEY cat`, holding
 * KEY until the test closes *@wfd (cat's standard input). -pass-stdin is what
 * makes it so: without it (consul lock's default) the CLI gives its child
 * /dev/null, cat ends at once and the CLI releases within milliseconds, while
 * the test still counts on the hold. */
static pid_t cli_hold(const struct broker_proc *b, const char *flags[], int nflags, const char *key,
		      int *wfd)
{
	const char *cli = getenv("SHMLOCK_CLI_BIN"), *argv[18];
	char sockarg[200];
	int pfd[2], n = 0, i;
	pid_t pid;

	if (!cli)
		FAIL_AT("SHMLOCK_CLI_BIN is not set (run through 'make test')");
	if (nflags > 10)
		FAIL_AT("too many flags");
	snprintf(sockarg, sizeof(sockarg), "-socket=%s", b->sock);
	argv[n++] = cli;
	argv[n++] = "lock";
	argv[n++] = sockarg;
	argv[n++] = "-lock-delay=0";
	argv[n++] = "-pass-stdin";
	for (i = 0; i < nflags; i++)
		argv[n++] = flags[i];
	argv[n++] = key;
	argv[n++] = "cat";
	argv[n] = NULL;
	if (pipe(pfd))
		FAIL_AT("pipe");
	pid = fork();
	if (pid == 0) {
		dup2(pfd[0], 0);
		close(pfd[1]);
		execv(cli, (char *const *)argv);
		_exit(127);
	}
	close(pfd[0]);
	*wfd = pfd[1];
	return pid;
}

/* tests/consul_client.py, also when not run from the top of the tree. */
static char *consul_client_script(void)
{
	char *script = strf("tests/consul_client.py");

	if (access(script, R_OK))
		script = strf("%.*s/consul_client.py", (int)(strrchr(__FILE__, '/') - __FILE__),
			      __FILE__);
	return script;
}

static local_session *lsession(const struct broker_proc *b)
{
	return open_session(b, "it_consul", 0, 0);
}

/* ---- sessions ---------------------------------------------------------------- */

TEST(consul, sessions_create_info_list_node_renew_destroy, 20)
{
	struct broker_proc b;
	json_t *j, *e;
	char *id, *id2;
	struct resp *r;

	cstart(&b, NULL);
	id = session_create("{\"Name\":\"db\",\"TTL\":\"30s\",\"LockDelay\":\"5s\","
			    "\"Behavior\":\"delete\",\"Checks\":[]}");
	id2 = session_create(NULL);
	r = call("GET", strf("/v1/session/info/%s", id), NULL);
	CHECK_STATUS(r, 200);
	CHECK(r->index > 0 && r->leader_hdr);
	j = js(r);
	CHECK(json_array_size(j) == 1);
	e = json_array_get(j, 0);
	CHECK(!strcmp(json_string_value(json_object_get(e, "ID")), id));
	CHECK(!strcmp(json_string_value(json_object_get(e, "Name")), "db"));
	CHECK(!strcmp(json_string_value(json_object_get(e, "Node")), "node1"));
	CHECK(!strcmp(json_string_value(json_object_get(e, "TTL")), "30s"));
	CHECK(!strcmp(json_string_value(json_object_get(e, "Behavior")), "delete"));
	CHECK_EQ(jint(e, "LockDelay"), 5000000000LL);
	CHECK(json_array_size(json_object_get(e, "NodeChecks")) == 0);
	CHECK(jint(e, "CreateIndex") > 0 && jint(e, "ModifyIndex") == jint(e, "CreateIndex"));
	/* defaults: serfHealth, release, 15 s, no TTL */
	e = json_array_get(js(call("GET", strf("/v1/session/info/%s", id2), NULL)), 0);
	CHECK(!strcmp(json_string_value(json_array_get(json_object_get(e, "NodeChecks"), 0)),
		      "serfHealth"));
	CHECK(!strcmp(json_string_value(json_object_get(e, "Behavior")), "release"));
	CHECK_EQ(jint(e, "LockDelay"), 15000000000LL);
	CHECK(!strcmp(json_string_value(json_object_get(e, "TTL")), ""));
	/* it is a segment session: liblocal lists it */
	CHECK(json_array_size(js(call("GET", "/v1/session/list", NULL))) == 2);
	CHECK(json_array_size(js(call("GET", "/v1/session/node/node1", NULL))) == 2);
	CHECK(json_array_size(js(call("GET", "/v1/session/node/other", NULL))) == 0);
	r = call("PUT", strf("/v1/session/renew/%s", id), NULL);
	CHECK_STATUS(r, 200);
	CHECK(!strcmp(json_string_value(json_object_get(json_array_get(js(r), 0), "ID")), id));
	CHECK(!strcmp(call("PUT", strf("/v1/session/destroy/%s", id), NULL)->body, "true"));
	CHECK(json_array_size(js(call("GET", strf("/v1/session/info/%s", id), NULL))) == 0);
	CHECK_STATUS(call("PUT", strf("/v1/session/renew/%s", id), NULL), 404);
	CHECK(!strcmp(call("PUT", strf("/v1/session/destroy/%s", id), NULL)->body, "true"));
	CHECK(json_array_size(js(call("GET", "/v1/session/list", NULL))) == 1);
	/* errors */
	CHECK_STATUS(call("PUT", "/v1/session/create", "{\"TTL\":\"500ms\"}"), 400);
	CHECK_STATUS(call("PUT", "/v1/session/create", "{\"TTL\":\"90000s\"}"), 400);
	CHECK_STATUS(call("PUT", "/v1/session/create", "{\"TTL\":\"soon\"}"), 400);
	CHECK_STATUS(call("PUT", "/v1/session/create", "{\"Behavior\":\"keep\"}"), 400);
	CHECK_STATUS(call("PUT", "/v1/session/create", "{\"Checks\":[\"web\"]}"), 500);
	CHECK_STATUS(call("PUT", "/v1/session/create", "{\"NodeChecks\":[\"web\"]}"), 500);
	CHECK_STATUS(call("PUT", "/v1/session/create", "{\"Node\":\"elsewhere\"}"), 500);
	CHECK_STATUS(call("PUT", "/v1/session/create", "{\"Name\":"), 400);
	CHECK_STATUS(call("GET", "/v1/session/create", NULL), 405);
	CHECK_STATUS(call("DELETE", strf("/v1/session/info/%s", id2), NULL), 405);
	CHECK_STATUS(call("GET", "/v1/session/nothing", NULL), 404);
	CHECK_STATUS(call("PUT", "/v1/session/destroy/", NULL), 400);
	CHECK_STATUS(call("GET", "/v1/session/info/", NULL), 400);
	CHECK_STATUS(call("GET", "/v1/nothing", NULL), 404);
	CHECK(json_array_size(js(call("GET", "/v1/session/info/not-a-uuid", NULL))) == 0);
	/* status and agent */
	CHECK(!strcmp(call("GET", "/v1/status/leader", NULL)->body, "\"127.0.0.1:8300\""));
	CHECK(json_array_size(js(call("GET", "/v1/status/peers", NULL))) == 1);
	CHECK(!strcmp(json_string_value(json_object_get(
			      json_object_get(js(call("GET", "/v1/agent/self", NULL)), "Config"),
			      "NodeName")),
		      "node1"));
	broker_stop_clean(&b);
}

TEST(consul, ttl_expiry_releases_with_lock_delay, 30)
{
	struct broker_proc b;
	char *a, *o;
	uint64_t until;
	struct resp *r;

	cstart(&b, NULL);
	a = session_create("{\"Name\":\"a\",\"TTL\":\"1s\",\"LockDelay\":\"3s\"}");
	o = session_create("{\"Name\":\"o\",\"LockDelay\":\"0s\"}");
	CHECK(put_bool(strf("/v1/kv/ttl/k?acquire=%s", a), "a"));
	CHECK(!put_bool(strf("/v1/kv/ttl/k?acquire=%s", o), "o"));
	/* renewals keep it: two TTLs' worth */
	until = now_ms() + 2500;
	while (now_ms() < until) {
		CHECK_STATUS(call("PUT", strf("/v1/session/renew/%s", a), NULL), 200);
		usleep(300000);
	}
	CHECK(!strcmp(kv_session("ttl/k"), a));
	/* no renew: invalidated after twice the TTL, as Consul does */
	until = now_ms() + 10000;
	while (json_array_size(js(call("GET", strf("/v1/session/info/%s", a), NULL)))) {
		if (now_ms() > until)
			FAIL_AT("the session never expired");
		usleep(50000);
	}
	r = call("GET", "/v1/kv/ttl/k", NULL);
	CHECK(!json_object_get(json_array_get(js(r), 0), "Session"));
	/* lock-delay: the key is refused for 3 s, then granted */
	CHECK(!put_bool(strf("/v1/kv/ttl/k?acquire=%s", o), "o"));
	until = now_ms() + 10000;
	while (!put_bool(strf("/v1/kv/ttl/k?acquire=%s", o), "o")) {
		if (now_ms() > until)
			FAIL_AT("never granted after the lock-delay");
		usleep(100000);
	}
	CHECK(!strcmp(kv_session("ttl/k"), o));
	CHECK_EQ(jint(kv_entry("ttl/k"), "LockIndex"), 2);
	broker_stop_clean(&b);
}

/* ---- KV -------------------------------------------------------------------- */

TEST(consul, kv_put_get_flags_cas_delete_recurse_keys_raw, 20)
{
	struct broker_proc b;
	json_t *e, *j;
	struct resp *r;
	long long mi;

	cstart(&b, NULL);
	r = call("GET", "/v1/kv/app/a", NULL);
	CHECK_STATUS(r, 404);
	CHECK(r->index > 0);
	CHECK(put_bool("/v1/kv/app/a?flags=42", "hello"));
	e = kv_entry("app/a");
	CHECK(!strcmp(json_string_value(json_object_get(e, "Key")), "app/a"));
	CHECK(!strcmp(json_string_value(json_object_get(e, "Value")), "aGVsbG8="));
	CHECK_EQ(jint(e, "Flags"), 42);
	CHECK_EQ(jint(e, "LockIndex"), 0);
	CHECK(!json_object_get(e, "Session"));
	CHECK(jint(e, "CreateIndex") == jint(e, "ModifyIndex"));
	mi = jint(e, "ModifyIndex");
	r = call("GET", "/v1/kv/app/a?raw", NULL);
	CHECK(!strcmp(r->body, "hello"));
	/* CAS on ModifyIndex; cas=0 only creates */
	CHECK(!put_bool("/v1/kv/app/a?cas=0", "x"));
	CHECK(!put_bool(strf("/v1/kv/app/a?cas=%lld", mi + 100), "x"));
	CHECK(put_bool(strf("/v1/kv/app/a?cas=%lld", mi), "hi"));
	e = kv_entry("app/a");
	CHECK(jint(e, "ModifyIndex") > mi && jint(e, "CreateIndex") == mi);
	CHECK_EQ(jint(e, "Flags"), 0);
	/* `consul lock`'s semaphore flag is past INT64_MAX */
	CHECK(put_bool("/v1/kv/app/f?flags=16210313421097356768", "f"));
	CHECK(strstr(call("GET", "/v1/kv/app/f", NULL)->body, "\"Flags\":16210313421097356768,"));
	CHECK(!strcmp(call("DELETE", "/v1/kv/app/f", NULL)->body, "true"));
	CHECK(put_bool("/v1/kv/app/b/c?cas=0", ""));
	CHECK(json_is_null(json_object_get(kv_entry("app/b/c"), "Value")));
	CHECK(put_bool("/v1/kv/app/b/d", "d"));
	CHECK(put_bool("/v1/kv/other", "o"));
	CHECK(put_bool("/v1/kv/a%2Fb%20c", "escaped"));
	CHECK(!strcmp(call("GET", "/v1/kv/a%2Fb%20c?raw", NULL)->body, "escaped"));
	CHECK(put_bool("/v1/kv/plus+sign", "p")); /* a path's '+' is itself */
	CHECK(!strcmp(json_string_value(json_object_get(kv_entry("plus+sign"), "Key")),
		      "plus+sign"));
	CHECK(!strcmp(call("DELETE", "/v1/kv/plus+sign", NULL)->body, "true"));
	j = js(call("GET", "/v1/kv/app?recurse", NULL));
	CHECK(json_array_size(j) == 3);
	CHECK(!strcmp(json_string_value(json_object_get(json_array_get(j, 2), "Key")), "app/b/d"));
	j = js(call("GET", "/v1/kv/app/?keys&separator=/", NULL));
	CHECK(json_array_size(j) == 2);
	CHECK(!strcmp(json_string_value(json_array_get(j, 0)), "app/a"));
	CHECK(!strcmp(json_string_value(json_array_get(j, 1)), "app/b/"));
	CHECK(json_array_size(js(call("GET", "/v1/kv/?keys", NULL))) == 5);
	CHECK_STATUS(call("GET", "/v1/kv/none/?recurse", NULL), 404);
	CHECK_STATUS(call("GET", "/v1/kv/none/?keys", NULL), 404);
	/* delete: cas, one key, recurse */
	mi = jint(kv_entry("other"), "ModifyIndex");
	CHECK(!strcmp(call("DELETE", strf("/v1/kv/other?cas=%lld", mi + 1), NULL)->body, "false"));
	CHECK(!strcmp(call("DELETE", strf("/v1/kv/other?cas=%lld", mi), NULL)->body, "true"));
	CHECK_STATUS(call("GET", "/v1/kv/other", NULL), 404);
	CHECK(!strcmp(call("DELETE", "/v1/kv/app/b?recurse", NULL)->body, "true"));
	CHECK(json_array_size(js(call("GET", "/v1/kv/app?recurse", NULL))) == 1);
	CHECK(!strcmp(call("DELETE", "/v1/kv/app/a", NULL)->body, "true"));
	CHECK(!strcmp(call("DELETE", "/v1/kv/app/a", NULL)->body, "true"));
	/* errors */
	CHECK_STATUS(call("PUT", "/v1/kv/", "x"), 400);
	CHECK_STATUS(call("GET", "/v1/kv/", NULL), 400);
	CHECK_STATUS(call("DELETE", "/v1/kv/", NULL), 400);
	CHECK_STATUS(call("PUT", "/v1/kv/k?flags=x", "x"), 400);
	CHECK_STATUS(call("PUT", "/v1/kv/k?cas=-1", "x"), 400);
	CHECK_STATUS(call("PUT", "/v1/kv/k?acquire=00000000-0000-0000-0000-000000000000", "x"),
		     500);
	CHECK_STATUS(call("PUT", "/v1/kv/k?acquire=a&release=a", "x"), 400);
	CHECK_STATUS(call("DELETE", "/v1/kv/k?recurse&cas=1", NULL), 400);
	CHECK_STATUS(call("POST", "/v1/kv/k", "x"), 405);
	CHECK_STATUS(call("GET", "/v1/kv/%zz", NULL), 400);
	{
		char *big = malloc(600 * 1024 + 1);

		memset(big, 'v', 600 * 1024);
		big[600 * 1024] = '\0';
		CHECK_STATUS(call("PUT", "/v1/kv/big", big), 413);
	}
	broker_stop_clean(&b);
}

TEST(consul, kv_lock_is_the_segment_lock, 20)
{
	struct broker_proc b;
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 0);
	static char value[64];
	static LOCAL_OPTS(local_key_info, ki, .value_buf = value, .value_buf_size = sizeof(value));
	local_session *ls;
	char *s1, *s2;
	uint64_t tok;
	json_t *e;

	cstart(&b, NULL);
	ls = lsession(&b);
	s1 = session_create("{\"Name\":\"s1\"}");
	s2 = session_create("{\"Name\":\"s2\",\"LockDelay\":0}");
	CHECK(put_bool(strf("/v1/kv/svc/leader?acquire=%s", s1), "node-a"));
	e = kv_entry("svc/leader");
	CHECK(!strcmp(json_string_value(json_object_get(e, "Session")), s1));
	CHECK_EQ(jint(e, "LockIndex"), 1);
	/* re-acquire by the holder: true, same LockIndex, new value */
	CHECK(put_bool(strf("/v1/kv/svc/leader?acquire=%s", s1), "node-a2"));
	CHECK_EQ(jint(kv_entry("svc/leader"), "LockIndex"), 1);
	CHECK(!put_bool(strf("/v1/kv/svc/leader?acquire=%s", s2), "node-b"));
	CHECK(!put_bool(strf("/v1/kv/svc/leader?release=%s", s2), ""));
	/* liblocal sees the hold, with the value attached */
	CHECK_RC(local_lock(ls, "svc/leader", &o, &tok), -EBUSY);
	CHECK_OK(local_info(ls, "svc/leader", &ki));
	CHECK_EQ(ki.holders, 1);
	CHECK(ki.value_len == 7 && !memcmp(value, "node-a2", 7));
	CHECK(put_bool(strf("/v1/kv/svc/leader?release=%s", s1), ""));
	CHECK(!json_object_get(kv_entry("svc/leader"), "Session"));
	/* now liblocal holds it: Consul's acquire is refused, the entry
	 * shows the holder */
	CHECK_OK(local_lock(ls, "svc/leader", &o, &tok));
	CHECK(!put_bool(strf("/v1/kv/svc/leader?acquire=%s", s2), "node-b"));
	CHECK(kv_session("svc/leader")[0] == 's');
	CHECK_OK(local_release(ls, "svc/leader"));
	CHECK(!json_object_get(kv_entry("svc/leader"), "Session"));
	CHECK(put_bool(strf("/v1/kv/svc/leader?acquire=%s", s2), "node-b"));
	CHECK_EQ(jint(kv_entry("svc/leader"), "LockIndex"), 3);
	/* deleting a held key releases the lock */
	CHECK(!strcmp(call("DELETE", "/v1/kv/svc/leader", NULL)->body, "true"));
	CHECK_OK(local_lock(ls, "svc/leader", &o, &tok));
	CHECK_OK(local_release(ls, "svc/leader"));
	local_session_close(ls);
	broker_stop_clean(&b);
}

/* Leader discovery as Consul's guide does it: read the lock key, then its
 * Session's info. Here the holder is a liblocal session, not this API's. */
TEST(consul, a_liblocal_hold_is_a_kv_entry_with_its_session, 30)
{
	struct broker_proc b;
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 0, .value = "node-a:5432", .value_len = 11);
	LOCAL_OPTS(local_key_info, ki);
	struct local_session_opts so;
	local_session *ls;
	struct resp *r;
	struct bg *g;
	json_t *e, *si, *a;
	const char *sid;
	uint64_t tok, idx;
	size_t i;
	bool listed = false;

	cstart(&b, NULL);
	local_session_opts_init(&so);
	so.socket_path = b.sock;
	so.name = "pg-primary";
	so.lock_delay_ms = 2500;
	so.ttl_ms = 15000;
	so.behavior = LOCAL_BEHAVIOR_DELETE;
	CHECK_OK(local_session_open(&so, &ls));
	CHECK_OK(local_lock(ls, "svc/primary", &o, &tok));
	CHECK_OK(local_info(ls, "svc/primary", &ki));
	e = kv_entry("svc/primary");
	CHECK(!strcmp(json_string_value(json_object_get(e, "Key")), "svc/primary"));
	CHECK(!strcmp(json_string_value(json_object_get(e, "Value")), "bm9kZS1hOjU0MzI="));
	CHECK_EQ(jint(e, "LockIndex"), (long long)ki.lock_index);
	sid = json_string_value(json_object_get(e, "Session"));
	CHECK(sid && sid[0]);
	r = call("GET", strf("/v1/session/info/%s", sid), NULL);
	CHECK_STATUS(r, 200);
	a = js(r);
	if (json_array_size(a) != 1)
		FAIL_AT("session/info/%s answered %s", sid, r->body);
	si = json_array_get(a, 0);
	CHECK(!strcmp(json_string_value(json_object_get(si, "ID")), sid));
	CHECK(!strcmp(json_string_value(json_object_get(si, "Name")), "pg-primary"));
	CHECK(!strcmp(json_string_value(json_object_get(si, "Node")), "node1"));
	CHECK_EQ(jint(si, "LockDelay"), 2500000000LL);
	CHECK(!strcmp(json_string_value(json_object_get(si, "Behavior")), "delete"));
	CHECK(!strcmp(json_string_value(json_object_get(si, "TTL")), "15s"));
	CHECK(jint(si, "CreateIndex") > 0 && jint(si, "ModifyIndex") >= jint(si, "CreateIndex"));
	/* the session lists show it too */
	a = js(call("GET", "/v1/session/node/node1", NULL));
	json_array_foreach(a, i, si) listed |=
		!strcmp(json_string_value(json_object_get(si, "ID")), sid);
	CHECK(listed);
	CHECK(json_array_size(js(call("GET", "/v1/session/list", NULL))) == 1);
	/* ?recurse and ?keys list the key */
	a = js(call("GET", "/v1/kv/svc/?recurse", NULL));
	CHECK(json_array_size(a) == 1 &&
	      !strcmp(json_string_value(json_object_get(json_array_get(a, 0), "Session")), sid));
	a = js(call("GET", "/v1/kv/?keys", NULL));
	CHECK(json_array_size(a) == 1 &&
	      !strcmp(json_string_value(json_array_get(a, 0)), "svc/primary"));
	/* a semaphore held by liblocal is not shown (docs/consul-api.md says why) */
	CHECK_OK(local_sem_acquire(ls, "svc/pool", 3, &o, &tok));
	CHECK_STATUS(call("GET", "/v1/kv/svc/pool", NULL), 404);
	CHECK(json_array_size(js(call("GET", "/v1/kv/svc/?recurse", NULL))) == 1);
	CHECK_OK(local_release(ls, "svc/pool"));
	/* a session of this API cannot take it */
	CHECK(!put_bool(strf("/v1/kv/svc/primary?acquire=%s", session_create(NULL)), "x"));
	CHECK(!strcmp(json_string_value(json_object_get(kv_entry("svc/primary"), "Session")), sid));
	/* a blocking query on the key ends when liblocal releases it: the
	 * entry existed only as the hold, and is gone with it */
	r = call("GET", "/v1/kv/svc/primary", NULL);
	idx = r->index;
	g = bg_start(strf("/v1/kv/svc/primary?index=%llu&wait=20s", (unsigned long long)idx));
	wait_blocked(g);
	CHECK_OK(local_release(ls, "svc/primary"));
	r = bg_join(g);
	CHECK(r->index > idx);
	CHECK_STATUS(r, 404);
	/* and a blocking query on a free key ends when liblocal takes it */
	r = call("GET", "/v1/kv/svc/primary", NULL);
	idx = r->index;
	g = bg_start(strf("/v1/kv/svc/primary?index=%llu&wait=20s", (unsigned long long)idx));
	wait_blocked(g);
	CHECK_OK(local_lock(ls, "svc/primary", &o, &tok));
	r = bg_join(g);
	CHECK_STATUS(r, 200);
	CHECK(!strcmp(json_string_value(json_object_get(json_array_get(js(r), 0), "Session")),
		      sid));
	/* a PUT during the hold stands, and makes the entry a plain one that
	 * outlives the hold */
	CHECK(put_bool("/v1/kv/svc/primary", "manual"));
	e = kv_entry("svc/primary");
	CHECK(!strcmp(json_string_value(json_object_get(e, "Value")), "bWFudWFs"));
	CHECK(!strcmp(json_string_value(json_object_get(e, "Session")), sid));
	CHECK_OK(local_release(ls, "svc/primary"));
	e = kv_entry("svc/primary");
	CHECK(!json_object_get(e, "Session"));
	CHECK(!strcmp(json_string_value(json_object_get(e, "Value")), "bWFudWFs"));
	local_session_close(ls);
	CHECK(json_array_size(js(call("GET", strf("/v1/session/info/%s", sid), NULL))) == 0);
	broker_stop_clean(&b);
}

TEST(consul, behavior_release_and_delete_on_destroy, 20)
{
	struct broker_proc b;
	char *rel, *del, *other;

	cstart(&b, NULL);
	rel = session_create("{\"Behavior\":\"release\",\"LockDelay\":\"0s\"}");
	del = session_create("{\"Behavior\":\"delete\",\"LockDelay\":\"0s\"}");
	other = session_create("{\"LockDelay\":\"0s\"}");
	CHECK(put_bool(strf("/v1/kv/b/rel?acquire=%s", rel), "r"));
	CHECK(put_bool(strf("/v1/kv/b/del?acquire=%s", del), "d"));
	CHECK(put_bool("/v1/kv/b/plain", "p"));
	call("PUT", strf("/v1/session/destroy/%s", rel), NULL);
	call("PUT", strf("/v1/session/destroy/%s", del), NULL);
	CHECK(!json_object_get(kv_entry("b/rel"), "Session"));
	CHECK(!strcmp(call("GET", "/v1/kv/b/rel?raw", NULL)->body, "r"));
	CHECK_STATUS(call("GET", "/v1/kv/b/del", NULL), 404);
	CHECK_STATUS(call("GET", "/v1/kv/b/plain", NULL), 200);
	/* lock-delay 0: free at once */
	CHECK(put_bool(strf("/v1/kv/b/rel?acquire=%s", other), "o"));
	broker_stop_clean(&b);
}

/* ---- blocking queries -------------------------------------------------------- */

TEST(consul, blocking_queries_woken_by_api_liblocal_and_cli, 30)
{
	struct broker_proc b;
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 0);
	local_session *ls;
	struct resp *r;
	struct bg *g;
	uint64_t idx, tok;
	pid_t pid;
	int st, wfd;

	cstart(&b, NULL);
	ls = lsession(&b);
	CHECK(put_bool("/v1/kv/w/k", "v1"));
	r = call("GET", "/v1/kv/w/k", NULL);
	idx = r->index;
	/* no change: the wait ends with the same index */
	r = call("GET", strf("/v1/kv/w/k?index=%llu&wait=200ms", (unsigned long long)idx), NULL);
	CHECK_STATUS(r, 200);
	CHECK_EQ(r->index, idx);
	/* a change through this API */
	g = bg_start(strf("/v1/kv/w/k?index=%llu&wait=20s", (unsigned long long)idx));
	wait_blocked(g);
	CHECK(put_bool("/v1/kv/w/k", "v2"));
	r = bg_join(g);
	CHECK(r->index > idx);
	CHECK(!strcmp(json_string_value(json_object_get(json_array_get(js(r), 0), "Value")),
		      "djI="));
	idx = r->index;
	/* a lock taken by liblocal */
	g = bg_start(strf("/v1/kv/w/k?index=%llu&wait=20s", (unsigned long long)idx));
	wait_blocked(g);
	CHECK_OK(local_lock(ls, "w/k", &o, &tok));
	r = bg_join(g);
	CHECK(r->index > idx);
	CHECK(json_object_get(json_array_get(js(r), 0), "Session"));
	idx = r->index;
	g = bg_start(strf("/v1/kv/w/k?index=%llu&wait=20s", (unsigned long long)idx));
	wait_blocked(g);
	CHECK_OK(local_release(ls, "w/k"));
	r = bg_join(g);
	CHECK(r->index > idx && !json_object_get(json_array_get(js(r), 0), "Session"));
	idx = r->index;
	/* a prefix query, woken by the CLI's lock of a key under it */
	r = call("GET", "/v1/kv/w/?recurse", NULL);
	idx = r->index;
	g = bg_start(strf("/v1/kv/w/?recurse&index=%llu&wait=20s", (unsigned long long)idx));
	wait_blocked(g);
	pid = cli_hold(&b, NULL, 0, "w/k", &wfd);
	r = bg_join(g);
	CHECK(r->index > idx && json_object_get(json_array_get(js(r), 0), "Session"));
	idx = r->index;
	g = bg_start(strf("/v1/kv/w/?recurse&index=%llu&wait=20s", (unsigned long long)idx));
	wait_blocked(g);
	/* The CLI still holds: cat ends only when the pipe closes. */
	CHECK_EQ(waitpid(pid, &st, WNOHANG), 0);
	close(wfd); /* the CLI's command ends: it releases */
	r = bg_join(g);
	CHECK(r->index > idx && !json_object_get(json_array_get(js(r), 0), "Session"));
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* a new key under the prefix; a deleted one */
	idx = r->index;
	g = bg_start(strf("/v1/kv/w/?keys&index=%llu&wait=20s", (unsigned long long)idx));
	wait_blocked(g);
	CHECK(put_bool("/v1/kv/w/new", "n"));
	r = bg_join(g);
	CHECK(json_array_size(js(r)) == 2);
	idx = r->index;
	g = bg_start(strf("/v1/kv/w/?keys&index=%llu&wait=20s", (unsigned long long)idx));
	wait_blocked(g);
	CHECK(!strcmp(call("DELETE", "/v1/kv/w/new", NULL)->body, "true"));
	r = bg_join(g);
	CHECK(json_array_size(js(r)) == 1);
	/* session lists: woken by a create and by a destroy */
	r = call("GET", "/v1/session/list", NULL);
	idx = r->index;
	g = bg_start(strf("/v1/session/list?index=%llu&wait=20s", (unsigned long long)idx));
	wait_blocked(g);
	{
		char *s = session_create("{\"Name\":\"x\"}");

		/* this API's session and liblocal's */
		r = bg_join(g);
		CHECK(json_array_size(js(r)) == 2 && r->index > idx);
		idx = r->index;
		g = bg_start(strf("/v1/session/list?index=%llu&wait=20s", (unsigned long long)idx));
		wait_blocked(g);
		call("PUT", strf("/v1/session/destroy/%s", s), NULL);
		r = bg_join(g);
		CHECK(json_array_size(js(r)) == 1 && r->index > idx);
	}
	CHECK_EQ(stat_of("watched_keys"), 0);
	local_session_close(ls);
	broker_stop_clean(&b);
}

TEST(consul, token_is_required_as_for_the_http_api, 20)
{
	struct broker_proc b;

	cstart(&b, "sekrit");
	CHECK_STATUS(call("GET", "/v1/kv/x", NULL), 403);
	CHECK_STATUS(call_h("GET", "/v1/kv/x", NULL, "X-Consul-Token: wrong"), 403);
	CHECK_STATUS(call_h("GET", "/v1/kv/x", NULL, "X-Consul-Token: sekrit"), 404);
	CHECK_STATUS(call_h("GET", "/v1/kv/x", NULL, "Authorization: Bearer sekrit"), 404);
	CHECK_STATUS(call("GET", "/v1/kv/x?token=sekrit", NULL), 404);
	broker_stop_clean(&b);
}

/* Off loopback nothing names a peer's user: a token, or the insecure flag.
 * (On loopback the control socket's users need none: it_net_uid.c.) */
TEST(consul, refuses_tcp_off_loopback_without_a_token, 20)
{
	struct broker_proc b;
	char *any = strf("0.0.0.0:%d", free_port());
	int st;

	broker_start(&b, NULL);
	broker_signal_wait(&b, SIGTERM);
	st = broker_refuses(&b, ARGS("--consul-listen", any), 5000);
	CHECK_EQ(st, 1);
	CHECK(broker_log_has(&b,
			     strf("refusing to serve HTTP on %s, not a loopback address", any)));
	broker_stop(&b);
}

/* ---- the recipes ------------------------------------------------------------ */

/* Reference 003, leader election, as its curl commands show it. */
TEST(consul, recipe_leader_election, 30)
{
	struct broker_proc b;
	char *out, *s1, *s2, *base;
	json_t *j;

	cstart(&b, NULL);
	base = strf("http://localhost:%d", port);
	/* curl -X PUT -d '{"Name": "dbservice"}' http://localhost:8500/v1/session/create */
	out = curl_cmd("-X PUT -d '{\"Name\": \"dbservice\", \"LockDelay\": \"0s\"}' "
		       "%s/v1/session/create",
		       base);
	s1 = strdup(json_string_value(json_object_get(json_loads(out, 0, NULL), "ID")));
	out = curl_cmd("-X PUT -d '{\"Name\": \"dbservice\"}' %s/v1/session/create", base);
	s2 = strdup(json_string_value(json_object_get(json_loads(out, 0, NULL), "ID")));
	/* curl -X PUT -d <body> http://localhost:8500/v1/kv/<key>?acquire=<session> */
	CHECK(!strcmp(
		curl_cmd("-X PUT -d 'node-1' '%s/v1/kv/service/db/leader?acquire=%s'", base, s1),
		"true"));
	CHECK(!strcmp(
		curl_cmd("-X PUT -d 'node-2' '%s/v1/kv/service/db/leader?acquire=%s'", base, s2),
		"false"));
	/* curl http://localhost:8500/v1/kv/<key>: the leader is the Session */
	j = json_loads(curl_cmd("%s/v1/kv/service/db/leader", base), 0, NULL);
	CHECK(!strcmp(json_string_value(json_object_get(json_array_get(j, 0), "Session")), s1));
	CHECK(!strcmp(json_string_value(json_object_get(json_array_get(j, 0), "Value")),
		      "bm9kZS0x"));
	/* curl http://localhost:8500/v1/session/info/<session> */
	j = json_loads(curl_cmd("%s/v1/session/info/%s", base, s1), 0, NULL);
	CHECK(!strcmp(json_string_value(json_object_get(json_array_get(j, 0), "Name")),
		      "dbservice"));
	/* the follower watches with a blocking query; the leader steps down
	 * with curl -X PUT http://localhost:8500/v1/kv/<key>?release=<session> */
	{
		uint64_t idx = call("GET", "/v1/kv/service/db/leader", NULL)->index;
		struct bg *g = bg_start(
			strf("/v1/kv/service/db/leader?index=%llu", (unsigned long long)idx));

		wait_blocked(g);
		CHECK(!strcmp(curl_cmd("-X PUT '%s/v1/kv/service/db/leader?release=%s'", base, s1),
			      "true"));
		CHECK(!json_object_get(json_array_get(js(bg_join(g)), 0), "Session"));
	}
	CHECK(!strcmp(
		curl_cmd("-X PUT -d 'node-2' '%s/v1/kv/service/db/leader?acquire=%s'", base, s2),
		"true"));
	j = json_loads(curl_cmd("%s/v1/kv/service/db/leader", base), 0, NULL);
	CHECK(!strcmp(json_string_value(json_object_get(json_array_get(j, 0), "Session")), s2));
	broker_stop_clean(&b);
}

/*
 * Reference 000, the semaphore: each contender creates a session, a
 * contender key <prefix>/<session> acquired with it, then takes a slot by
 * a CAS on <prefix>/.lock, whose value is {"Limit":N,"Holders":[...]},
 * pruning holders whose contender key has no live session. Contenders run
 * as processes with TTL sessions they renew; a holder killed with SIGKILL
 * stops renewing, its session expires, and a waiting contender, blocked on
 * the prefix, takes its slot.
 */
static int holders_in(const char *prefix, json_t **lock_out, long long *mi)
{
	struct resp *r = call("GET", strf("/v1/kv/%s?recurse", prefix), NULL);
	json_t *all = r->status == 200 ? js(r) : json_array(), *e, *lock = NULL;
	size_t i;

	*mi = 0;
	json_array_foreach(all, i, e)
	{
		const char *k = json_string_value(json_object_get(e, "Key"));

		if (!strcmp(k + strlen(k) - 5, ".lock")) {
			const char *v64 = json_string_value(json_object_get(e, "Value"));
			char *cmd = strf("echo %s | base64 -d", v64 ? v64 : "");
			FILE *f = popen(cmd, "r");
			char buf[4096];
			size_t n = fread(buf, 1, sizeof(buf) - 1, f);

			pclose(f);
			buf[n] = '\0';
			lock = json_loads(buf, 0, NULL);
			*mi = jint(e, "ModifyIndex");
		}
	}
	*lock_out = lock;
	return (int)r->index;
}

/* One contender: runs until it holds a slot, reports "held" on @wfd,
 * then renews its session for ever. */
static void contender(const char *prefix, int limit, int wfd)
{
	char *s = session_create("{\"Name\":\"sem\",\"TTL\":\"1s\",\"LockDelay\":\"0s\"}");
	uint64_t last_renew = now_ms();

	if (!put_bool(strf("/v1/kv/%s/%s?acquire=%s", prefix, s, s), "{}"))
		_exit(2);
	for (;;) {
		struct resp *r = call("GET", strf("/v1/kv/%s?recurse", prefix), NULL);
		json_t *all = js(r), *e, *lock = NULL, *holders, *live = json_array();
		long long mi = 0;
		size_t i;
		char *body;

		json_array_foreach(all, i, e)
		{
			const char *k = json_string_value(json_object_get(e, "Key"));

			if (!strcmp(k + strlen(k) - 5, ".lock")) {
				struct resp *raw = call("GET", strf("/v1/kv/%s?raw", k), NULL);

				lock = json_loads(raw->body, 0, NULL);
				mi = jint(e, "ModifyIndex");
			}
		}
		if (!lock)
			lock = json_pack("{s:i, s:[]}", "Limit", limit, "Holders");
		holders = json_object_get(lock, "Holders");
		/* prune: a holder counts while its contender key has a session */
		json_array_foreach(holders, i, e)
		{
			size_t k;
			json_t *c;

			json_array_foreach(all, k, c)
			{
				const char *key = json_string_value(json_object_get(c, "Key"));
				const char *sess = json_string_value(json_object_get(c, "Session"));

				if (sess && !strcmp(sess, json_string_value(e)) &&
				    !strcmp(key + strlen(prefix) + 1, sess))
					json_array_append(live, e);
			}
		}
		if ((int)json_array_size(live) < limit) {
			json_array_append_new(live, json_string(s));
			json_object_set(lock, "Holders", live);
			body = json_dumps(lock, JSON_COMPACT);
			if (put_bool(strf("/v1/kv/%s/.lock?cas=%lld", prefix, mi), body))
				break;
			continue; /* lost the race: read again */
		}
		/* full: wait for a change under the prefix, renewing */
		call("GET",
		     strf("/v1/kv/%s?recurse&index=%llu&wait=500ms", prefix,
			  (unsigned long long)r->index),
		     NULL);
		if (now_ms() - last_renew > 300) {
			call("PUT", strf("/v1/session/renew/%s", s), NULL);
			last_renew = now_ms();
		}
	}
	if (write(wfd, "h", 1) != 1)
		_exit(3);
	for (;;) {
		call("PUT", strf("/v1/session/renew/%s", s), NULL);
		usleep(300000);
	}
}

TEST(consul, recipe_semaphore_with_contenders_that_die, 40)
{
	struct broker_proc b;
	pid_t pids[3];
	int pfd[3][2], i;
	char ch;
	json_t *lock;
	long long mi;

	cstart(&b, NULL);
	for (i = 0; i < 3; i++) {
		if (pipe(pfd[i]))
			FAIL_AT("pipe");
		fflush(NULL);
		pids[i] = fork();
		if (pids[i] == 0) {
			close(pfd[i][0]);
			contender("service/db/lock", 2, pfd[i][1]);
			_exit(0);
		}
		close(pfd[i][1]);
		if (i < 2) { /* the first two get the two slots */
			if (read(pfd[i][0], &ch, 1) != 1)
				FAIL_AT("contender %d never held a slot", i);
		}
	}
	holders_in("service/db/lock", &lock, &mi);
	CHECK(lock && json_array_size(json_object_get(lock, "Holders")) == 2);
	CHECK_EQ(json_integer_value(json_object_get(lock, "Limit")), 2);
	/* the third waits; a holder dies */
	kill(pids[0], SIGKILL);
	waitpid(pids[0], NULL, 0);
	if (read(pfd[2][0], &ch, 1) != 1)
		FAIL_AT("the third contender never took the dead holder's slot");
	holders_in("service/db/lock", &lock, &mi);
	CHECK(lock && json_array_size(json_object_get(lock, "Holders")) == 2);
	for (i = 1; i < 3; i++) {
		kill(pids[i], SIGKILL);
		waitpid(pids[i], NULL, 0);
	}
	broker_stop_clean(&b);
}

/* ---- python3-consul ------------------------------------------------------- */

TEST(consul, python_consul_client_runs_a_lock_and_leader_election, 40)
{
	struct broker_proc b;
	char *cmd;
	int st;

	cstart(&b, NULL);
	cmd = strf("/usr/bin/python3 '%s' %d", consul_client_script(), port);
	st = system(cmd);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		FAIL_AT("%s failed (status %d)", cmd, st);
	broker_stop_clean(&b);
}

/* Consul's leader discovery, by python3-consul, of a leader that is
 * `shmlock lock` (the CLI's session, its -name and -value). */
TEST(consul, python_consul_discovers_a_cli_leader_by_name, 40)
{
	const char *flags[] = { "-name=web-leader", "-value=10.0.0.7:80" };
	struct broker_proc b;
	char *cmd;
	int st, wfd;
	pid_t pid;

	cstart(&b, NULL);
	pid = cli_hold(&b, flags, 2, "service/web/leader", &wfd);
	cmd = strf("/usr/bin/python3 '%s' %d discover service/web/leader web-leader 10.0.0.7:80",
		   consul_client_script(), port);
	st = system(cmd);
	close(wfd);
	waitpid(pid, NULL, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		FAIL_AT("%s failed (status %d)", cmd, st);
	broker_stop_clean(&b);
}

/* ---- broker restart ----------------------------------------------------- */

TEST(consul, broker_restart_forgets_sessions_and_releases_their_locks, 30)
{
	struct broker_proc b;
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 5000);
	local_session *ls;
	uint64_t tok, until, before;
	char *s;

	cstart(&b, NULL);
	s = session_create("{\"Name\":\"r\",\"LockDelay\":\"1s\"}");
	CHECK(put_bool(strf("/v1/kv/restart/k?acquire=%s", s), "v"));
	CHECK(put_bool("/v1/kv/restart/plain", "p"));
	before = call("GET", "/v1/kv/restart/plain", NULL)->index;
	/* a crash: the next broker ends the session as a dead client's */
	broker_signal_wait(&b, SIGKILL);
	broker_restart(&b);
	connect_may_fail = true;
	until = now_ms() + 5000;
	while (call("GET", "/v1/status/leader", NULL)->status != 200) {
		if (now_ms() > until)
			FAIL_AT("the Consul API is not back");
		usleep(10000);
	}
	connect_may_fail = false;
	CHECK(json_array_size(js(call("GET", "/v1/session/list", NULL))) == 0);
	CHECK_STATUS(call("GET", "/v1/kv/restart/plain", NULL), 404);
	/* the index never goes backwards: a blocking query from before the
	 * restart is answered at once */
	CHECK(call("GET",
		   strf("/v1/kv/restart/plain?index=%llu&wait=30s", (unsigned long long)before),
		   NULL)
		      ->index > before);
	/* the lock is free again (after its lock-delay) */
	ls = lsession(&b);
	CHECK_OK(local_lock(ls, "restart/k", &o, &tok));
	CHECK_OK(local_release(ls, "restart/k"));
	local_session_close(ls);
	/* a clean stop closes the sessions: their locks are free at once */
	s = session_create("{\"Name\":\"r2\",\"LockDelay\":\"60s\"}");
	CHECK(put_bool(strf("/v1/kv/restart/k?acquire=%s", s), "v"));
	broker_signal_wait(&b, SIGTERM);
	broker_restart(&b);
	ls = lsession(&b);
	o.timeout_ms = 0;
	CHECK_OK(local_lock(ls, "restart/k", &o, &tok));
	local_session_close(ls);
	broker_stop_clean(&b);
}

/* ---- socket activation ------------------------------------------------------- */

TEST(consul, socket_activated_fd_named_consul, 20)
{
	struct broker_proc b;
	uint64_t until;
	char *s;

	/* At info level: the log line that names the activated socket. */
	broker_spawn_activated(&b, "act", "consul", &port,
			       ARGS("--http-insecure-no-auth", "--log-level", "info"));
	connect_may_fail = true;
	until = now_ms() + 5000;
	while (call("GET", "/v1/status/leader", NULL)->status != 200) {
		if (now_ms() > until)
			FAIL_AT("the socket-activated Consul API does not answer");
		usleep(10000);
	}
	connect_may_fail = false;
	s = session_create("{\"Name\":\"activated\"}");
	CHECK(put_bool(strf("/v1/kv/act/k?acquire=%s", s), "v"));
	CHECK(!strcmp(kv_session("act/k"), s));
	CHECK(broker_log_has(&b, "Consul-compatible API on socket-activated"));
	broker_stop_clean(&b);
}

/* ---- the references' curl commands, step by step --------------------------- */

static char *id_of(const char *json)
{
	json_t *j = json_loads(json, 0, NULL);
	const char *id = json_string_value(json_object_get(j, "ID"));

	if (!id)
		FAIL_AT("no ID in %s", json);
	return strdup(id);
}

/* The first entry of a GET answer (a JSON array), or NULL. */
static json_t *first(const char *json)
{
	return json_array_get(json_loads(json, 0, NULL), 0);
}

/*
 * Reference 001 (sessions): a session with no health check is never
 * released by a failure detector, only by destroy; the holder re-acquires
 * to update the value (LockIndex unchanged); anyone holding the session ID
 * may release (the operator's intervention); lock-delay 0 disables the
 * delay; an invalid session fails the release.
 */
TEST(consul, reference_001_sessions_and_kv_integration, 20)
{
	struct broker_proc b;
	char *base, *s, *t;
	json_t *e;

	cstart(&b, NULL);
	base = strf("http://localhost:%d", port);
	s = id_of(curl_cmd("-X PUT -d '{\"Name\": \"no-checks\", \"Checks\": [], "
			   "\"LockDelay\": \"0s\"}' %s/v1/session/create",
			   base));
	t = id_of(curl_cmd("-X PUT -d '{\"Name\": \"other\"}' %s/v1/session/create", base));
	CHECK(!strcmp(curl_cmd("-X PUT -d one '%s/v1/kv/ref1/k?acquire=%s'", base, s), "true"));
	e = first(curl_cmd("%s/v1/kv/ref1/k", base));
	CHECK_EQ(jint(e, "LockIndex"), 1);
	/* the holder updates the contents without giving up the lock */
	CHECK(!strcmp(curl_cmd("-X PUT -d two '%s/v1/kv/ref1/k?acquire=%s'", base, s), "true"));
	e = first(curl_cmd("%s/v1/kv/ref1/k", base));
	CHECK_EQ(jint(e, "LockIndex"), 1);
	CHECK(!strcmp(json_string_value(json_object_get(e, "Value")), "dHdv"));
	CHECK(!strcmp(curl_cmd("-X PUT -d three '%s/v1/kv/ref1/k?acquire=%s'", base, t), "false"));
	/* released by whoever presents the session ID */
	CHECK(!strcmp(curl_cmd("-X PUT '%s/v1/kv/ref1/k?release=%s'", base, s), "true"));
	CHECK(!json_object_get(first(curl_cmd("%s/v1/kv/ref1/k", base)), "Session"));
	/* an invalid session fails */
	CHECK(strstr(curl_cmd("-X PUT '%s/v1/kv/ref1/k?release=%s'", base,
			      "11111111-2222-3333-4444-555555555555"),
		     "invalid session"));
	/* destroy invalidates; with lock-delay 0 the key is free at once, and
	 * the release bumped ModifyIndex */
	CHECK(!strcmp(curl_cmd("-X PUT -d four '%s/v1/kv/ref1/k?acquire=%s'", base, s), "true"));
	e = first(curl_cmd("%s/v1/kv/ref1/k", base));
	{
		long long mi = jint(e, "ModifyIndex");

		CHECK(!strcmp(curl_cmd("-X PUT %s/v1/session/destroy/%s", base, s), "true"));
		e = first(curl_cmd("%s/v1/kv/ref1/k", base));
		CHECK(jint(e, "ModifyIndex") > mi && !json_object_get(e, "Session"));
	}
	CHECK(!strcmp(curl_cmd("-X PUT -d five '%s/v1/kv/ref1/k?acquire=%s'", base, t), "true"));
	broker_stop_clean(&b);
}

/*
 * Reference 000 (semaphore), its curl commands in order, with three
 * contenders and a limit of 2: the third is refused a slot until a holder
 * leaves and is pruned.
 */
TEST(consul, reference_000_semaphore_step_by_step, 20)
{
	struct broker_proc b;
	char *base, *s[3], *body, *out;
	json_t *all, *e, *lock;
	long long mi = 0;
	size_t i;
	int k;

	cstart(&b, NULL);
	base = strf("http://localhost:%d", port);
	for (k = 0; k < 3; k++) {
		/* curl -X PUT -d '{"Name": "db-semaphore"}' .../v1/session/create */
		s[k] = id_of(curl_cmd("-X PUT -d '{\"Name\": \"db-semaphore\", \"LockDelay\": "
				      "\"0s\"}' %s/v1/session/create",
				      base));
		/* curl -X PUT -d <body> .../v1/kv/<prefix>/<session>?acquire=<session> */
		CHECK(!strcmp(curl_cmd("-X PUT -d 'contender %d' "
				       "'%s/v1/kv/service/db/lock/%s?acquire=%s'",
				       k, base, s[k], s[k]),
			      "true"));
	}
	/* curl -X PUT -d <body> .../v1/kv/<lock>?cas=0 */
	body = strf("{\"Limit\": 2, \"Holders\": [\"%s\"]}", s[0]);
	CHECK(!strcmp(curl_cmd("-X PUT -d '%s' '%s/v1/kv/service/db/lock/.lock?cas=0'", body, base),
		      "true"));
	/* a second contender's cas=0 fails: the .lock exists; it reads */
	CHECK(!strcmp(curl_cmd("-X PUT -d '%s' '%s/v1/kv/service/db/lock/.lock?cas=0'", body, base),
		      "false"));
	for (k = 1; k < 3; k++) {
		/* curl .../v1/kv/<prefix>?recurse */
		out = curl_cmd("'%s/v1/kv/service/db/lock?recurse'", base);
		all = json_loads(out, 0, NULL);
		CHECK(json_array_size(all) == 4);
		lock = NULL;
		json_array_foreach(all, i, e)
		{
			if (strstr(json_string_value(json_object_get(e, "Key")), ".lock")) {
				mi = jint(e, "ModifyIndex");
				lock = json_loads(
					curl_cmd("'%s/v1/kv/service/db/lock/.lock?raw'", base), 0,
					NULL);
			}
		}
		CHECK(lock);
		if ((int)json_array_size(json_object_get(lock, "Holders")) >= 2) {
			CHECK_EQ(k, 2); /* full: the third waits */
			break;
		}
		json_array_append_new(json_object_get(lock, "Holders"), json_string(s[k]));
		/* curl -X PUT -d <Updated Lock Body> .../v1/kv/<lock>?cas=<lock-modify-index> */
		body = json_dumps(lock, JSON_COMPACT);
		CHECK(!strcmp(curl_cmd("-X PUT -d '%s' '%s/v1/kv/service/db/lock/.lock?cas=%lld'",
				       body, base, mi + 1),
			      "false")); /* a stale index loses */
		CHECK(!strcmp(curl_cmd("-X PUT -d '%s' '%s/v1/kv/service/db/lock/.lock?cas=%lld'",
				       body, base, mi),
			      "true"));
	}
	/* holder 0 leaves: its session is destroyed, its contender key released */
	CHECK(!strcmp(curl_cmd("-X PUT %s/v1/session/destroy/%s", base, s[0]), "true"));
	all = json_loads(curl_cmd("'%s/v1/kv/service/db/lock?recurse'", base), 0, NULL);
	json_array_foreach(all, i, e)
	{
		const char *key = json_string_value(json_object_get(e, "Key"));

		if (strstr(key, s[0]))
			CHECK(!json_object_get(e, "Session")); /* pruned by the next one */
		if (strstr(key, ".lock"))
			mi = jint(e, "ModifyIndex");
	}
	body = strf("{\"Limit\": 2, \"Holders\": [\"%s\", \"%s\"]}", s[1], s[2]);
	CHECK(!strcmp(curl_cmd("-X PUT -d '%s' '%s/v1/kv/service/db/lock/.lock?cas=%lld'", body,
			       base, mi),
		      "true"));
	out = curl_cmd("'%s/v1/kv/service/db/lock/.lock?raw'", base);
	CHECK(strstr(out, s[2]) && !strstr(out, s[0]));
	broker_stop_clean(&b);
}

TEST(consul, a_blocking_query_whose_client_hangs_up_ends_at_once, 20)
{
	struct broker_proc b;
	uint64_t idx, until;
	char *out;

	cstart(&b, NULL);
	CHECK(put_bool("/v1/kv/hup/k", "v"));
	idx = call("GET", "/v1/kv/hup/k", NULL)->index;
	/* curl gives up after 1 s of a 60 s wait */
	out = strf("curl -s --max-time 1 'http://127.0.0.1:%d/v1/kv/hup/k?index=%llu&wait=60s' "
		   ">/dev/null; true",
		   port, (unsigned long long)idx);
	CHECK_EQ(system(out), 0);
	until = now_ms() + 5000;
	while (stat_of("blocking_queries") != 0 || stat_of("watched_keys") != 0) {
		if (now_ms() > until)
			FAIL_AT("the abandoned blocking query is still suspended");
		usleep(10000);
	}
	broker_stop_clean(&b);
}
