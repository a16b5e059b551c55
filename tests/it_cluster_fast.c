// SPDX-License-Identifier: MIT
/*
 * Cluster keys on the lock-free path (docs/cluster.md, "The lock-free
 * path"; libshm/fastpath.c): a cluster key its host holds open is taken and
 * released without the key mutex, and the lock-free acquire refuses, on its
 * own and with no broker running, once the key's gate is shut: past the
 * host's deadline (the broker stopped while its lease runs out), the key
 * closed, opened under another lease than the host's, or its token range
 * spent. Against a real 3-member etcd (etcd_fixture.h) and brokers standing
 * for hosts, as it_cluster.c.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker_fixture.h"
#include "client.h"
#include "etcd_fixture.h"
#include "harness.h"
#include "keyops.h"

#define KEY "c/fast"

static const LOCAL_OPTS(local_acquire_opts, try_once, .timeout_ms = 0);

/* A host with an etcd lease of @ttl_s that keeps a free key open for
 * --cluster-idle @idle while no other host asks (the host holds it), and
 * gives it up at once when one does (--cluster-linger 0). */
static void host_up(struct broker_proc *b, const struct etcd3 *e, const char *ttl_s,
		    const char *idle)
{
	const char *extra[] = { "--cluster",
				e->eps,
				"--cluster-prefix",
				"c/",
				"--cluster-lease-ttl",
				ttl_s,
				"--cluster-margin",
				"1000",
				"--cluster-batch",
				"4",
				"--cluster-linger",
				"0",
				"--cluster-idle",
				idle,
				NULL };

	broker_start(b, extra);
}

/* @key's entry in @s's segment (NULL: none). */
static struct seg_key *entry_of(local_session *s, const char *key)
{
	uint32_t i;

	for (i = 0; i < s->seg->caps.max_keys; i++) {
		struct seg_key *k = &s->seg->keys[i];

		if (atomic_load(&k->state) == KEY_USED && k->key_len == strlen(key) &&
		    !memcmp(k->key, key, strlen(key)))
			return k;
	}
	return NULL;
}

static bool in_fast_mode(const struct seg_key *k)
{
	return !(atomic_load(&k->fast) & FAST_SLOW);
}

/* The lock-free acquire alone, as a try: 0 granted, FAST_MISS (the mutex
 * path must decide), or an error. */
static int lock_free(local_session *s, const char *key, uint64_t *tok)
{
	struct acquire_req req = {
		.who = s->who, .kind = LOCAL_KIND_LOCK, .limit = 1, .try_only = true
	};
	uint32_t idx;

	return fast_acquire(s->seg, key, &req, tok, &s->hints, &idx);
}

/* Take @key once, so that the host takes its cluster lock and opens the
 * gate, and release it; the key stays open (long linger). */
static struct seg_key *open_on_host(local_session *s, const char *key)
{
	struct seg_key *k;

	CHECK_OK(local_lock(s, key, NULL, NULL));
	CHECK_OK(local_release(s, key));
	k = entry_of(s, key);
	CHECK(k);
	CHECK(atomic_load(&k->cluster) & CL_OPEN);
	return k;
}

/* Every thread of @pid stopped (SIGSTOP reaches them one by one). */
static bool all_stopped(pid_t pid)
{
	char path[64], buf[512], *p;
	struct dirent *d;
	bool all = true;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	dir = opendir(path);
	if (!dir)
		return false;
	while (all && (d = readdir(dir))) {
		FILE *f;

		if (d->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.16s/stat", (int)pid, d->d_name);
		f = fopen(path, "re");
		if (!f)
			continue;
		if (!fgets(buf, sizeof(buf), f) || !(p = strrchr(buf, ')')) || p[2] != 'T')
			all = false;
		fclose(f);
	}
	closedir(dir);
	return all;
}

/* Stop broker @b (SIGSTOP) outside @k's critical section: a broker stopped
 * inside its look at the key leaves the key in slow mode, and the test is
 * about the lock-free path. */
static void stop_outside(const struct broker_proc *b, const struct seg_key *k)
{
	int i;

	for (i = 0; i < 200; i++) {
		kill(b->pid, SIGSTOP);
		CHECK(WAIT_FOR(all_stopped(b->pid), 5000));
		if (in_fast_mode(k) && !atomic_load(&k->lock))
			return;
		if (!atomic_load(&k->lock))
			FAIL_AT("the open key is not in fast mode (fast word %#llx, cluster %#x)",
				(unsigned long long)atomic_load(&k->fast),
				atomic_load(&k->cluster));
		kill(b->pid, SIGCONT);
		usleep(2000);
	}
	FAIL_AT("the broker was always stopped inside the key's mutex");
}

/*
 * A cluster key its host holds open is taken without the key mutex: the key
 * stays in fast mode and its fast word names the holder's node in the state
 * only the lock-free acquire leaves (NODE_FAST_CLAIMED). Its tokens come
 * from the range the broker set for this acquisition, rising.
 */
TEST(cluster_fast, open_key_taken_lock_free, 60)
{
	struct broker_proc a;
	struct etcd3 e;
	local_session *s;
	struct seg_key *k;
	uint64_t tok, last = 0;
	int i, lock_free_grants = 0;

	etcd3_start(&e);
	host_up(&a, &e, "10", "60s");
	s = open_session(&a, "fast", 0, 0);
	k = open_on_host(s, KEY);
	/* The broker looks at the key now and then (under its mutex): some
	 * grants may go the mutex path, most must not. */
	for (i = 0; i < 200; i++) {
		uint32_t h;

		CHECK_OK(local_lock(s, KEY, NULL, &tok));
		h = FAST_HOLDER(atomic_load(&k->fast));
		if (in_fast_mode(k) && h &&
		    NODE_STATE(atomic_load(&s->seg->nodes[h - 1].word)) == NODE_FAST_CLAIMED)
			lock_free_grants++;
		CHECK(tok > CLUSTER_TOKEN_BASE);
		CHECK(tok > last);
		CHECK(tok <= __atomic_load_n(&k->tok_hi, __ATOMIC_RELAXED));
		last = tok;
		CHECK_OK(local_release(s, KEY));
	}
	if (lock_free_grants < 100)
		FAIL_AT("%d of 200 grants of the open cluster key were lock-free",
			lock_free_grants);
	local_session_close(s);
	broker_stop_clean(&a);
	etcd3_stop(&e);
}

/*
 * The broker stopped (SIGSTOP) while its lease runs out, with the key open
 * and in fast mode: past the host's deadline the lock-free acquire refuses
 * on its own (nobody set SLOW), and the mutex path too; a lock-free hold
 * taken before is void (LOCAL_ECLUSTER). The other host is granted once
 * the lease expires at etcd, and nothing is granted here meanwhile. When
 * the broker resumes it closes the key, out of fast mode.
 */
TEST(cluster_fast, refused_past_deadline_broker_stopped, 60)
{
	struct broker_proc a, b;
	struct etcd3 e;
	local_session *s, *s2, *sb;
	struct seg_key *k;
	uint64_t tok, tb;
	int rc;

	etcd3_start(&e);
	host_up(&a, &e, "3", "60s");
	host_up(&b, &e, "3", "30s");
	s = open_session(&a, "holder", 0, 0);
	s2 = open_session(&a, "other", 0, 0);
	k = open_on_host(s, KEY);
	stop_outside(&a, k);
	CHECK_OK(local_lock(s, KEY, NULL, &tok)); /* lock-free, before the deadline */
	CHECK(WAIT_FOR(cluster_deadline_passed(s->seg), 10000));
	/* The holder is told, with no broker. */
	CHECK(WAIT_FOR((rc = local_held(s, KEY, NULL)) != 0 && rc != -ETIMEDOUT, 10000));
	CHECK_RC(rc, -LOCAL_ECLUSTER);
	local_release(s, KEY);
	/* The key is back in fast mode (nothing here shut it: the broker is
	 * stopped), and still open under the host's lease... */
	CHECK(in_fast_mode(k));
	CHECK(atomic_load(&k->cluster) & CL_OPEN);
	CHECK_EQ(atomic_load(&k->cluster_lease), atomic_load(&s->seg->hdr->cluster_lease_id));
	/* ... but past the deadline the lock-free acquire refuses. */
	CHECK_EQ(lock_free(s2, KEY, &tb), FAST_MISS);
	CHECK(in_fast_mode(k));
	CHECK_RC(local_lock(s2, KEY, &try_once, NULL), -EBUSY);
	/* The other host gets it once host A's lease expires at etcd. */
	sb = open_session(&b, "b", 0, 0);
	CHECK_OK(local_lock(sb, KEY, NULL, &tb));
	CHECK(tb > tok);
	CHECK_EQ(lock_free(s2, KEY, &tok), FAST_MISS);
	CHECK_RC(local_lock(s2, KEY, &try_once, NULL), -EBUSY);
	/* Broker A back: it closes the key, out of fast mode. */
	kill(a.pid, SIGCONT);
	CHECK(WAIT_FOR(!(atomic_load(&k->cluster) & CL_OPEN), 10000));
	CHECK(!in_fast_mode(k));
	CHECK_EQ(lock_free(s2, KEY, &tok), FAST_MISS);
	CHECK_OK(local_release(sb, KEY));
	local_session_close(sb);
	local_session_close(s2);
	local_session_close(s);
	broker_stop(&a);
	broker_stop_clean(&b);
	etcd3_stop(&e);
}

/*
 * With the key in fast mode and its broker stopped (so that only this test
 * writes it), each part of the gate alone makes the lock-free acquire
 * refuse: the key not open, opened under another lease than the host's,
 * the host's lease changed, the token range spent, the host's deadline
 * near. Each time the same acquire succeeds lock-free once the field is
 * put back. Then another host asks for the key: the broker closes it, out
 * of fast mode, before it gives the etcd lock up.
 */
TEST(cluster_fast, refused_closed_stale_spent, 60)
{
	struct broker_proc a, b;
	struct etcd3 e;
	local_session *s, *sb;
	struct seg_key *k;
	struct seg_header *h;
	uint64_t tok = 0, t, hi, dl;
	uint32_t cl;
	int64_t lease;
	pid_t pid;
	int st;

	etcd3_start(&e);
	host_up(&a, &e, "10", "60s");
	host_up(&b, &e, "10", "30s");
	s = open_session(&a, "fast", 0, 0);
	h = s->seg->hdr;
	k = open_on_host(s, KEY);
	stop_outside(&a, k);
	CHECK_OK(lock_free(s, KEY, &tok));
	CHECK_OK(local_release(s, KEY));

	cl = atomic_load(&k->cluster);
	atomic_store(&k->cluster, cl & ~CL_OPEN); /* closed */
	CHECK_EQ(lock_free(s, KEY, &t), FAST_MISS);
	atomic_store(&k->cluster, cl);
	CHECK_OK(lock_free(s, KEY, &t));
	CHECK_OK(local_release(s, KEY));

	lease = atomic_load(&k->cluster_lease);
	atomic_store(&k->cluster_lease, lease + 1); /* opened under another lease */
	CHECK_EQ(lock_free(s, KEY, &t), FAST_MISS);
	atomic_store(&k->cluster_lease, 0); /* opened under none */
	CHECK_EQ(lock_free(s, KEY, &t), FAST_MISS);
	atomic_store(&k->cluster_lease, lease);
	atomic_store(&h->cluster_lease_id, lease + 1); /* the host's lease changed */
	CHECK_EQ(lock_free(s, KEY, &t), FAST_MISS);
	atomic_store(&h->cluster_lease_id, lease);
	CHECK_OK(lock_free(s, KEY, &t));
	CHECK_OK(local_release(s, KEY));

	/* The range spent: the next grant's token would pass tok_hi. */
	hi = __atomic_load_n(&k->tok_hi, __ATOMIC_RELAXED);
	__atomic_store_n(&k->tok_hi, t, __ATOMIC_RELAXED);
	CHECK_EQ(lock_free(s, KEY, &t), FAST_MISS);
	CHECK(in_fast_mode(k));
	CHECK_RC(local_lock(s, KEY, &try_once, NULL), -EBUSY); /* the mutex path: gated */
	__atomic_store_n(&k->tok_hi, hi, __ATOMIC_RELAXED);
	CHECK_OK(lock_free(s, KEY, &t));
	CHECK_OK(local_release(s, KEY));

	/* The deadline near (within the coarse clock's slack): refused, the
	 * mutex path decides with the precise clock. */
	dl = atomic_load(&h->cluster_deadline_ns);
	atomic_store(&h->cluster_deadline_ns, mono_ns() + CLUSTER_FAST_SLACK_NS / 2);
	CHECK_EQ(lock_free(s, KEY, &t), FAST_MISS);
	atomic_store(&h->cluster_deadline_ns, dl);
	CHECK_OK(lock_free(s, KEY, &t));
	CHECK(t > tok);
	CHECK_OK(local_release(s, KEY));

	/* Closed by its broker: another host asks, host A yields the key. */
	kill(a.pid, SIGCONT);
	fflush(NULL);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		sb = open_session(&b, "b", 0, 0);
		CHECK_OK(local_lock(sb, KEY, NULL, &t));
		CHECK(t > tok);
		CHECK_OK(local_release(sb, KEY));
		_exit(0);
	}
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK(!(atomic_load(&k->cluster) & CL_OPEN));
	CHECK(!in_fast_mode(k));
	CHECK_EQ(lock_free(s, KEY, &t), FAST_MISS);
	local_session_close(s);
	broker_stop_clean(&a);
	broker_stop_clean(&b);
	etcd3_stop(&e);
}

#ifdef LOCAL_CRASH_POINTS
#include "crashpoint.h"
#include "invariants.h"

/* A process on @b that takes and releases @key, dying at crash point @point
 * if it gets there: true if it died there. */
static bool dies_at(const struct broker_proc *b, const char *key, int point)
{
	char num[16];
	pid_t pid;
	int st;

	fflush(NULL);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		local_session *c;

		snprintf(num, sizeof(num), "%d", point);
		setenv("SHMLOCK_CRASH_AT", num, 1);
		c = open_session(b, "crasher", 0, 0);
		if (local_lock(c, key, NULL, NULL) || local_release(c, key))
			_exit(1);
		_exit(0);
	}
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == CRASH_EXIT_CODE));
	return WEXITSTATUS(st) == CRASH_EXIT_CODE;
}

/*
 * A client killed at each step of the lock-free path on an open cluster key
 * (claimed, committed, released): its hold is ended by the broker's sweep
 * as for a host-local key, the segment keeps its invariants, the key is
 * granted again on this host with a larger token and goes back to fast
 * mode, still open.
 */
TEST(cluster_fast, killed_in_the_lock_free_path, 60)
{
	static const int points[] = { CP_FAST_ACQ_CLAIMED, CP_FAST_ACQ_PUBLISHED,
				      CP_FAST_REL_PUBLISHED };
	LOCAL_OPTS(local_acquire_opts, wait, .timeout_ms = 10000);
	struct broker_proc a;
	struct etcd3 e;
	local_session *s;
	struct seg_key *k;
	uint64_t tok, last = 0;
	unsigned i, tries;

	etcd3_start(&e);
	host_up(&a, &e, "10", "60s");
	s = open_session(&a, "observer", 0, 0);
	k = open_on_host(s, KEY);
	for (i = 0; i < sizeof(points) / sizeof(points[0]); i++) {
		/* The broker may have armed the key at that moment (the
		 * mutex path then): again. */
		for (tries = 0; !dies_at(&a, KEY, points[i]); tries++)
			CHECK(tries < 100);
		/* The broker's sweep of the dead session first. */
		CHECK(WAIT_SESSIONS(s, 1, 10000));
		CHECK_OK(local_lock(s, KEY, &wait, &tok));
		CHECK(tok > last && tok > CLUSTER_TOKEN_BASE);
		last = tok;
		CHECK_OK(local_release(s, KEY));
		CHECK_EQ(segment_violations(s), 0);
		CHECK(atomic_load(&k->cluster) & CL_OPEN);
		CHECK(WAIT_FOR(in_fast_mode(k), 5000));
	}
	local_session_close(s);
	broker_stop_clean(&a);
	etcd3_stop(&e);
}
#endif
