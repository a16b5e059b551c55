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
#include "ui_fixture.h"

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
