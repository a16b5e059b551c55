// SPDX-License-Identifier: MIT
/*
 * Two-phase acquire (local_enqueue, then local_wait) against a real broker:
 * immediate grants, queued grants, the enqueue/wait errors, timeouts that
 * leave the queue, FIFO shared with plain local_lock waiters, semaphores.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "broker_fixture.h"
#include "harness.h"
#include "invariants.h"

static struct local_key_info *info_of(local_session *s, const char *key)
{
	static char value[LOCAL_VALUE_MAX];
	static LOCAL_OPTS(local_key_info, info, .value_buf = value,
			  .value_buf_size = sizeof(value));

	CHECK_OK(local_info(s, key, &info));
	return &info;
}

TEST(twophase, enqueue_on_a_free_key_is_granted_at_once, 20)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 0, .value = "v1", .value_len = 2);
	struct broker_proc b;
	local_session *a, *c;
	uint64_t tok = 0, held = 0;
	int granted = -1, r;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	c = open_session(&b, "c", 0, 0);
	CHECK_OK(local_enqueue(a, "tp/free", 0, &o, &granted, &tok));
	CHECK_EQ(granted, 1);
	CHECK(tok > 0);
	CHECK_OK(local_held(a, "tp/free", &held));
	CHECK_EQ(held, tok);
	CHECK_EQ(info_of(c, "tp/free")->kind, LOCAL_KIND_LOCK);
	CHECK_EQ(info_of(c, "tp/free")->holders, 1);
	CHECK_EQ(info_of(c, "tp/free")->waiters, 0);
	CHECK_EQ(info_of(c, "tp/free")->value_len, 2);
	/* Holding already: nothing to queue for. */
	CHECK_RC(local_enqueue(a, "tp/free", 0, NULL, &granted, NULL), -LOCAL_EENQUEUED);
	/* Nothing is pending either: a wait has nothing to wait for (the
	 * header allows no other reading for a request that never queued). */
	r = local_wait(a, "tp/free", 0, NULL);
	if (r != -LOCAL_ENOTENQUEUED && r != 0)
		FAIL_AT("wait after an immediate grant: %s", local_strerror(r));
	CHECK_OK(local_held(a, "tp/free", NULL));
	CHECK_OK(local_release(a, "tp/free"));
	CHECK_RC(local_enqueue(a, "", 0, NULL, &granted, NULL), -EINVAL);
	CHECK_RC(local_enqueue(a, "tp/x", 0, NULL, NULL, NULL), -EINVAL);
	CHECK_EQ(segment_violations(a), 0);
	broker_stop(&b);
}

TEST(twophase, enqueue_on_a_held_key_then_wait, 20)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 0, .value = "queued-value",
		   .value_len = 12);
	struct local_key_info *info;
	struct broker_proc b;
	local_session *h, *a;
	uint64_t th = 0, tok = 0, held = 0;
	int granted = -1;

	broker_start(&b, NULL);
	h = open_session(&b, "holder", 0, 0);
	a = open_session(&b, "a", 0, 0);
	CHECK_OK(local_lock(h, "tp/held", NULL, &th));
	CHECK_OK(local_enqueue(a, "tp/held", 0, &o, &granted, &tok));
	CHECK_EQ(granted, 0);
	CHECK_EQ(info_of(h, "tp/held")->waiters, 1);
	CHECK_RC(local_enqueue(a, "tp/held", 0, &o, &granted, NULL), -LOCAL_EENQUEUED);
	CHECK_EQ(info_of(h, "tp/held")->waiters, 1);
	CHECK_RC(local_held(a, "tp/held", NULL), -LOCAL_ENOTHELD);
	CHECK_OK(local_release(h, "tp/held"));
	/* Granted by the release, before anyone waits: the wait returns it. */
	info = info_of(h, "tp/held");
	CHECK_EQ(info->holders, 1);
	CHECK(!strcmp(info->holder_session, local_session_id(a)));
	CHECK_OK(local_wait(a, "tp/held", 0, &tok));
	CHECK(tok > th);
	CHECK_OK(local_held(a, "tp/held", &held));
	CHECK_EQ(held, tok);
	info = info_of(h, "tp/held");
	CHECK_EQ(info->token, tok);
	CHECK_EQ(info->value_len, 12);
	CHECK(!memcmp((char *)info->value_buf, "queued-value", 12));
	/* The request is used up. */
	CHECK_RC(local_wait(a, "tp/held", 0, NULL), -LOCAL_ENOTENQUEUED);
	CHECK_OK(local_release(a, "tp/held"));
	CHECK_EQ(segment_violations(h), 0);
	CHECK_EQ(used_nodes(h), 0);
	broker_stop(&b);
}

TEST(twophase, wait_without_enqueue, 20)
{
	struct broker_proc b;
	local_session *a, *c;
	int granted = -1;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	c = open_session(&b, "c", 0, 0);
	CHECK_RC(local_wait(a, "tp/none", 0, NULL), -LOCAL_ENOTENQUEUED);
	CHECK_RC(local_wait(a, "tp/none", 100, NULL), -LOCAL_ENOTENQUEUED);
	CHECK_OK(local_lock(c, "tp/k", NULL, NULL));
	CHECK_OK(local_enqueue(a, "tp/k", 0, NULL, &granted, NULL));
	CHECK_EQ(granted, 0);
	/* Another key, another session: neither has a pending request. */
	CHECK_RC(local_wait(a, "tp/k2", 0, NULL), -LOCAL_ENOTENQUEUED);
	CHECK_RC(local_wait(c, "tp/k", 0, NULL), -LOCAL_ENOTENQUEUED);
	CHECK_RC(local_wait(a, "", 0, NULL), -EINVAL);
	CHECK_OK(local_release(c, "tp/k"));
	CHECK_OK(local_wait(a, "tp/k", 1000, NULL));
	broker_stop(&b);
}

/*
 * While a session has a request queued on a key, a plain acquire of that key
 * by the same session has nothing to add: the header's code for "already
 * queued" is LOCAL_EENQUEUED (local_lock() lists no other that fits).
 */
TEST(twophase, lock_while_enqueued_says_enqueued, 20)
{
	LOCAL_OPTS(local_acquire_opts, try, .timeout_ms = 0);
	struct broker_proc b;
	local_session *h, *a;
	int granted = -1;

	broker_start(&b, NULL);
	h = open_session(&b, "holder", 0, 0);
	a = open_session(&b, "a", 0, 0);
	CHECK_OK(local_lock(h, "tp/dup", NULL, NULL));
	CHECK_OK(local_enqueue(a, "tp/dup", 0, NULL, &granted, NULL));
	CHECK_EQ(granted, 0);
	CHECK_RC(local_lock(a, "tp/dup", &try, NULL), -LOCAL_EENQUEUED);
	CHECK_RC(local_lock(a, "tp/dup",
			    &(struct local_acquire_opts){ .sz = sizeof(struct local_acquire_opts),
							  .timeout_ms = 50 },
			    NULL),
		 -LOCAL_EENQUEUED);
	CHECK_EQ(info_of(h, "tp/dup")->waiters, 1);
	broker_stop(&b);
}

/*
 * The session's count of queued requests (node_hints.queued, which lets an
 * acquire skip the walk for a duplicate) is taken back when a
 * local_wait() ends a request, and only then: after a timed-out wait and a
 * granted one, a request queued anew must still be found by an acquire of
 * the same key (a count taken back twice would skip the walk, and the try
 * would answer EBUSY).
 */
TEST(twophase, a_queued_request_is_found_after_earlier_waits_ended, 20)
{
	LOCAL_OPTS(local_acquire_opts, try, .timeout_ms = 0);
	struct broker_proc b;
	local_session *h, *a;
	int granted = -1;

	broker_start(&b, NULL);
	h = open_session(&b, "holder", 0, 0);
	a = open_session(&b, "a", 0, 0);
	CHECK_OK(local_lock(h, "tp/q1", NULL, NULL));
	CHECK_OK(local_lock(h, "tp/q2", NULL, NULL));
	CHECK_OK(local_enqueue(a, "tp/q2", 0, NULL, &granted, NULL));
	CHECK_EQ(granted, 0);
	/* A wait that times out, then one that is granted, on another key. */
	CHECK_OK(local_enqueue(a, "tp/q1", 0, NULL, &granted, NULL));
	CHECK_RC(local_wait(a, "tp/q1", 10, NULL), -ETIMEDOUT);
	CHECK_RC(local_lock(a, "tp/q2", &try, NULL), -LOCAL_EENQUEUED);
	CHECK_OK(local_enqueue(a, "tp/q1", 0, NULL, &granted, NULL));
	CHECK_OK(local_release(h, "tp/q1"));
	CHECK_OK(local_wait(a, "tp/q1", 1000, NULL));
	CHECK_OK(local_release(a, "tp/q1"));
	CHECK_RC(local_lock(a, "tp/q2", &try, NULL), -LOCAL_EENQUEUED);
	CHECK_OK(local_release(h, "tp/q2"));
	CHECK_OK(local_wait(a, "tp/q2", 1000, NULL));
	broker_stop(&b);
}

struct role {
	const struct broker_proc *b;
	const char *key;
	int id;
	bool two_phase;
};

/*
 * Child: queue on the key, two-phase (enqueue, report "queued", then wait
 * only when told "wait") or with a blocking local_lock; report "got ID
 * TOKEN"; release on "release"; leave on "exit".
 */
static void queue_child(void *p, int in, int out)
{
	const struct role *r = p;
	char name[32], buf[64];
	local_session *s;
	uint64_t tok = 0;
	int granted = -1, err;

	snprintf(name, sizeof(name), "%s-%d", r->two_phase ? "tp" : "lock", r->id);
	s = open_session(r->b, name, 0, 0);
	if (r->two_phase) {
		err = local_enqueue(s, r->key, 0, NULL, &granted, &tok);
		if (err || granted) {
			say(out, "enqueue %d granted %d", err, granted);
			return;
		}
		say(out, "queued");
		if (hear(in, buf, sizeof(buf)) || strcmp(buf, "wait"))
			return;
		err = local_wait(s, r->key, 5000, &tok);
	} else {
		say(out, "queued");
		err = local_lock(s, r->key, NULL, &tok);
	}
	if (err)
		say(out, "error %d", err);
	else
		say(out, "got %d %llu", r->id, (unsigned long long)tok);
	while (!hear(in, buf, sizeof(buf))) {
		if (!strcmp(buf, "exit"))
			break;
		if (!strcmp(buf, "release"))
			say(out, "released %d", local_release(s, r->key));
	}
	local_session_close(s);
}

static unsigned long long expect_got(struct child *c, int id)
{
	unsigned long long tok;
	char line[128];
	int got;

	if (child_read(c, line, sizeof(line), 5000))
		FAIL_AT("child %d: no grant", id);
	if (sscanf(line, "got %d %llu", &got, &tok) != 2 || got != id)
		FAIL_AT("child %d: expected a grant, got \"%s\"", id, line);
	return tok;
}

TEST(twophase, timed_out_wait_leaves_the_queue, 20)
{
	struct broker_proc b;
	struct role r = { NULL, "tp/timeout", 1, false };
	local_session *h, *a;
	struct local_key_info *info;
	struct child w;
	uint64_t t0;
	int granted = -1;

	broker_start(&b, NULL);
	r.b = &b;
	h = open_session(&b, "holder", 0, 0);
	a = open_session(&b, "a", 0, 0);
	CHECK_OK(local_lock(h, "tp/timeout", NULL, NULL));
	CHECK_OK(local_enqueue(a, "tp/timeout", 0, NULL, &granted, NULL));
	CHECK_EQ(granted, 0);
	child_spawn(&w, queue_child, &r);
	child_expect(&w, "queued", 5000);
	CHECK(WAIT_FOR(info_of(h, "tp/timeout")->waiters == 2, 5000));
	t0 = now_ms();
	CHECK_RC(local_wait(a, "tp/timeout", 100, NULL), -ETIMEDOUT);
	CHECK(now_ms() - t0 >= 100);
	info = info_of(h, "tp/timeout");
	CHECK_EQ(info->waiters, 1);
	CHECK_EQ(info->holders, 1);
	CHECK_RC(local_wait(a, "tp/timeout", 0, NULL), -LOCAL_ENOTENQUEUED);
	CHECK_EQ(segment_violations(h), 0);
	/* The one behind is not held up by the request that left. */
	CHECK_OK(local_release(h, "tp/timeout"));
	expect_got(&w, 1);
	CHECK_EQ(info_of(h, "tp/timeout")->holder_pid, w.pid);
	CHECK_RC(local_held(a, "tp/timeout", NULL), -LOCAL_ENOTHELD);
	/* A new request may be made after a timeout. */
	CHECK_OK(local_enqueue(a, "tp/timeout", 0, NULL, &granted, NULL));
	CHECK_EQ(granted, 0);
	child_send(&w, "release");
	child_expect(&w, "released 0", 5000);
	CHECK_OK(local_wait(a, "tp/timeout", 5000, NULL));
	child_send(&w, "exit");
	child_wait(&w, 5000);
	CHECK_EQ(segment_violations(h), 0);
	broker_stop(&b);
}

TEST(twophase, fifo_shared_with_plain_waiters_across_processes, 30)
{
	enum { N = 5 };
	static const bool two_phase[N] = { true, false, true, false, true };
	struct role roles[N];
	struct child kids[N];
	struct broker_proc b;
	local_session *h;
	unsigned long long last = 0, tok;
	char line[64];
	int i;

	broker_start(&b, NULL);
	h = open_session(&b, "holder", 0, 0);
	CHECK_OK(local_lock(h, "tp/fifo", NULL, NULL));
	for (i = 0; i < N; i++) {
		roles[i] = (struct role){ &b, "tp/fifo", i, two_phase[i] };
		child_spawn(&kids[i], queue_child, &roles[i]);
		child_expect(&kids[i], "queued", 5000);
		CHECK(WAIT_FOR(info_of(h, "tp/fifo")->waiters == (unsigned)i + 1, 5000));
	}
	/* Two-phase children 0 and 4 start waiting now; 2 only once it has
	 * been granted: the grant must not depend on a waiting thread. */
	child_send(&kids[0], "wait");
	child_send(&kids[4], "wait");
	CHECK_OK(local_release(h, "tp/fifo"));
	for (i = 0; i < N; i++) {
		if (i == 2) {
			CHECK(WAIT_FOR(info_of(h, "tp/fifo")->holder_pid == kids[2].pid, 5000));
			child_send(&kids[2], "wait");
		}
		tok = expect_got(&kids[i], i);
		CHECK(tok > last);
		last = tok;
		if (i + 1 < N)
			CHECK_EQ(child_read(&kids[i + 1], line, sizeof(line), 30), -ETIMEDOUT);
		CHECK_EQ(info_of(h, "tp/fifo")->holder_pid, kids[i].pid);
		child_send(&kids[i], "release");
		child_expect(&kids[i], "released 0", 5000);
	}
	for (i = 0; i < N; i++) {
		child_send(&kids[i], "exit");
		child_wait(&kids[i], 5000);
	}
	CHECK(WAIT_SESSIONS(h, 1, 5000));
	CHECK_EQ(segment_violations(h), 0);
	CHECK_EQ(used_nodes(h), 0);
	broker_stop(&b);
}

TEST(twophase, semaphores_with_a_limit, 20)
{
	struct broker_proc b;
	local_session *a, *c, *d, *e;
	uint64_t ta = 0, tc = 0, td = 0;
	int granted = -1;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	c = open_session(&b, "c", 0, 0);
	d = open_session(&b, "d", 0, 0);
	e = open_session(&b, "e", 0, 0);
	CHECK_OK(local_enqueue(a, "tp/sem", 2, NULL, &granted, &ta));
	CHECK_EQ(granted, 1);
	CHECK_OK(local_enqueue(c, "tp/sem", 2, NULL, &granted, &tc));
	CHECK_EQ(granted, 1);
	CHECK(tc > ta);
	CHECK_OK(local_enqueue(d, "tp/sem", 2, NULL, &granted, NULL));
	CHECK_EQ(granted, 0);
	CHECK_EQ(info_of(a, "tp/sem")->kind, LOCAL_KIND_SEMAPHORE);
	CHECK_EQ(info_of(a, "tp/sem")->limit, 2);
	CHECK_EQ(info_of(a, "tp/sem")->holders, 2);
	CHECK_EQ(info_of(a, "tp/sem")->waiters, 1);
	CHECK_RC(local_enqueue(e, "tp/sem", 3, NULL, &granted, NULL), -LOCAL_ELIMIT);
	CHECK_RC(local_enqueue(e, "tp/sem", 0, NULL, &granted, NULL), -LOCAL_EKIND);
	CHECK_RC(local_wait(d, "tp/sem", 50, NULL), -ETIMEDOUT);
	CHECK_OK(local_enqueue(d, "tp/sem", 2, NULL, &granted, NULL));
	CHECK_EQ(granted, 0);
	CHECK_OK(local_release(a, "tp/sem"));
	CHECK_OK(local_wait(d, "tp/sem", 5000, &td));
	CHECK(td > tc);
	CHECK_EQ(info_of(a, "tp/sem")->holders, 2);
	/* Limit 1 is a semaphore too, not a lock. */
	CHECK_OK(local_enqueue(e, "tp/sem1", 1, NULL, &granted, NULL));
	CHECK_EQ(granted, 1);
	CHECK_EQ(info_of(e, "tp/sem1")->kind, LOCAL_KIND_SEMAPHORE);
	CHECK_RC(local_lock(a, "tp/sem1",
			    &(struct local_acquire_opts){ .sz = sizeof(struct local_acquire_opts),
							  .timeout_ms = 0 },
			    NULL),
		 -LOCAL_EKIND);
	CHECK_EQ(segment_violations(a), 0);
	broker_stop(&b);
}

/* A request whose session ends is removed with it; its wait says so. */
TEST(twophase, destroyed_session_ends_its_wait, 20)
{
	struct broker_proc b;
	local_session *h, *a;
	int granted = -1;
	uint64_t t0;

	broker_start(&b, NULL);
	h = open_session(&b, "holder", 0, 0);
	a = open_session(&b, "a", 0, 0);
	CHECK_OK(local_lock(h, "tp/gone", NULL, NULL));
	CHECK_OK(local_enqueue(a, "tp/gone", 0, NULL, &granted, NULL));
	CHECK_EQ(granted, 0);
	CHECK_OK(local_session_destroy(h, local_session_id(a)));
	CHECK_EQ(info_of(h, "tp/gone")->waiters, 0);
	t0 = now_ms();
	CHECK_RC(local_wait(a, "tp/gone", NEVER_MS, NULL), -LOCAL_ESESSION);
	CHECK_AT_ONCE(t0);
	CHECK_EQ(segment_violations(h), 0);
	broker_stop(&b);
}

/*
 * A queued request granted before its wait is a hold like any other: the
 * session may release it without ever calling local_wait(). That must leave
 * nothing behind: no waiter node, no pending request that makes the next
 * enqueue on the key fail or a later wait report a hold long gone.
 */
TEST(twophase, grant_released_without_wait_leaves_nothing, 20)
{
	struct broker_proc b;
	local_session *h, *a;
	uint64_t tok = 0, tok2 = 0;
	int granted = -1, r;
	unsigned used;

	broker_start(&b, NULL);
	h = open_session(&b, "holder", 0, 0);
	a = open_session(&b, "a", 0, 0);
	CHECK_OK(local_lock(h, "tp/nowait", NULL, NULL));
	CHECK_OK(local_enqueue(a, "tp/nowait", 0, NULL, &granted, NULL));
	CHECK_EQ(granted, 0);
	CHECK_OK(local_release(h, "tp/nowait"));
	CHECK_OK(local_held(a, "tp/nowait", &tok));
	CHECK_OK(local_release(a, "tp/nowait"));
	CHECK_EQ(info_of(h, "tp/nowait")->holders, 0);
	used = used_nodes(h);
	r = local_wait(a, "tp/nowait", 0, NULL);
	if (used || r == 0)
		FAIL_AT("after the release, %u node(s) are still in use (want 0) and a wait "
			"returns %d (%s), want an error: the grant was released already",
			used, r, local_strerror(r));
	CHECK_OK(local_enqueue(a, "tp/nowait", 0, NULL, &granted, &tok2));
	CHECK_EQ(granted, 1);
	CHECK(tok2 > tok);
	CHECK_OK(local_release(a, "tp/nowait"));
	CHECK_EQ(segment_violations(h), 0);
	broker_stop(&b);
}
