// SPDX-License-Identifier: MIT
/*
 * Talking to the service manager (sd_notify(3)): READY=1 once the segment is
 * attached and the sessions re-adopted, a STATUS= line with live counts,
 * WATCHDOG=1 pings, STOPPING=1, and the segment's fd in the fd store.
 *
 * The pings are timers of the event loop (TIMER_NOTIFY), not a thread of
 * their own: a loop that is stuck stops pinging, and that is exactly what
 * the watchdog is there to catch.
 *
 * Without $NOTIFY_SOCKET every call here returns at once: a broker run by
 * hand pays nothing, not even the STATUS scans.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "broker.h"
#include "clock.h"

/* Modest: a STATUS scan reads the session, key and node tables, so it runs
 * every 2 s, or less often on tables so large that a scan takes more than
 * 1% of that (see status_interval()). */
#define STATUS_INTERVAL_NS 2000000000ull
#define STATUS_MAX_SHARE 100

/* The fd store entry's name; shmlockd.service passes it back under it. */
#define STORE_NAME "segment"

int notify_stored_fd(const char *name)
{
	char **names = NULL;
	int n, i, fd = -1;

	/* Leave the environment alone: listen_setup() reads it again. */
	n = sd_listen_fds_with_names(0, &names);
	for (i = 0; i < n; i++) {
		struct stat st;
		int cand = SD_LISTEN_FDS_START + i;

		if (fd < 0 && names && !strcmp(names[i], name) && fstat(cand, &st) == 0 &&
		    S_ISREG(st.st_mode))
			fd = cand;
	}
	if (names) {
		for (i = 0; i < n; i++)
			free(names[i]);
		free(names);
	}
	return fd;
}

struct counts {
	unsigned sessions, keys, holds, waiters;
};

/*
 * Read without locks: the numbers are for an operator's eyes, and a value
 * torn by a concurrent change is corrected by the next refresh. Every index
 * comes from our own copy of the caps.
 */
static void count_live(const struct segment *seg, struct counts *c)
{
	uint32_t i;

	memset(c, 0, sizeof(*c));
	for (i = 0; i < seg->caps.max_sessions; i++)
		if (SESS_STATE(atomic_load(&seg->sessions[i].state_gen)) == SESS_ACTIVE)
			c->sessions++;
	for (i = 0; i < seg->caps.max_keys; i++)
		if (atomic_load(&seg->keys[i].state) == KEY_USED)
			c->keys++;
	for (i = 0; i < seg->nnodes; i++) {
		uint64_t w = atomic_load(&seg->nodes[i].word);

		if (seg_node_is_hold(seg, i, w))
			c->holds++;
		else if (NODE_STATE(w) == NODE_WAITING)
			c->waiters++;
	}
}

static uint64_t status_cost_ns; /* how long the last STATUS scan took */

static uint64_t status_interval(void)
{
	uint64_t share = status_cost_ns * STATUS_MAX_SHARE;

	return share > STATUS_INTERVAL_NS ? share : STATUS_INTERVAL_NS;
}

static void send_status(struct broker *b)
{
	uint64_t t0 = mono_ns();
	struct counts c;
	char line[sizeof(b->status)];

	count_live(&b->seg, &c);
	status_cost_ns = mono_ns() - t0;
	snprintf(line, sizeof(line), "%u sessions, %u keys, %u holds, %u waiters", c.sessions,
		 c.keys, c.holds, c.waiters);
	if (!strcmp(line, b->status))
		return; /* unchanged: spare the manager a message */
	strcpy(b->status, line);
	sd_notifyf(0, "STATUS=%s", line);
}

/*
 * Keep the segment in the fd store so that it survives even if its name is
 * unlinked. Remove what the store held first: a segment that did not come
 * from the store replaced the stored one (or there was none), and two entries
 * of the same name would leave the next broker guessing.
 */
static void store_segment(struct broker *b)
{
	int fd = b->keep_fd, r;

	if (b->seg_from_store)
		return; /* the manager has it already */
	sd_notify(0, "FDSTOREREMOVE=1\nFDNAME=" STORE_NAME);
	r = sd_pid_notify_with_fds(0, 0, "FDSTORE=1\nFDNAME=" STORE_NAME, &fd, 1);
	if (r < 0)
		blog(LOG_WARNING, "cannot pass the segment to the fd store: %s", strerror(-r));
}

void notify_ready(struct broker *b)
{
	uint64_t usec = 0;

	b->notify = getenv("NOTIFY_SOCKET") != NULL;
	if (!b->notify)
		return;
	store_segment(b);
	/* sd_watchdog_enabled() also checks WATCHDOG_PID names us. */
	if (sd_watchdog_enabled(0, &usec) > 0 && usec)
		b->watchdog_ns = usec * 1000ull / 2;
	b->status[0] = '\0';
	send_status(b);
	sd_notify(0, "READY=1");
	broker_schedule(b, mono_ns() + status_interval(), TIMER_NOTIFY, NOTIFY_STATUS, 0);
	if (b->watchdog_ns) {
		sd_notify(0, "WATCHDOG=1");
		broker_schedule(b, mono_ns() + b->watchdog_ns, TIMER_NOTIFY, NOTIFY_WATCHDOG, 0);
	}
}

void notify_due(struct broker *b, uint32_t what)
{
	if (!b->notify || b->stopping)
		return;
	if (what == NOTIFY_STATUS) {
		send_status(b);
		broker_schedule(b, mono_ns() + status_interval(), TIMER_NOTIFY, NOTIFY_STATUS, 0);
	} else if (what == NOTIFY_WATCHDOG && b->watchdog_ns) {
		sd_notify(0, "WATCHDOG=1");
		broker_schedule(b, mono_ns() + b->watchdog_ns, TIMER_NOTIFY, NOTIFY_WATCHDOG, 0);
	}
}

void notify_stopping(struct broker *b)
{
	if (!b->notify)
		return;
	/* The segment is about to go: a stored fd would bring it back. */
	if (b->opts.destroy_segment_on_exit && b->owns_segment)
		sd_notify(0, "STOPPING=1\nSTATUS=stopping; removing the segment\n"
			     "FDSTOREREMOVE=1\nFDNAME=" STORE_NAME);
	else
		sd_notify(0,
			  "STOPPING=1\nSTATUS=stopping; the segment and every hold stay in place");
}
