// SPDX-License-Identifier: MIT
/*
 * The web view's newer parts in headless Chromium (ui/, broker/faces/ui/,
 * docs/web-view.md), as tests/it_ui.c drives it (tests/ui/cdp.py; DOM checks
 * and screenshots under $(O)/ui-shots/): a hold granted before the page
 * opened shows its grant time, keys wrap only after their separators, and
 * the wait-time, hold-time and grants charts draw what the metrics count.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/time.h>
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

static void ui_start(struct ui_env *e, const char *const *more)
{
	const char *args[16] = { "--http-listen", e->listen, "--auth-token", UI_TOKEN };
	int i = 4;

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

static LOCAL_OPTS(local_acquire_opts, wait20, .timeout_ms = 20000);

static uint64_t wall_ms(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
}

/* A hold taken 2 s before the page opens: the page shows when it was
 * granted (to the broker's look, a second at most), not when the page
 * first saw it. */
TEST(ui_dropin, hold_older_than_the_page_shows_its_grant_time, 60)
{
	struct ui_env e;
	struct cdp c;
	local_session *a;
	uint64_t tok, t0, t1;
	const char *v;
	double at;

	ui_start(&e, NULL);
	a = open_session(&e.b, "ui-old-holder", 0, 0);
	t0 = wall_ms();
	CHECK_OK(local_lock(a, "svc/old", &wait20, &tok));
	t1 = wall_ms();
	/* What is tested is a hold older than the page: let it age. */
	WAIT_FOR(wall_ms() - t1 >= 2000, 3000);
	cdp_open(&c, &e);
	PAGE_WAIT(&c, 10000, "!!document.querySelector('tr[data-key=\"svc/old\"] .holder .clock')");
	/* Held for the hold's age, not the page's (it was "held 160 ms"). */
	v = cdp(&c, 5000,
		"eval document.querySelector('tr[data-key=\"svc/old\"] .holder "
		".clock').textContent");
	if (!strstr(v, " s") || atof(v + 1) < 2)
		FAIL_AT("the hold, 2 s old when the page opened, shows as held %s", v);
	PAGE_WAIT(&c, 5000, "!!document.querySelector('tr[data-key=\"svc/old\"] .granted')");
	v = cdp(&c, 5000,
		"eval document.querySelector('tr[data-key=\"svc/old\"] .granted').dataset.granted");
	at = atof(v + (v[0] == '"'));
	if (at < (double)t0 - 300 || at > (double)t1 + 1300)
		FAIL_AT("grant shown at %.0f, taken between %llu and %llu (wall ms)", at,
			(unsigned long long)t0, (unsigned long long)t1);
	cdp_shot(&c, "10-grant-time");
	cdp_quit(&c);
	local_session_close(a);
	broker_stop_clean(&e.b);
}

#define LONG_KEY "alpha-service/region-eu-west/instance_000123/leader.lock"

/* Where the key's text breaks into lines, each break comes after a
 * separator; and it does break (the column is narrow). */
static const char wrap_check[] =
	"(function(){var c=document.querySelector('tr[data-key=\"" LONG_KEY "\"] td.key');"
	"if(!c)return 'no row';var s=c.querySelector('.keytext');"

	"var w=document.createTreeWalker(c,NodeFilter.SHOW_TEXT),n,ch=[];"
	"while((n=w.nextNode()))for(var i=0;i<n.length;i++){var r=document.createRange();"
	"r.setStart(n,i);r.setEnd(n,i+1);var q=r.getClientRects();"
	"if(q.length)ch.push([n.data[i],q[0].top]);}"
	"var breaks=0;for(var k=1;k<ch.length;k++)if(ch[k][1]>ch[k-1][1]+2){breaks++;"
	"if('/.-_:'.indexOf(ch[k-1][0])<0)return 'mid-word after '+ch[k-1][0]+' before '+ch[k][0];}"
	"if(!breaks)return 'no break';"
	"return s&&s.title==='" LONG_KEY "'?'ok':'no title';})()";

TEST(ui_dropin, keys_wrap_at_separators_not_mid_word, 60)
{
	struct ui_env e;
	struct cdp c;
	local_session *a;
	uint64_t tok;
	const char *v;

	ui_start(&e, NULL);
	a = open_session(&e.b, "ui-wrap", 0, 0);
	CHECK_OK(local_lock(a, LONG_KEY, &wait20, &tok));
	cdp_open(&c, &e);
	PAGE_WAIT(&c, 10000, "!!document.querySelector('tr[data-key=\"" LONG_KEY "\"]')");
	/* A narrow window: the key must wrap somewhere. */
	CHECK(!strcmp(cdp(&c, 5000, "eval (document.body.style.width='520px', 1)"), "1"));
	v = cdp(&c, 5000, "eval %s", wrap_check);
	if (strcmp(v, "\"ok\""))
		FAIL_AT("the key wraps badly: %s", v);
	cdp_shot(&c, "11-key-wrap");
	cdp_quit(&c);
	local_session_close(a);
	broker_stop_clean(&e.b);
}

/* Waits and holds that queued are counted (the metrics' histograms); the
 * page draws them, and grants over time. */
TEST(ui_dropin, charts_draw_wait_hold_and_grants, 60)
{
	struct ui_env e;
	struct cdp c;
	local_session *a, *b;
	uint64_t tok;
	int go[2], st;
	pid_t kid;

	ui_start(&e, NULL);
	a = open_session(&e.b, "ui-chart-a", 0, 0);
	CHECK_OK(local_lock(a, "charts/k", &wait20, &tok));
	CHECK(!pipe2(go, O_CLOEXEC));
	kid = fork();
	CHECK(kid >= 0);
	if (!kid) { /* queues, is granted, holds a moment, releases */
		local_session *s = open_session(&e.b, "ui-chart-b", 0, 0);
		uint64_t t;

		if (local_lock(s, "charts/k", &wait20, &t) || local_release(s, "charts/k"))
			_exit(2);
		local_session_close(s);
		_exit(0);
	}
	b = open_session(&e.b, "ui-chart-obs", 0, 0);
	{
		static LOCAL_OPTS(local_key_info, ki);

		CHECK(WAIT_FOR(!local_info(b, "charts/k", &ki) && ki.waiters == 1, 5000));
	}
	CHECK_OK(local_release(a, "charts/k"));
	CHECK_EQ(pid_wait(kid, 10000), 0);
	st = 0;
	(void)st;
	close(go[0]);
	close(go[1]);
	cdp_open(&c, &e);
	PAGE_WAIT(&c, 10000,
		  "(function(){var w=document.querySelector('#chart-wait svg'),"
		  "h=document.querySelector('#chart-hold svg'),g=document.querySelector("
		  "'#chart-grants svg');return !!w&&!!h&&!!g&&+w.dataset.total>=1&&"
		  "+h.dataset.total>=1&&+g.dataset.points>=1&&"
		  "!!w.querySelector('rect.bar[data-count=\"1\"]');})()");
	cdp_shot(&c, "12-charts");
	cdp_quit(&c);
	local_session_close(b);
	local_session_close(a);
	broker_stop_clean(&e.b);
}
