// SPDX-License-Identifier: MIT
/*
 * The broker-wide part of /metrics, read from the segment as the broker
 * sees it (operator_stats()), so that it needs no session and works with
 * every table full. The wait and hold time histograms are summed over every
 * session slot at scrape: each session counts its own (libshm/hist.c), on
 * the contended path only, and a slot's counts are never reset, so the sums
 * cover every session that ever ran on this segment.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker.h"
#include "hist.h"
#include "metrics_text.h"
#include "operator.h"

void text_put(struct text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		size_t room = t->cap - t->len;

		va_start(ap, fmt);
		n = vsnprintf(t->p ? t->p + t->len : NULL, t->p ? room : 0, fmt, ap);
		va_end(ap);
		if (n < 0)
			return;
		if (t->p && (size_t)n < room) {
			t->len += (size_t)n;
			return;
		}
		t->cap = (t->cap + (size_t)n + 1) * 2;
		t->p = realloc(t->p, t->cap);
		if (!t->p) {
			t->cap = t->len = 0;
			return;
		}
	}
}

void text_gauge(struct text *t, const char *name, const char *help, uint64_t v)
{
	text_put(t, "# HELP %s %s\n# TYPE %s gauge\n%s %llu\n", name, help, name, name,
		 (unsigned long long)v);
}

void text_counter(struct text *t, const char *name, const char *help, uint64_t v)
{
	text_put(t, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
		 (unsigned long long)v);
}

struct hist_sum {
	uint64_t count, sum_us, bucket[SEG_HIST_BUCKETS];
};

static void hist_add(struct hist_sum *s, struct seg_hist *h)
{
	unsigned i;

	/* The count first (acquire, hist_note() adds it last): the buckets
	 * read after it hold at least what it counts. */
	s->count += atomic_load_explicit(&h->count, memory_order_acquire);
	s->sum_us += atomic_load_explicit(&h->sum_us, memory_order_relaxed);
	for (i = 0; i < SEG_HIST_BUCKETS; i++)
		s->bucket[i] += atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
}

static void histogram(struct text *t, const char *name, const char *help, const struct hist_sum *s)
{
	uint64_t cum = 0;
	unsigned i;

	text_put(t, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	for (i = 0; i < SEG_HIST_BUCKETS; i++) {
		cum += s->bucket[i];
		/* A scrape racing a note may see a bucket ahead of the count:
		 * buckets never exceed +Inf. */
		text_put(t, "%s_bucket{le=\"%g\"} %llu\n", name, (double)hist_bounds_us[i] / 1e6,
			 (unsigned long long)(cum < s->count ? cum : s->count));
	}
	text_put(t, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
		 (unsigned long long)s->count, name, (double)s->sum_us / 1e6, name,
		 (unsigned long long)s->count);
}

void metrics_render_broker(struct broker *b, struct text *t)
{
	struct hist_sum wait = { 0 }, hold = { 0 };
	struct proto_op_stats st;
	uint32_t i;

	memset(&st, 0, sizeof(st));
	operator_stats(b, &st);
	for (i = 0; i < b->seg.caps.max_sessions; i++) {
		hist_add(&wait, &b->seg.sessions[i].wait_hist);
		hist_add(&hold, &b->seg.sessions[i].hold_hist);
	}
	text_put(t,
		 "# HELP shmlock_build_info The broker's version; always 1.\n"
		 "# TYPE shmlock_build_info gauge\n"
		 "shmlock_build_info{version=\"%s\",seg_abi=\"%u\"} 1\n",
		 SHMLOCK_VERSION, SEG_ABI);
	text_gauge(t, "shmlock_uptime_seconds", "Seconds since the segment's broker started.",
		   st.uptime_ms / 1000);
	text_gauge(t, "shmlock_sessions", "Live sessions (all transports).", st.sessions);
	text_gauge(t, "shmlock_holds", "Holds of locks and semaphore slots.", st.holds);
	text_gauge(t, "shmlock_waiters", "Queued requests.", st.waiters);
	text_gauge(t, "shmlock_keys", "Keys in the table.", st.keys);
	text_gauge(t, "shmlock_capacity_sessions", "--max-sessions.", st.max_sessions);
	text_gauge(t, "shmlock_capacity_keys", "--max-keys.", st.max_keys);
	text_gauge(t, "shmlock_capacity_holds", "--max-holds.", st.max_holds);
	text_gauge(t, "shmlock_capacity_waiters", "--max-waiters.", st.max_waiters);
	text_counter(t, "shmlock_grants_total", "Grants of any key, any transport.", st.grants);
	text_counter(t, "shmlock_timeouts_total", "Waits that timed out.", st.timeouts);
	text_counter(t, "shmlock_handoffs_total", "Holds handed directly to a queued waiter.",
		     st.handoffs);
	text_counter(t, "shmlock_lease_expiries_total", "Holds ended by lease expiry.",
		     st.lease_expiries);
	text_counter(t, "shmlock_crash_cleanups_total",
		     "Sessions cleaned up after their process died.", st.crash_cleanups);
	text_counter(t, "shmlock_ttl_expiries_total", "Sessions ended by TTL expiry.",
		     st.ttl_expiries);
	text_counter(t, "shmlock_repairs_total", "Key mutexes repaired after their owner died.",
		     st.repairs);
	text_gauge(t, "shmlock_quarantined_keys",
		   "Key entries quarantined as damaged now (shmlock reset KEY).",
		   st.quarantined_keys);
	text_counter(t, "shmlock_quarantined_total", "Key entries found damaged and quarantined.",
		     st.quarantined);
	text_counter(t, "shmlock_sessions_opened_total", "Sessions opened.", st.sessions_opened);
	text_counter(t, "shmlock_sessions_closed_total",
		     "Sessions ended (closed, expired, cleaned up).", st.sessions_closed);
	histogram(t, "shmlock_wait_seconds",
		  "Time acquires that queued spent waiting, until granted or timed out "
		  "(acquires granted at once are not timed).",
		  &wait);
	histogram(t, "shmlock_hold_seconds",
		  "Time from grant to release of holds that had queued and were released "
		  "by their holder.",
		  &hold);
}
