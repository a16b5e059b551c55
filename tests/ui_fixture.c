// SPDX-License-Identifier: MIT
/*
 * The web view's tests' browser and broker (tests/it_ui.c, tests/it_ui_dropin.c):
 * a broker with the HTTP listener and a token, and headless Chromium driven
 * over the DevTools protocol by tests/ui/cdp.py.
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
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "net_fixture.h"
#include "ui_fixture.h"

/* GET @path: the status; the body in *@body (malloc), the type in @type. */
long ui_get(const struct ui_env *e, const char *path, bool auth, char **body, char *type,
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

void ui_start(struct ui_env *e, const char *const *more)
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
	CHECK(WAIT_FOR(ui_get(e, "/health", false, NULL, NULL, 0) == 200, 5000));
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
const char *cdp(struct cdp *c, int ms, const char *fmt, ...)
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

void cdp_shot(struct cdp *c, const char *name)
{
	CHECK(!strcmp(cdp(c, 15000, "shot %s/%s.png", c->shots, name), "ok"));
	CHECK(!strcmp(cdp(c, 15000, "dom %s/%s.html", c->shots, name), "ok"));
}

void cdp_open(struct cdp *c, const struct ui_env *e)
{
	cdp_start(c, e);
	/* Chromium's start-up: one to a few seconds on a loaded machine. */
	CHECK(!strcmp(cdp(c, 30000, "goto http://127.0.0.1:%d/ui/#token=" UI_TOKEN, e->port),
		      "ok"));
	PAGE_WAIT(c, 10000, "!!document.querySelector('.status.live')");
}

void cdp_quit(struct cdp *c)
{
	int st;

	fputs("quit\n", c->to);
	fflush(c->to);
	if (!WAIT_FOR(waitpid(c->pid, &st, WNOHANG) == c->pid, 10000))
		kill(c->pid, SIGKILL);
	fclose(c->to);
	fclose(c->from);
}
