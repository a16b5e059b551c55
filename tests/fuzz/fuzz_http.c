// SPDX-License-Identifier: MIT
/*
 * libFuzzer target: the HTTP API's request handling (paths, headers,
 * bodies), end to end through libmicrohttpd. The broker runs in process on
 * a small private segment (anonymous shared memory: nothing is left behind)
 * with its HTTP server on a Unix socket in a temporary directory, driven by
 * a bounded copy of the event loop of broker/core/loop.c.
 *
 * An input is one byte of configuration, then raw HTTP request streams
 * separated by CONN_SEP, each sent on a connection of its own (at most
 * MAX_CONNS). The streams are sent one after the other, each handled until
 * the loop is quiet (answered, or suspended in a wait), so that a later one
 * can grant what an earlier one waits for. Then every client shuts its
 * write side down (a suspended wait sees the hang-up), reads until EOF and
 * closes. Placeholders are replaced in place (same length, so Content-Length
 * stays right): PH_SESSION_A and PH_SESSION_B by the ids of two HTTP
 * sessions opened before each input, PH_TOKEN by the last token answered to
 * an earlier stream of the input.
 *
 * The configuration byte, XOR '@' (so seeds start with '@': none), has bits
 * 0x01 require a bearer token (FUZZ_TOKEN), 0x02 CORS for two origins,
 * 0x80 CORS for any, 0x04 a rate limit, 0x08 a per-address session cap,
 * 0x10 draining (as after SIGTERM), 0x20 time passes: the waits' deadlines
 * fire before the clients hang up, 0x40 the clients of all streams but the
 * last read nothing (answers fill their sockets) and go away as soon as the
 * last stream is sent: their hang-ups race with its requests.
 *
 * Checked (abort on failure): every answer is HTTP/1.x; an answer in JSON
 * has a documented status, is an object, an error one {"error": STRING,
 * "detail": STRING}, a token one 32 lowercase hex digits; any other answer is an
 * empty 204, /metrics text, or one of libmicrohttpd's own refusals. When
 * the loop goes quiet, libmicrohttpd has nothing left to do (else a client
 * would wait for an unrelated event or the 250 ms tick). After each input:
 * no connection or wait is left, the segment passes the test suite's
 * invariants, and closing every HTTP session (as at shutdown, which starts
 * the next input afresh) leaves no session and no node in the segment.
 *
 * FUZZ_HTTP_VERBOSE=1 prints every answer and the broker's debug log (for
 * writing seeds: build/fuzz/fuzz_http tests/fuzz/corpus/http/FILE).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <syslog.h>
#include <unistd.h>

#include <sanitizer/common_interface_defs.h>

#include "clock.h"
#include "faces/http/http_int.h"
#include "net/http_engine.h"
#include "invariants.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PH_SESSION_A "SESSIONSESSIONSESSIONSESSIONSESS"
#define PH_SESSION_B "SESSION2SESSION2SESSION2SESSION2"
#define PH_TOKEN "TOKENTOKENTOKENTOKENTOKENTOKENTO" /* 32: a token's length */
#define CONN_SEP "\n--CONN--\n"
#define FUZZ_TOKEN "fuzz-token"
#define MAX_CONNS 4
#define OUT_MAX (1u << 20) /* bytes of answers kept per connection */
#define QUIET_ROUNDS 3	   /* rounds without progress: the loop is quiet */
#define MAX_ROUNDS 400	   /* per phase: the harness never hangs */

/* The first byte of an input, XOR CFG_BASE (so '@' is none of them). */
enum {
	CFG_BASE = '@',
	CFG_AUTH = 0x01,     /* 'A' */
	CFG_CORS = 0x02,     /* 'B' */
	CFG_RATE = 0x04,     /* 'D' */
	CFG_PER_IP = 0x08,   /* 'H' */
	CFG_DRAIN = 0x10,    /* 'P' */
	CFG_EXPIRE = 0x20,   /* '`' */
	CFG_ABORT = 0x40,    /* '\0' */
	CFG_CORS_ANY = 0x80, /* '\xc0' */
};

static const struct seg_caps caps = {
	.max_keys = 32, .max_sessions = 12, .max_waiters = 32, .max_holds = 32, .max_value = 16
};

static struct broker B;
static char dir[64];
static char session_ids[2][LOCAL_SESSION_ID_LEN + 1];
static uint32_t last_bell;
static bool verbose; /* FUZZ_HTTP_VERBOSE set */

struct conn {
	int fd;
	bool eof, full;
	bool deaf; /* reads nothing (CFG_ABORT) */
	char *out;
	size_t len;   /* kept in out (at most OUT_MAX) */
	size_t total; /* received */
};

/* A crash leaves nothing behind in /tmp either. */
static void remove_files(void)
{
	unlink(B.opts.http.unix_path);
	rmdir(dir);
}

static void fail(const char *what, const char *detail, size_t n)
{
	fprintf(stderr, "fuzz_http: %s: %.*s\n", what, (int)(n > 600 ? 600 : n),
		detail ? detail : "");
	remove_files();
	abort();
}

/* ---- the broker, in process ------------------------------------------------ */

/*
 * The broker frees a closed session's record after an RCU grace period,
 * through liburcu's call_rcu thread, which batches callbacks (it sleeps
 * 10 ms between rounds). Those frees would land in later inputs, and
 * libFuzzer, seeing allocations and frees unbalanced, would run a leak
 * check after nearly every input. The fuzz build links the broker with
 * -Wl,--wrap=urcu_memb_call_rcu (its own references only, not liburcu's):
 * wait for the grace period here and free at once. Never called inside a
 * read-side critical section (see forget() in broker/core/sessions.c).
 */
void __wrap_urcu_memb_call_rcu(struct rcu_head *head, void (*func)(struct rcu_head *head));

void __wrap_urcu_memb_call_rcu(struct rcu_head *head, void (*func)(struct rcu_head *head))
{
	urcu_memb_synchronize_rcu();
	func(head);
}

static void teardown(void)
{
	http_stop(&B);
	if (B.by_id)
		sessions_fini(&B);
	timer_free(&B.timers);
	loop_watches_free(&B);
	if (B.epfd >= 0)
		close(B.epfd);
	if (B.mem)
		munmap(B.mem, B.mem_size);
	rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	size_t size = seg_size_for(&caps);
	void *mem;

	(void)argc;
	(void)argv;
	signal(SIGPIPE, SIG_IGN);
	blog_set_level(LOG_ERR); /* sessions opened and closed: not news here */
	memset(&B, 0, sizeof(B));
	B.lease_efd = -1;
	B.shm_fd = B.lock_fd = B.listen_fd = B.epfd = B.timerfd = B.sigfd = -1;
	B.opts.caps = caps;
	http_opts_default(&B.opts.http);
	B.opts.http.max_sessions = 6; /* A, B and 4 opened by an input */
	snprintf(dir, sizeof(dir), "/tmp/fuzz_http.XXXXXX");
	if (!mkdtemp(dir))
		abort();
	snprintf(B.opts.http.unix_path, sizeof(B.opts.http.unix_path), "%s/http.sock", dir);
	mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED || seg_format(mem, size, &caps) || seg_bind(&B.seg, mem, size))
		abort();
	B.mem = mem;
	B.mem_size = size;
	urcu_memb_register_thread();
	B.started_ns = mono_ns();
	atomic_store(&B.seg.hdr->broker_pid, (uint32_t)getpid());
	B.epfd = epoll_create1(EPOLL_CLOEXEC);
	/* Registered as main.c does, so that the core's hooks reach it (a
	 * session's end: the HTTP sessions settle() closes are let go). */
	if (B.epfd < 0 || sessions_init(&B) || face_register(&B, &http_face) || http_start(&B) ||
	    !B.http)
		abort();
	B.served = true;
	__sanitizer_set_death_callback(remove_files);
	verbose = getenv("FUZZ_HTTP_VERBOSE") != NULL;
	if (verbose)
		blog_set_level(LOG_DEBUG);
	atexit(teardown);
	return 0;
}

/* Timers due now, as handle_timers() runs them. */
static int run_due_timers(void)
{
	uint64_t now = mono_ns();
	struct timer t;
	int n = 0;

	while (timer_peek(&B.timers, &t) && t.at_ns <= now) {
		timer_pop(&B.timers);
		n++;
		if (t.owner)
			faces_timer(&B, t.owner, t.kind, t.a, t.b);
		else if (t.kind == TIMER_TTL)
			session_ttl_due(&B, t.a, t.b);
		else if (t.kind == TIMER_DELAY)
			key_delay_due(&B, t.a);
		else if (t.kind == TIMER_SWEEP)
			session_sweep_due(&B, t.a, t.b);
	}
	return n;
}

/* Time passes for the HTTP face's timers of @kind: they fire now. Others stay. */
static size_t fire_timers_of(uint32_t kind)
{
	struct timer *v = NULL, t;
	size_t n = 0, i, fired = 0;

	while (timer_peek(&B.timers, &t)) {
		struct timer *p = realloc(v, (n + 1) * sizeof(*v));

		if (!p)
			abort();
		v = p;
		v[n++] = t;
		timer_pop(&B.timers);
	}
	for (i = 0; i < n; i++)
		if (v[i].owner == &http_face && v[i].kind == kind)
			http_timer(&B, v[i].kind, v[i].a, v[i].b), fired++;
		else if (timer_add(&B.timers, v[i].at_ns, v[i].owner, v[i].kind, v[i].a, v[i].b))
			abort();
	free(v);
	return fired;
}

/* Time passes: every wait's deadline fires now. */
static void fire_wait_deadlines(void)
{
	fire_timers_of(TIMER_HTTP_WAIT);
}

/* One turn of loop_run(): events, due timers, and the doorbell thread's
 * part (a grant to an HTTP waiter rings the segment's doorbell). Returns
 * how much happened. */
static int loop_once(void)
{
	struct epoll_event ev[64];
	int n = epoll_wait(B.epfd, ev, 64, 0), i, done = 0;
	uint32_t bell;

	for (i = 0; i < n; i++)
		if (loop_dispatch(&B, &ev[i], NULL))
			done++;
	done += run_due_timers();
	bell = atomic_load(&B.seg.hdr->broker_doorbell);
	if (bell != last_bell) {
		last_bell = bell;
		http_doorbell(&B);
		done++;
	}
	/* The end of the loop's turn (loop.c): daemons asked to run soon
	 * (a resumed connection: a long poll answered, a 401 let go). */
	if (http_face.deferred(&B, true))
		done++;
	return done;
}

/* ---- clients --------------------------------------------------------------- */

static int client_connect(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", B.opts.http.unix_path);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
		abort(); /* a Unix socket with room in its backlog connects at once */
	return fd;
}

/* Read what has arrived; returns the bytes read. */
static size_t client_read(struct conn *c)
{
	char buf[65536];
	size_t got = 0;
	ssize_t n;

	while (c->fd >= 0 && !c->eof && !c->deaf) {
		n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n <= 0) {
			c->eof = true;
			break;
		}
		got += (size_t)n;
		c->total += (size_t)n;
		if (c->len + (size_t)n > OUT_MAX)
			c->full = true; /* the answers kept stay a prefix */
		if (!c->full) {
			char *p = realloc(c->out, c->len + (size_t)n);

			if (!p)
				abort();
			c->out = p;
			memcpy(c->out + c->len, buf, (size_t)n);
			c->len += (size_t)n;
		}
	}
	return got;
}

/*
 * The loop has gone quiet: no event, no timer due. libmicrohttpd must have
 * nothing to do meanwhile: not say "run me now" (MHD_get_timeout() 0: work
 * its edge-triggered epoll will not signal again), and not answer anything
 * if run once more (a resumed connection that nothing woke it for). Else a
 * client waits for an unrelated event or the periodic tick.
 */
static void check_idle(struct conn *cs, int nc)
{
	MHD_UNSIGNED_LONG_LONG ms;
	size_t before = 0, after = 0;
	uint32_t conns = B.http->connections;
	unsigned d;
	int i;

	for (d = 0; d < B.http->nd; d++)
		if (MHD_get_timeout(B.http->d[d], &ms) == MHD_YES && ms == 0)
			fail("the loop is idle while libmicrohttpd has work ready", NULL, 0);
	for (i = 0; i < nc; i++)
		before += cs[i].total + cs[i].eof;
	for (d = 0; d < B.http->nd; d++)
		MHD_run(B.http->d[d]);
	for (i = 0; i < nc; i++) {
		client_read(&cs[i]);
		after += cs[i].total + cs[i].eof;
	}
	if (after != before || B.http->connections != conns)
		fail("the loop is idle while libmicrohttpd has something to answer", NULL, 0);
}

/* Run the loop until it is quiet (or every client has its EOF). */
static void drive(struct conn *cs, int nc, bool until_eof)
{
	int rounds, quiet = 0, i;

	for (rounds = 0; rounds < MAX_ROUNDS && quiet < QUIET_ROUNDS; rounds++) {
		size_t done = (size_t)loop_once();
		bool all_eof = true;

		for (i = 0; i < nc; i++) {
			done += client_read(&cs[i]);
			all_eof &= cs[i].eof || cs[i].fd < 0;
		}
		if (until_eof && all_eof)
			return;
		quiet = done ? 0 : quiet + 1;
	}
	if (quiet == QUIET_ROUNDS)
		check_idle(cs, nc);
}

/* drive(), and each time the loop is quiet with 401s held back (pipelined
 * ones come one after the other), let their delay pass. */
static void drive_delays(struct conn *cs, int nc, bool until_eof)
{
	int rounds = 0;

	do
		drive(cs, nc, until_eof);
	while (fire_timers_of(TIMER_HTTP_DELAY) && ++rounds < MAX_ROUNDS);
}

static void client_send(struct conn *cs, int nc, struct conn *c, const char *p, size_t n)
{
	int stalls = 0;

	while (n && stalls < MAX_ROUNDS) {
		ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (w > 0) {
			p += w;
			n -= (size_t)w;
			stalls = 0;
		} else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
			loop_once(); /* the server reads, and we read its answers */
			for (int i = 0; i < nc; i++)
				client_read(&cs[i]);
			stalls++;
		} else {
			return; /* the server closed the connection */
		}
	}
}

/* ---- placeholders ---------------------------------------------------------- */

static void replace_all(char *s, size_t n, const char *ph, const char *with)
{
	size_t len = strlen(ph);
	char *p = s;

	while ((p = memmem(p, n - (size_t)(p - s), ph, len))) {
		memcpy(p, with, len);
		p += len;
	}
}

/* The last "token":"HEX" in @c's answers, into @tok (32 hex digits). */
static void last_token(const struct conn *c, char tok[33])
{
	static const char tag[] = "\"token\":\"";
	const char *p = c->out, *end, *q;

	if (!c->len)
		return;
	end = c->out + c->len;
	while ((q = memmem(p, (size_t)(end - p), tag, sizeof(tag) - 1))) {
		q += sizeof(tag) - 1;
		if (end - q >= 32)
			memcpy(tok, q, 32);
		p = q;
	}
}

/* ---- checking the answers -------------------------------------------------- */

static bool in(int v, const int *set, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (set[i] == v)
			return true;
	return false;
}

/* The statuses docs/http-api.md lists (and http_stats.c counts). */
static const int documented[] = { 200, 204, 400, 401, 403, 404, 405,
				  408, 409, 410, 421, 429, 500, 503 };
/* What libmicrohttpd answers by itself, before any handler of ours runs:
 * malformed or oversized requests, unsupported versions and encodings. */
static const int mhd_own[] = { 400, 413, 414, 417, 431, 500, 501, 505 };

/* Header @name's value in [h, end), or NULL; its length in *n. */
static const char *header(const char *h, const char *end, const char *name, size_t *n)
{
	size_t len = strlen(name);

	while (h < end) {
		const char *eol = memmem(h, (size_t)(end - h), "\r\n", 2);

		if (!eol)
			eol = end;
		if ((size_t)(eol - h) > len && h[len] == ':' && !strncasecmp(h, name, len)) {
			h += len + 1;
			while (h < eol && *h == ' ')
				h++;
			*n = (size_t)(eol - h);
			return h;
		}
		h = eol + 2;
	}
	return NULL;
}

static void check_json(int status, const char *body, size_t n)
{
	json_error_t e;
	json_t *j = json_loadb(body, n, 0, &e), *v;

	if (!json_is_object(j))
		fail("an answer in JSON that is not an object", body, n);
	if (status == 503 && json_object_size(j) == 1 &&
	    json_is_string(json_object_get(j, "status"))) {
		/* /ready while draining: dflockd's {"status":"draining"} */
	} else if (status >= 300) {
		if (!json_is_string(json_object_get(j, "error")) ||
		    !json_is_string(json_object_get(j, "detail")))
			fail("an error answer without error and detail strings", body, n);
	} else if ((v = json_object_get(j, "token"))) {
		const char *t = json_string_value(v);

		if (!t || strlen(t) != 32 || strspn(t, "0123456789abcdef") != 32)
			fail("a token that is not 32 lowercase hex digits", body, n);
	}
	json_decref(j);
}

/* @body is NULL for the answer to a HEAD request (its body is not sent). */
static void check_answer(int status, const char *head, const char *hend, const char *body, size_t n)
{
	size_t tn = 0;
	const char *type = header(head, hend, "Content-Type", &tn);

	if (type && tn >= 16 && !strncmp(type, "application/json", 16)) {
		if (!in(status, documented, sizeof(documented) / sizeof(documented[0])))
			fail("a JSON answer with an undocumented status", head,
			     (size_t)(hend - head));
		/* Not the OpenAPI document (72 KB, a constant, checked by the
		 * unit tests): parsing it under ASan would take most of the time. */
		if (body && n < 16384)
			check_json(status, body, n);
		return;
	}
	if (!body)
		body = "", n = 0;
	if (status == 100 || (status == 204 && !n))
		return;
	if (status == 200 && type && tn >= 10 && !strncmp(type, "text/plain", 10))
		return; /* /metrics */
	if (status == 200 && type && tn >= 5 && !strncmp(type, "text/", 5))
		return; /* the web view's page, script and style (ui_server.c) */
	if (in(status, mhd_own, sizeof(mhd_own) / sizeof(mhd_own[0])) && !(n && body[0] == '{'))
		return;
	fail("an answer neither JSON nor libmicrohttpd's own", head,
	     (size_t)(hend - head) + (n > 200 ? 200 : n));
}

/* Every complete answer in @c's stream. A cut one at the end is left: the
 * bound on rounds may have stopped the client before it came. */
static void check_stream(const struct conn *c)
{
	const char *p = c->out, *end;

	if (!c->len)
		return;
	end = c->out + c->len;

	while (p < end) {
		const char *hend, *body, *v;
		size_t n = 0, vn;
		int status;

		if (end - p < 13)
			return;
		if (strncmp(p, "HTTP/1.1 ", 9) && strncmp(p, "HTTP/1.0 ", 9))
			fail("an answer that is not HTTP/1.x", p, (size_t)(end - p));
		if (p[9] < '1' || p[9] > '5' || p[10] < '0' || p[10] > '9' || p[11] < '0' ||
		    p[11] > '9' || p[12] != ' ')
			fail("a malformed status line", p, (size_t)(end - p));
		status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
		hend = memmem(p, (size_t)(end - p), "\r\n\r\n", 4);
		if (!hend)
			return;
		body = hend + 4;
		if (header(p, hend + 2, "Transfer-Encoding", &vn))
			return; /* none of ours; not followed further */
		v = header(p, hend + 2, "Content-Length", &vn);
		if (v)
			n = strtoul(v, NULL, 10);
		if (status / 100 == 1 || status == 204 || status == 304)
			n = 0;
		/* A HEAD request: the length of a body that is not sent. */
		if (n && end - body >= 7 && !strncmp(body, "HTTP/1.", 7)) {
			check_answer(status, p, hend + 2, NULL, 0);
			p = body;
			continue;
		}
		if ((size_t)(end - body) < n)
			return;
		check_answer(status, p, hend + 2, body, n);
		p = body + n;
	}
}

/* ---- one input ------------------------------------------------------------- */

/* Open an HTTP session as POST /v1/sessions does; its id into @id. */
static void open_session(char id[LOCAL_SESSION_ID_LEN + 1])
{
	struct hreq r;
	json_t *j;
	const char *s;

	memset(&r, 0, sizeof(r));
	r.h = B.http;
	r.waiter = -1;
	snprintf(r.ip, sizeof(r.ip), "local");
	http_sessions_create(&r);
	j = r.reply ? json_loads(r.reply, 0, NULL) : NULL;
	s = json_string_value(json_object_get(j, "session_id"));
	if (r.status != 200 || !s || strlen(s) != LOCAL_SESSION_ID_LEN)
		fail("cannot open a session", r.reply, r.reply ? strlen(r.reply) : 0);
	memcpy(id, s, LOCAL_SESSION_ID_LEN + 1);
	json_decref(j);
	free(r.reply);
}

static void configure(uint8_t cfg)
{
	struct http_opts *o = &B.opts.http;

	snprintf(o->auth_token, sizeof(o->auth_token), "%s", cfg & CFG_AUTH ? FUZZ_TOKEN : "");
	snprintf(o->cors_origins, sizeof(o->cors_origins), "%s",
		 cfg & CFG_CORS_ANY ? "*"
		 : cfg & CFG_CORS   ? "https://a.example, http://b.example:8080"
				    : "");
	o->rate_per_ip = cfg & CFG_RATE ? 2 : 0;
	o->rate_burst = cfg & CFG_RATE ? 5 : 0;
	o->max_sessions_per_ip = cfg & CFG_PER_IP ? 3 : 0;
	/* A fresh start: the records of addresses (buckets, session counts),
	 * then the two sessions the placeholders name. */
	net_rate_free(&B.http->rates);
	B.http->rates.rate = o->rate_per_ip;
	B.http->rates.burst = o->rate_burst;
	open_session(session_ids[0]);
	open_session(session_ids[1]);
	if (cfg & CFG_DRAIN)
		http_draining(&B);
}

/* After an input: nothing in flight, a consistent segment, and closing
 * every session leaves it empty. */
static void settle(void)
{
	struct http *h = B.http;
	local_session *obs = h->observer;

	if (h->connections || h->active_waiters) {
		fprintf(stderr,
			"fuzz_http: %u connection(s), %u wait(s) left after the clients "
			"closed\n",
			h->connections, h->active_waiters);
		abort();
	}
	if (segment_violations(obs))
		fail("segment invariants broken", NULL, 0);
	http_sessions_close_all(h);
	loop_once();
	fire_wait_deadlines(); /* of waits long over: only drops them */
	if (live_sessions(obs) || used_nodes(obs) || http_engine_sessions_count(h)) {
		fprintf(stderr,
			"fuzz_http: %u session(s), %u node(s), %u HTTP session(s) left "
			"after closing them all\n",
			live_sessions(obs), used_nodes(obs), http_engine_sessions_count(h));
		abort();
	}
	h->draining = false; /* configure() starts each input afresh */
}

/* The client goes away without reading what is left. */
static void client_abort(struct conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct conn cs[MAX_CONNS];
	char token[33] = "00000000000000000000000000000000", *buf, *stream[MAX_CONNS], *p, *end;
	size_t len[MAX_CONNS];
	uint8_t cfg;
	int nc = 0, i, k;

	if (!size)
		return 0;
	cfg = data[0] ^ CFG_BASE;
	configure(cfg);
	buf = malloc(size);
	if (!buf)
		abort();
	memcpy(buf, data + 1, size - 1);
	for (p = buf, end = buf + size - 1;;) {
		char *sep = nc + 1 < MAX_CONNS
				    ? memmem(p, (size_t)(end - p), CONN_SEP, sizeof(CONN_SEP) - 1)
				    : NULL;

		stream[nc] = p;
		len[nc++] = (size_t)((sep ? sep : end) - p);
		if (!sep)
			break;
		p = sep + sizeof(CONN_SEP) - 1;
	}
	memset(cs, 0, sizeof(cs));
	for (k = 0; k < nc; k++) {
		cs[k].fd = client_connect();
		cs[k].deaf = (cfg & CFG_ABORT) && k < nc - 1;
		replace_all(stream[k], len[k], PH_SESSION_A, session_ids[0]);
		replace_all(stream[k], len[k], PH_SESSION_B, session_ids[1]);
		replace_all(stream[k], len[k], PH_TOKEN, token);
		client_send(cs, k + 1, &cs[k], stream[k], len[k]);
		if ((cfg & CFG_ABORT) && k == nc - 1)
			for (i = 0; i < k; i++) /* hang-ups and the last requests together */
				client_abort(&cs[i]);
		drive_delays(cs, k + 1, false);
		for (i = 0; i <= k; i++)
			last_token(&cs[i], token);
	}
	if (cfg & CFG_EXPIRE) {
		fire_wait_deadlines();
		drive_delays(cs, nc, false);
	}
	for (i = 0; i < nc; i++)
		if (cs[i].fd >= 0)
			shutdown(cs[i].fd, SHUT_WR);
	drive_delays(cs, nc, true);
	for (i = 0; i < nc; i++)
		client_abort(&cs[i]);
	drive_delays(cs, nc, false);
	for (i = 0; i < nc; i++) {
		if (verbose)
			fprintf(stderr, "---- connection %d: %zu bytes%s\n%.*s\n", i, cs[i].len,
				cs[i].eof ? ", EOF" : "", (int)cs[i].len,
				cs[i].out ? cs[i].out : "");
		check_stream(&cs[i]);
		free(cs[i].out);
	}
	free(buf);
	settle();
	return 0;
}
