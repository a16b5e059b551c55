// SPDX-License-Identifier: MIT
/* Logging to stderr. Lines start with "<N>" (sd-daemon(3) priorities) when
 * JOURNAL_STREAM is set (systemd connected stderr to the journal), so
 * journald files them at the right level. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "broker.h"

static int max_level = LOG_INFO;

void blog_set_level(int level)
{
	max_level = level;
}

int blog_parse_level(const char *s)
{
	static const char *const names[] = { "emerg", "alert", "crit", "err",
					     "warning", "notice", "info", "debug" };
	int i;

	for (i = 0; i < 8; i++)
		if (!strcmp(s, names[i]))
			return i;
	return strcmp(s, "error") ? -1 : LOG_ERR; /* what our own lines print */
}

void blog(int level, const char *fmt, ...)
{
	static const char *const tags[] = { "emerg", "alert", "crit", "error",
					    "warning", "notice", "info", "debug" };
	char line[1024];
	va_list ap;

	if (level > max_level)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (getenv("JOURNAL_STREAM"))
		fprintf(stderr, "<%d>%s\n", level, line);
	else
		fprintf(stderr, "shmlockd: %s: %s\n", tags[level & 7], line);
}

bool blog_allow(struct blog_limit *l, uint64_t now_ns)
{
	if (now_ns - l->window_ns >= 1000000000ull) {
		if (l->dropped)
			blog(LOG_NOTICE, "... and %u more like it in the last second", l->dropped);
		l->window_ns = now_ns;
		l->lines = l->dropped = 0;
	}
	if (l->lines < BLOG_BURST) {
		l->lines++;
		return true;
	}
	l->dropped++;
	return false;
}
