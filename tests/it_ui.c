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
#include "ui_fixture.h"

/* ---- HTTP ---------------------------------------------------------------- */

static json_t *state(const struct ui_env *e, const char *query)
{
	char path[512], *body;
	json_error_t err;
	json_t *j;

	snprintf(path, sizeof(path), "/ui/api/state%s", query);
	if (ui_get(e, path, true, &body, NULL, 0) != 200)
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
		long st = ui_get(e, path, true, &b, NULL, 0);
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
	CHECK_EQ(ui_get(&e, "/ui/", false, &body, type, sizeof(type)), 200);
	CHECK(strstr(type, "text/html") && strstr(body, "<script src=\"/ui/app.js\">"));
	free(body);
	CHECK_EQ(ui_get(&e, "/ui/app.js", false, NULL, type, sizeof(type)), 200);
	CHECK(strstr(type, "javascript"));
	CHECK_EQ(ui_get(&e, "/ui/api/state", false, NULL, NULL, 0), 401);
	CHECK_EQ(ui_get(&e, "/ui/nope", false, NULL, NULL, 0), 404);

	s = open_session(&e.b, "ui-bulk", 0, 0);
	for (i = 0; i < 10000; i++) {
		snprintf(key, sizeof(key), "bulk/%05d", i);
		CHECK_OK(local_lock(s, key, &wait20, &tok));
	}
	CHECK_OK(local_lock(s, "other/x", &wait20, &tok));

	/* One page of a search, from the server. */
	ui_get(&e, "/ui/api/state?q=bulk%2F&limit=50&offset=100", true, &body, NULL, 0);
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
