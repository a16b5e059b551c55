// SPDX-License-Identifier: MIT
/*
 * The event loop: one epoll over the control socket, its connections, every
 * session's pidfd, a timerfd for the deadline heap and a signalfd. Nothing in
 * it blocks on a client: connections are non-blocking and each carries one
 * request and one reply.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <syslog.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "broker.h"
#include "clock.h"
#include "conns.h"
#include "operator.h"
#include "procinfo.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77 /* Linux 6.5; missing from 6.1 UAPI headers */
#endif

/* The peer's pidfd: SO_PEERPIDFD, else SO_PEERCRED + pidfd_open, checked
 * against the start time the client reported so a reused pid is refused. */
static int peer_pidfd(struct broker *b, int conn, const struct ucred *cred, uint64_t claimed_start,
		      uint64_t *start)
{
	socklen_t len = sizeof(int);
	int fd = -1;

	if (b->opts.force_pidfd_fallback ||
	    getsockopt(conn, SOL_SOCKET, SO_PEERPIDFD, &fd, &len) < 0)
		fd = -1;
	if (fd < 0) {
		fd = (int)syscall(SYS_pidfd_open, cred->pid, 0);
		if (fd < 0)
			return -LOCAL_EDENIED;
	}
	if (proc_start_time(cred->pid, start) || (claimed_start && *start != claimed_start)) {
		close(fd);
		return -LOCAL_EDENIED;
	}
	return fd;
}

static int handle_open(struct broker *b, int conn, const struct proto_open *req,
		       struct proto_reply *rep)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	uint64_t start = 0;
	int pidfd, err;

	if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return -LOCAL_EDENIED;
	err = access_check(b, conn, &cred);
	if (err) {
		blog(LOG_WARNING, "refused a session to uid %u (pid %d): not in --allow-uid/gid",
		     (unsigned)cred.uid, (int)cred.pid);
		return err;
	}
	err = shm_revalidate(b);
	if (err)
		return err;
	pidfd = peer_pidfd(b, conn, &cred, req->start_time, &start);
	if (pidfd < 0)
		return pidfd;
	err = session_open(b, req, pidfd, cred.pid, cred.uid, start, rep);
	if (err)
		close(pidfd);
	return err;
}

/* Operator actions: the same peers as may open sessions. Logged with the
 * operator's uid and pid (who did it, for the audit trail),
 * before the action's own lines. */
static int operator_allowed(struct broker *b, int conn, const char *what, const char *arg)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	int err;

	if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return -LOCAL_EDENIED;
	err = access_check(b, conn, &cred);
	/* Refusals are a peer's to trigger at will: limited like any such
	 * line. What an admitted operator did is the audit trail: never. */
	if (err)
		blog(LOG_WARNING, "operator request %s %s from uid %u, pid %d: refused", what, arg,
		     (unsigned)cred.uid, (int)cred.pid);
	else
		blog_audit(LOG_NOTICE, "operator request %s %s from uid %u, pid %d", what, arg,
			   (unsigned)cred.uid, (int)cred.pid);
	return err;
}

/*
 * MSG_CLOSE names a session by its id, which is the capability; the id of
 * a session is also readable by anyone the segment is shared with. The
 * close is therefore held to the same peers as MSG_DESTROY: those the
 * allow lists admit (always root and the broker's user). A peer refused
 * sessions cannot end anyone's.
 */
static int close_allowed(struct broker *b, int conn)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	int err;

	if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return -LOCAL_EDENIED;
	err = access_check(b, conn, &cred);
	if (err)
		blog(LOG_WARNING,
		     "refused to close a session for uid %u (pid %d): not in "
		     "--allow-uid/gid",
		     (unsigned)cred.uid, (int)cred.pid);
	return err;
}

/* MSG_BIND: only the session's own process may bind its child. */
static int bind_allowed(struct broker *b, int conn, const struct proto_bind *req)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return -LOCAL_EDENIED;
	return session_bind(b, req->id, cred.pid, req->pid);
}

static void send_reply(int conn, const struct proto_reply *rep, int fd)
{
	/* Non-blocking: a client that does not read its reply loses it. */
	send_with_fd(conn, rep, sizeof(*rep), fd, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static void loop_handle_conn(struct broker *b, int conn)
{
	char buf[PROTO_MAX_MSG + 1];
	union proto_request req;
	struct proto_reply rep;
	char what[2 * LOCAL_KEY_MAX + 2];
	ssize_t n;
	int type, fd = -1;

	n = recv(conn, buf, sizeof(buf), MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	memset(&rep, 0, sizeof(rep));
	proto_init_hdr(&rep.hdr, MSG_REPLY, sizeof(rep));
	rep.seg_abi = SEG_ABI;
	if (n > 0) {
		type = proto_decode_request(buf, (size_t)n, &req);
		if (type >= MSG_OP_FIRST && type <= MSG_OP_LAST) {
			operator_serve(b, conn, type, &req.op); /* replies itself */
			goto out;
		}
		switch (type) {
		case MSG_OPEN:
			rep.status = handle_open(b, conn, &req.open, &rep);
			if (!rep.status)
				fd = b->shm_fd;
			break;
		case MSG_CLOSE:
			rep.status = close_allowed(b, conn);
			if (!rep.status)
				rep.status = session_close_id(b, req.sid.id, true);
			break;
		case MSG_BIND:
			rep.status = bind_allowed(b, conn, &req.bind);
			break;
		case MSG_DESTROY:
			hex_encode(req.sid.id, sizeof(req.sid.id), what);
			rep.status = operator_allowed(b, conn, "to destroy session", what);
			if (!rep.status)
				rep.status = session_close_id(b, req.sid.id, false);
			break;
		case MSG_FORCE_RELEASE:
			snprintf(what, sizeof(what), "%.*s", (int)req.force.key_len, req.force.key);
			rep.status = operator_allowed(b, conn, "to force-release", what);
			if (!rep.status)
				rep.status = force_release(b, &req.force);
			break;
		default:
			rep.status = type; /* -LOCAL_EVERSION or -LOCAL_EPROTO */
			blog(LOG_DEBUG, "bad request (%zd bytes): %s", n, local_strerror(type));
		}
		send_reply(conn, &rep, fd);
	}
out:
	conns_forget(b, conn);
	loop_unwatch(b, conn);
	close(conn);
}

static void arm_timer(struct broker *b)
{
	struct itimerspec its = { { 0, 0 }, { 0, 0 } };
	struct timer t;
	uint64_t at;

	if (!timer_peek(&b->timers, &t)) {
		if (b->armed_ns) {
			timerfd_settime(b->timerfd, TFD_TIMER_ABSTIME, &its, NULL);
			b->armed_ns = 0;
		}
		return;
	}
	at = t.at_ns ? t.at_ns : 1;
	if (at == b->armed_ns)
		return;
	its.it_value.tv_sec = (time_t)(at / 1000000000ull);
	its.it_value.tv_nsec = (long)(at % 1000000000ull);
	timerfd_settime(b->timerfd, TFD_TIMER_ABSTIME, &its, NULL);
	b->armed_ns = at;
}

/* A safety net for deaths no pidfd reports (sessions without a process
 * check): a mutex left by a dead owner is repaired within a second. */
#define SCAN_INTERVAL_NS 1000000000ull

/* Damage is repaired or quarantined by whoever meets it, often a client:
 * the broker says so in its log, naming the keys taken out of service. */
static void report_quarantine(struct broker *b)
{
	uint64_t now = atomic_load(&b->seg.hdr->stats.quarantined);
	char names[512] = "", label[160];
	size_t used = 0;
	uint32_t i;

	if (now == b->quarantined_seen)
		return;
	for (i = 0; i < b->seg.caps.max_keys && used + sizeof(label) < sizeof(names); i++) {
		int n;

		if (atomic_load(&b->seg.keys[i].state) != KEY_QUARANTINED)
			continue;
		n = snprintf(names + used, sizeof(names) - used, "%s%s", used ? ", " : "",
			     operator_key_label(&b->seg, i, label, sizeof(label)));
		if (n > 0)
			used += (size_t)n;
	}
	blog(LOG_WARNING,
	     "%llu key entr%s found damaged and quarantined (%s); "
	     "see shmlock keys -quarantined, and shmlock reset KEY to bring one back",
	     (unsigned long long)(now - b->quarantined_seen),
	     now - b->quarantined_seen == 1 ? "y" : "ies", names[0] ? names : "none left");
	b->quarantined_seen = now;
}

static void periodic_scan(struct broker *b)
{
	report_quarantine(b);
	shm_revalidate(b);
	conns_expire(b);
	blog_tick();
	sessions_reclaim_untracked(b);
	repair_dead_mutexes(b);
	grant_stranded(b);
	broker_schedule(b, mono_ns() + SCAN_INTERVAL_NS, TIMER_SCAN, 0, 0);
}

/* Reclaim keys idle (no holder, waiter or watcher) for --gc-idle. */
static void periodic_gc(struct broker *b)
{
	uint64_t idle_ns = (uint64_t)b->opts.gc_idle_ms * 1000000ull;
	uint32_t n = keytab_reclaim_idle(&b->seg, idle_ns, UINT32_MAX, BROKER_LOCK_MS);

	if (n)
		blog(LOG_DEBUG, "reclaimed %u idle key(s)", n);
	broker_schedule(
		b, mono_ns() + (idle_ns / 4 > SCAN_INTERVAL_NS ? idle_ns / 4 : SCAN_INTERVAL_NS),
		TIMER_GC, 0, 0);
}

static void handle_timers(struct broker *b)
{
	uint64_t expirations, now = mono_ns();
	struct timer t;

	if (read(b->timerfd, &expirations, sizeof(expirations)) < 0 && errno != EAGAIN)
		blog(LOG_WARNING, "timerfd: %s", strerror(errno));
	b->armed_ns = 0;
	while (timer_peek(&b->timers, &t) && t.at_ns <= now) {
		timer_pop(&b->timers);
		if (t.owner)
			faces_timer(b, t.owner, t.kind, t.a, t.b);
		else if (t.kind == TIMER_TTL)
			session_ttl_due(b, t.a, t.b);
		else if (t.kind == TIMER_DELAY)
			key_delay_due(b, t.a);
		else if (t.kind == TIMER_SCAN)
			periodic_scan(b);
		else if (t.kind == TIMER_LEASE)
			lease_due(b, t.a, t.at_ns);
		else if (t.kind == TIMER_GC)
			periodic_gc(b);
		else if (t.kind == TIMER_SWEEP)
			session_sweep_due(b, t.a, t.b);
		else if (t.kind == TIMER_NOTIFY)
			notify_due(b, t.a);
		else if (t.kind == TIMER_LISTEN_REARM)
			conns_rearm(b);
	}
}

static void timer_ready(struct broker *b, int fd, uint32_t events, void *ctx)
{
	(void)fd;
	(void)events;
	(void)ctx;
	handle_timers(b);
}

static void handle_signal(struct broker *b)
{
	struct signalfd_siginfo si;

	if (read(b->sigfd, &si, sizeof(si)) != sizeof(si))
		return;
	if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
		blog(LOG_NOTICE, "signal %u: stopping%s", si.ssi_signo,
		     b->opts.destroy_segment_on_exit
			     ? " and removing the segment"
			     : "; the segment and every hold stay in place");
		b->stopping = true;
	}
}

static void signal_ready(struct broker *b, int fd, uint32_t events, void *ctx)
{
	(void)fd;
	(void)events;
	(void)ctx;
	handle_signal(b);
}

static int loop_setup(struct broker *b)
{
	sigset_t mask;
	int err;

	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);
	b->epfd = epoll_create1(EPOLL_CLOEXEC);
	b->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	b->sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (b->epfd < 0 || b->timerfd < 0 || b->sigfd < 0)
		return -errno;
	err = conns_init(b, loop_handle_conn);
	if (!err)
		err = loop_watch(b, b->timerfd, EPOLLIN, timer_ready, NULL);
	if (!err)
		err = loop_watch(b, b->sigfd, EPOLLIN, signal_ready, NULL);
	return err;
}

/*
 * Stopping: accept nothing more (under socket activation what waits in the
 * backlog stays there for the next broker) but answer the requests already
 * accepted and sent, so that no OPEN or CLOSE is dropped half-done.
 */
static void drain_requests(struct broker *b)
{
	struct epoll_event ev[64];
	bool more = true;
	int n, i;

	loop_unwatch(b, b->listen_fd);
	while (more) {
		more = false;
		n = epoll_wait(b->epfd, ev, 64, 0);
		for (i = 0; i < n; i++)
			if (loop_dispatch(b, &ev[i], conns_request_ready))
				more = true;
	}
}

/*
 * Rings made by the broker itself (seg.ring_local): leases its in-process
 * sessions took and grants to waiters it armed; and work the faces deferred
 * to the end of the turn (HTTP daemons to run for answers resumed). They are handled here, at the end of the turn that
 * made them, as the eventfd of the doorbell thread
 * would be, without a futex wake, an eventfd write and read and one more
 * epoll turn per ring. What this handling does may ring again (a resumed
 * connection takes a lease): a few rounds, then the next turn does not
 * sleep.
 */
static bool local_rings(struct broker *b)
{
	int round;

	for (round = 0; round < 4; round++) {
		bool rung = b->seg.rung_local;

		if (rung) {
			b->seg.rung_local = false;
			leases_collect(b);
			faces_doorbell(b);
		}
		/* Answers resumed in this turn (libmicrohttpd sends them only
		 * when it runs). */
		if (!faces_deferred(b, true) && !rung)
			break;
	}
	return b->seg.rung_local || faces_deferred(b, false);
}

int loop_run(struct broker *b)
{
	struct epoll_event ev[64];
	int err = loop_setup(b), n, i;

	if (err)
		return err;
	b->served = true;
	b->seg.lock_budgeted = true;
	b->seg.lock_budget_ns = BROKER_TURN_LOCK_MS * 1000000ull;
	sessions_adopt(b);
	broker_schedule(b, mono_ns() + SCAN_INTERVAL_NS, TIMER_SCAN, 0, 0);
	if (b->opts.gc_idle_ms)
		broker_schedule(b, mono_ns() + SCAN_INTERVAL_NS, TIMER_GC, 0, 0);
	err = leases_start(b);
	if (!err)
		err = faces_start(b);
	if (err)
		return err;
	b->seg.ring_local = true; /* from here on the loop sees its own rings */
	notify_ready(b);	  /* READY=1: segment attached, sessions re-adopted */
	blog(LOG_INFO, "ready on %s, segment %s",
	     b->listen_owned ? b->opts.socket_path : "the socket-activated socket",
	     b->opts.shm_name);
	/* Stopping waits for the faces to drain (each bounds its own). */
	while (!b->stopping || !faces_drained(b)) {
		bool more = local_rings(b);

		arm_timer(b);
		n = epoll_wait(b->epfd, ev, 64, more ? 0 : b->stopping ? 20 : -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		b->seg.lock_budget_ns = BROKER_TURN_LOCK_MS * 1000000ull; /* a new turn */
		for (i = 0; i < n; i++)
			loop_dispatch(b, &ev[i], NULL);
	}
	notify_stopping(b);
	drain_requests(b);
	local_rings(b);
	faces_stop(b);
	leases_stop(b);
	conns_fini(b);
	return 0;
}
