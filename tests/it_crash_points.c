// SPDX-License-Identifier: MIT
/*
 * Crash points: kill a client at every numbered point of CRASH_POINT_LIST
 * (libshm/crashpoint.h), then check that the broker's cleanup and the next
 * users of the key recover: the dead session is gone, the segment invariants
 * hold, the right party gets the key next (FIFO kept), tokens keep rising,
 * and no node leaks.
 *
 * One test per declared point is generated from the list itself, so a point
 * declared without a scenario here fails (and so does the coverage test).
 *
 * Only in builds with -DLOCAL_CRASH_POINTS: elsewhere CRASH_POINT() is empty,
 * nothing could be reached, and these tests do not exist.
 */
#ifdef LOCAL_CRASH_POINTS
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker_fixture.h"
#include "crashpoint.h"
#include "harness.h"
#include "invariants.h"
#include "word_fixture.h"

#define KEY "crash/point"
#define SEM_KEY "crash/sem"
#define SEM_LIMIT 3
#define STEP_MS 5000	     /* deadline for anything that should happen at once */
#define QUIET_MS 50	     /* how long a party that must not be granted is watched */
#define CANCEL_TIMEOUT_MS 50 /* the crashing child's timed lock */
#define OLD_VALUE "old-value"
#define NEW_VALUE "the-new-value-which-is-longer"

#define CRASHER_ID 9

struct point {
	int n;
	const char *name;
	const char *what;
};

/* The point under test: named in every failure, as several share a scenario. */
static struct point cur = { 0, "?", "?" };

#define CP_FAIL(fmt, ...) \
	FAIL_AT("crash point %d %s (%s): " fmt, cur.n, cur.name, cur.what, ##__VA_ARGS__)

#define CP_CHECK(cond)                                      \
	do {                                                \
		if (!(cond))                                \
			CP_FAIL("CHECK(%s) failed", #cond); \
	} while (0)

#define CP_CHECK_EQ(a, b)                                                         \
	do {                                                                      \
		long long a_ = (long long)(a), b_ = (long long)(b);               \
		if (a_ != b_)                                                     \
			CP_FAIL("%s == %s failed: %lld != %lld", #a, #b, a_, b_); \
	} while (0)

#define CP_CHECK_OK(expr)                                                              \
	do {                                                                           \
		int r_ = (expr);                                                       \
		if (r_)                                                                \
			CP_FAIL("%s returned %d (%s)", #expr, r_, local_strerror(r_)); \
	} while (0)

/* ---- children ------------------------------------------------------------ */

struct crasher_arg {
	const struct broker_proc *b;
	int point;
};

/*
 * The child that dies: arms its crash point, opens a session, then runs the
 * commands it is sent, one reply each ("got ID TOKEN", "error RC",
 * "released RC"). At the armed point it ends with _exit(CRASH_EXIT_CODE),
 * which the parent sees as the pipe closing.
 */
static void crasher_child(void *p, int in, int out)
{
	const struct crasher_arg *a = p;
	char num[16], cmd[64];
	local_session *s;

	/* Before the first liblocal call: crash_point_hit() reads it once. */
	snprintf(num, sizeof(num), "%d", a->point);
	if (setenv("SHMLOCK_CRASH_AT", num, 1))
		_exit(2);
	/* Points of the mutex path that the lock-free path would bypass. */
	if ((a->point >= CP_GRANT_CLAIMED && a->point <= CP_GRANT_DONE) ||
	    a->point == CP_REL_UNLINKED || a->point == CP_REL_FREED ||
	    a->point == CP_SLOT_GIVEN_NAMED || a->point == CP_SLOT_GIVEN_UNLISTED)
		setenv("SHMLOCK_NO_FAST_PATH", "1", 1);
	/* A twin's commit is made for it while it stands stopped after its own
	 * (scenario_slot_twin()). */
	if (a->point == CP_SLOT_YIELDED || a->point == CP_SLOT_SETTLED) {
		snprintf(num, sizeof(num), "%d", CP_SLOT_ACQ_PUBLISHED);
		setenv("SHMLOCK_STOP_AT", num, 1);
	}
	s = open_session(a->b, "crasher", 0, 0);
	say(out, "open");
	while (!hear(in, cmd, sizeof(cmd))) {
		LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = -1);
		uint64_t tok = 0;
		int r;

		if (!strcmp(cmd, "exit"))
			break;
		if (!strcmp(cmd, "release")) {
			say(out, "released %d", local_release(s, KEY));
			continue;
		}
		if (!strcmp(cmd, "handle")) {
			/* By a key handle: the second lock takes back the node
			 * the release left it (FAST_ACQ_TAKEN). The handle is
			 * left open: the child exits, or dies, with it. */
			local_key *h = NULL;

			o.timeout_ms = 0;
			r = local_key_open(s, KEY, &h);
			if (!r)
				r = local_key_lock(h, &o, NULL);
			if (!r)
				r = local_key_release(h);
			if (!r)
				r = local_key_lock(h, &o, &tok);
			if (r)
				say(out, "error %d", r);
			else
				say(out, "got %d %llu", CRASHER_ID, (unsigned long long)tok);
			continue;
		}
		if (!strcmp(cmd, "semtry")) {
			o.timeout_ms = 0;
			r = local_sem_acquire(s, SEM_KEY, SEM_LIMIT, &o, &tok);
			if (r)
				say(out, "error %d", r);
			else
				say(out, "got %d %llu", CRASHER_ID, (unsigned long long)tok);
			continue;
		}
		if (!strcmp(cmd, "info") || !strcmp(cmd, "seminfo")) {
			/* Takes the key mutex, as any mutex-path call would. */
			static LOCAL_OPTS(local_key_info, ii);

			say(out, "info %d", local_info(s, cmd[0] == 's' ? SEM_KEY : KEY, &ii));
			continue;
		}
		if (!strcmp(cmd, "watch")) {
			/* Watch for the next change of the key (the observer
			 * makes it), with a timeout so that it returns. */
			static LOCAL_OPTS(local_key_info, wi);
			uint64_t idx = 0;

			if (!local_info(s, KEY, &wi))
				idx = wi.modify_index;
			r = local_watch(s, KEY, idx, STEP_MS, &wi);
			say(out, "watched %d", r);
			continue;
		}
		if (!strcmp(cmd, "try")) {
			o.timeout_ms = 0;
		} else if (!strcmp(cmd, "timed")) {
			o.timeout_ms = CANCEL_TIMEOUT_MS;
		} else if (!strcmp(cmd, "value")) {
			o.timeout_ms = 0;
			o.value = NEW_VALUE;
			o.value_len = strlen(NEW_VALUE);
		} else if (strcmp(cmd, "lock")) {
			say(out, "bad command %s", cmd);
			continue;
		}
		r = local_lock(s, KEY, &o, &tok);
		if (r)
			say(out, "error %d", r);
		else
			say(out, "got %d %llu", CRASHER_ID, (unsigned long long)tok);
	}
	local_session_close(s);
}

struct waiter_arg {
	const struct broker_proc *b;
	int id;
};

/* A well-behaved client: queue on the key at once, report the grant, release
 * on command, close its session on "exit". */
static void waiter_child(void *p, int in, int out)
{
	const struct waiter_arg *a = p;
	char name[32], cmd[64];
	local_session *s;
	uint64_t tok = 0;
	int r;

	snprintf(name, sizeof(name), "waiter-%d", a->id);
	s = open_session(a->b, name, 0, 0);
	say(out, "open");
	r = local_lock(s, KEY, NULL, &tok);
	if (r)
		say(out, "error %d", r);
	else
		say(out, "got %d %llu", a->id, (unsigned long long)tok);
	while (!hear(in, cmd, sizeof(cmd))) {
		if (!strcmp(cmd, "exit"))
			break;
		if (!strcmp(cmd, "release"))
			say(out, "released %d", local_release(s, KEY));
	}
	local_session_close(s);
}

/* ---- the parent's side ---------------------------------------------------- */

struct world {
	struct broker_proc b;
	local_session *obs; /* the observer: this process */
	struct child crasher;
	struct crasher_arg ca;
	unsigned long long last; /* the highest token seen granted so far */
};

static struct local_key_info *key_info(local_session *s)
{
	static char value[LOCAL_VALUE_MAX];
	static LOCAL_OPTS(local_key_info, info, .value_buf = value,
			  .value_buf_size = sizeof(value));

	CP_CHECK_OK(local_info(s, KEY, &info));
	return &info;
}

static unsigned waiters_of(local_session *s)
{
	static LOCAL_OPTS(local_key_info, info);

	return local_info(s, KEY, &info) ? ~0u : info.waiters;
}

/*
 * Print the key's nodes as the segment has them, without the key mutex:
 * taking it could run repair and hide what the crash left behind.
 */
static void dump_key(local_session *s)
{
	struct segment *seg = s->seg;
	uint32_t i, k;

	for (k = 0; k < seg->caps.max_keys; k++) {
		struct seg_key *key = &seg->keys[k];

		if (atomic_load(&key->state) != KEY_USED || strcmp(key->key, KEY))
			continue;
		fprintf(stderr,
			"    key %u: holders %u waiters %u h_head %d q_head %d q_tail %d "
			"lock_index %llu\n",
			k, key->holders, key->waiters, (int)key->h_head, (int)key->q_head,
			(int)key->q_tail, (unsigned long long)key->lock_index);
		for (i = 0; i < seg->nnodes; i++) {
			struct seg_node *n = &seg->nodes[i];
			uint64_t w = atomic_load(&n->word);

			if (!w || NODE_KEY(w) != k)
				continue;
			fprintf(stderr,
				"    node %u: state %u session %u hold %d futex %u seq %llu "
				"token %llu\n",
				i, NODE_STATE(w), NODE_SESSION(w), (int)n->hold,
				atomic_load(&n->futex), (unsigned long long)n->seq,
				(unsigned long long)n->token);
		}
	}
}

/* Has child @c written something (or died) within @timeout_ms? Reads nothing. */
static bool poll_readable(struct child *c, int timeout_ms)
{
	struct pollfd p = { .fd = c->rd, .events = POLLIN };

	return poll(&p, 1, timeout_ms) == 1;
}

/*
 * Read a grant from child @c (@who, for messages) and check its token rises.
 * @behind, if any, is queued behind @c: when @c gets nothing, say whether
 * @behind got the key instead (FIFO broken) or nobody did.
 */
static void expect_grant(struct world *w, struct child *c, int id, const char *who,
			 struct child *behind)
{
	unsigned long long tok;
	char line[128];
	int r = child_read(c, line, sizeof(line), STEP_MS), got;

	if (r) {
		dump_key(w->obs);
		CP_FAIL("%s was not granted within %d ms (%s)%s", who, STEP_MS,
			r == -ETIMEDOUT ? "no reply" : "its pipe closed",
			behind && poll_readable(behind, 0) ? "; the one queued behind it was" : "");
	}
	if (sscanf(line, "got %d %llu", &got, &tok) != 2 || got != id)
		CP_FAIL("%s: expected a grant, got \"%s\"", who, line);
	if (tok <= w->last)
		CP_FAIL("%s: token %llu is not above the last one granted, %llu", who, tok,
			w->last);
	w->last = tok;
}

static void expect_no_grant(struct child *c, const char *who)
{
	char line[128];
	int r = child_read(c, line, sizeof(line), QUIET_MS);

	if (r != -ETIMEDOUT)
		CP_FAIL("%s should still be queued, but %s%s%s", who,
			r ? "its pipe closed" : "said \"", r ? "" : line, r ? "" : "\"");
}

static void release_child(struct child *c, const char *who)
{
	char line[128];

	child_send(c, "release");
	if (child_read(c, line, sizeof(line), STEP_MS) || strcmp(line, "released 0"))
		CP_FAIL("%s: release failed", who);
}

static void end_child(struct child *c)
{
	int status;

	child_send(c, "exit");
	status = child_wait(c, STEP_MS);
	CP_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/*
 * Is process @pid's request on the key queued and asleep on its futex? Read
 * from the segment without the key mutex: only atomic words are looked at.
 */
static bool parked(local_session *s, pid_t pid)
{
	struct segment *seg = s->seg;
	uint32_t slot, i;

	for (slot = 0; slot < seg->caps.max_sessions; slot++)
		if (SESS_STATE(atomic_load(&seg->sessions[slot].state_gen)) == SESS_ACTIVE &&
		    seg->sessions[slot].pid == pid)
			break;
	if (slot == seg->caps.max_sessions)
		return false;
	for (i = 0; i < seg->nnodes; i++) {
		uint64_t w = atomic_load(&seg->nodes[i].word);

		if (NODE_STATE(w) == NODE_WAITING && NODE_SESSION(w) == slot)
			return atomic_load(&seg->nodes[i].futex) == NODE_FUTEX_PARKED;
	}
	return false;
}

/*
 * Wait until child @c's request is queued and asleep. The waiters count
 * alone is not enough: it rises at the enqueue, before the child reaches its
 * sleep, and a grant landing in between exercises the enqueue/park race
 * instead of the crash point a scenario is about.
 */
static void wait_parked(struct world *w, struct child *c, const char *who)
{
	if (!WAIT_FOR(parked(w->obs, c->pid), STEP_MS))
		CP_FAIL("%s did not go to sleep in the queue within %d ms", who, STEP_MS);
}

/*
 * Start a waiter and wait until it is queued: @live sessions and @waiters on
 * the key. Both, because a dead session's node may still count as a waiter
 * until the broker has swept it. Then until it sleeps.
 */
static void spawn_waiter(struct world *w, struct child *c, int id, unsigned live, unsigned waiters)
{
	struct waiter_arg a = { &w->b, id };

	child_spawn(c, waiter_child, &a);
	child_expect(c, "open", STEP_MS);
	if (!WAIT_FOR(live_sessions(w->obs) == live && waiters_of(w->obs) == waiters, STEP_MS))
		CP_FAIL("waiter %d not queued: %u live sessions (want %u), %u waiters (want %u)",
			id, live_sessions(w->obs), live, waiters_of(w->obs), waiters);
	wait_parked(w, c, "a waiter");
}

/* The crasher must die at its point (exit 86), not reply to the command. */
static void expect_crash(struct world *w)
{
	char line[128];
	int r = child_read(&w->crasher, line, sizeof(line), STEP_MS), status;

	if (!r)
		CP_FAIL("point not reached: the child replied \"%s\"", line);
	if (r == -ETIMEDOUT)
		CP_FAIL("point not reached: the child still runs after %d ms", STEP_MS);
	status = child_wait(&w->crasher, STEP_MS);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != CRASH_EXIT_CODE)
		CP_FAIL("the child ended with wait status %#x, not exit %d", (unsigned)status,
			CRASH_EXIT_CODE);
}

static void wait_sessions(struct world *w, unsigned live)
{
	if (!WAIT_SESSIONS(w->obs, live, STEP_MS))
		CP_FAIL("the broker did not clean up the dead session: %u live, want %u",
			live_sessions(w->obs), live);
}

/* The observer takes the key (@try: must be free now) and checks the token. */
static void obs_take(struct world *w, bool try)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = try ? 0 : -1);
	uint64_t tok = 0;

	CP_CHECK_OK(local_lock(w->obs, KEY, &o, &tok));
	if (tok <= w->last)
		CP_FAIL("observer: token %llu is not above the last one granted, %llu",
			(unsigned long long)tok, w->last);
	w->last = tok;
}

static void world_start(struct world *w)
{
	memset(w, 0, sizeof(*w));
	broker_start(&w->b, NULL);
	/*
	 * Fork the crashing child before this process runs any lock code:
	 * crash_point_hit() caches $SHMLOCK_CRASH_AT in a static at its first
	 * call, and fork() copies that cache, so a child forked after our
	 * first lock would never crash.
	 */
	w->ca = (struct crasher_arg){ &w->b, cur.n };
	child_spawn(&w->crasher, crasher_child, &w->ca);
	child_expect(&w->crasher, "open", STEP_MS);
	w->obs = open_session(&w->b, "observer", 0, 0);
}

/* Every child has ended: nothing leaked and the key still works. */
static void world_finish(struct world *w)
{
	CP_CHECK_EQ(w->crasher.pid, 0); /* reaped by expect_crash() */
	wait_sessions(w, 1);
	CP_CHECK_EQ(segment_violations(w->obs), 0);
	CP_CHECK_EQ(used_nodes(w->obs), 0);
	obs_take(w, true);
	CP_CHECK_EQ(used_nodes(w->obs), 1);
	CP_CHECK_OK(local_release(w->obs, KEY));
	CP_CHECK_EQ(used_nodes(w->obs), 0);
	CP_CHECK_EQ(segment_violations(w->obs), 0);
	CP_CHECK_OK(local_session_close(w->obs));
	broker_stop(&w->b);
}

/* After the crash: the key is free, and a waiter queued behind the next
 * holder gets it from that holder's release. */
static void check_free_then_handover(struct world *w)
{
	struct local_key_info *info = key_info(w->obs);
	struct child wk;

	CP_CHECK_EQ(info->holders, 0);
	CP_CHECK_EQ(info->waiters, 0);
	obs_take(w, true);
	CP_CHECK_EQ(segment_violations(w->obs), 0);
	spawn_waiter(w, &wk, 3, 2, 1);
	CP_CHECK_OK(local_release(w->obs, KEY));
	expect_grant(w, &wk, 3, "waiter W", NULL);
	release_child(&wk, "waiter W");
	end_child(&wk);
}

/* ---- scenarios ------------------------------------------------------------ */

/*
 * GRANT_* and FAST_ACQ_*: the child takes the free key and dies in the grant
 * (under the mutex, or lock-free: the key is a lock, idle, in fast mode).
 */
static void scenario_fast_path(struct world *w)
{
	obs_take(w, true); /* creates the key and sets a token baseline */
	CP_CHECK_OK(local_release(w->obs, KEY));
	child_send(&w->crasher, "try");
	expect_crash(w);
	wait_sessions(w, 1);
	CP_CHECK_EQ(segment_violations(w->obs), 0);
	check_free_then_handover(w);
}

/* FAST_ACQ_TAKEN: as the fast path, by a key handle whose release kept its
 * node: the sweep at death frees that node too (nothing in use after). */
static void scenario_handle(struct world *w)
{
	obs_take(w, true);
	CP_CHECK_OK(local_release(w->obs, KEY));
	child_send(&w->crasher, "handle");
	expect_crash(w);
	wait_sessions(w, 1);
	CP_CHECK_EQ(segment_violations(w->obs), 0);
	CP_CHECK_EQ(used_nodes(w->obs), 0);
	check_free_then_handover(w);
}

/* VALUE_WRITTEN: as the fast path, with a value; the published value must be
 * the old one or the new one, whole. */
static void scenario_value(struct world *w)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 0, .value = OLD_VALUE,
		   .value_len = strlen(OLD_VALUE));
	struct local_key_info *info;
	uint64_t tok = 0;

	CP_CHECK_OK(local_lock(w->obs, KEY, &o, &tok));
	w->last = tok;
	CP_CHECK_OK(local_release(w->obs, KEY));
	child_send(&w->crasher, "value");
	expect_crash(w);
	wait_sessions(w, 1);
	CP_CHECK_EQ(segment_violations(w->obs), 0);
	info = key_info(w->obs);
	if (!(info->value_len == strlen(OLD_VALUE) &&
	      !memcmp((char *)info->value_buf, OLD_VALUE, info->value_len)) &&
	    !(info->value_len == strlen(NEW_VALUE) &&
	      !memcmp((char *)info->value_buf, NEW_VALUE, info->value_len)))
		CP_FAIL("torn value: %zu bytes \"%.*s\"", info->value_len,
			(int)(info->value_len < 64 ? info->value_len : 64),
			(char *)info->value_buf);
	check_free_then_handover(w);
}

/*
 * ENQ_* and CANCEL_*: the observer holds, A is queued, the child queues (with
 * @cmd: blocking, or timed so that it times out) and dies, B queues. A and B
 * keep their order.
 */
static void scenario_queue(struct world *w, const char *cmd)
{
	struct local_key_info *info;
	struct child a, b;

	obs_take(w, true);
	spawn_waiter(w, &a, 1, 3, 1);
	child_send(&w->crasher, cmd);
	expect_crash(w);
	/* B races the broker's sweep on purpose: whoever takes the key mutex
	 * first repairs it. Three live sessions means the sweep is done. */
	spawn_waiter(w, &b, 2, 3, 2);
	CP_CHECK_EQ(segment_violations(w->obs), 0);
	info = key_info(w->obs);
	CP_CHECK_EQ(info->holders, 1);
	CP_CHECK_EQ(info->waiters, 2);
	CP_CHECK_OK(local_release(w->obs, KEY));
	expect_grant(w, &a, 1, "waiter A (queued before the crash)", &b);
	expect_no_grant(&b, "waiter B (queued after the crash)");
	CP_CHECK_EQ(segment_violations(w->obs), 0);
	release_child(&a, "waiter A");
	expect_grant(w, &b, 2, "waiter B (queued after the crash)", NULL);
	release_child(&b, "waiter B");
	end_child(&a);
	end_child(&b);
}

static void scenario_enqueue(struct world *w)
{
	scenario_queue(w, "lock");
}

static void scenario_cancel(struct world *w)
{
	scenario_queue(w, "timed");
}

/* REL_* and FAST_REL_*: the child holds the free key and dies releasing it
 * (under the mutex, or lock-free). The key exists and is idle first, so that
 * a lock-free child takes a lock-free hold (FAST_CLAIMED): its release frees
 * that node with a plain store, which the crash cuts off. */
static void scenario_release(struct world *w)
{
	obs_take(w, true);
	CP_CHECK_OK(local_release(w->obs, KEY));
	child_send(&w->crasher, "lock");
	expect_grant(w, &w->crasher, CRASHER_ID, "the crashing child", NULL);
	CP_CHECK_EQ(key_info(w->obs)->holders, 1);
	child_send(&w->crasher, "release");
	expect_crash(w);
	wait_sessions(w, 1);
	CP_CHECK_EQ(segment_violations(w->obs), 0);
	check_free_then_handover(w);
}

/*
 * HANDOFF_* (HANDOFF_UNLOCKED: after the unlock, before the wake-up call): the
 * child holds, A then B queue, the child dies handing the key
 * to A. Nobody touches the key after the crash until A reports: the broker's
 * cleanup alone must finish the hand-over.
 */
static void scenario_handoff(struct world *w)
{
	struct local_key_info *info;
	struct child a, b;

	child_send(&w->crasher, "lock");
	expect_grant(w, &w->crasher, CRASHER_ID, "the crashing child", NULL);
	spawn_waiter(w, &a, 1, 3, 1);
	spawn_waiter(w, &b, 2, 4, 2);
	child_send(&w->crasher, "release");
	expect_crash(w);
	wait_sessions(w, 3);
	if (!poll_readable(&a, STEP_MS)) {
		/* Tell the two ways this can fail apart: is the hand-over just
		 * never finished, or lost for good? Lock the key once (which
		 * repairs it) and see whether A gets it then. */
		dump_key(w->obs);
		if (poll_readable(&b, 0))
			CP_FAIL("waiter B was granted before waiter A, the head of the queue");
		segment_violations(w->obs);
		CP_FAIL("waiter A was not granted within %d ms of the crash with only the broker "
			"cleaning up; after another client locked the key (repair) it %s",
			STEP_MS, poll_readable(&a, STEP_MS) ? "was granted" : "still was not");
	}
	expect_grant(w, &a, 1, "waiter A (head of the queue)", &b);
	expect_no_grant(&b, "waiter B");
	CP_CHECK_EQ(segment_violations(w->obs), 0);
	info = key_info(w->obs);
	CP_CHECK_EQ(info->holders, 1);
	CP_CHECK_EQ(info->waiters, 1);
	CP_CHECK_EQ(info->holder_pid, a.pid);
	/* The crasher's grant and A's: a handoff finished by repair counts. */
	CP_CHECK_EQ(info->lock_index, 2);
	release_child(&a, "waiter A");
	expect_grant(w, &b, 2, "waiter B", NULL);
	release_child(&b, "waiter B");
	end_child(&a);
	end_child(&b);
}

/*
 * GRANTED_CONSUMED: the observer holds, the child then B queue; the observer
 * releases, the child is granted and dies taking the grant. The key must go
 * on to B.
 */
static void scenario_granted(struct world *w)
{
	struct local_key_info *info;
	struct child b;

	obs_take(w, true);
	child_send(&w->crasher, "lock");
	if (!WAIT_FOR(waiters_of(w->obs) == 1, STEP_MS))
		CP_FAIL("the crashing child did not queue");
	wait_parked(w, &w->crasher, "the crashing child");
	spawn_waiter(w, &b, 2, 3, 2);
	CP_CHECK_OK(local_release(w->obs, KEY));
	expect_crash(w);
	wait_sessions(w, 2);
	expect_grant(w, &b, 2, "waiter B (queued after the crashed child)", NULL);
	CP_CHECK_EQ(segment_violations(w->obs), 0);
	info = key_info(w->obs);
	CP_CHECK_EQ(info->holders, 1);
	CP_CHECK_EQ(info->waiters, 0);
	CP_CHECK_EQ(info->holder_pid, b.pid);
	release_child(&b, "waiter B");
	end_child(&b);
}

/* Watch nodes on the key and the key's watcher count, read from the segment
 * without the key mutex (taking it could repair what is being looked at). */
static unsigned watch_nodes(local_session *s)
{
	struct segment *seg = s->seg;
	uint32_t i, k, n = 0;

	for (k = 0; k < seg->caps.max_keys; k++) {
		if (atomic_load(&seg->keys[k].state) != KEY_USED || strcmp(seg->keys[k].key, KEY))
			continue;
		for (i = 0; i < seg->nnodes; i++) {
			uint64_t w = atomic_load(&seg->nodes[i].word);

			if (w && NODE_KEY(w) == k && NODE_STATE(w) == NODE_WATCHING)
				n++;
		}
	}
	return n;
}

static unsigned key_watchers(local_session *s)
{
	struct segment *seg = s->seg;
	uint32_t k;

	for (k = 0; k < seg->caps.max_keys; k++)
		if (atomic_load(&seg->keys[k].state) == KEY_USED && !strcmp(seg->keys[k].key, KEY))
			return atomic_load(&seg->keys[k].watchers);
	return 0;
}

/*
 * WATCH_CLAIMED and UNWATCH_FREED: the observer holds the key, the child
 * watches it and dies registering its watch (under the key mutex), or ending
 * it after the observer's release woke it. With only the broker cleaning up
 * (the sweep of the dead session, or its repair of the dead mutex), no watch
 * node is left and the watcher count is back to 0; then the key is idle: it
 * can be reclaimed, and made and used again.
 */
static void scenario_watch(struct world *w)
{
	struct local_key_info *info;

	obs_take(w, true);
	child_send(&w->crasher, "watch");
	if (cur.n == CP_UNWATCH_FREED) {
		if (!WAIT_FOR(watch_nodes(w->obs) == 1 && key_watchers(w->obs) == 1, STEP_MS))
			CP_FAIL("the child's watch was not registered: %u watch nodes, count %u",
				watch_nodes(w->obs), key_watchers(w->obs));
		CP_CHECK_OK(local_release(w->obs, KEY));
	}
	expect_crash(w);
	wait_sessions(w, 1);
	if (!WAIT_FOR(watch_nodes(w->obs) == 0 && key_watchers(w->obs) == 0, STEP_MS)) {
		dump_key(w->obs);
		CP_FAIL("after the broker's clean-up: %u watch nodes, watcher count %u (want 0, 0)",
			watch_nodes(w->obs), key_watchers(w->obs));
	}
	CP_CHECK_EQ(segment_violations(w->obs), 0);
	CP_CHECK_EQ(key_watchers(w->obs), 0);
	if (cur.n == CP_WATCH_CLAIMED)
		CP_CHECK_OK(local_release(w->obs, KEY));
	info = key_info(w->obs);
	CP_CHECK_EQ(info->holders, 0);
	CP_CHECK_EQ(info->waiters, 0);
	/* Nothing pins it: an idle key is reclaimed. */
	CP_CHECK(keytab_reclaim_idle(w->obs->seg, 0, UINT32_MAX, 0) >= 1);
	CP_CHECK_EQ(key_info(w->obs)->kind, LOCAL_KIND_NONE);
	check_free_then_handover(w);
}

/* Lock and release the key lock-free @n times (the observer): operations
 * that only the next key_lock() counts into lock_index and modify_index. */
static void obs_cycles(struct world *w, int n)
{
	while (n--) {
		obs_take(w, true);
		CP_CHECK_OK(local_release(w->obs, KEY));
	}
}

/* The child takes the key mutex (local_info) and dies at the point. */
static void crash_in_key_lock(struct world *w, const char *cmd)
{
	child_send(&w->crasher, cmd);
	expect_crash(w);
	wait_sessions(w, 1);
}

/*
 * FOLD_NOTED: the observer locks and releases lock-free (nothing counted
 * yet); the child's key_lock() dies while adding those operations in, with
 * their sums noted but not stored. Whoever takes the mutex next (the broker's
 * repair of the dead mutex) finishes the sums: lock_index counts each
 * acquisition exactly once, modify_index at least each change.
 */
static void scenario_fold(struct world *w)
{
	struct local_key_info *info;
	uint64_t li, mi;

	obs_cycles(w, 1);	 /* creates the key */
	info = key_info(w->obs); /* counts what came before */
	li = info->lock_index;
	mi = info->modify_index;
	obs_cycles(w, 3);
	crash_in_key_lock(w, "info");
	CP_CHECK_EQ(segment_violations(w->obs), 0);
	info = key_info(w->obs);
	CP_CHECK_EQ(info->lock_index, li + 3);
	CP_CHECK(info->modify_index >= mi + 6);
	CP_CHECK_EQ(info->holders, 0);
	check_free_then_handover(w);
}

/*
 * FAST_HOLD_ADOPTED: the observer holds the key lock-free; the child's
 * key_lock() turns that hold into an ordinary one and dies with the mutex.
 * The observer still holds, with its token, and releases lock-free; the
 * key goes on.
 */
static void scenario_adopted(struct world *w)
{
	struct local_key_info *info;
	uint64_t tok = 0;

	obs_cycles(w, 1);
	obs_take(w, true);
	tok = w->last;
	crash_in_key_lock(w, "info");
	CP_CHECK_EQ(segment_violations(w->obs), 0);
	info = key_info(w->obs);
	CP_CHECK_EQ(info->holders, 1);
	CP_CHECK_EQ(info->token, tok);
	CP_CHECK_EQ(info->holder_pid, getpid());
	CP_CHECK_OK(local_held(w->obs, KEY, NULL));
	CP_CHECK_OK(local_release(w->obs, KEY));
	CP_CHECK_EQ(used_nodes(w->obs), 0);
	check_free_then_handover(w);
}

/* The observer takes one slot of the semaphore; checks the token. */
static void obs_sem_take(struct world *w)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 0);
	uint64_t tok = 0;

	CP_CHECK_OK(local_sem_acquire(w->obs, SEM_KEY, SEM_LIMIT, &o, &tok));
	if (tok <= w->last)
		CP_FAIL("observer: semaphore token %llu is not above the last one granted, %llu",
			(unsigned long long)tok, w->last);
	w->last = tok;
}

/*
 * SEM_HOLD_LISTED: the observer holds a semaphore slot lock-free (the key's
 * fast word names it); the child's key_lock() moves it into the holder list
 * and dies before the word lets go of it. Repair lists it once: one holder,
 * the observer's, which releases; the semaphore then fills to its limit.
 */
static void scenario_sem_listed(struct world *w)
{
	static LOCAL_OPTS(local_key_info, si);
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 0);
	local_session *more[SEM_LIMIT];
	int i;

	obs_sem_take(w); /* creates the key (under the mutex) */
	CP_CHECK_OK(local_release(w->obs, SEM_KEY));
	obs_sem_take(w); /* lock-free now */
	crash_in_key_lock(w, "seminfo");
	CP_CHECK_EQ(segment_violations(w->obs), 0);
	CP_CHECK_OK(local_info(w->obs, SEM_KEY, &si));
	CP_CHECK_EQ(si.holders, 1);
	CP_CHECK_OK(local_held(w->obs, SEM_KEY, NULL));
	CP_CHECK_OK(local_release(w->obs, SEM_KEY));
	CP_CHECK_EQ(used_nodes(w->obs), 0);
	for (i = 0; i < SEM_LIMIT; i++) {
		char name[16];

		snprintf(name, sizeof(name), "sem-%d", i);
		more[i] = open_session(&w->b, name, 0, 0);
		CP_CHECK_OK(local_sem_acquire(more[i], SEM_KEY, SEM_LIMIT, &o, NULL));
	}
	CP_CHECK_EQ(local_sem_acquire(w->obs, SEM_KEY, SEM_LIMIT, &o, NULL), -EBUSY);
	CP_CHECK_EQ(segment_violations(w->obs), 0);
	for (i = 0; i < SEM_LIMIT; i++) {
		CP_CHECK_OK(local_release(more[i], SEM_KEY));
		CP_CHECK_OK(local_session_close(more[i]));
	}
	CP_CHECK(WAIT_SESSIONS(w->obs, 1, STEP_MS));
	CP_CHECK_OK(local_info(w->obs, SEM_KEY, &si));
	CP_CHECK_EQ(si.holders, 0);
}

/* The semaphore's entry (IDX_NONE: none), from the segment. */
static uint32_t sem_entry(local_session *s)
{
	uint32_t i;

	for (i = 0; i < s->seg->caps.max_keys; i++)
		if (atomic_load(&s->seg->keys[i].state) == KEY_USED &&
		    !strcmp(s->seg->keys[i].key, SEM_KEY))
			return i;
	return IDX_NONE;
}

/*
 * After a crash on the semaphore, the observer holding one unit with token
 * @tok: the dead session's unit is back (the observer and SEM_LIMIT - 1
 * others fill the semaphore, and one more is refused), nothing leaks, and
 * the invariants hold throughout.
 */
static void sem_after_crash(struct world *w, uint64_t tok)
{
	static LOCAL_OPTS(local_key_info, si);
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 0);
	local_session *more[SEM_LIMIT];
	uint64_t held = 0;
	int i;

	CP_CHECK_EQ(segment_violations(w->obs), 0);
	CP_CHECK_OK(local_info(w->obs, SEM_KEY, &si));
	CP_CHECK_EQ(si.holders, 1);
	CP_CHECK_OK(local_held(w->obs, SEM_KEY, &held));
	CP_CHECK_EQ(held, tok);
	for (i = 0; i < SEM_LIMIT; i++) {
		char name[16];

		snprintf(name, sizeof(name), "sem-%d", i);
		more[i] = open_session(&w->b, name, 0, 0);
		if (i < SEM_LIMIT - 1)
			CP_CHECK_OK(local_sem_acquire(more[i], SEM_KEY, SEM_LIMIT, &o, NULL));
		else
			CP_CHECK_EQ(local_sem_acquire(more[i], SEM_KEY, SEM_LIMIT, &o, NULL),
				    -EBUSY);
	}
	CP_CHECK_EQ(segment_violations(w->obs), 0);
	CP_CHECK_OK(local_release(w->obs, SEM_KEY));
	CP_CHECK_OK(local_sem_acquire(more[SEM_LIMIT - 1], SEM_KEY, SEM_LIMIT, &o, NULL));
	for (i = 0; i < SEM_LIMIT; i++) {
		CP_CHECK_OK(local_release(more[i], SEM_KEY));
		CP_CHECK_OK(local_session_close(more[i]));
	}
	CP_CHECK(WAIT_SESSIONS(w->obs, 1, STEP_MS));
	CP_CHECK_EQ(used_nodes(w->obs), 0);
	CP_CHECK_OK(local_info(w->obs, SEM_KEY, &si));
	CP_CHECK_EQ(si.holders, 0);
	CP_CHECK_EQ(segment_violations(w->obs), 0);
}

/*
 * SLOT_ACQ_PUBLISHED: the observer holds a unit (slot 0); the child commits
 * lock-free on slot 1 and dies before its re-check. The broker's sweep
 * adopts and ends its hold. SLOT_GIVEN_NAMED, SLOT_GIVEN_UNLISTED: the
 * child, on the mutex path, is granted beside the observer and dies giving
 * both holds back to the slots; repair lists them, the sweep ends the
 * child's.
 */
static void scenario_slot(struct world *w)
{
	uint64_t tok;

	obs_sem_take(w); /* creates the key; given back to slot 0 */
	tok = w->last;
	child_send(&w->crasher, "semtry");
	expect_crash(w);
	wait_sessions(w, 1);
	sem_after_crash(w, tok);
}

/*
 * SLOT_YIELDED, SLOT_SETTLED: two threads of one session committing at
 * once. The child commits on slot 1 and stops (SHMLOCK_STOP_AT) before its
 * re-check; the observer then commits a twin for it on slot 2, as another
 * thread of its session would (a node of its session, named by the slot).
 * Resumed, the child's re-check finds the twin and gives its slot back
 * (SLOT_YIELDED); or, for SLOT_SETTLED, finds the key frozen (the observer
 * took the mutex meanwhile, listing all three) and settles under the mutex,
 * ending its own hold as the later one. It dies there; the sweep ends the
 * twin, and frees the in-flight node.
 */
static void scenario_slot_twin(struct world *w)
{
	static LOCAL_OPTS(local_key_info, si);
	struct segment *seg = w->obs->seg;
	uint32_t ki, mine, twin;
	struct seg_key *k;
	struct seg_node *tn;
	uint64_t tok, f, x;

	obs_sem_take(w); /* slot 0 */
	tok = w->last;
	ki = sem_entry(w->obs);
	CP_CHECK(ki != IDX_NONE);
	k = &seg->keys[ki];
	child_send(&w->crasher, "semtry");
	if (!WAIT_FOR(is_stopped(w->crasher.pid), STEP_MS))
		CP_FAIL("the child did not stop after its commit on slot 1");
	f = atomic_load(&k->fast_x[0]);
	CP_CHECK(FAST_HOLDER(f) != 0);
	mine = FAST_HOLDER(f) - 1;
	/* A free hold node, claimed as the twin's lock-free claim. */
	for (twin = 0; twin < seg->caps.max_holds; twin++)
		if (!atomic_load(&seg->nodes[twin].word))
			break;
	CP_CHECK(twin < seg->caps.max_holds);
	tn = &seg->nodes[twin];
	tn->session_gen = seg->nodes[mine].session_gen;
	tn->token = seg->nodes[mine].token;
	tn->lease_until_ns = 0;
	tn->lease_ms = 0;
	tn->hold = tn->prev = tn->next = IDX_NONE;
	atomic_store(&tn->word, NODE_PACK(NODE_FAST_CLAIMED,
					  NODE_SESSION(atomic_load(&seg->nodes[mine].word)), ki));
	x = atomic_load(&k->fast_x[1]);
	CP_CHECK(!(x & FAST_SLOW) && !FAST_HOLDER(x));
	CP_CHECK(atomic_compare_exchange_strong(&k->fast_x[1], &x,
						FAST_PACK(0, twin + 1, FAST_SEQ(x) + 1)));
	if (cur.n == CP_SLOT_SETTLED) {
		CP_CHECK_OK(local_info(w->obs, SEM_KEY, &si)); /* freezes and lists */
		CP_CHECK_EQ(si.holders, 3);
	}
	CP_CHECK_EQ(kill(w->crasher.pid, SIGCONT), 0);
	expect_crash(w);
	wait_sessions(w, 1);
	sem_after_crash(w, tok);
}

/*
 * LOCK_WORD_TAKEN, LOCK_WORD_RELEASED: the child dies holding the key's lock
 * word (nothing done under it yet), or right after releasing it, before
 * waking anyone. The broker reaps the dead pid's words (or the next locker
 * finds the owner gone): the key works on, and the invariants hold. A
 * sleeper stranded by the second is covered in unit_lockword.c.
 */
static void scenario_lock_word(struct world *w)
{
	obs_cycles(w, 1); /* creates the key */
	crash_in_key_lock(w, "info");
	CP_CHECK_EQ(segment_violations(w->obs), 0);
	CP_CHECK_EQ(key_info(w->obs)->holders, 0);
	check_free_then_handover(w);
}

/* @key's entry in the segment, read without its mutex (NULL: none). */
static struct seg_key *key_entry(local_session *s, const char *key)
{
	struct segment *seg = s->seg;
	uint32_t k;

	for (k = 0; k < seg->caps.max_keys; k++)
		if (atomic_load(&seg->keys[k].state) == KEY_USED && !strcmp(seg->keys[k].key, key))
			return &seg->keys[k];
	return NULL;
}

/*
 * TOKEN_RESERVED, TOKEN_RANGE_SET: the observer spends the key's token range
 * (lock-free), so the child's grant must reserve a new one from the
 * segment's counter; it dies after taking it from the counter, or after
 * storing it in the key but before completing it. The range is lost, never
 * half used: the next grants reserve again, and their tokens still rise and
 * stay at or below the counter (segment_violations() checks that too).
 */
static void scenario_token_range(struct world *w)
{
	struct seg_key *k;
	uint64_t before;
	int n = 0;

	obs_cycles(w, 1); /* creates the key, with its first range */
	k = key_entry(w->obs, KEY);
	CP_CHECK(k != NULL);
	while (w->last < __atomic_load_n(&k->tok_hi, __ATOMIC_RELAXED) && n++ < 100)
		obs_cycles(w, 1);
	CP_CHECK_EQ(w->last, __atomic_load_n(&k->tok_hi, __ATOMIC_RELAXED));
	before = atomic_load(&w->obs->seg->hdr->token_counter);
	child_send(&w->crasher, "lock");
	expect_crash(w);
	wait_sessions(w, 1);
	CP_CHECK(atomic_load(&w->obs->seg->hdr->token_counter) > before);
	CP_CHECK_EQ(segment_violations(w->obs), 0);
	CP_CHECK_EQ(key_info(w->obs)->holders, 0);
	check_free_then_handover(w);
	CP_CHECK(w->last <= atomic_load(&w->obs->seg->hdr->token_counter));
}

/*
 * TOKEN_REMAPPED: the key's count lags a token already drawn, as a granter
 * that died after showing a grant and before counting it leaves the key when
 * the waiter takes the grant before repair counts it (the observer sets
 * that up under the key mutex: tok_last one ahead of the count). The
 * child's grant must map the range above tok_last, and dies right after
 * moving tok_off. The next grants still rise above tok_last.
 */
static void scenario_token_remap(struct world *w)
{
	struct seg_key *k;
	uint64_t drawn;

	obs_cycles(w, 1); /* creates the key, with its first range */
	k = key_entry(w->obs, KEY);
	CP_CHECK(k != NULL);
	CP_CHECK_OK(key_lock(w->obs->seg, k));
	drawn = key_token_for(k, atomic_load(&k->lock_index) + 1);
	CP_CHECK(drawn != 0 && drawn < k->tok_hi);
	__atomic_store_n(&k->tok_last, drawn, __ATOMIC_RELAXED);
	key_unlock(k);
	w->last = drawn;
	child_send(&w->crasher, "lock");
	expect_crash(w);
	wait_sessions(w, 1);
	CP_CHECK_EQ(segment_violations(w->obs), 0);
	CP_CHECK_EQ(key_info(w->obs)->holders, 0);
	check_free_then_handover(w);
}

struct scenario {
	int point;
	void (*run)(struct world *w);
};

static const struct scenario scenarios[] = {
	{ CP_GRANT_CLAIMED, scenario_fast_path },
	{ CP_GRANT_LINKED, scenario_fast_path },
	{ CP_GRANT_DONE, scenario_fast_path },
	{ CP_FAST_ACQ_CLAIMED, scenario_fast_path },
	{ CP_FAST_ACQ_PUBLISHED, scenario_fast_path },
	{ CP_FAST_REL_PUBLISHED, scenario_release },
	{ CP_ENQ_CLAIMED, scenario_enqueue },
	{ CP_ENQ_LINKED, scenario_enqueue },
	{ CP_ENQ_PARKED, scenario_enqueue },
	{ CP_REL_UNLINKED, scenario_release },
	{ CP_REL_FREED, scenario_release },
	{ CP_HANDOFF_HOLD_SET, scenario_handoff },
	{ CP_HANDOFF_TRANSFERRED, scenario_handoff },
	{ CP_HANDOFF_GRANTED, scenario_handoff },
	{ CP_HANDOFF_UNLINKED, scenario_handoff },
	{ CP_HANDOFF_UNLOCKED, scenario_handoff },
	{ CP_CANCEL_UNLINKED, scenario_cancel },
	{ CP_CANCEL_FREED, scenario_cancel },
	{ CP_VALUE_WRITTEN, scenario_value },
	{ CP_GRANTED_CONSUMED, scenario_granted },
	{ CP_WATCH_CLAIMED, scenario_watch },
	{ CP_UNWATCH_FREED, scenario_watch },
	{ CP_FOLD_NOTED, scenario_fold },
	{ CP_FAST_HOLD_ADOPTED, scenario_adopted },
	{ CP_SEM_HOLD_LISTED, scenario_sem_listed },
	{ CP_LOCK_WORD_TAKEN, scenario_lock_word },
	{ CP_LOCK_WORD_RELEASED, scenario_lock_word },
	{ CP_TOKEN_RESERVED, scenario_token_range },
	{ CP_TOKEN_RANGE_SET, scenario_token_range },
	{ CP_TOKEN_REMAPPED, scenario_token_remap },
	{ CP_SLOT_GIVEN_NAMED, scenario_slot },
	{ CP_SLOT_GIVEN_UNLISTED, scenario_slot },
	{ CP_SLOT_ACQ_PUBLISHED, scenario_slot },
	{ CP_SLOT_YIELDED, scenario_slot_twin },
	{ CP_SLOT_SETTLED, scenario_slot_twin },
	{ CP_FAST_ACQ_TAKEN, scenario_handle },
};

#define NSCENARIOS (sizeof(scenarios) / sizeof(scenarios[0]))

static const struct point points[] = {
#define X(n, name, what) { n, #name, what },
	CRASH_POINT_LIST(X)
#undef X
};

#define NPOINTS (sizeof(points) / sizeof(points[0]))

static const struct scenario *scenario_for(int point)
{
	size_t i;

	for (i = 0; i < NSCENARIOS; i++)
		if (scenarios[i].point == point)
			return &scenarios[i];
	return NULL;
}

static void run_point(int n, const char *name, const char *what)
{
	const struct scenario *sc = scenario_for(n);
	struct world w;

	cur = (struct point){ n, name, what };
	if (!sc)
		CP_FAIL("no scenario: add one to scenarios[] in %s", __FILE__);
	world_start(&w);
	sc->run(&w);
	world_finish(&w);
}

/* One test per declared point, named after it. */
#define X(n, name, what)                   \
	TEST(crash_points, name, 30)       \
	{                                  \
		run_point(n, #name, what); \
	}
CRASH_POINT_LIST(X)
#undef X

TEST(crash_points, every_point_has_a_scenario, 30)
{
	unsigned missing = 0, bad = 0;
	size_t i, j;

	for (i = 0; i < NPOINTS; i++) {
		if (!scenario_for(points[i].n)) {
			fprintf(stderr, "    crash point %d %s (%s) has no scenario\n", points[i].n,
				points[i].name, points[i].what);
			missing++;
		}
		for (j = 0; j < i; j++)
			if (points[j].n == points[i].n) {
				fprintf(stderr, "    crash points %s and %s share number %d\n",
					points[j].name, points[i].name, points[i].n);
				bad++;
			}
	}
	for (i = 0; i < NSCENARIOS; i++) {
		for (j = 0; j < NPOINTS && points[j].n != scenarios[i].point; j++)
			;
		if (j == NPOINTS) {
			fprintf(stderr, "    scenario %zu names undeclared crash point %d\n", i,
				scenarios[i].point);
			bad++;
		}
		for (j = 0; j < i; j++)
			if (scenarios[j].point == scenarios[i].point) {
				fprintf(stderr, "    crash point %d has two scenarios\n",
					scenarios[i].point);
				bad++;
			}
	}
	CHECK_EQ(missing, 0);
	CHECK_EQ(bad, 0);
}

#else
typedef int it_crash_points_c_is_empty_without_crash_points;
#endif /* LOCAL_CRASH_POINTS */
