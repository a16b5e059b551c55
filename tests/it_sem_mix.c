// SPDX-License-Identifier: MIT
/*
 * Semaphore holds taken every way at once: processes on 40 semaphores
 * (limit 3) each acquire one lock-free, with a value (the mutex path), or
 * two-phase (enqueue, then wait), then ask again with a try, which must
 * answer the same token at once (one slot per session, however the slot was
 * granted and whatever path the others took meanwhile), and release. The
 * holders are counted in a shared table from a snapshot (as the soak does),
 * which must never show more than the limit. This is the mix that found a
 * re-acquire granting a second slot in a lock-free holders prototype.
 *
 * Then the other three ways that prototype lost count, each a test here
 * whatever path a semaphore's holders take: two threads of one session
 * releasing the same hold at once, two threads of one session acquiring at
 * once, and an acquire stopped in its lock-free step while its key is
 * released, reclaimed and created again as a lock. And holders in every
 * slot killed at any instruction.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker_fixture.h"
#include "crashpoint.h"
#include "harness.h"
#include "invariants.h"
#include "keyops.h"
#include "word_fixture.h"

#define MIX_PROCS 8
#define MIX_ITERS 8000
#define MIX_LIMIT 3
/* More keys than a session has entries for its lock-free semaphore holds
 * (16 in the prototype that failed), so that keys share entries. */
#define MIX_KEYS 40

struct mix {
	_Atomic uint32_t inside[MIX_KEYS][MIX_PROCS]; /* 1 while that process holds key k */
	_Atomic uint64_t changes[MIX_KEYS];	      /* counts each store to inside[k][] */
	char what[256];				      /* the first failure, from a child */
	_Atomic int failed;
};

__attribute__((format(printf, 2, 3))) static void mix_fail(struct mix *m, const char *fmt, ...)
{
	va_list ap;
	int was = 0;

	if (!atomic_compare_exchange_strong(&m->failed, &was, 1))
		_exit(1);
	va_start(ap, fmt);
	vsnprintf(m->what, sizeof(m->what), fmt, ap);
	va_end(ap);
	_exit(1);
}

static void mix_mark(struct mix *m, unsigned k, unsigned me, uint32_t v)
{
	atomic_store(&m->inside[k][me], v);
	atomic_fetch_add(&m->changes[k], 1);
}

/* Holders of key @k now, from reads no change came between. */
static unsigned mix_count(struct mix *m, unsigned k)
{
	uint32_t seen[MIX_PROCS];
	uint64_t before;
	unsigned i, n = 0;

	do {
		before = atomic_load(&m->changes[k]);
		for (i = 0; i < MIX_PROCS; i++)
			seen[i] = atomic_load(&m->inside[k][i]);
	} while (atomic_load(&m->changes[k]) != before);
	for (i = 0; i < MIX_PROCS; i++)
		n += seen[i];
	return n;
}

static void mix_child(const struct broker_proc *b, struct mix *m, unsigned me)
{
	LOCAL_OPTS(local_acquire_opts, try, .timeout_ms = 0);
	local_session *s = open_session(b, "mix", 0, 0);
	unsigned seed = me * 7919u + 1;
	int i, rc;

	for (i = 0; i < MIX_ITERS; i++) {
		LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 10000);
		unsigned k = (unsigned)rand_r(&seed) % MIX_KEYS, how = (unsigned)rand_r(&seed) % 3;
		char key[16];
		uint64_t tok = 0, again = 0;
		int granted = 0;

		snprintf(key, sizeof(key), "mix/%u", k);
		if (how == 1) {
			o.value = "v";
			o.value_len = 1;
		}
		if (how == 2) {
			rc = local_enqueue(s, key, MIX_LIMIT, &o, &granted, &tok);
			if (!rc && !granted)
				rc = local_wait(s, key, 10000, &tok);
		} else {
			rc = local_sem_acquire(s, key, MIX_LIMIT, &o, &tok);
		}
		if (rc)
			mix_fail(m, "proc %u, round %d: acquire (way %u) %s: %s", me, i, how, key,
				 local_strerror(rc));
		mix_mark(m, k, me, 1);
		if (mix_count(m, k) > MIX_LIMIT)
			mix_fail(m, "proc %u, round %d: %u holders of %s, limit %d", me, i,
				 mix_count(m, k), key, MIX_LIMIT);
		rc = local_sem_acquire(s, key, MIX_LIMIT, &try, &again);
		if (rc || again != tok)
			mix_fail(m,
				 "proc %u, round %d: asked again (way %u) %s: %s, token %llu, held "
				 "%llu",
				 me, i, how, key, local_strerror(rc), (unsigned long long)again,
				 (unsigned long long)tok);
		if (rand_r(&seed) % 4 == 0) /* hold a while: others hold beside us */
			usleep((useconds_t)(rand_r(&seed) % 200));
		mix_mark(m, k, me, 0);
		rc = local_release(s, key);
		if (rc)
			mix_fail(m, "proc %u, round %d: release %s: %s", me, i, key,
				 local_strerror(rc));
	}
	_exit(0);
}

TEST(sem_mix, every_way_of_granting_keeps_one_slot_per_session, 120)
{
	struct mix *m =
		mmap(NULL, sizeof(*m), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct broker_proc b;
	pid_t pids[MIX_PROCS];
	unsigned i;
	int st, bad = 0;

	CHECK(m != MAP_FAILED);
	memset(m, 0, sizeof(*m));
	broker_start(&b, NULL);
	fflush(NULL);
	for (i = 0; i < MIX_PROCS; i++) {
		pids[i] = fork();
		CHECK(pids[i] >= 0);
		if (pids[i] == 0)
			mix_child(&b, m, i);
	}
	for (i = 0; i < MIX_PROCS; i++) {
		CHECK(waitpid(pids[i], &st, 0) == pids[i]);
		bad += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
	}
	if (m->what[0])
		FAIL_AT("%s", m->what);
	CHECK_EQ(bad, 0);
	broker_stop_clean(&b);
}

/* ---- two threads of one session ----------------------------------------- */

#define TWIN_ROUNDS 3000
#define TWIN_LIMIT 3

struct twin {
	local_session *s;
	const char *key;
	pthread_barrier_t go, done;
	int acquire; /* this round: 1 both acquire, 0 both release */
	int rc[2];
	uint64_t tok[2];
	_Atomic int stop;
};

struct twin_arg {
	struct twin *t;
	int i;
};

static void *twin_run(void *p)
{
	static const LOCAL_OPTS(local_acquire_opts, try, .timeout_ms = 0);
	struct twin_arg *a = p;
	struct twin *t = a->t;

	for (;;) {
		pthread_barrier_wait(&t->go);
		if (atomic_load(&t->stop))
			return NULL;
		if (t->acquire)
			t->rc[a->i] =
				local_sem_acquire(t->s, t->key, TWIN_LIMIT, &try, &t->tok[a->i]);
		else
			t->rc[a->i] = local_release(t->s, t->key);
		pthread_barrier_wait(&t->done);
	}
}

/* Run one round on both threads: acquire (1) or release (0) at once. */
static void twin_round(struct twin *t, int acquire)
{
	t->acquire = acquire;
	t->rc[0] = t->rc[1] = 1;
	t->tok[0] = t->tok[1] = 0;
	pthread_barrier_wait(&t->go);
	pthread_barrier_wait(&t->done);
}

/* How many units of @key (limit TWIN_LIMIT) the sessions @probe can take
 * now, each one at most: the units left. Released again. */
static int units_left(local_session *const *probe, int n, const char *key)
{
	static const LOCAL_OPTS(local_acquire_opts, try, .timeout_ms = 0);
	int i, got = 0, rc;

	for (i = 0; i < n; i++) {
		rc = local_sem_acquire(probe[i], key, TWIN_LIMIT, &try, NULL);
		if (rc == 0)
			got++;
		else if (rc != -EBUSY)
			FAIL_AT("probe %d: %s", i, local_strerror(rc));
	}
	for (i = 0; i < got; i++)
		CHECK_OK(local_release(probe[i], key));
	return got;
}

/*
 * A session is one holder however many of its threads ask: two threads
 * acquiring at once get one unit and the same token, two threads releasing
 * it at once end it once (one answers LOCAL_ENOTHELD), while another session
 * holds a unit too, so that neither is the key's only holder. After each
 * round the units left are counted by sessions that try to take them: a
 * second unit taken, or a unit given back twice, shows there. A
 * lock-free-holders prototype failed both ways.
 */
TEST(sem_mix, two_threads_of_one_session_hold_one_unit, 120)
{
	const char *key = "twin/k";
	struct twin t = { .key = key };
	struct twin_arg a[2] = { { &t, 0 }, { &t, 1 } };
	local_session *other, *probe[TWIN_LIMIT];
	struct broker_proc b;
	pthread_t th[2];
	int r, i;

	broker_start(&b, NULL);
	t.s = open_session(&b, "twins", 0, 0);
	other = open_session(&b, "other", 0, 0);
	for (i = 0; i < TWIN_LIMIT; i++)
		probe[i] = open_session(&b, "probe", 0, 0);
	CHECK_OK(local_sem_acquire(other, key, TWIN_LIMIT, NULL, NULL));
	CHECK_OK(pthread_barrier_init(&t.go, NULL, 3));
	CHECK_OK(pthread_barrier_init(&t.done, NULL, 3));
	for (i = 0; i < 2; i++)
		CHECK_OK(pthread_create(&th[i], NULL, twin_run, &a[i]));
	for (r = 0; r < TWIN_ROUNDS; r++) {
		twin_round(&t, 1);
		if (t.rc[0] || t.rc[1] || t.tok[0] != t.tok[1] || !t.tok[0])
			FAIL_AT("round %d: acquire at once: %s (token %llu), %s (token %llu)", r,
				local_strerror(t.rc[0]), (unsigned long long)t.tok[0],
				local_strerror(t.rc[1]), (unsigned long long)t.tok[1]);
		if (r % 8 == 0 && (i = units_left(probe, TWIN_LIMIT, key)) != TWIN_LIMIT - 2)
			FAIL_AT("round %d: %d units left after one session's two threads took "
				"one (limit %d, another session holds one)",
				r, i, TWIN_LIMIT);
		twin_round(&t, 0);
		if (!((t.rc[0] == 0 && t.rc[1] == -LOCAL_ENOTHELD) ||
		      (t.rc[1] == 0 && t.rc[0] == -LOCAL_ENOTHELD)))
			FAIL_AT("round %d: release at once: %s, %s", r, local_strerror(t.rc[0]),
				local_strerror(t.rc[1]));
		if (r % 8 == 0 && (i = units_left(probe, TWIN_LIMIT, key)) != TWIN_LIMIT - 1)
			FAIL_AT("round %d: %d units left after one session's two threads released "
				"one (limit %d, another session holds one)",
				r, i, TWIN_LIMIT);
	}
	atomic_store(&t.stop, 1);
	pthread_barrier_wait(&t.go);
	for (i = 0; i < 2; i++)
		CHECK_OK(pthread_join(th[i], NULL));
	CHECK_EQ(units_left(probe, TWIN_LIMIT, key), TWIN_LIMIT - 1);
	CHECK_EQ(segment_violations(other), 0);
	CHECK_OK(local_release(other, key));
	broker_stop_clean(&b);
}

/* ---- lock-free holders in every slot, killed ------------------------------ */

#define KILL_PROCS 6
#define KILL_RUN_MS 3000
#define KILL_UNITS 6 /* the largest limit below */

struct slotkill {
	pthread_mutex_t unit[KILL_UNITS]; /* robust: one per unit a holder is in */
	_Atomic uint32_t violations;
	_Atomic uint32_t errors;
	_Atomic int last_error;
	_Atomic uint64_t rounds;
};

struct slotkill_arg {
	const struct broker_proc *b;
	struct slotkill *c;
	const char *key;
	uint32_t limit;
};

/* A free unit mutex (one whose holder died counts as free), or -1. */
static int unit_take(struct slotkill *c, uint32_t limit)
{
	uint32_t i;
	int r;

	for (i = 0; i < limit; i++) {
		r = pthread_mutex_trylock(&c->unit[i]);
		if (r == EOWNERDEAD)
			pthread_mutex_consistent(&c->unit[i]);
		if (r == 0 || r == EOWNERDEAD)
			return (int)i;
	}
	return -1;
}

static void slotkill_error(struct slotkill *c, int err)
{
	atomic_fetch_add(&c->errors, 1);
	atomic_store(&c->last_error, err);
	_exit(1);
}

/* Tries, holds a moment, asks again (same token), releases; its own
 * tokens must rise. Killed at any instruction by the parent. */
static void slotkill_child(void *p, int in, int out)
{
	static const LOCAL_OPTS(local_acquire_opts, try, .timeout_ms = 0);
	static const LOCAL_OPTS(local_acquire_opts, wait, .timeout_ms = 10000);
	const struct slotkill_arg *a = p;
	struct slotkill *c = a->c;
	local_session *s = open_session(a->b, "slotkill", 0, 0);
	uint64_t tok, again, last = 0;
	unsigned seed = (unsigned)getpid();
	int rc, u;

	(void)in;
	(void)out;
	for (;;) {
		rc = local_sem_acquire(s, a->key, a->limit, &try, &tok);
		if (rc == -EBUSY) {
			sched_yield();
			continue;
		}
		if (rc)
			slotkill_error(c, rc);
		if (tok <= last)
			slotkill_error(c, -ERANGE);
		last = tok;
		u = unit_take(c, a->limit);
		if (u < 0)
			atomic_fetch_add(&c->violations, 1);
		/* Asked again: the same token at once. Not a try: with the
		 * key on the mutex path (a sweep of a killed holder just froze
		 * it) a try may find the mutex busy and answer EBUSY. */
		rc = local_sem_acquire(s, a->key, a->limit, &wait, &again);
		if (rc || again != tok)
			slotkill_error(c, rc ? rc : -EINVAL);
		if (rand_r(&seed) % 4 == 0)
			usleep((useconds_t)(rand_r(&seed) % 300));
		if (u >= 0)
			pthread_mutex_unlock(&c->unit[u]);
		rc = local_release(s, a->key);
		if (rc)
			slotkill_error(c, rc);
		atomic_fetch_add(&c->rounds, 1);
	}
}

/* Processes take units of @key (limit @limit) lock-free, in every slot,
 * while the parent kills one every few milliseconds and starts another. */
static void slotkill_run(const char *key, uint32_t limit)
{
	static const LOCAL_OPTS(local_acquire_opts, try, .timeout_ms = 0);
	struct slotkill *c =
		mmap(NULL, sizeof(*c), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct slotkill_arg a;
	struct child kids[KILL_PROCS];
	local_session *obs, *fill[KILL_UNITS + 1];
	pthread_mutexattr_t ma;
	struct broker_proc b;
	unsigned kills = 0, seed = (unsigned)getpid(), i, v;
	uint64_t end;

	CHECK(c != MAP_FAILED);
	memset(c, 0, sizeof(*c));
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
	for (i = 0; i < KILL_UNITS; i++)
		CHECK_OK(pthread_mutex_init(&c->unit[i], &ma));
	pthread_mutexattr_destroy(&ma);
	broker_start(&b, NULL);
	obs = open_session(&b, "obs", 0, 0);
	CHECK_OK(local_sem_acquire(obs, key, limit, &try, NULL)); /* makes it */
	CHECK_OK(local_release(obs, key));
	a = (struct slotkill_arg){ &b, c, key, limit };
	for (i = 0; i < KILL_PROCS; i++)
		child_spawn(&kids[i], slotkill_child, &a);
	end = now_ms() + KILL_RUN_MS;
	while (now_ms() < end && !atomic_load(&c->errors)) {
		usleep(1000 + (useconds_t)(rand_r(&seed) % 4000));
		v = (unsigned)rand_r(&seed) % KILL_PROCS;
		child_kill(&kids[v]);
		child_wait(&kids[v], 5000);
		kills++;
		child_spawn(&kids[v], slotkill_child, &a);
	}
	for (i = 0; i < KILL_PROCS; i++) {
		child_kill(&kids[i]);
		child_wait(&kids[i], 5000);
	}
	fprintf(stderr, "    %s (limit %u): %llu rounds, %u kills\n", key, limit,
		(unsigned long long)atomic_load(&c->rounds), kills);
	if (atomic_load(&c->errors))
		FAIL_AT("%s: a worker failed: %s", key,
			local_strerror(atomic_load(&c->last_error)));
	CHECK_EQ(atomic_load(&c->violations), 0);
	CHECK(atomic_load(&c->rounds) > 0);
	/* Every dead holder's unit is back and nothing leaked. */
	CHECK(WAIT_SESSIONS(obs, 1, 5000));
	CHECK_EQ(segment_violations(obs), 0);
	CHECK_EQ(used_nodes(obs), 0);
	for (i = 0; i <= limit; i++) {
		fill[i] = open_session(&b, "fill", 0, 0);
		CHECK_RC(local_sem_acquire(fill[i], key, limit, &try, NULL),
			 i < limit ? 0 : -EBUSY);
	}
	CHECK_EQ(segment_violations(obs), 0);
	for (i = 0; i < limit; i++)
		CHECK_OK(local_release(fill[i], key));
	CHECK_EQ(used_nodes(obs), 0);
	broker_stop_clean(&b);
	munmap(c, sizeof(*c));
}

/*
 * Holders in every slot killed at any instruction: with limit 4 (a slot
 * per unit) and 6 (four slots, the rest on the mutex path). No more units
 * held than the limit at any time (robust mutexes, one per unit, that a
 * killed holder's death gives back before the broker can), each process's
 * tokens rise, and afterwards every dead holder's unit is back (the limit's
 * worth of new sessions take one each, one more is refused), with no node
 * left behind and the segment's invariants whole.
 */
TEST(sem_mix, slot_holders_killed_at_any_instruction, 60)
{
	slotkill_run("slotkill/4", 4);
	slotkill_run("slotkill/6", 6);
}

#ifdef LOCAL_CRASH_POINTS
static bool readable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 0) == 1;
}

struct stale_role {
	const struct broker_proc *b;
	const char *key;
};

/* Child: a semaphore acquire that stops (SIGSTOP) in its lock-free step,
 * the hold node claimed and the commit still to come; then reports. */
static void stale_acquirer(void *p, int in, int out)
{
	const struct stale_role *r = p;
	local_session *s;
	char buf[8], num[8];
	uint64_t tok = 0;
	int rc;

	(void)in;
	snprintf(num, sizeof(num), "%d", CP_FAST_ACQ_CLAIMED);
	setenv("SHMLOCK_STOP_AT", num, 1);
	s = open_session(r->b, "stale", 0, 0);
	say(out, "open");
	rc = local_sem_acquire(s, r->key, 2, NULL, &tok);
	say(out, "done %d %d", rc, rc == 0 ? local_held(s, r->key, NULL) : 0);
	hear(in, buf, sizeof(buf));
}

/*
 * A lock-free semaphore acquire stopped between claiming its node and
 * committing, while its key is released by everyone, reclaimed, and created
 * again as a lock that another session holds. When it goes on, its commit
 * must fail (the entry is not the key it read), and the mutex path then
 * answers LOCAL_EKIND: two holders of the lock would be the defect a
 * lock-free-holders prototype had (a stale compare-and-swap that matched
 * the lock's hold node). Run once with no other holder (the first holder's
 * lock-free step) and once with another session holding a unit (where
 * holders beyond the first would have theirs; without such a step the
 * acquire does not stop and the round checks nothing more).
 */
TEST(sem_mix, a_stale_lock_free_acquire_does_not_hold_a_key_made_again_as_a_lock, 60)
{
	const char *key = "stale/k";
	struct stale_role r = { NULL, key };
	struct broker_proc b;
	local_session *other, *locker;
	struct child c;
	char line[64], want[64];
	int round, stopped;

	broker_start(&b, NULL);
	r.b = &b;
	other = open_session(&b, "other", 0, 0);
	locker = open_session(&b, "locker", 0, 0);
	for (round = 0; round < 2; round++) {
		make_key(other, "stale/side"); /* the sessions are in use */
		if (round == 1)
			CHECK_OK(local_sem_acquire(other, key, 2, NULL, NULL));
		else {
			CHECK_OK(local_sem_acquire(other, key, 2, NULL, NULL));
			CHECK_OK(local_release(other, key)); /* the key exists, free */
		}
		child_spawn(&c, stale_acquirer, &r);
		child_expect(&c, "open", 5000);
		/* Stopped at the point, or answered without passing it. */
		CHECK(WAIT_FOR(is_stopped(c.pid) || readable(c.rd), 5000));
		stopped = is_stopped(c.pid);
		if (!stopped) { /* no lock-free step here: nothing stale to resume */
			CHECK_OK(child_read(&c, line, sizeof(line), 5000));
			child_send(&c, "x");
			child_wait(&c, 5000);
			CHECK_OK(local_release(other, key));
			continue;
		}
		if (round == 1)
			CHECK_OK(local_release(other, key));
		CHECK(keytab_reclaim_idle(other->seg, 0, UINT32_MAX, 0) >= 1);
		CHECK_OK(local_lock(locker, key, NULL, NULL)); /* created again, a lock */
		kill(c.pid, SIGCONT);
		CHECK_OK(child_read(&c, line, sizeof(line), 5000));
		snprintf(want, sizeof(want), "done %d 0", -LOCAL_EKIND);
		if (strcmp(line, want))
			FAIL_AT("round %d: the resumed acquire answered \"%s\", not \"%s\"", round,
				line, want);
		CHECK_OK(local_held(locker, key, NULL));
		CHECK_EQ(segment_violations(locker), 0);
		child_send(&c, "x");
		child_wait(&c, 5000);
		CHECK_OK(local_release(locker, key));
		CHECK(keytab_reclaim_idle(other->seg, 0, UINT32_MAX, 0) >= 1);
	}
	CHECK_EQ(segment_violations(other), 0);
	broker_stop_clean(&b);
}
#endif
