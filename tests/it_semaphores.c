// SPDX-License-Identifier: MIT
/*
 * Semaphores against a real broker: the limit holds while holders are
 * SIGKILLed at random, FIFO order, limit and kind conflicts, one slot per
 * session, dead holders pruned by the broker alone, one token counter.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "broker_fixture.h"
#include "harness.h"
#include "invariants.h"
#include "key_fixture.h"

static unsigned waiters_of(local_session *s, const char *key)
{
	return info_of(s, key)->waiters;
}

/* ---- the limit under SIGKILL ------------------------------------------- */

#define CHAOS_KEY "sem/chaos"
#define CHAOS_LIMIT 3
#define CHAOS_CHILDREN 6
#define CHAOS_ROUNDS 200
#define CHAOS_RUN_MS 15000

/*
 * Shared between the parent and the workers (an anonymous shared mapping made
 * before any fork). The oracle is independent of shmlock: CHAOS_LIMIT robust
 * mutexes stand for the slots. A worker that holds the semaphore takes a free
 * one (trylock) for as long as it is inside, and gives it back before it
 * releases the semaphore; a worker that finds all of them taken by others is
 * one too many inside. A worker killed inside loses its mutex as it dies
 * (the kernel releases robust mutexes before the process's pidfd tells the
 * broker), so the dead never count; and only occupants ever hold one, so a
 * busy mutex is always a live worker inside. (A plain counter would stay
 * raised by a worker killed inside.)
 */
struct chaos {
	pthread_mutex_t slot[CHAOS_LIMIT];
	_Atomic uint32_t rounds[CHAOS_CHILDREN]; /* completed, per worker */
	_Atomic int in_cs[CHAOS_CHILDREN];	 /* statistics only */
	_Atomic uint32_t violations, max_inside, errors;
	_Atomic int last_error;
};

struct chaos_arg {
	const struct broker_proc *b;
	struct chaos *c;
	int slot;
};

static void robust_init(pthread_mutex_t *m)
{
	pthread_mutexattr_t a;

	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	CHECK(pthread_mutex_init(m, &a) == 0);
	pthread_mutexattr_destroy(&a);
}

/* Take a free slot mutex: its index, or -1 when all are held (by live
 * workers inside); *busy counts the held ones seen. */
static int take_slot(struct chaos *c, uint32_t *busy)
{
	int i, r;

	*busy = 0;
	for (i = 0; i < CHAOS_LIMIT; i++) {
		r = pthread_mutex_trylock(&c->slot[i]);
		if (r == EOWNERDEAD) /* its occupant died inside */
			pthread_mutex_consistent(&c->slot[i]);
		if (r == 0 || r == EOWNERDEAD)
			return i;
		(*busy)++;
	}
	return -1;
}

static void chaos_error(struct chaos *c, int err)
{
	atomic_fetch_add(&c->errors, 1);
	atomic_store(&c->last_error, err);
}

static void chaos_worker(void *p, int in, int out)
{
	const struct chaos_arg *a = p;
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 10000);
	struct chaos *c = a->c;
	local_session *s;
	char name[32];
	int err, i;

	(void)in;
	(void)out;
	snprintf(name, sizeof(name), "worker-%d", a->slot);
	srandom((unsigned)getpid());
	s = open_session(a->b, name, 0, 0);
	while (atomic_load(&c->rounds[a->slot]) < CHAOS_ROUNDS) {
		uint32_t busy, m;

		err = local_sem_acquire(s, CHAOS_KEY, CHAOS_LIMIT, &o, NULL);
		if (err) {
			chaos_error(c, err);
			_exit(1);
		}
		i = take_slot(c, &busy);
		if (i < 0)
			atomic_fetch_add(&c->violations, 1);
		m = atomic_load(&c->max_inside);
		while (busy + 1 > m && !atomic_compare_exchange_weak(&c->max_inside, &m, busy + 1))
			;
		atomic_store(&c->in_cs[a->slot], 1);
		/* Stay a moment, so that others pile in and kills land inside. */
		usleep(200 + (useconds_t)(random() % 800));
		atomic_store(&c->in_cs[a->slot], 0);
		if (i >= 0)
			pthread_mutex_unlock(&c->slot[i]);
		err = local_release(s, CHAOS_KEY);
		if (err) {
			chaos_error(c, err);
			_exit(1);
		}
		atomic_fetch_add(&c->rounds[a->slot], 1);
	}
	local_session_close(s);
}

static bool chaos_done(struct chaos *c)
{
	int i;

	for (i = 0; i < CHAOS_CHILDREN; i++)
		if (atomic_load(&c->rounds[i]) < CHAOS_ROUNDS)
			return false;
	return true;
}

TEST(semaphores, limit_holds_while_holders_are_killed, 30)
{
	struct chaos_arg args[CHAOS_CHILDREN];
	struct child kids[CHAOS_CHILDREN];
	unsigned kills = 0, inside_kills = 0, i;
	struct broker_proc b;
	local_session *obs;
	struct chaos *c;
	uint64_t end;

	broker_start(&b, NULL);
	c = mmap(NULL, sizeof(*c), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(c != MAP_FAILED);
	memset(c, 0, sizeof(*c));
	for (i = 0; i < CHAOS_LIMIT; i++)
		robust_init(&c->slot[i]);
	obs = open_session(&b, "obs", 0, 0);
	srandom((unsigned)getpid());
	for (i = 0; i < CHAOS_CHILDREN; i++) {
		args[i] = (struct chaos_arg){ &b, c, (int)i };
		child_spawn(&kids[i], chaos_worker, &args[i]);
	}
	end = now_ms() + CHAOS_RUN_MS;
	while (!chaos_done(c) && now_ms() < end && !atomic_load(&c->errors)) {
		unsigned v = (unsigned)random() % CHAOS_CHILDREN;
		int status;

		/* The chaos cadence: a kill every few milliseconds. */
		usleep(1000 + (useconds_t)(random() % 4000));
		CHECK(info_of(obs, CHAOS_KEY)->holders <= CHAOS_LIMIT);
		if (!kids[v].pid || atomic_load(&c->rounds[v]) >= CHAOS_ROUNDS)
			continue;
		inside_kills += (unsigned)atomic_load(&c->in_cs[v]); /* a statistic */
		child_kill(&kids[v]);
		status = child_wait(&kids[v], 5000);
		if (WIFEXITED(status) && WEXITSTATUS(status))
			FAIL_AT("worker %u failed before it was killed", v);
		kills++;
		child_spawn(&kids[v], chaos_worker, &args[v]);
	}
	/* The workers finish their rounds by themselves once the chaos ends. */
	for (i = 0; i < CHAOS_CHILDREN; i++) {
		if (!WAIT_FOR(atomic_load(&c->rounds[i]) >= CHAOS_ROUNDS || atomic_load(&c->errors),
			      5000))
			child_kill(&kids[i]);
		child_wait(&kids[i], 5000);
	}
	fprintf(stderr, "    %u kills (%u inside the critical section), %u seen inside at once\n",
		kills, inside_kills, atomic_load(&c->max_inside));
	if (atomic_load(&c->errors))
		FAIL_AT("%u worker error(s), last: %s", atomic_load(&c->errors),
			local_strerror(atomic_load(&c->last_error)));
	CHECK_EQ(atomic_load(&c->violations), 0);
	CHECK(atomic_load(&c->max_inside) <= CHAOS_LIMIT);
	CHECK(chaos_done(c));
	CHECK(kills > 0);
	CHECK(WAIT_SESSIONS(obs, 1, 5000));
	CHECK_EQ(info_of(obs, CHAOS_KEY)->holders, 0);
	CHECK_EQ(info_of(obs, CHAOS_KEY)->waiters, 0);
	CHECK_EQ(segment_violations(obs), 0);
	CHECK_EQ(used_nodes(obs), 0);
	broker_stop(&b);
}

/* ---- FIFO ---------------------------------------------------------------- */

struct sem_arg {
	const struct broker_proc *b;
	const char *key;
	uint32_t limit;
	int id;
	int lock_delay_ms;
};

/* Child: take a slot (blocking), report, release on "release", exit on "exit". */
static void sem_child(void *p, int in, int out)
{
	const struct sem_arg *a = p;
	char name[32], buf[64];
	local_session *s;
	uint64_t tok = 0;
	int r;

	snprintf(name, sizeof(name), "sem-%d", a->id);
	s = open_session(a->b, name, a->lock_delay_ms, 0);
	say(out, "open");
	r = local_sem_acquire(s, a->key, a->limit, NULL, &tok);
	if (r)
		say(out, "error %d", r);
	else
		say(out, "got %d %llu", a->id, (unsigned long long)tok);
	while (!hear(in, buf, sizeof(buf))) {
		if (!strcmp(buf, "exit"))
			break;
		if (!strcmp(buf, "release"))
			say(out, "released %d", local_release(s, a->key));
	}
	local_session_close(s);
}

static unsigned long long expect_got(struct child *c, int id)
{
	unsigned long long tok;
	char line[128];
	int got;

	CHECK_OK(child_read(c, line, sizeof(line), 5000));
	if (sscanf(line, "got %d %llu", &got, &tok) != 2 || got != id)
		FAIL_AT("expected a grant to %d, got \"%s\"", id, line);
	return tok;
}

static void expect_nothing(struct child *c)
{
	char line[128];

	CHECK_EQ(child_read(c, line, sizeof(line), 30), -ETIMEDOUT);
}

TEST(semaphores, waiters_are_granted_in_fifo_order, 30)
{
	enum { N = 5 };
	struct sem_arg args[N];
	struct child kids[N];
	struct broker_proc b;
	local_session *h1, *h2;
	unsigned long long last = 0, tok;
	uint64_t t1, t2;
	int i;

	broker_start(&b, NULL);
	h1 = open_session(&b, "h1", 0, 0);
	h2 = open_session(&b, "h2", 0, 0);
	CHECK_OK(local_sem_acquire(h1, "sem/fifo", 2, NULL, &t1));
	CHECK_OK(local_sem_acquire(h2, "sem/fifo", 2, NULL, &t2));
	CHECK(t2 > t1);
	last = t2;
	for (i = 0; i < N; i++) {
		args[i] = (struct sem_arg){ &b, "sem/fifo", 2, i, 0 };
		child_spawn(&kids[i], sem_child, &args[i]);
		child_expect(&kids[i], "open", 5000);
		CHECK(WAIT_FOR(waiters_of(h1, "sem/fifo") == (unsigned)i + 1, 5000));
	}
	CHECK_EQ(info_of(h1, "sem/fifo")->holders, 2);
	/* Each freed slot goes to the head of the queue, and only to it. */
	CHECK_OK(local_release(h1, "sem/fifo"));
	tok = expect_got(&kids[0], 0);
	CHECK(tok > last);
	last = tok;
	expect_nothing(&kids[1]);
	CHECK_OK(local_release(h2, "sem/fifo"));
	tok = expect_got(&kids[1], 1);
	CHECK(tok > last);
	last = tok;
	expect_nothing(&kids[2]);
	CHECK_EQ(info_of(h1, "sem/fifo")->holders, 2);
	CHECK_EQ(info_of(h1, "sem/fifo")->waiters, N - 2);
	for (i = 2; i < N; i++) {
		child_send(&kids[i - 2], "release");
		child_expect(&kids[i - 2], "released 0", 5000);
		tok = expect_got(&kids[i], i);
		CHECK(tok > last);
		last = tok;
		if (i + 1 < N)
			expect_nothing(&kids[i + 1]);
		CHECK(info_of(h1, "sem/fifo")->holders <= 2);
	}
	CHECK_EQ(segment_violations(h1), 0);
	for (i = 0; i < N; i++) {
		child_send(&kids[i], "exit");
		child_wait(&kids[i], 5000);
	}
	CHECK(WAIT_SESSIONS(h1, 2, 5000));
	CHECK_EQ(info_of(h1, "sem/fifo")->holders, 0);
	CHECK_EQ(used_nodes(h1), 0);
	broker_stop(&b);
}

/* ---- conflicts ------------------------------------------------------------ */

TEST(semaphores, limit_and_kind_mismatch, 20)
{
	LOCAL_OPTS(local_acquire_opts, try, .timeout_ms = 0);
	struct broker_proc b;
	local_session *a, *c;
	struct local_key_info *info;
	int granted = 0;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	c = open_session(&b, "c", 0, 0);
	CHECK_OK(local_sem_acquire(a, "sem/k", 3, NULL, NULL));
	/* Another limit: refused, and the key's limit is there to see. */
	CHECK_RC(local_sem_acquire(c, "sem/k", 2, &try, NULL), -LOCAL_ELIMIT);
	CHECK_RC(local_sem_acquire(c, "sem/k", 4, NULL, NULL), -LOCAL_ELIMIT);
	CHECK_RC(local_enqueue(c, "sem/k", 5, NULL, &granted, NULL), -LOCAL_ELIMIT);
	info = info_of(c, "sem/k");
	CHECK_EQ(info->kind, LOCAL_KIND_SEMAPHORE);
	CHECK_EQ(info->limit, 3);
	CHECK_EQ(info->holders, 1);
	CHECK_EQ(info->waiters, 0);
	CHECK(strstr(local_strerror(-LOCAL_ELIMIT), "limit") != NULL);
	/* A semaphore used as a lock, and a lock used as a semaphore. */
	CHECK_RC(local_lock(c, "sem/k", &try, NULL), -LOCAL_EKIND);
	CHECK_RC(local_lock(c, "sem/k", NULL, NULL), -LOCAL_EKIND);
	CHECK_RC(local_enqueue(c, "sem/k", 0, NULL, &granted, NULL), -LOCAL_EKIND);
	CHECK_OK(local_lock(a, "lock/k", NULL, NULL));
	CHECK_RC(local_sem_acquire(c, "lock/k", 1, &try, NULL), -LOCAL_EKIND);
	CHECK_RC(local_sem_acquire(c, "lock/k", 3, NULL, NULL), -LOCAL_EKIND);
	/* The holder too: the kind belongs to the key, not to the session. */
	CHECK_RC(local_sem_acquire(a, "lock/k", 1, NULL, NULL), -LOCAL_EKIND);
	CHECK_RC(local_lock(a, "sem/k", NULL, NULL), -LOCAL_EKIND);
	/* Still true once the key is free again (it still exists). */
	CHECK_OK(local_release(a, "lock/k"));
	CHECK_RC(local_sem_acquire(c, "lock/k", 1, &try, NULL), -LOCAL_EKIND);
	CHECK_OK(local_release(a, "sem/k"));
	CHECK_RC(local_sem_acquire(c, "sem/k", 2, &try, NULL), -LOCAL_ELIMIT);
	CHECK_EQ(info_of(c, "lock/k")->kind, LOCAL_KIND_LOCK);
	/* Bad limit. */
	CHECK_RC(local_sem_acquire(c, "sem/zero", 0, NULL, NULL), -EINVAL);
	CHECK_EQ(segment_violations(a), 0);
	CHECK_EQ(info_of(a, "sem/k")->waiters, 0);
	broker_stop(&b);
}

TEST(semaphores, a_session_holds_one_slot, 20)
{
	LOCAL_OPTS(local_acquire_opts, try, .timeout_ms = 0);
	struct broker_proc b;
	local_session *a, *c, *d;
	uint64_t t1 = 0, t2 = 0, t3 = 0;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	c = open_session(&b, "c", 0, 0);
	d = open_session(&b, "d", 0, 0);
	CHECK_OK(local_sem_acquire(a, "sem/one", 2, NULL, &t1));
	CHECK_OK(local_sem_acquire(a, "sem/one", 2, NULL, &t2));
	CHECK_EQ(t2, t1);
	CHECK_OK(local_sem_acquire(a, "sem/one", 2, &try, &t2));
	CHECK_EQ(t2, t1);
	CHECK_EQ(info_of(a, "sem/one")->holders, 1);
	CHECK_EQ(info_of(a, "sem/one")->lock_index, 1);
	CHECK_OK(local_held(a, "sem/one", &t3));
	CHECK_EQ(t3, t1);
	/* So the second slot is still there for someone else. */
	CHECK_OK(local_sem_acquire(c, "sem/one", 2, &try, &t2));
	CHECK(t2 > t1);
	CHECK_RC(local_sem_acquire(d, "sem/one", 2, &try, NULL), -EBUSY);
	CHECK_EQ(info_of(a, "sem/one")->holders, 2);
	/* One release frees the one slot. */
	CHECK_OK(local_release(a, "sem/one"));
	CHECK_RC(local_release(a, "sem/one"), -LOCAL_ENOTHELD);
	CHECK_EQ(info_of(a, "sem/one")->holders, 1);
	CHECK_OK(local_sem_acquire(d, "sem/one", 2, &try, NULL));
	CHECK_EQ(segment_violations(a), 0);
	broker_stop(&b);
}

/* ---- dead holders ----------------------------------------------------------- */

static void hold_child(void *p, int in, int out)
{
	const struct sem_arg *a = p;
	local_session *s = open_session(a->b, "doomed", a->lock_delay_ms, 0);
	char buf[16];

	CHECK_OK(local_sem_acquire(s, a->key, a->limit, NULL, NULL));
	say(out, "held");
	hear(in, buf, sizeof(buf));
}

/*
 * The broker prunes a dead holder by itself: this process only watches the
 * key (a watch changes nothing), yet the holder count drops at once. With the
 * default 15 s lock-delay the slot is pruned all the same, not re-granted.
 */
static void dead_holder_pruned(int lock_delay_ms)
{
	struct sem_arg a;
	struct local_key_info *out;
	struct broker_proc b;
	local_session *obs;
	struct child h[2];
	uint64_t idx, t0;
	int i, r;

	broker_start(&b, NULL);
	obs = open_session(&b, "obs", 0, 0);
	a = (struct sem_arg){ &b, "sem/prune", 3, 0, lock_delay_ms };
	for (i = 0; i < 2; i++) {
		child_spawn(&h[i], hold_child, &a);
		child_expect(&h[i], "held", 5000);
	}
	/* Zeroed and sized: local_info() refuses a struct whose sz is not a
	 * size it knows (malloc's garbage failed this under TSan). */
	out = calloc(1, sizeof(*out));
	CHECK(out);
	out->sz = sizeof(*out);
	CHECK_OK(local_info(obs, "sem/prune", out));
	CHECK_EQ(out->holders, 2);
	idx = out->modify_index;
	t0 = now_ms();
	child_kill(&h[0]);
	for (;;) {
		r = local_watch(obs, "sem/prune", idx, 10000, out);
		if (r)
			FAIL_AT("watch: %s, holders still %u", local_strerror(r), out->holders);
		if (out->holders == 1)
			break;
		idx = out->modify_index;
	}
	/* Pruned with nobody asking (this process only watches). How soon is
	 * a figure: a bound of 1 s was the machine's load as much as ours. */
	fprintf(stderr, "    the dead holder was pruned %llu ms after its SIGKILL\n",
		(unsigned long long)(now_ms() - t0));
	if (lock_delay_ms)
		CHECK(out->lock_delay_remaining_ms > 0);
	CHECK_EQ(out->holder_pid, h[1].pid);
	child_wait(&h[0], 5000);
	CHECK(WAIT_SESSIONS(obs, 2, 5000));
	CHECK_EQ(segment_violations(obs), 0);
	child_kill(&h[1]);
	child_wait(&h[1], 5000);
	CHECK(WAIT_FOR(info_of(obs, "sem/prune")->holders == 0, 5000));
	free(out);
	broker_stop(&b);
}

TEST(semaphores, dead_holder_pruned_by_the_broker, 20)
{
	dead_holder_pruned(0);
}

TEST(semaphores, dead_holder_pruned_during_lock_delay, 20)
{
	dead_holder_pruned(LOCAL_LOCK_DELAY_DEFAULT_MS);
}

/* A killed holder's slot goes to the head waiter, and only that slot. */
TEST(semaphores, killed_holder_hands_its_slot_to_the_head_waiter, 20)
{
	struct sem_arg ha, wa[2];
	struct child h, w[2];
	struct broker_proc b;
	local_session *obs;
	int i;

	broker_start(&b, NULL);
	obs = open_session(&b, "obs", 0, 0);
	CHECK_OK(local_sem_acquire(obs, "sem/kh", 2, NULL, NULL));
	ha = (struct sem_arg){ &b, "sem/kh", 2, 9, 0 };
	child_spawn(&h, hold_child, &ha);
	child_expect(&h, "held", 5000);
	for (i = 0; i < 2; i++) {
		wa[i] = (struct sem_arg){ &b, "sem/kh", 2, i, 0 };
		child_spawn(&w[i], sem_child, &wa[i]);
		child_expect(&w[i], "open", 5000);
		CHECK(WAIT_FOR(waiters_of(obs, "sem/kh") == (unsigned)i + 1, 5000));
	}
	child_kill(&h);
	child_wait(&h, 5000);
	expect_got(&w[0], 0);
	expect_nothing(&w[1]);
	CHECK_EQ(info_of(obs, "sem/kh")->holders, 2);
	CHECK_EQ(info_of(obs, "sem/kh")->waiters, 1);
	CHECK_EQ(segment_violations(obs), 0);
	for (i = 0; i < 2; i++) {
		child_kill(&w[i]);
		child_wait(&w[i], 5000);
	}
	broker_stop(&b);
}

/* ---- tokens ------------------------------------------------------------------ */

/* Tokens rise per key, over locks and semaphores alike, and no two grants on
 * different keys share one (they are not ordered across keys). */
TEST(semaphores, tokens_rise_per_key_and_differ_across_keys, 20)
{
	uint64_t lastk[4] = { 0 }, seen[200], last = 0, t;
	struct broker_proc b;
	local_session *a, *c;
	int round, nseen = 0, i, j;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	c = open_session(&b, "c", 0, 0);
#define NEXT(ki, expr)                                                                         \
	do {                                                                                   \
		t = 0;                                                                         \
		CHECK_OK(expr);                                                                \
		if (t <= lastk[ki])                                                            \
			FAIL_AT("%s: token %llu not above %llu", #expr, (unsigned long long)t, \
				(unsigned long long)lastk[ki]);                                \
		lastk[ki] = t;                                                                 \
		seen[nseen++] = t;                                                             \
		if (t > last)                                                                  \
			last = t;                                                              \
	} while (0)
	for (round = 0; round < 40; round++) {
		NEXT(0, local_lock(a, "tok/lock", NULL, &t));
		NEXT(1, local_sem_acquire(c, "tok/sem", 2, NULL, &t));
		NEXT(1, local_sem_acquire(a, "tok/sem", 2, NULL, &t));
		NEXT(2, local_lock(c, "tok/lock2", NULL, &t));
		NEXT(3, local_sem_acquire(a, "tok/sem1", 1, NULL, &t));
		CHECK_OK(local_release(a, "tok/lock"));
		CHECK_OK(local_release(c, "tok/sem"));
		CHECK_OK(local_release(a, "tok/sem"));
		CHECK_OK(local_release(c, "tok/lock2"));
		CHECK_OK(local_release(a, "tok/sem1"));
	}
#undef NEXT
	for (i = 0; i < nseen; i++)
		for (j = 0; j < i; j++)
			if (seen[i] == seen[j])
				FAIL_AT("token %llu granted twice", (unsigned long long)seen[i]);
	last = lastk[3];
	/* The key's last token is the latest grant. */
	CHECK_EQ(info_of(a, "tok/sem1")->token, 0);
	CHECK_OK(local_sem_acquire(a, "tok/sem1", 1, NULL, &t));
	CHECK(t > last);
	CHECK_EQ(info_of(a, "tok/sem1")->token, t);
	CHECK_OK(local_check_token(c, "tok/sem1", t));
	CHECK_RC(local_check_token(c, "tok/sem1", last), -LOCAL_ESTALE);
	CHECK_OK(local_release(a, "tok/sem1"));
	CHECK_RC(local_check_token(c, "tok/sem1", t), -LOCAL_ESTALE);
	CHECK_RC(local_check_token(c, "tok/never", t), -LOCAL_ESTALE);
	broker_stop(&b);
}

/*
 * The mutex path tries the entry the session found the same
 * key string address in last (keytab_find_hinted()), and must confirm it
 * under the key mutex. A caller that reuses its buffer for another key
 * must get that other key, on acquire and on release, while both keys have
 * another holder (so that every call takes the mutex path).
 */
TEST(semaphores, a_reused_key_buffer_names_its_new_key_on_the_mutex_path, 20)
{
	/* With a value the lock-free path does not even look the key up (it
	 * would mend the hint first): the mutex path meets the stale hint. */
	LOCAL_OPTS(local_acquire_opts, try, .timeout_ms = 0, .value = "v", .value_len = 1);
	struct broker_proc b;
	local_session *a, *c;
	char buf[32];
	int i;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	c = open_session(&b, "c", 0, 0);
	CHECK_OK(local_sem_acquire(a, "sem/x", 3, NULL, NULL));
	CHECK_OK(local_sem_acquire(a, "sem/y", 3, NULL, NULL));
	for (i = 0; i < 4; i++) {
		/* x, y, x, y: the hint names the other key's entry each time. */
		snprintf(buf, sizeof(buf), "sem/%c", i % 2 ? 'y' : 'x');
		CHECK_OK(local_sem_acquire(c, buf, 3, &try, NULL));
		CHECK_EQ(info_of(c, i % 2 ? "sem/y" : "sem/x")->holders, 2);
		CHECK_EQ(info_of(c, i % 2 ? "sem/x" : "sem/y")->holders, 1);
		/* The other key is not held by c: not released by this buffer. */
		snprintf(buf, sizeof(buf), "sem/%c", i % 2 ? 'x' : 'y');
		CHECK_RC(local_release(c, buf), -LOCAL_ENOTHELD);
		snprintf(buf, sizeof(buf), "sem/%c", i % 2 ? 'y' : 'x');
		CHECK_OK(local_release(c, buf));
		CHECK_EQ(info_of(c, "sem/x")->holders, 1);
		CHECK_EQ(info_of(c, "sem/y")->holders, 1);
	}
	/* A key that does not exist, through a buffer whose hint names one
	 * that does: not created by a release, not held. */
	snprintf(buf, sizeof(buf), "sem/none");
	CHECK_RC(local_release(c, buf), -LOCAL_ENOTHELD);
	CHECK_EQ(segment_violations(a), 0);
	broker_stop(&b);
}
