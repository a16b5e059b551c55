// SPDX-License-Identifier: MIT
/*
 * The live web view (broker/ui_*.c, ui/, docs/web-view.md) in a real
 * browser: Debian's headless Chromium loads /ui/ from a real shmlockd and
 * its DOM is dumped (--dump-dom) and photographed (--screenshot, under
 * $(O)/ui-shots/) after the page's script has rendered the broker's
 * answers. The states come from liblocal: a key taken and queued on; the
 * same key handed over while the page is open and long-polling (the page
 * is never reloaded: the DOM it dumps at the end is what the long poll
 * brought); a holder SIGKILLed inside its hold, whose lock-delay countdown
 * the page shows with who died. The data API itself (token, paging over
 * 10 000 keys, search, sort, a long poll ended by a lock-free acquire) is
 * driven with libcurl.
 *
 * Every Chromium runs with its own profile in the broker's directory, dies
 * with the test (PR_SET_PDEATHSIG) and is waited for with a deadline.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker_fixture.h"
#include "harness.h"
#include "net_fixture.h"

#define UI_TOKEN "ui-test-token"

struct ui_env {
	struct broker_proc b;
	int port;
	char listen[32];
};

/* ---- HTTP ---------------------------------------------------------------- */

/* GET @path: the status; the body in *@body (malloc), the type in @type. */
static long get(const struct ui_env *e, const char *path, bool auth, char **body, char *type,
		size_t tsize)
{
	const char *const headers[] = { auth ? "Authorization: Bearer " UI_TOKEN : NULL, NULL };
	char url[1024];
	struct http_reply r;
	long status;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", e->port, path);
	http_do(&(struct http_req){ .url = url, .headers = headers, .timeout_ms = 40000 }, &r);
	if (type && !http_reply_header(&r, "Content-Type", type, tsize))
		type[0] = '\0';
	status = r.status;
	if (body) {
		*body = r.body;
		r.body = NULL;
	}
	http_reply_free(&r);
	return status;
}

static json_t *state(const struct ui_env *e, const char *query)
{
	char path[512], *body;
	json_error_t err;
	json_t *j;

	snprintf(path, sizeof(path), "/ui/api/state%s", query);
	if (get(e, path, true, &body, NULL, 0) != 200)
		FAIL_AT("GET %s: not 200: %s", path, body);
	j = json_loads(body, 0, &err);
	if (!j)
		FAIL_AT("GET %s: not JSON: %s", path, err.text);
	free(body);
	return j;
}

static long views_waiting(const struct ui_env *e)
{
	json_t *j = state(e, "?limit=1");
	long n = (long)json_integer_value(json_object_get(j, "views_waiting"));

	json_decref(j);
	return n;
}

/*
 * A view's long poll from @q (state?...&since=STAMP), as the page does it:
 * an answer that lacks @want came from some other change (an idle key
 * reclaimed, say), so wait on from that answer's stamp. Exit status 0 once
 * an answer has @want (NULL: once *@stop is set and an answer comes), 1 on
 * an error. For forked children.
 */
static void poll_view(const struct ui_env *e, const char *q, const char *want,
		      const _Atomic int *stop)
{
	char path[512];
	int tries;

	snprintf(path, sizeof(path), "%s", q);
	for (tries = 0; tries < 100; tries++) {
		char *b = NULL, *cut;
		long st = get(e, path, true, &b, NULL, 0);
		json_t *j;

		if (stop && atomic_load(stop))
			_exit(st == 200 ? 0 : 1);
		if (st != 200 || !b)
			_exit(1);
		if (want && strstr(b, want))
			_exit(0);
		j = json_loads(b, 0, NULL);
		free(b);
		if (!j || !json_string_value(json_object_get(j, "stamp")))
			_exit(1);
		cut = strstr(path, "since=");
		if (!cut)
			_exit(1);
		snprintf(cut, sizeof(path) - (size_t)(cut - path), "since=%s",
			 json_string_value(json_object_get(j, "stamp")));
		json_decref(j);
	}
	_exit(1);
}

static void ui_start(struct ui_env *e, const char *const *more)
{
	/* The token alone: root, the test's user, would need none. */
	const char *args[16] = { "--http-listen", e->listen, "--auth-token", UI_TOKEN,
				 "--token-only" };
	int i = 5;

	e->port = free_port();
	snprintf(e->listen, sizeof(e->listen), "127.0.0.1:%d", e->port);
	while (more && *more && i < 15)
		args[i++] = *more++;
	args[i] = NULL;
	broker_start(&e->b, args);
	CHECK(WAIT_FOR(get(e, "/health", false, NULL, NULL, 0) == 200, 5000));
}

/* ---- Chromium, over the DevTools protocol (tests/ui/cdp.py) ----------------- */

static const char *chromium_bin(void)
{
	const char *c = getenv("SHMLOCK_CHROMIUM");

	c = c && *c ? c : "/usr/bin/chromium";
	if (access(c, X_OK))
		FAIL_AT("%s not found: the web view's tests need Debian's chromium "
			"(scripts/install-deps.sh installs it; or set SHMLOCK_CHROMIUM)",
			c);
	return c;
}

/* $(O)/ui-shots and the source tree, from $(O)/tests/shmlock-tests. */
static void exe_rel(char *out, size_t size, int up, const char *rest)
{
	char exe[PATH_MAX], *d;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	CHECK(n > 0);
	exe[n] = '\0';
	d = exe;
	while (up--)
		d = dirname(d);
	n = snprintf(out, size, "%s/%s", d, rest);
	CHECK(n > 0 && (size_t)n < size); /* a truncated path would name another file */
}

struct cdp {
	pid_t pid;
	FILE *to, *from;
	int from_fd;
	char shots[PATH_MAX];
};

static void cdp_start(struct cdp *c, const struct ui_env *e)
{
	const char *bin = chromium_bin(), *env = getenv("SHMLOCK_UI_CDP");
	char script[PATH_MAX], prof[160];
	int in[2], out[2];
	pid_t parent = getpid();

	if (env && *env) {
		snprintf(script, sizeof(script), "%s", env);
	} else { /* the source tree above $(O), however deep O is */
		int up;

		for (up = 2; up < 8; up++) {
			exe_rel(script, sizeof(script), up, "tests/ui/cdp.py");
			if (!access(script, R_OK))
				break;
		}
		if (up == 8)
			FAIL_AT("tests/ui/cdp.py not found above the test binary; set "
				"SHMLOCK_UI_CDP");
	}
	exe_rel(c->shots, sizeof(c->shots), 2, "ui-shots");
	mkdir(c->shots, 0755);
	snprintf(prof, sizeof(prof), "%s/chrome", e->b.dir);
	CHECK(!pipe2(in, O_CLOEXEC) && !pipe2(out, O_CLOEXEC));
	c->pid = fork();
	CHECK(c->pid >= 0);
	if (!c->pid) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		dup2(in[0], 0);
		dup2(out[1], 1);
		setenv("HOME", e->b.dir, 1);
		execl("/usr/bin/python3", "python3", script, bin, prof, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	c->to = fdopen(in[1], "w");
	c->from_fd = out[0];
	c->from = fdopen(out[0], "r");
	CHECK(c->to && c->from);
}

/* Send one command; its one-line answer (static), or fail after @ms. */
static const char *cdp(struct cdp *c, int ms, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static const char *cdp(struct cdp *c, int ms, const char *fmt, ...)
{
	static char line[4096];
	struct pollfd p = { .fd = c->from_fd, .events = POLLIN };
	va_list ap;

	va_start(ap, fmt);
	vfprintf(c->to, fmt, ap);
	va_end(ap);
	fputc('\n', c->to);
	fflush(c->to);
	if (poll(&p, 1, ms) != 1 || !fgets(line, sizeof(line), c->from))
		FAIL_AT("the browser driver (tests/ui/cdp.py) did not answer '%.60s' within %d ms",
			fmt, ms);
	line[strcspn(line, "\n")] = '\0';
	return line;
}

/* Wait (in the page) until the JS expression @expr is true, or fail. */
#define PAGE_WAIT(c, ms, expr)                                                      \
	do {                                                                        \
		const char *r_ = cdp((c), (ms) + 5000, "wait %d %s", (ms), (expr)); \
		if (strcmp(r_, "ok"))                                               \
			FAIL_AT("the page never showed %s (%s)", (expr), r_);       \
	} while (0)

static void cdp_shot(struct cdp *c, const char *name)
{
	CHECK(!strcmp(cdp(c, 15000, "shot %s/%s.png", c->shots, name), "ok"));
	CHECK(!strcmp(cdp(c, 15000, "dom %s/%s.html", c->shots, name), "ok"));
}

static void cdp_open(struct cdp *c, const struct ui_env *e)
{
	cdp_start(c, e);
	/* Chromium's start-up: one to a few seconds on a loaded machine. */
	CHECK(!strcmp(cdp(c, 30000, "goto http://127.0.0.1:%d/ui/#token=" UI_TOKEN, e->port),
		      "ok"));
	PAGE_WAIT(c, 10000, "!!document.querySelector('.status.live')");
}

static void cdp_quit(struct cdp *c)
{
	int st;

	fputs("quit\n", c->to);
	fflush(c->to);
	if (!WAIT_FOR(waitpid(c->pid, &st, WNOHANG) == c->pid, 10000))
		kill(c->pid, SIGKILL);
	fclose(c->to);
	fclose(c->from);
}

/* A JS expression: the <tr> of key @k. */
#define ROW(k) "document.querySelector('tr[data-key=\"" k "\"]')"

/* ---- the states ------------------------------------------------------------ */

static LOCAL_OPTS(local_acquire_opts, wait20, .timeout_ms = 20000);

/* A child that queues on @key as session @name, says 'g' on @ready when it
 * is granted, and releases when the test closes go[1]. */
static pid_t queue_child(const struct ui_env *e, const char *name, const char *key, int ready,
			 const int go[2])
{
	pid_t pid = fork();

	CHECK(pid >= 0);
	if (!pid) {
		local_session *s = open_session(&e->b, name, 0, 0);
		uint64_t tok;
		char x;

		if (local_lock(s, key, &wait20, &tok))
			_exit(2);
		if (write(ready, "g", 1) != 1)
			_exit(3);
		close(go[1]); /* EOF when the test closes its end */
		(void)!read(go[0], &x, 1);
		local_release(s, key);
		local_session_close(s);
		_exit(0);
	}
	return pid;
}

static uint32_t waiters(local_session *s, const char *key)
{
	static LOCAL_OPTS(local_key_info, ki);

	CHECK_OK(local_info(s, key, &ki));
	return ki.waiters;
}

/* A key taken by liblocal appears, with its holder (name, pid, the exact
 * token) and its FIFO queue; then, with the page left open, the key is
 * handed over and the page (the same document: no reload) follows. */
TEST(ui, key_appears_and_holder_follows_handover, 90)
{
	struct ui_env e;
	struct cdp c;
	local_session *a;
	int rdy[2], go[2];
	uint64_t tok;
	char expr[512], x;
	pid_t kid;

	ui_start(&e, NULL);
	cdp_open(&c, &e);
	a = open_session(&e.b, "ui-alpha", 0, 0);
	CHECK_OK(local_lock(a, "jobs/nightly", &wait20, &tok));
	CHECK(!pipe2(rdy, O_CLOEXEC) && !pipe2(go, O_CLOEXEC));
	kid = queue_child(&e, "ui-beta", "jobs/nightly", rdy[1], go);
	CHECK(WAIT_FOR(waiters(a, "jobs/nightly") == 1, 5000));

	/* Live: the page, already open, shows the key when it comes. */
	snprintf(expr, sizeof(expr),
		 "(function(){var r=" ROW(
			 "jobs/nightly") ";if(!r)return false;"
					 "var h=r.querySelector('.holder[data-name=\"ui-alpha\"]'),"
					 "w=r.querySelectorAll('.waiter');"
					 "return "
					 "!!h&&h.dataset.pid=='%d'&&h.textContent.indexOf('token "
					 "%llu,')>0&&"
					 "w.length==1&&w[0].textContent.indexOf('ui-beta (pid "
					 "%d)')==0;})()",
		 (int)getpid(), (unsigned long long)tok, (int)kid);
	PAGE_WAIT(&c, 10000, expr);
	cdp_shot(&c, "1-held-and-queued");
	CHECK(!strcmp(cdp(&c, 5000, "eval window.__same_page = 1"), "1"));

	CHECK_OK(local_release(a, "jobs/nightly"));
	CHECK(read(rdy[0], &x, 1) == 1 && x == 'g');
	PAGE_WAIT(&c, 10000,
		  "(function(){var r=" ROW(
			  "jobs/nightly") ";return !!r&&"
					  "!!r.querySelector('.holder[data-name=\"ui-beta\"]')&&"
					  "!r.querySelector('.holder[data-name=\"ui-alpha\"]')&&"
					  "!r.querySelector('.waiter');})()");
	CHECK(!strcmp(cdp(&c, 5000, "eval window.__same_page"), "1"));
	cdp_shot(&c, "2-after-handover");

	cdp_quit(&c);
	close(go[1]);
	waitpid(kid, NULL, 0);
	local_session_close(a);
	broker_stop_clean(&e.b);
}

/* A holder SIGKILLed in its hold: the page shows the key's lock-delay,
 * who died, and counts it down. */
TEST(ui, sigkilled_holder_lock_delay_countdown, 60)
{
	struct ui_env e;
	struct cdp c;
	local_session *obs;
	static LOCAL_OPTS(local_key_info, ki);
	int rdy[2];
	char expr[512], x;
	const char *v;
	double first;
	pid_t kid;

	ui_start(&e, NULL);
	cdp_open(&c, &e);
	CHECK(!pipe2(rdy, O_CLOEXEC));
	kid = fork();
	CHECK(kid >= 0);
	if (!kid) {
		local_session *s = open_session(&e.b, "ui-doomed", 30000, 0);
		uint64_t tok;

		if (local_lock(s, "jobs/delay", &wait20, &tok) || write(rdy[1], "r", 1) != 1)
			_exit(2);
		for (;;)
			pause();
	}
	CHECK(read(rdy[0], &x, 1) == 1);
	kill(kid, SIGKILL);
	waitpid(kid, NULL, 0);
	obs = open_session(&e.b, "ui-observer", 0, 0);
	CHECK(WAIT_FOR(!local_info(obs, "jobs/delay", &ki) && ki.lock_delay_remaining_ms > 0 &&
			       !ki.holders,
		       5000));

	snprintf(expr, sizeof(expr),
		 "(function(){var r=" ROW("jobs/delay") ";var d=r&&r.querySelector('.delay');"
							"return !!d&&d.textContent.indexOf('after "
							"ui-doomed (pid %d) died')>0&&"
							"!r.querySelector('.holder');})()",
		 (int)kid);
	PAGE_WAIT(&c, 10000, expr);
	v = cdp(&c, 5000,
		"eval parseFloat(" ROW("jobs/delay") ".querySelector('.delay .clock')"
						     ".textContent)");
	first = atof(v);
	CHECK(first > 0 && first <= 30);
	/* It counts down between the broker's answers. */
	snprintf(expr, sizeof(expr),
		 "parseFloat(" ROW("jobs/delay") ".querySelector('.delay "
						 ".clock').textContent) < %.1f",
		 first - 0.4);
	PAGE_WAIT(&c, 5000, expr);
	cdp_shot(&c, "3-sigkilled-lock-delay");

	cdp_quit(&c);
	local_session_close(obs);
	broker_stop_clean(&e.b);
}

/* 10 000 keys in the browser: the page holds one page of rows, and its
 * search box, sortable headers and next button ask the broker for others. */
TEST(ui, search_sort_and_page_10000_keys_in_the_browser, 90)
{
	const char *more[] = { "--max-keys", "12000", "--max-holds", "12000", NULL };
	struct ui_env e;
	struct cdp c;
	local_session *s;
	char key[32];
	uint64_t tok;
	int i;

	ui_start(&e, more);
	s = open_session(&e.b, "ui-bulk", 0, 0);
	for (i = 0; i < 10000; i++) {
		snprintf(key, sizeof(key), "bulk/%05d", i);
		CHECK_OK(local_lock(s, key, &wait20, &tok));
	}
	CHECK_OK(local_lock(s, "other/x", &wait20, &tok));
	cdp_open(&c, &e);
#define ROWS "document.querySelectorAll('#keys tbody tr')"
	PAGE_WAIT(&c, 10000,
		  "document.getElementById('keys-count').textContent=='(10001)'&&" ROWS
		  ".length==50&&" ROWS "[0].dataset.key=='bulk/00000'");
	/* Search. */
	CHECK(!strcmp(cdp(&c, 5000,
			  "eval (function(){var i=document.getElementById('search');"
			  "i.value='other';i.dispatchEvent(new Event('input'));return 1;})()"),
		      "1"));
	PAGE_WAIT(&c, 10000,
		  ROWS ".length==1&&" ROWS "[0].dataset.key=='other/x'&&"
		       "document.getElementById('keys-count').textContent=='(1 of 10001)'");
	CHECK(!strcmp(cdp(&c, 5000,
			  "eval (function(){var i=document.getElementById('search');"
			  "i.value='';i.dispatchEvent(new Event('input'));return 1;})()"),
		      "1"));
	PAGE_WAIT(&c, 10000, ROWS ".length==50&&" ROWS "[0].dataset.key=='bulk/00000'");
	/* Sort by name, descending (the second click on the key header). */
	CHECK(!strcmp(cdp(&c, 5000, "eval (document.querySelector('th[data-sort=key]').click(),1)"),
		      "1"));
	PAGE_WAIT(&c, 10000,
		  ROWS "[0].dataset.key=='other/x'&&" ROWS "[1].dataset.key=="
		       "'bulk/09999'");
	/* The next page. */
	CHECK(!strcmp(cdp(&c, 5000, "eval (document.getElementById('next').click(),1)"), "1"));
	PAGE_WAIT(&c, 10000,
		  ROWS ".length==50&&" ROWS "[0].dataset.key=='bulk/09950'&&"
		       "document.getElementById('page').textContent=='51–100 of 10001'");
#undef ROWS
	cdp_shot(&c, "4-10000-keys-sorted-page-2");
	cdp_quit(&c);
	local_session_close(s);
	broker_stop_clean(&e.b);
}

/* ---- the data API (no browser) ---------------------------------------------- */

TEST(ui, api_token_paging_search_sort_over_10000_keys, 60)
{
	const char *more[] = { "--max-keys", "12000", "--max-holds", "12000", NULL };
	struct ui_env e;
	local_session *s;
	char key[32], type[64], *body, q[160];
	json_t *j, *rows;
	uint64_t tok;
	int i;

	ui_start(&e, more);
	/* The assets are open and typed; the data asks for the token. */
	CHECK_EQ(get(&e, "/ui/", false, &body, type, sizeof(type)), 200);
	CHECK(strstr(type, "text/html") && strstr(body, "<script src=\"/ui/app.js\">"));
	free(body);
	CHECK_EQ(get(&e, "/ui/app.js", false, NULL, type, sizeof(type)), 200);
	CHECK(strstr(type, "javascript"));
	CHECK_EQ(get(&e, "/ui/api/state", false, NULL, NULL, 0), 401);
	CHECK_EQ(get(&e, "/ui/nope", false, NULL, NULL, 0), 404);

	s = open_session(&e.b, "ui-bulk", 0, 0);
	for (i = 0; i < 10000; i++) {
		snprintf(key, sizeof(key), "bulk/%05d", i);
		CHECK_OK(local_lock(s, key, &wait20, &tok));
	}
	CHECK_OK(local_lock(s, "other/x", &wait20, &tok));

	/* One page of a search, from the server. */
	get(&e, "/ui/api/state?q=bulk%2F&limit=50&offset=100", true, &body, NULL, 0);
	CHECK(strlen(body) < 64 * 1024); /* a page, not 10 000 rows */
	j = json_loads(body, 0, NULL);
	CHECK(j);
	rows = json_object_get(json_object_get(j, "keys"), "rows");
	CHECK_EQ(json_integer_value(json_object_get(json_object_get(j, "keys"), "total")), 10000);
	CHECK_EQ(json_integer_value(json_object_get(json_object_get(j, "keys"), "all")), 10001);
	CHECK_EQ(json_array_size(rows), 50);
	CHECK(!strcmp(json_string_value(json_object_get(json_array_get(rows, 0), "key")),
		      "bulk/00100"));
	json_decref(j);
	free(body);

	j = state(&e, "?sort=key&dir=desc&limit=1");
	rows = json_object_get(json_object_get(j, "keys"), "rows");
	CHECK(!strcmp(json_string_value(json_object_get(json_array_get(rows, 0), "key")),
		      "other/x"));
	json_decref(j);
	j = state(&e, "?q=bulk&sort=key&dir=desc&limit=100000");
	CHECK_EQ(json_integer_value(json_object_get(json_object_get(j, "keys"), "limit")), 500);
	rows = json_object_get(json_object_get(j, "keys"), "rows");
	CHECK(!strcmp(json_string_value(json_object_get(json_array_get(rows, 0), "key")),
		      "bulk/09999"));
	json_decref(j);

	/* Two views' long polls wait while nothing changes, and a lock-free
	 * acquire (which rings no doorbell) ends both (one snapshot's text,
	 * shared: the same question). */
	j = state(&e, "?q=late&limit=5");
	snprintf(q, sizeof(q), "/ui/api/state?q=late&limit=5&since=%s",
		 json_string_value(json_object_get(j, "stamp")));
	json_decref(j);
	{
		pid_t kids[2];
		/* Set before the broker is stopped: the drain's answer ends the
		 * view's poll (MAP_SHARED: the forked view reads it). */
		_Atomic int *stopping = mmap(NULL, sizeof(*stopping), PROT_READ | PROT_WRITE,
					     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		int k, wst;

		CHECK(stopping != MAP_FAILED);
		for (k = 0; k < 2; k++) {
			kids[k] = fork();
			CHECK(kids[k] >= 0);
			if (!kids[k])
				poll_view(&e, q, "\"key\":\"late/one\"", NULL);
		}
		CHECK(WAIT_FOR(views_waiting(&e) == 2, 20000));
		CHECK_OK(local_lock(s, "late/one", &wait20, &tok));
		for (k = 0; k < 2; k++) {
			wst = -1;
			if (!WAIT_FOR(waitpid(kids[k], &wst, WNOHANG) == kids[k], 5000))
				FAIL_AT("a long poll did not end at the change");
			CHECK(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
		}
		CHECK_EQ(views_waiting(&e), 0);

		/* SIGTERM answers a waiting view (draining), and the broker
		 * exits cleanly (under ASan: no report). */
		j = state(&e, "?q=late&limit=5");
		snprintf(q, sizeof(q), "/ui/api/state?q=late&limit=5&since=%s",
			 json_string_value(json_object_get(j, "stamp")));
		json_decref(j);
		kids[0] = fork();
		CHECK(kids[0] >= 0);
		if (!kids[0])
			poll_view(&e, q, NULL, stopping);
		CHECK(WAIT_FOR(views_waiting(&e) == 1, 20000));
		atomic_store(stopping, 1);
		local_session_close(s);
		broker_stop_clean(&e.b);
		wst = -1;
		CHECK(WAIT_FOR(waitpid(kids[0], &wst, WNOHANG) == kids[0], 5000));
		CHECK(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
	}
}
