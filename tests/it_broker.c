// SPDX-License-Identifier: MIT
/* The broker under stress: restarts that lose nothing, garbage on the
 * socket, a damaged segment. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "broker_fixture.h"
#include "crashpoint.h"
#include "harness.h"
#include "net_fixture.h"
#include "invariants.h"
#include "proto.h"

struct role {
	const struct broker_proc *b;
	const char *key;
};

/* Child: take the key, report its token, release on "release". */
static void holder(void *p, int in, int out)
{
	const struct role *r = p;
	local_session *s = open_session(r->b, "holder", 0, 0);
	char buf[16];
	uint64_t tok;

	say(out, "open");
	CHECK_OK(local_lock(s, r->key, NULL, &tok));
	say(out, "got %llu", (unsigned long long)tok);
	while (hear(in, buf, sizeof(buf)) == 0)
		if (!strcmp(buf, "release"))
			say(out, "released %d", local_release(s, r->key));
}

static struct local_key_info key_info(local_session *s, const char *key)
{
	LOCAL_OPTS(local_key_info, info);

	CHECK_OK(local_info(s, key, &info));
	return info;
}

static void restart_keeps_everything(int sig)
{
	struct broker_proc b;
	struct role rk = { &b, "r/k" }, rd = { &b, "r/d" };
	struct child h, w, d;
	unsigned long long th, tw;
	local_session *obs;
	char line[64];

	broker_start(&b, NULL);
	obs = open_session(&b, "obs", 0, 0);
	child_spawn(&h, holder, &rk);
	child_expect(&h, "open", 5000);
	CHECK_OK(child_read(&h, line, sizeof(line), 5000));
	CHECK_EQ(sscanf(line, "got %llu", &th), 1);
	child_spawn(&w, holder, &rk);
	child_expect(&w, "open", 5000);
	CHECK(WAIT_FOR(key_info(obs, "r/k").waiters == 1, 5000));
	child_spawn(&d, holder, &rd);
	child_expect(&d, "open", 5000);
	CHECK_OK(child_read(&d, line, sizeof(line), 5000));

	broker_signal_wait(&b, sig);
	/* Outage: uncontended locking needs no broker... */
	CHECK_OK(local_lock(obs, "r/free", NULL, NULL));
	CHECK_OK(local_release(obs, "r/free"));
	/* ...and a holder that dies now is cleaned up after the restart. */
	child_kill(&d);
	child_wait(&d, 5000);
	CHECK_EQ(key_info(obs, "r/d").holders, 1);

	broker_restart(&b);
	CHECK(WAIT_FOR(key_info(obs, "r/d").holders == 0, 5000));
	CHECK(WAIT_SESSIONS(obs, 3, 5000)); /* obs, h and w re-adopted */
	CHECK_EQ(key_info(obs, "r/k").holder_pid, h.pid);
	CHECK_EQ(key_info(obs, "r/k").token, th);
	CHECK_EQ(key_info(obs, "r/k").waiters, 1);
	CHECK_EQ(segment_violations(obs), 0);
	child_send(&h, "release");
	child_expect(&h, "released 0", 5000);
	CHECK_OK(child_read(&w, line, sizeof(line), 5000));
	CHECK_EQ(sscanf(line, "got %llu", &tw), 1);
	CHECK(tw > th);
	/* The re-adopted holder's death is still noticed. */
	child_kill(&w);
	child_wait(&w, 5000);
	CHECK(WAIT_FOR(key_info(obs, "r/k").holders == 0, 5000));
	child_kill(&h);
	child_wait(&h, 5000);
	CHECK(WAIT_SESSIONS(obs, 1, 5000));
	CHECK_EQ(segment_violations(obs), 0);
	CHECK_EQ(used_nodes(obs), 0);
	broker_stop(&b);
}

TEST(broker, sigterm_restart_keeps_holds_and_queue, 30)
{
	restart_keeps_everything(SIGTERM);
}

TEST(broker, sigkill_restart_keeps_holds_and_queue, 30)
{
	restart_keeps_everything(SIGKILL);
}

/* Send one datagram; return the reply's status (or 1 when none came). */
static int exchange(const char *path, const void *msg, size_t len)
{
	struct timeval tv = { .tv_sec = 5 };
	struct proto_reply rep;
	char buf[256];
	int fd = unix_connect(path, SOCK_SEQPACKET), status = 1;
	ssize_t n;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (send(fd, msg, len, MSG_NOSIGNAL) == (ssize_t)len) {
		n = recv(fd, buf, sizeof(buf), 0);
		if (n > 0 && proto_decode_reply(buf, (size_t)n, &rep) == 0)
			status = rep.status;
	}
	close(fd);
	return status;
}

TEST(broker, garbage_on_the_socket, 30)
{
	struct proto_open open;
	struct proto_session_id sid;
	struct broker_proc b;
	char junk[600];
	local_session *s;
	int i, fd;

	broker_start(&b, NULL);
	memset(&open, 0, sizeof(open));
	proto_init_hdr(&open.hdr, MSG_OPEN, sizeof(open));
	open.hdr.version = PROTO_VERSION + 1;
	CHECK_RC(exchange(b.sock, &open, sizeof(open)), -LOCAL_EVERSION);
	open.hdr.version = PROTO_VERSION;
	open.hdr.magic = 0;
	CHECK_RC(exchange(b.sock, &open, sizeof(open)), -LOCAL_EPROTO);
	CHECK_RC(exchange(b.sock, &open, 3), -LOCAL_EPROTO);
	memset(&sid, 0, sizeof(sid));
	proto_init_hdr(&sid.hdr, MSG_CLOSE, sizeof(sid));
	CHECK_RC(exchange(b.sock, &sid, sizeof(sid)), -LOCAL_ESESSION);
	for (i = 0; i < 300; i++) {
		size_t len = 1 + (size_t)i * 2 % sizeof(junk);

		CHECK_EQ(getrandom(junk, len, 0), (ssize_t)len);
		if (i % 3 == 0) /* a valid header on random bodies */
			memcpy(junk, &open.hdr, sizeof(open.hdr) < len ? sizeof(open.hdr) : len);
		exchange(b.sock, junk, len);
	}
	/* Connections that never speak, or hang up at once. */
	for (i = 0; i < 50; i++)
		close(unix_connect(b.sock, SOCK_SEQPACKET));
	fd = unix_connect(b.sock, SOCK_SEQPACKET);
	CHECK_EQ(kill(b.pid, 0), 0);
	s = open_session(&b, "after-garbage", 0, 0);
	CHECK_OK(local_lock(s, "still/works", NULL, NULL));
	close(fd);
	broker_stop(&b);
}

TEST(broker, damaged_segment_entries_are_contained, 30)
{
	struct broker_proc b;
	struct seg_key *k;
	local_session *s, *victim;
	struct segment *seg;
	uint32_t n;

	broker_start(&b, NULL);
	s = open_session(&b, "obs", 0, 0);
	seg = s->seg;
	CHECK_OK(local_lock(s, "c/bad", NULL, NULL));
	CHECK_OK(local_lock(s, "c/links", NULL, NULL));
	CHECK_OK(local_lock(s, "c/good", NULL, NULL));
	/* A key whose own fields are nonsense is quarantined. */
	CHECK_OK(keytab_find(seg, "c/bad", 5, false, &k));
	k->kind = 99;
	key_unlock(k);
	CHECK_RC(local_lock(s, "c/bad", NULL, NULL), -LOCAL_ECORRUPT);
	CHECK_RC(local_release(s, "c/bad"), -LOCAL_ECORRUPT);
	/* Broken list heads are rebuilt from the node table. */
	CHECK_OK(keytab_find(seg, "c/links", 7, false, &k));
	k->h_head = 0x7ffffff;
	k->q_head = 12345;
	key_unlock(k);
	CHECK_OK(local_lock(s, "c/links", NULL, NULL)); /* still ours */
	CHECK_OK(local_release(s, "c/links"));
	CHECK_OK(local_release(s, "c/good"));
	/* A node word naming a key that does not exist, owned by a session
	 * the broker is about to sweep, must not upset the broker. */
	victim = open_session(&b, "victim", 0, 0);
	for (n = 0; n < seg->nnodes && atomic_load(&seg->nodes[n].word); n++)
		;
	CHECK(n < seg->nnodes);
	atomic_store(&seg->nodes[n].word, NODE_PACK(NODE_HOLDING, victim->who.slot, 0xfffffff0u));
	CHECK_OK(local_session_close(victim));
	CHECK_EQ(atomic_load(&seg->nodes[n].word), 0);
	CHECK_EQ(kill(b.pid, 0), 0);
	CHECK_OK(local_lock(s, "c/good", NULL, NULL));
	broker_stop(&b);
}

TEST(broker, second_broker_on_the_segment_refuses_and_removes_nothing, 20)
{
	static const char *const flags[] = { "--destroy-segment-on-exit", NULL };
	struct broker_proc b, other;
	local_session *s;

	broker_start(&b, NULL);
	s = open_session(&b, "obs", 0, 0);
	CHECK_OK(local_lock(s, "mine", NULL, NULL));
	/* Same segment, another socket: must refuse, and must not unlink. */
	broker_beside(&b, &other, "other.sock");
	/* No keeper beside its socket, but live mappers of a segment of that
	 * --shm-name: refused as a segment in use (exit 3). */
	CHECK_EQ(broker_refuses(&other, flags, 5000), 3);
	CHECK_EQ(key_info(s, "mine").holders, 1);
	broker_signal_wait(&b, SIGKILL);
	broker_restart(&b); /* finds the segment still there */
	CHECK_EQ(key_info(s, "mine").holders, 1);
	CHECK_OK(local_release(s, "mine"));
	broker_stop(&b);
}

#ifdef LOCAL_CRASH_POINTS
/* Child: stop (SIGSTOP) inside the key mutex while queueing on the key. */
static void stalled_locker(void *p, int in, int out)
{
	LOCAL_OPTS(local_acquire_opts, timed, .timeout_ms = 100);
	const struct role *r = p;
	local_session *s;
	char buf[8], num[8];

	snprintf(num, sizeof(num), "%d", CP_ENQ_LINKED);
	setenv("SHMLOCK_STOP_AT", num, 1);
	s = open_session(r->b, "stalled", 0, 0);
	say(out, "open");
	say(out, "done %d", local_lock(s, r->key, &timed, NULL));
	hear(in, buf, sizeof(buf));
}

TEST(broker, a_stopped_client_in_a_critical_section_does_not_stall_the_broker, 30)
{
	struct broker_proc b;
	struct role r = { &b, "stall/k" };
	struct child st, d;
	local_session *obs, *late;
	siginfo_t si;
	char line[64];

	broker_start(&b, NULL);
	obs = open_session(&b, "obs", 0, 0);
	CHECK_OK(local_lock(obs, "stall/k", NULL, NULL));
	/* D queues on the key, then the staller stops inside its mutex. */
	child_spawn(&d, holder, &r);
	child_expect(&d, "open", 5000);
	CHECK(WAIT_FOR(key_info(obs, "stall/k").waiters == 1, 5000));
	child_spawn(&st, stalled_locker, &r);
	child_expect(&st, "open", 5000);
	memset(&si, 0, sizeof(si));
	CHECK_OK(waitid(P_PID, (id_t)st.pid, &si, WSTOPPED | WNOWAIT));
	/* D dies: its sweep needs the stalled key and must defer, not block. */
	child_kill(&d);
	child_wait(&d, 5000);
	late = open_session(&b, "late", 0, 0); /* the broker still answers */
	CHECK_OK(local_lock(late, "stall/other", NULL, NULL));
	CHECK_EQ(live_sessions(obs), 4); /* obs, staller, late, D still closing */
	kill(st.pid, SIGCONT);
	CHECK_OK(child_read(&st, line, sizeof(line), 5000));
	CHECK(!strcmp(line, "done -110"));  /* its own timed wait ran out */
	CHECK(WAIT_SESSIONS(obs, 3, 5000)); /* the retried sweep finished */
	CHECK_EQ(key_info(obs, "stall/k").waiters, 0);
	CHECK_EQ(segment_violations(obs), 0);
	child_kill(&st);
	child_wait(&st, 5000);
	broker_stop(&b);
}
#endif

#ifdef LOCAL_CRASH_POINTS
/* Child: stop in the lock-free acquire, right after claiming its node. */
static void stalled_fast_locker(void *p, int in, int out)
{
	LOCAL_OPTS(local_acquire_opts, try, .timeout_ms = 0);
	const struct role *r = p;
	local_session *s;
	char buf[8], num[8];

	snprintf(num, sizeof(num), "%d", CP_FAST_ACQ_CLAIMED);
	setenv("SHMLOCK_STOP_AT", num, 1);
	s = open_session(r->b, "fast", 0, 0);
	say(out, "%s", local_session_id(s));
	say(out, "done %d", local_lock(s, r->key, &try, NULL));
	hear(in, buf, sizeof(buf));
}

TEST(broker, a_session_ended_under_a_lock_free_acquire_frees_nothing_in_use, 30)
{
	struct broker_proc b;
	struct role r = { &b, "fc/k" };
	local_session *obs;
	struct child c;
	siginfo_t si;
	char id[64], line[64];
	int i;

	broker_start(&b, NULL);
	obs = open_session(&b, "obs", 0, 0);
	CHECK_OK(local_lock(obs, "fc/k", NULL, NULL)); /* a lock key, in fast mode */
	CHECK_OK(local_release(obs, "fc/k"));
	child_spawn(&c, stalled_fast_locker, &r);
	CHECK_OK(child_read(&c, id, sizeof(id), 5000));
	memset(&si, 0, sizeof(si));
	CHECK_OK(waitid(P_PID, (id_t)c.pid, &si, WSTOPPED | WNOWAIT));
	/* The operator ends the session while its thread fills in a node. */
	CHECK_OK(local_session_destroy(obs, id));
	/* Churn the node table: a node freed too early would be re-used here. */
	for (i = 0; i < 50; i++) {
		char key[16];

		snprintf(key, sizeof(key), "fc/%d", i);
		CHECK_OK(local_lock(obs, key, NULL, NULL));
	}
	CHECK_EQ(live_sessions(obs), 2); /* the ended one waits for its thread */
	kill(c.pid, SIGCONT);
	CHECK_OK(child_read(&c, line, sizeof(line), 5000));
	CHECK(!strcmp(line, "done -10001")); /* LOCAL_ESESSION */
	CHECK(WAIT_SESSIONS(obs, 1, 5000));
	CHECK_EQ(segment_violations(obs), 0);
	CHECK_EQ(used_nodes(obs), 50); /* exactly the observer's holds */
	child_kill(&c);
	child_wait(&c, 5000);
	broker_stop(&b);
}
#endif
