// SPDX-License-Identifier: MIT
/*
 * A hostile client against a real broker: one that the broker admits, so it
 * maps the segment read-write and writes what it likes into the words the
 * key and table locks live in, the index and the counters the broker reads,
 * or sits (stopped) inside critical sections. docs/security.md says what
 * survives that; each test here is one attack from the red team's report
 *, and checks that
 *
 *  - the broker stays up and answers (a new session opens) within a bound,
 *  - a client with a deadline gets an answer before it,
 *  - keys the attacker did not touch keep working, and touched ones recover
 *    once the attacker is gone.
 *
 * "Stopped inside a critical section" is staged by writing the pid of a
 * stopped client of ours (a process with a session) into a lock word:
 * exactly what a client that stopped (SIGSTOP) holding that lock leaves
 * there.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "broker_fixture.h"
#include "harness.h"
#include "invariants.h"
#include "lockword.h"
#include "word_fixture.h"

static const char *const small_caps[] = {
	"--max-keys", "64", "--max-holds", "16", "--max-waiters", "16", "--max-sessions", "16", NULL
};

/* A client of @b (a session of its own: the broker breaks a word naming
 * any other process) that stops itself at once and stays stopped: a live
 * owner that never lets go. */
static pid_t stopped_process(const struct broker_proc *b)
{
	siginfo_t si;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		open_session(b, "stopped", 0, 0);
		raise(SIGSTOP);
		_exit(0);
	}
	memset(&si, 0, sizeof(si));
	CHECK_OK(waitid(P_PID, (id_t)pid, &si, WSTOPPED | WEXITED | WNOWAIT));
	CHECK_EQ(si.si_code, CLD_STOPPED); /* not dead: its session opened */
	return pid;
}

static void end_process(pid_t pid)
{
	kill(pid, SIGKILL);
	pid_wait(pid, 5000);
}

/* The broker still answers: a session opens (open_session() fails the
 * test after its own 5 s bound) and takes a key nobody touched. */
static void broker_answers(const struct broker_proc *b)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 5000);
	local_session *s = open_session(b, "prober", 0, 0);

	CHECK_OK(local_lock(s, "untouched/probe", &o, NULL));
	CHECK_OK(local_release(s, "untouched/probe"));
	CHECK_OK(local_session_close(s));
}

/*
 * Issue 18 item 1: garbage in lock words (what once were glibc mutexes,
 * whose list pointers a client could aim the unlocker's writes with). No
 * value written there is followed as an address; an owner that does not
 * exist is found dead and the key repaired; the table lock too.
 */
TEST(hostile, garbage_in_lock_words_is_survived_and_recovered, 60)
{
	static const uint32_t patterns[] = { 0x41414141u, 0x01414141u, 0xffffffffu, 0x80000000u,
					     0x3fffffffu };
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 5000);
	struct broker_proc b;
	local_session *a, *v;
	struct seg_key *k;
	unsigned i;

	broker_start(&b, small_caps);
	a = open_session(&b, "attacker", 0, 0);
	v = open_session(&b, "victim", 0, 0);
	for (i = 0; i < sizeof(patterns) / sizeof(patterns[0]); i++) {
		CHECK_OK(local_lock(v, "h/k", &o, NULL));
		CHECK_OK(local_release(v, "h/k"));
		k = entry_of(a, "h/k");
		atomic_store(&k->lock, patterns[i]);
		k->lock_pad = patterns[i];
		atomic_store(&a->seg->hdr->table_lock, patterns[i]);
		/* The broker takes the key (an operator release of nobody) and
		 * the table (a new key); the victim then uses both. */
		CHECK_RC(local_force_release(v, "h/k", NULL), -LOCAL_ENOTHELD);
		broker_answers(&b);
		CHECK_OK(local_lock(v, "h/k", &o, NULL));
		CHECK_OK(local_release(v, "h/k"));
		CHECK_OK(local_lock(v, "h/new", &o, NULL));
		CHECK_OK(local_release(v, "h/new"));
	}
	CHECK_EQ(segment_violations(v), 0);
	broker_stop(&b);
}

/*
 * Issue 18 item 4: a client keeps every index slot non-zero and raises the
 * tombstone count, so the broker's idle-key collection rebuilds the index
 * while the slots fill up behind it. Every loop over the index is bounded:
 * the broker still answers, and stops on SIGTERM.
 */
static void index_filler(void *p, int in, int out)
{
	local_session *s = open_session(p, "filler", 0, 0);
	uint64_t end;
	uint32_t i;

	(void)in;
	say(out, "open");
	end = now_ms() + 3000;
	while (now_ms() < end) {
		s->seg->hdr->index_tombs = UINT32_MAX;
		for (i = 0; i < s->seg->index_size; i++)
			atomic_store(&s->seg->index[i], INDEX_TOMB);
	}
	say(out, "done");
}

TEST(hostile, an_index_kept_full_does_not_hang_the_broker, 60)
{
	static const char *const gc[] = { "--max-keys", "64", "--gc-idle", "1", NULL };
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 5000);
	struct broker_proc b;
	struct child f;
	local_session *v;
	char name[32];
	int i;

	broker_start(&b, gc);
	v = open_session(&b, "victim", 0, 0);
	/* Idle keys for the collector to visit, and a held one to keep. */
	for (i = 0; i < 16; i++) {
		snprintf(name, sizeof(name), "idle/%d", i);
		CHECK_OK(local_lock(v, name, &o, NULL));
		CHECK_OK(local_release(v, name));
	}
	CHECK_OK(local_lock(v, "held", &o, NULL));
	child_spawn(&f, index_filler, &b);
	child_expect(&f, "open", 5000);
	child_expect(&f, "done", 20000); /* three collection rounds at least */
	child_wait(&f, 5000);
	broker_answers(&b);
	/* The index is all tombstones now: lookups fall back to the entries. */
	CHECK_RC(local_lock(v, "held",
			    &(struct local_acquire_opts){ .sz = sizeof(struct local_acquire_opts),
							  .timeout_ms = 0 },
			    NULL),
		 0);
	CHECK_OK(local_release(v, "held"));
	CHECK_OK(local_lock(v, "idle/after", &o, NULL));
	CHECK_EQ(segment_violations(v), 0);
	broker_signal_wait(&b, SIGTERM); /* fails the test if it does not exit */
	broker_stop(&b);
}

/*
 * Issue 18 item 5: a process stopped inside the critical sections of many
 * keys at once, and the broker then has to visit all of them (the session
 * that held them died). Its patience is per turn of its loop, not per key:
 * it goes on answering, and finishes the sweep once the keys come free.
 */
static void many_holder(void *p, int in, int out)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 5000);
	local_session *s = open_session(p, "many", 0, 0);
	char name[32], buf[8];
	int i;

	for (i = 0; i < 1000; i++) {
		snprintf(name, sizeof(name), "many/%d", i);
		CHECK_OK(local_lock(s, name, &o, NULL));
	}
	say(out, "held");
	hear(in, buf, sizeof(buf));
}

TEST(hostile, a_thousand_stalled_keys_do_not_stall_the_broker, 90)
{
	static const char *const caps[] = { "--max-keys", "1100", "--max-holds", "1100", NULL };
	struct broker_proc b;
	struct child h;
	local_session *obs;
	char name[32];
	pid_t stopped;
	int i;

	broker_start(&b, caps);
	obs = open_session(&b, "obs", 0, 0);
	child_spawn(&h, many_holder, &b);
	child_expect(&h, "held", 30000);
	stopped = stopped_process(&b);
	for (i = 0; i < 1000; i++) {
		snprintf(name, sizeof(name), "many/%d", i);
		stall_key(entry_of(obs, name), stopped);
	}
	child_kill(&h); /* its sweep needs every one of those keys */
	child_wait(&h, 5000);
	/* 200 ms a key would be 200 s; one budget a turn answers at once. */
	broker_answers(&b);
	broker_answers(&b);
	/* obs, the stopped one, and the dead one still closing */
	CHECK_EQ(live_sessions(obs), 3);
	end_process(stopped); /* the owner is gone: its words are repaired */
	CHECK(WAIT_SESSIONS(obs, 1, 30000));
	CHECK_OK(local_lock(obs, "many/999",
			    &(struct local_acquire_opts){ .sz = sizeof(struct local_acquire_opts),
							  .timeout_ms = 5000 },
			    NULL));
	CHECK_EQ(segment_violations(obs), 0);
	broker_stop(&b);
}

/*
 * Issue 18 item 11: a client stopped inside a key's lock (or the table's)
 * does not make other clients ignore their deadlines, and inspection does
 * not hang on it.
 */
static int count_key(const char *key, const struct local_key_info *ki, void *arg)
{
	(void)key;
	(void)ki;
	(*(int *)arg)++;
	return 0;
}

TEST(hostile, deadlines_hold_against_a_stopped_lock_owner, 60)
{
	LOCAL_OPTS(local_acquire_opts, timed, .timeout_ms = 300);
	LOCAL_OPTS(local_acquire_opts, try, .timeout_ms = 0);
	struct broker_proc b;
	local_session *v;
	struct seg_key *k;
	uint64_t t0;
	pid_t stopped;
	int n = 0;

	broker_start(&b, small_caps);
	v = open_session(&b, "victim", 0, 0);
	broker_answers(&b); /* creates its probe key while the table is free */
	CHECK_OK(local_lock(v, "d/k", NULL, NULL));
	CHECK_OK(local_release(v, "d/k"));
	CHECK_OK(local_lock(v, "d/other", NULL, NULL));
	CHECK_OK(local_release(v, "d/other"));
	stopped = stopped_process(&b);
	k = entry_of(v, "d/k");
	stall_key(k, stopped);

	t0 = now_ms();
	CHECK_RC(local_lock(v, "d/k", &timed, NULL), -ETIMEDOUT);
	CHECK_RC(local_lock(v, "d/k", &try, NULL), -EBUSY);
	CHECK_RC(local_info(v, "d/k",
			    &(struct local_key_info){ .sz = sizeof(struct local_key_info) }),
		 -ETIMEDOUT);
	CHECK_OK(local_keys(v, "d/", count_key, &n));
	CHECK_EQ(n, 1); /* d/other listed; the stuck key left out */
	/* Bounds, not speeds: each call above waits at most about a second. */
	CHECK(now_ms() - t0 < 10000);

	/* The table lock too: creating a key respects the deadline. */
	atomic_store(&v->seg->hdr->table_lock, (uint32_t)stopped);
	CHECK_RC(local_lock(v, "d/new", &timed, NULL), -ETIMEDOUT);
	broker_answers(&b); /* its key exists: no table lock needed */

	end_process(stopped); /* gone: the next taker repairs both */
	CHECK_OK(local_lock(v, "d/k",
			    &(struct local_acquire_opts){ .sz = sizeof(struct local_acquire_opts),
							  .timeout_ms = 5000 },
			    NULL));
	CHECK_OK(local_lock(v, "d/new",
			    &(struct local_acquire_opts){ .sz = sizeof(struct local_acquire_opts),
							  .timeout_ms = 5000 },
			    NULL));
	CHECK_EQ(segment_violations(v), 0);
	broker_stop(&b);
}

/*
 * Issue 18 item 12: one 4-byte write into the index hides a held key from
 * lookups. Creating the key again must not trust the index alone: the
 * entry is found, and there is still one holder.
 */
TEST(hostile, a_key_hidden_from_the_index_keeps_one_holder, 30)
{
	struct broker_proc b;
	local_session *a, *v;
	LOCAL_OPTS(local_key_info, ki);
	uint32_t i, idx, found = 0;
	struct seg_key *k;

	broker_start(&b, small_caps);
	a = open_session(&b, "attacker", 0, 0);
	v = open_session(&b, "victim", 0, 0);
	CHECK_OK(local_lock(v, "dup/k", NULL, NULL));
	k = entry_of(a, "dup/k");
	idx = seg_key_index(a->seg, k);
	for (i = 0; i < a->seg->index_size; i++)
		if (atomic_load(&a->seg->index[i]) == idx + 1) {
			atomic_store(&a->seg->index[i], 0);
			found++;
		}
	CHECK_EQ(found, 1);
	CHECK_RC(local_lock(a, "dup/k",
			    &(struct local_acquire_opts){ .sz = sizeof(struct local_acquire_opts),
							  .timeout_ms = 0 },
			    NULL),
		 -EBUSY);
	for (i = 0, found = 0; i < a->seg->caps.max_keys; i++)
		found += atomic_load(&a->seg->keys[i].state) == KEY_USED &&
			 a->seg->keys[i].key_len == 5 && !memcmp(a->seg->keys[i].key, "dup/k", 5);
	CHECK_EQ(found, 1);
	CHECK_OK(local_info(a, "dup/k", &ki));
	CHECK_EQ(ki.holders, 1);
	CHECK_OK(local_release(v, "dup/k"));
	CHECK_OK(local_lock(a, "dup/k",
			    &(struct local_acquire_opts){ .sz = sizeof(struct local_acquire_opts),
							  .timeout_ms = 0 },
			    NULL));
	CHECK_EQ(segment_violations(a), 0);
	broker_stop(&b);
}

/*
 * Random bytes into a live segment: a scribbler writes them at random places
 * (header, sessions, keys, index, nodes, values) while well-behaved clients
 * lock, release, acquire slots and watch with deadlines, and the broker
 * serves them. Nothing can be promised to the clients' locks; what must hold
 * is that the broker neither dies nor hangs (it answers every probe, and
 * stops cleanly on SIGTERM, under ASan in the sanitizer run, so a write
 * outside the segment fails it), and that no client crashes or hangs: every
 * one of their operations returns, with some error if need be.
 */
struct worker {
	const struct broker_proc *b;
	int id;
};

static void chaos_worker(void *p, int in, int out)
{
	const struct worker *w = p;
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 50);
	LOCAL_OPTS(local_key_info, ki);
	local_session *s = NULL;
	struct local_session_opts so;
	char key[32], buf[8];
	unsigned n;

	local_session_opts_init(&so);
	so.socket_path = w->b->sock;
	so.lock_delay_ms = 0;
	say(out, "open");
	for (n = 0;; n++) {
		struct pollfd pf = { .fd = in, .events = POLLIN };

		if (poll(&pf, 1, 0) == 1 && hear(in, buf, sizeof(buf)) == 0 && !strcmp(buf, "stop"))
			break;
		if (!s && local_session_open(&so, &s) != 0) {
			s = NULL;
			continue;
		}
		snprintf(key, sizeof(key), "chaos/%u", (n + (unsigned)w->id) % 6);
		if (n % 3 == 2) {
			if (local_sem_acquire(s, key, 2, &o, NULL) == 0)
				local_release(s, key);
		} else if (n % 7 == 3) {
			local_watch(s, key, 0, 10, &ki);
		} else if (local_lock(s, key, &o, NULL) == 0) {
			local_release(s, key);
		}
		if (n % 50 == 49) {
			local_session_close(s);
			s = NULL;
		}
	}
	say(out, "stopped %u", n);
}

/* Scribble until told to stop (at most a minute). */
static void scribbler(void *p, int in, int out)
{
	local_session *s = open_session(p, "scribbler", 0, 0);
	unsigned char *mem = (unsigned char *)s->seg->hdr;
	uint64_t x = 0x5eed, end = now_ms() + 60000, n = 0;
	struct pollfd pf = { .fd = in, .events = POLLIN };
	char buf[8];

	say(out, "open");
	while (now_ms() < end && poll(&pf, 1, 0) == 0) {
		uint64_t r;

		x += 0x9e3779b97f4a7c15ull;
		r = x;
		r = (r ^ (r >> 30)) * 0xbf58476d1ce4e5b9ull;
		r = (r ^ (r >> 27)) * 0x94d049bb133111ebull;
		r ^= r >> 31;
		/* One random byte at a random place, every few microseconds. */
		mem[(r >> 8) % s->seg->size] = (unsigned char)r;
		if (++n % 64 == 0)
			usleep(200);
	}
	say(out, "done %llu", (unsigned long long)n);
	hear(in, buf, sizeof(buf));
}

TEST(hostile, random_bytes_in_a_live_segment_neither_kill_nor_hang_anyone, 120)
{
	struct broker_proc b;
	struct worker w[4];
	struct child c[4], sc;
	local_session *probe;
	char line[64];
	int i, rounds = 0, status;
	uint64_t t0;

	broker_start(&b, small_caps);
	for (i = 0; i < 4; i++) {
		w[i] = (struct worker){ &b, i };
		child_spawn(&c[i], chaos_worker, &w[i]);
		child_expect(&c[i], "open", 5000);
	}
	child_spawn(&sc, scribbler, &b);
	child_expect(&sc, "open", 5000);
	/* The broker answers throughout: a session opens (or is refused with
	 * a code, if the scribbler filled the table), never a silence. For 3 s
	 * and at least 6 probes: a fixed 3 s made "more than 5 probes" a
	 * matter of how fast the machine was. */
	t0 = now_ms();
	while (rounds < 6 || now_ms() < t0 + 3000) {
		struct local_session_opts so;
		int rc;

		local_session_opts_init(&so);
		so.socket_path = b.sock;
		so.broker_wait_ms = 5000;
		rc = local_session_open(&so, &probe);
		CHECK(rc != -LOCAL_EBROKER);
		if (rc == 0)
			local_session_close(probe);
		rounds++;
		usleep(50000);
	}
	child_send(&sc, "stop");
	CHECK_OK(child_read(&sc, line, sizeof(line), 10000));
	CHECK(!strncmp(line, "done ", 5));
	child_kill(&sc);
	child_wait(&sc, 5000);
	for (i = 0; i < 4; i++) {
		child_send(&c[i], "stop");
		/* Every operation has a deadline: the worker stops promptly. */
		CHECK_OK(child_read(&c[i], line, sizeof(line), 20000));
		CHECK(!strncmp(line, "stopped ", 8));
		status = child_wait(&c[i], 5000);
		CHECK(WIFEXITED(status));
	}
	CHECK(kill(b.pid, 0) == 0); /* alive */
	CHECK_OK(kill(b.pid, SIGTERM));
	status = pid_wait(b.pid, 10000);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0); /* no crash, no ASan report */
	b.pid = 0;
	broker_stop(&b);
}
