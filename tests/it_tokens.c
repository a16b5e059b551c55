// SPDX-License-Identifier: MIT
/*
 * Fencing tokens from per-key ranges (keyops.h, key_next_token_locked()),
 * and the uncontended path's footprint: a lock-free lock+release writes its
 * key's first line and its own hold node, and no line another key's users
 * write (docs/architecture.md, "Cache lines the uncontended path writes").
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "broker_fixture.h"
#include "harness.h"
#include "invariants.h"

static const LOCAL_OPTS(local_acquire_opts, try_once, .timeout_ms = 0);

/* @key's entry, read without its mutex (the test's own session only). */
static struct seg_key *entry_of(local_session *s, const char *key)
{
	uint32_t i;

	for (i = 0; i < s->seg->caps.max_keys; i++)
		if (atomic_load(&s->seg->keys[i].state) == KEY_USED &&
		    !strcmp(s->seg->keys[i].key, key))
			return &s->seg->keys[i];
	return NULL;
}

/* Tokens @key's current range has left for lock-free grants (the key's
 * counts made exact first by a mutex holder: local_info()). */
static uint64_t room_of(local_session *s, const char *key)
{
	static LOCAL_OPTS(local_key_info, info);
	struct seg_key *k;
	uint64_t next;

	CHECK_OK(local_info(s, key, &info));
	k = entry_of(s, key);
	CHECK(k != NULL);
	next = key_token_for(k, info.lock_index + 1);
	return next ? k->tok_hi - next + 1 : 0;
}

/* What a changed line of the segment is, for the failure message. */
static void name_line(const struct segment *seg, size_t off, char *out, size_t size)
{
	const char *base = (const char *)seg->hdr;
	size_t sess = (size_t)((const char *)seg->sessions - base);
	size_t keys = (size_t)((const char *)seg->keys - base);
	size_t nodes = (size_t)((const char *)seg->nodes - base);

	if (off < sess)
		snprintf(out, size, "header +%zu", off);
	else if (off < keys)
		snprintf(out, size, "session %zu +%zu", (off - sess) / sizeof(struct seg_session),
			 (off - sess) % sizeof(struct seg_session));
	else if (off < keys + (size_t)seg->caps.max_keys * sizeof(struct seg_key))
		snprintf(out, size, "key %zu +%zu", (off - keys) / sizeof(struct seg_key),
			 (off - keys) % sizeof(struct seg_key));
	else if (off >= nodes && off < nodes + (size_t)seg->nnodes * sizeof(struct seg_node))
		snprintf(out, size, "node %zu", (off - nodes) / sizeof(struct seg_node));
	else
		snprintf(out, size, "segment +%zu", off);
}

/*
 * Snapshot the segment, run lock-free lock+release cycles on one key (inside
 * its token range), and list the 64-byte lines that changed: only the key's
 * first line and one hold node may. The old token counter (one atomic add
 * per grant on a header line every process shares) fails this.
 */
TEST(tokens, uncontended_path_writes_only_its_own_lines, 30)
{
	const char *key = "tok/own-lines";
	struct broker_proc b;
	local_session *a;
	struct seg_key *k;
	size_t off, size, bad = 0, key_line, nodes = 0;
	unsigned char *before;
	const unsigned char *now;
	uint64_t room;
	int i, n, attempt;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	for (i = 0, room = 0; room < 400 && i < 100; i++) {
		for (n = 0; n < 100; n++) {
			CHECK_OK(local_lock(a, key, &try_once, NULL));
			CHECK_OK(local_release(a, key));
		}
		room = room_of(a, key);
	}
	CHECK(room >= 400); /* three attempts of 101 cycles stay inside it */
	k = entry_of(a, key);
	CHECK(!(atomic_load(&k->fast) & FAST_SLOW));
	size = a->seg->size;
	before = malloc(size);
	CHECK(before != NULL);
	now = (const unsigned char *)a->seg->hdr;
	key_line = (size_t)((const char *)&k->fast - (const char *)a->seg->hdr) & ~(size_t)63;
	/* The broker writes its own header words now and then (its doorbell,
	 * the table lock of its idle-key collector): a line our cycles write
	 * is written in every attempt, one of the broker's only by chance. */
	for (attempt = 0; attempt < 3; attempt++) {
		/* One cycle first: the node this session will reuse. */
		CHECK_OK(local_lock(a, key, &try_once, NULL));
		CHECK_OK(local_release(a, key));
		memcpy(before, now, size);
		for (n = 0; n < 100; n++) {
			CHECK_OK(local_lock(a, key, &try_once, NULL));
			CHECK_OK(local_release(a, key));
		}
		for (off = 0, bad = 0, nodes = 0; off < size; off += 64) {
			char what[64];

			if (!memcmp(before + off, now + off, 64 < size - off ? 64 : size - off))
				continue;
			name_line(a->seg, off, what, sizeof(what));
			if (off == key_line)
				continue;
			if (!strncmp(what, "node ", 5) && nodes++ == 0)
				continue; /* our hold node, claimed and freed each cycle */
			if (attempt == 2)
				fprintf(stderr,
					"    line at +%zu (%s) written by lock-free "
					"lock+release\n",
					off, what);
			bad++;
		}
		if (!bad)
			break;
	}
	free(before);
	CHECK_EQ(bad, 0);
	CHECK_EQ(segment_violations(a), 0);
	broker_stop(&b);
}

/* Lock @key for @s, lock-free (try) or through the mutex (with a value). */
static uint64_t take(local_session *s, const char *key, bool mutex)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 0, .value = mutex ? "v" : NULL,
		   .value_len = mutex ? 1 : 0);
	uint64_t t = 0;

	CHECK_OK(local_lock(s, key, &o, &t));
	return t;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * Two sessions take three keys in turn, lock-free and through the mutex,
 * long enough for every key to spend several ranges: each key's tokens rise,
 * no token is given twice, and the counter is at or above all of them.
 */
#define ROUNDS 400
#define NKEYS 3

TEST(tokens, rise_per_key_and_never_repeat, 60)
{
	static const char *const keys[NKEYS] = { "tok/a", "tok/b", "tok/c" };
	static uint64_t all[ROUNDS * NKEYS];
	uint64_t last[NKEYS] = { 0 }, t;
	struct broker_proc b;
	local_session *s[2];
	int r, j, n = 0;

	broker_start(&b, NULL);
	s[0] = open_session(&b, "a", 0, 0);
	s[1] = open_session(&b, "b", 0, 0);
	for (r = 0; r < ROUNDS; r++)
		for (j = 0; j < NKEYS; j++) {
			local_session *who = s[(r + j) & 1];

			t = take(who, keys[j], r % 7 == j);
			if (t <= last[j])
				FAIL_AT("%s: token %llu after %llu", keys[j], (unsigned long long)t,
					(unsigned long long)last[j]);
			last[j] = all[n++] = t;
			CHECK_OK(local_release(who, keys[j]));
		}
	qsort(all, (size_t)n, sizeof(all[0]), cmp_u64);
	for (j = 1; j < n; j++)
		if (all[j] == all[j - 1])
			FAIL_AT("token %llu given twice", (unsigned long long)all[j]);
	CHECK(all[n - 1] <= atomic_load(&s[0]->seg->hdr->token_counter));
	CHECK_EQ(segment_violations(s[0]), 0);
	broker_stop(&b);
}

/*
 * Reclaim and re-create: with two key entries, the key comes back in each of
 * them in turn, after other keys used them; its tokens still rise (a new
 * entry's token 0 voids whatever range the entry held before).
 */
TEST(tokens, rise_across_reclaim, 30)
{
	static const char *const extra[] = { "--max-keys", "2", NULL };
	const char *const names[] = { "gc/k", "gc/other" };
	uint64_t last = 0, t;
	struct broker_proc b;
	local_session *a;
	int r, i, j;

	broker_start(&b, extra);
	a = open_session(&b, "a", 0, 0);
	for (r = 0; r < 8; r++) {
		/* The other key spends a few ranges in an entry first. */
		for (i = 0; i < (r & 1) * 50; i++) {
			take(a, names[1], i % 5 == 0);
			CHECK_OK(local_release(a, names[1]));
		}
		for (j = 0; j < 3; j++) {
			t = take(a, names[0], j == 1);
			if (t <= last)
				FAIL_AT("round %d: token %llu after %llu", r, (unsigned long long)t,
					(unsigned long long)last);
			last = t;
			CHECK_OK(local_release(a, names[0]));
		}
		CHECK(keytab_reclaim_idle(a->seg, 0, UINT32_MAX, 0) >= 1);
		CHECK(entry_of(a, names[0]) == NULL);
	}
	CHECK_EQ(segment_violations(a), 0);
	broker_stop(&b);
}

/*
 * Three processes take four keys at random, lock-free and through the mutex,
 * and each grant is logged while the key is still held, so the log of a key
 * is in grant order: every key's log rises, and no token appears twice in
 * all the logs. Races on one key's fast word between processes, and range
 * reservations on the shared counter, happen throughout.
 */
#define RACE_PROCS 3
#define RACE_KEYS 4
#define RACE_GRANTS 3000 /* per process */

struct race_log {
	uint32_t n[RACE_KEYS];
	uint64_t tok[RACE_KEYS][RACE_PROCS * RACE_GRANTS];
};

struct race_arg {
	const struct broker_proc *b;
	struct race_log *log;
	int id;
};

static void race_child(void *p, int in, int out)
{
	static const char *const keys[RACE_KEYS] = { "race/a", "race/b", "race/c", "race/d" };
	const struct race_arg *a = p;
	unsigned seed = (unsigned)a->id * 7919u + 1;
	local_session *s = open_session(a->b, "racer", 0, 0);
	int i;

	(void)in;
	for (i = 0; i < RACE_GRANTS; i++) {
		unsigned k = (unsigned)rand_r(&seed) % RACE_KEYS;
		bool mutex = rand_r(&seed) % 8 == 0;
		LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = -1, .value = mutex ? "v" : NULL,
			   .value_len = mutex ? 1 : 0);
		uint64_t t = 0;
		int rc = local_lock(s, keys[k], &o, &t);

		if (rc) {
			say(out, "lock %s: %d", keys[k], rc);
			return;
		}
		a->log->tok[k][a->log->n[k]++] = t; /* under the lock: grant order */
		rc = local_release(s, keys[k]);
		if (rc) {
			say(out, "release %s: %d", keys[k], rc);
			return;
		}
	}
	local_session_close(s);
	say(out, "done");
}

TEST(tokens, racing_processes_rise_per_key_and_never_repeat, 120)
{
	struct race_arg args[RACE_PROCS];
	struct child kids[RACE_PROCS];
	struct race_log *log;
	struct broker_proc b;
	local_session *obs;
	uint64_t *all;
	size_t total = 0, i;
	uint32_t k, j;
	int p;

	log = mmap(NULL, sizeof(*log), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(log != MAP_FAILED);
	broker_start(&b, NULL);
	obs = open_session(&b, "obs", 0, 0);
	for (p = 0; p < RACE_PROCS; p++) {
		args[p] = (struct race_arg){ &b, log, p };
		child_spawn(&kids[p], race_child, &args[p]);
	}
	for (p = 0; p < RACE_PROCS; p++) {
		child_expect(&kids[p], "done", 60000);
		CHECK(WIFEXITED(child_wait(&kids[p], 5000)));
	}
	all = malloc(sizeof(log->tok));
	CHECK(all != NULL);
	for (k = 0; k < RACE_KEYS; k++) {
		for (j = 0; j < log->n[k]; j++) {
			if (j && log->tok[k][j] <= log->tok[k][j - 1])
				FAIL_AT("key %u: grant %u got token %llu after %llu", k, j,
					(unsigned long long)log->tok[k][j],
					(unsigned long long)log->tok[k][j - 1]);
			all[total++] = log->tok[k][j];
		}
	}
	CHECK_EQ(total, RACE_PROCS * RACE_GRANTS);
	qsort(all, total, sizeof(all[0]), cmp_u64);
	for (i = 1; i < total; i++)
		if (all[i] == all[i - 1])
			FAIL_AT("token %llu given twice", (unsigned long long)all[i]);
	CHECK(all[total - 1] <= atomic_load(&obs->seg->hdr->token_counter));
	CHECK_EQ(segment_violations(obs), 0);
	free(all);
	munmap(log, sizeof(*log));
	broker_stop(&b);
}

/*
 * The slow-path counters: a timeout and a handoff are counted in
 * their key's entry, and local_stats() reports them, while the header's
 * shared stats line stays as it was (it took both before SEG_ABI 6).
 */
static void handoff_child(void *p, int in, int out)
{
	struct broker_proc *b = p;
	local_session *s = open_session(b, "waiter", 0, 0);
	char buf[8];

	say(out, "open");
	hear(in, buf, sizeof(buf));
	CHECK_OK(local_lock(s, "tok/counted", NULL, NULL)); /* waits: handed off */
	CHECK_OK(local_release(s, "tok/counted"));
	say(out, "done");
}

TEST(tokens, slow_path_counters_stay_off_the_shared_line, 30)
{
	LOCAL_OPTS(local_acquire_opts, timed, .timeout_ms = 20);
	LOCAL_OPTS(local_stats, s0);
	LOCAL_OPTS(local_stats, s1);
	struct broker_proc b;
	struct child c;
	local_session *a, *obs;
	struct seg_stats hdr0;
	struct seg_key *k;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	obs = open_session(&b, "obs", 0, 0);
	CHECK_OK(local_stats(obs, &s0));
	memcpy(&hdr0, (const void *)&a->seg->hdr->stats, sizeof(hdr0));
	CHECK_OK(local_lock(a, "tok/counted", NULL, NULL));
	CHECK_RC(local_lock(obs, "tok/counted", &timed, NULL), -ETIMEDOUT);
	child_spawn(&c, handoff_child, &b);
	child_expect(&c, "open", 5000);
	child_send(&c, "go");
	/* Release once the child's request is queued: a handoff. */
	k = entry_of(a, "tok/counted");
	CHECK(k != NULL);
	CHECK(WAIT_FOR(__atomic_load_n(&k->waiters, __ATOMIC_RELAXED) == 1, 5000));
	CHECK_OK(local_release(a, "tok/counted"));
	child_expect(&c, "done", 5000);
	CHECK_EQ(child_wait(&c, 5000), 0);
	CHECK_OK(local_stats(obs, &s1));
	CHECK_EQ(s1.timeouts - s0.timeouts, 1);
	CHECK_EQ(s1.handoffs - s0.handoffs, 1);
	CHECK_EQ(atomic_load(&k->n_timeouts), 1);
	CHECK_EQ(atomic_load(&k->n_handoffs), 1);
	CHECK_EQ(atomic_load(&a->seg->hdr->stats.timeouts), atomic_load(&hdr0.timeouts));
	CHECK_EQ(atomic_load(&a->seg->hdr->stats.handoffs), atomic_load(&hdr0.handoffs));
	CHECK_EQ(segment_violations(a), 0);
	broker_stop(&b);
}
