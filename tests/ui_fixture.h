/* SPDX-License-Identifier: MIT */
/*
 * The web view's tests' browser and broker (tests/ui_fixture.c).
 */
#ifndef SHMLOCK_TEST_UI_FIXTURE_H
#define SHMLOCK_TEST_UI_FIXTURE_H

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include "broker_fixture.h"

#define UI_TOKEN "ui-test-token"

struct ui_env {
	struct broker_proc b;
	int port;
	char listen[32];
};

/* GET @path from the broker's HTTP listener (with the token when @auth): the
 * status; the body in *@body (malloc), the type in @type. */
long ui_get(const struct ui_env *e, const char *path, bool auth, char **body, char *type,
	    size_t tsize);
/* A broker with --http-listen on a free port and --auth-token UI_TOKEN,
 * and @more flags; answering /health. */
void ui_start(struct ui_env *e, const char *const *more);

struct cdp {
	pid_t pid;
	FILE *to, *from;
	int from_fd;
	char shots[PATH_MAX];
};

/* Chromium with its own profile, on /ui/#token=UI_TOKEN, the page live. */
void cdp_open(struct cdp *c, const struct ui_env *e);
/* Send one command to tests/ui/cdp.py; its one-line answer (static), or
 * fail after @ms. */
const char *cdp(struct cdp *c, int ms, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A screenshot and the DOM, as $(O)/ui-shots/@name.png and .html. */
void cdp_shot(struct cdp *c, const char *name);
void cdp_quit(struct cdp *c);

/* Wait (in the page) until the JS expression @expr is true, or fail. */
#define PAGE_WAIT(c, ms, expr)                                                      \
	do {                                                                        \
		const char *r_ = cdp((c), (ms) + 5000, "wait %d %s", (ms), (expr)); \
		if (strcmp(r_, "ok"))                                               \
			FAIL_AT("the page never showed %s (%s)", (expr), r_);       \
	} while (0)

#endif
