// SPDX-License-Identifier: MIT
/*
 * Logging to stderr. Lines start with "<N>" (sd-daemon(3) priorities) when
 * stderr is the journal (JOURNAL_STREAM names stderr's device and inode, as
 * systemd.exec(5) says to check), so journald files them at the right level
 * and stamps them itself. Anywhere else (a terminal, a file, a pipe to
 * another logger) each line carries its own UTC timestamp.
 *
 * Two defences live here, in the one output path every line takes:
 *
 *  - Escaping. Lines quote what clients chose (keys, session names, HTTP
 *    methods): a control character, a byte that is not UTF-8, or a C1
 *    control in UTF-8 is written as \xHH (\n, \r, \t and \\ as such), so a
 *    key "a\nFAKE LINE" can neither start a line of its own nor move a
 *    terminal's cursor, and no reader is handed invalid UTF-8.
 *
 *  - Repeats. A line that a peer can trigger at will (a refused session, a
 *    failed accept) must not fill the disk or the journal: lines of the same
 *    format are limited to BLOG_SIMILAR_BURST a window of one second; the
 *    rest are counted and summarised in one line when the window ends
 *    (blog_tick() from the loop, or the next line of that format).
 *    Audit lines (blog_audit(): what an operator did) are exempt: a refused
 *    peer may flood the format they share with refusals, and the record of
 *    who released what must not be what it pushes out.
 *
 * A warning that repeats as long as a condition lasts (blog_backoff_allow())
 * is spaced 1 s, 2 s, 4 s ... apart instead, with the count left out.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>

#include "broker.h"
#include "clock.h"

static int max_level = LOG_INFO;

void blog_set_level(int level)
{
	max_level = level;
}

int blog_parse_level(const char *s)
{
	static const char *const names[] = { "emerg",	"alert",  "crit", "err",
					     "warning", "notice", "info", "debug" };
	int i;

	for (i = 0; i < 8; i++)
		if (!strcmp(s, names[i]))
			return i;
	return strcmp(s, "error") ? -1 : LOG_ERR; /* what our own lines print */
}

/* Length of the valid UTF-8 sequence at @s (of @n bytes), 0 if none, and
 * whether it encodes a C1 control (U+0080..U+009F). */
static size_t utf8_seq(const unsigned char *s, size_t n, bool *c1)
{
	size_t len, i;
	uint32_t cp;

	*c1 = false;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2, cp = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3, cp = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4, cp = s[0] & 0x07;
	else
		return 0;
	if (len > n)
		return 0;
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	/* Overlong forms, surrogates, beyond U+10FFFF. */
	if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	*c1 = cp >= 0x80 && cp <= 0x9f;
	return len;
}

size_t blog_escape(const char *in, char *out, size_t size)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *s = (const unsigned char *)in;
	size_t n = strlen(in), o = 0, i = 0;

	if (!size)
		return 0;
	while (i < n) {
		char esc[4 * 4 + 1];
		size_t elen = 0, k, seq;
		unsigned char c = s[i];
		bool c1;

		if (c == '\n' || c == '\r' || c == '\t' || c == '\\') {
			esc[0] = '\\';
			esc[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : c == '\t' ? 't' : '\\';
			elen = 2;
			seq = 1;
		} else if (c >= 0x20 && c < 0x7f) {
			esc[0] = (char)c;
			elen = seq = 1;
		} else if (c >= 0x80 && (seq = utf8_seq(s + i, n - i, &c1)) && !c1) {
			memcpy(esc, s + i, seq);
			elen = seq;
		} else {
			/* Other controls, DEL, bytes that are not UTF-8, C1. */
			seq = c >= 0x80 && (seq = utf8_seq(s + i, n - i, &c1)) ? seq : 1;
			for (k = 0; k < seq; k++) {
				esc[elen++] = '\\';
				esc[elen++] = 'x';
				esc[elen++] = hex[s[i + k] >> 4];
				esc[elen++] = hex[s[i + k] & 15];
			}
		}
		if (o + elen >= size)
			break; /* truncated at a whole escape, never inside one */
		memcpy(out + o, esc, elen);
		o += elen;
		i += seq;
	}
	out[o] = '\0';
	return o;
}

bool blog_to_journal(void)
{
	static int journal = -1;
	const char *env;
	unsigned long long dev, ino;
	struct stat st;

	if (journal >= 0)
		return journal;
	env = getenv("JOURNAL_STREAM");
	journal = env && sscanf(env, "%llu:%llu", &dev, &ino) == 2 && fstat(2, &st) == 0 &&
		  (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
	return journal;
}

static void emit(int level, const char *line)
{
	static const char *const tags[] = { "emerg",   "alert",	 "crit", "error",
					    "warning", "notice", "info", "debug" };
	char safe[4096], stamp[40];
	struct timespec ts;
	struct tm tm;

	blog_escape(line, safe, sizeof(safe));
	if (blog_to_journal()) {
		fprintf(stderr, "<%d>%s\n", level, safe);
		return;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
	fprintf(stderr, "%s.%03ldZ shmlockd: %s: %s\n", stamp, ts.tv_nsec / 1000000,
		tags[level & 7], safe);
}

/* ---- repeated lines ------------------------------------------------------ */

#define BLOG_FORMATS 32
#define BLOG_WINDOW_NS 1000000000ull

struct similar {
	const char *fmt; /* the format (its address): "similar" lines */
	uint64_t window_ns;
	uint32_t lines, dropped;
	int level;
	char last[160]; /* the last line left out, for the summary */
};

static struct similar similar[BLOG_FORMATS];
static pthread_mutex_t similar_lock = PTHREAD_MUTEX_INITIALIZER;

static void summarise(struct similar *s, uint64_t now)
{
	char line[320];

	if (!s->dropped)
		return;
	snprintf(line, sizeof(line), "%u more line%s like this in the last %.1f s, the last: %s",
		 s->dropped, s->dropped == 1 ? "" : "s", (double)(now - s->window_ns) / 1e9,
		 s->last);
	emit(s->level, line);
	s->dropped = 0;
}

/* May a line of @fmt be written now? Counts it otherwise. */
static bool similar_allow(const char *fmt, int level, const char *line, uint64_t now)
{
	struct similar *s = NULL, *oldest = &similar[0];
	unsigned i;

	for (i = 0; i < BLOG_FORMATS; i++) {
		if (similar[i].fmt == fmt) {
			s = &similar[i];
			break;
		}
		if (similar[i].window_ns < oldest->window_ns)
			oldest = &similar[i];
	}
	if (!s) {
		s = oldest;
		summarise(s, now);
		memset(s, 0, sizeof(*s));
		s->fmt = fmt;
		s->window_ns = now;
	}
	if (now - s->window_ns >= BLOG_WINDOW_NS) {
		summarise(s, now);
		s->window_ns = now;
		s->lines = 0;
	}
	if (s->lines < BLOG_SIMILAR_BURST) {
		s->lines++;
		return true;
	}
	s->dropped++;
	s->level = level;
	/* Cut at a byte boundary; emit() escapes whatever half a character is left. */
	strncpy(s->last, line, sizeof(s->last) - 1);
	s->last[sizeof(s->last) - 1] = '\0';
	return false;
}

void blog_tick(void)
{
	uint64_t now = mono_ns();
	unsigned i;

	pthread_mutex_lock(&similar_lock);
	for (i = 0; i < BLOG_FORMATS; i++)
		if (similar[i].fmt && now - similar[i].window_ns >= BLOG_WINDOW_NS) {
			summarise(&similar[i], now);
			similar[i].window_ns = now;
			similar[i].lines = 0;
		}
	pthread_mutex_unlock(&similar_lock);
}

/* @limited: subject to the repeats' limit (every line but an audit line). */
static void vblog(int level, bool limited, const char *fmt, va_list ap)
{
	char line[1024];

	if (level > max_level)
		return;
	vsnprintf(line, sizeof(line), fmt, ap);
	pthread_mutex_lock(&similar_lock); /* one line at a time, either kind */
	if (!limited || similar_allow(fmt, level, line, mono_ns()))
		emit(level, line);
	pthread_mutex_unlock(&similar_lock);
}

void blog(int level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vblog(level, true, fmt, ap);
	va_end(ap);
}

void blog_audit(int level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vblog(level, false, fmt, ap);
	va_end(ap);
}

bool blog_backoff_allow(struct blog_backoff *l, uint64_t now_ns, uint32_t *suppressed)
{
	if (l->next_ns && now_ns < l->next_ns) {
		l->suppressed++;
		return false;
	}
	*suppressed = l->suppressed;
	l->suppressed = 0;
	l->interval_s = !l->interval_s				  ? 1
			: l->interval_s >= BLOG_BACKOFF_MAX_S / 2 ? BLOG_BACKOFF_MAX_S
								  : l->interval_s * 2;
	l->next_ns = now_ns + (uint64_t)l->interval_s * 1000000000ull;
	return true;
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
