// SPDX-License-Identifier: MIT
/*
 * Cluster keys cached by their host (docs/cluster.md, "Holding"): a host
 * keeps a key's etcd lock, and a semaphore's slots, while no other host
 * waits for them, so that a host using its own keys makes no etcd write per
 * local operation; it gives them back when another host asks, or after
 * --cluster-idle. A real 3-member etcd (etcd_fixture.h) and brokers with
 * their own sockets and segments standing for hosts, at default options but
 * for the lease TTL (short, as in it_cluster.c).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "broker_fixture.h"
#include "etcd_fixture.h"
#include "harness.h"

/* A host on @e with the default --cluster-linger, --cluster-batch and
 * --cluster-idle, and option @opt @val if given. */
static void host_start(struct broker_proc *b, const struct etcd3 *e, const char *opt,
		       const char *val)
{
	const char *extra[] = { "--cluster",
				e->eps,
				"--cluster-prefix",
				"c/",
				"--cluster-lease-ttl",
				"3",
				"--cluster-margin",
				"1000",
				"--log-level",
				"info",
				opt,
				val,
				NULL };

	broker_start(b, extra);
}

/* A number field of an etcd JSON answer ("name":"123"), the first one; 0 if
 * absent. */
static long long field(const char *out, const char *name)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":\"", name);
	p = strstr(out, pat);
	return p ? atoll(p + strlen(pat)) : 0;
}

/* etcd's revision now: it rises by one at every write (a put, a delete, a
 * txn that changed something). */
static long long etcd_revision(const struct etcd3 *e)
{
	char out[ETCD_OUT];
	int i;

	for (i = 0; i < 3; i++)
		if (e->pid[i] > 0 &&
		    etcd_req(e->cport[i], "/v3/kv/range", "{\"key\":\"AA==\"}", out) == 0)
			return field(out, "revision");
	FAIL_AT("no etcd member answers");
	return 0;
}

/* The create revision of the first etcd key under @prefix hex(@key) "/" (a
 * lock key: NS hex(key) "/" lease; a slot: NS "s/" hex(key) "/" i): the
 * acquisition it stands for. 0: none. */
static long long first_create_rev(const struct etcd3 *e, const char *prefix, const char *key)
{
	char out[ETCD_OUT];

	if (etcd_range_under(e, prefix, key, "/", false, out))
		return 0;
	return field(out, "create_revision");
}

/* A pause between two uses of a key, as a workload makes: longer than the
 * 5 ms after which an idle key used to be given back (the former default
 * --cluster-linger). */
static void pause_20ms(void)
{
	struct timespec ts = { 0, 20 * 1000000L };

	nanosleep(&ts, NULL);
}

static int take(local_session *s, const char *key, bool sem, uint64_t *tok)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 10000);

	return sem ? local_sem_acquire(s, key, 1, &o, tok) : local_lock(s, key, &o, tok);
}

/*
 * Host @s takes @key (a lock, or a semaphore of limit 1 with @sem), then
 * releases and takes it again 20 times with pauses of 20 ms: the acquisition made first is kept (the first etcd key
 * under @prefix hex(@key) "/", the lock key or the slot, keeps its create
 * revision) and next to nothing is written to etcd meanwhile. The last token in *@tok.
 */
static void use_cached(const struct etcd3 *e, local_session *s, const char *prefix, const char *key,
		       bool sem, uint64_t *tok)
{
	long long cr, rev;
	int i;

	CHECK_OK(take(s, key, sem, tok));
	cr = first_create_rev(e, prefix, key);
	CHECK(cr > 0);
	CHECK_OK(local_release(s, key));
	/* A semaphore's waiter key goes once it is served. */
	CHECK(WAIT_FOR(etcd_count_under(e, "shmlock/lock/s/", key, "/w/") == 0, 10000));
	rev = etcd_revision(e);
	for (i = 0; i < 20; i++) {
		pause_20ms();
		CHECK_OK(take(s, key, sem, tok));
		CHECK_OK(local_release(s, key));
	}
	/* Before: a fresh acquisition (a new etcd key, a delete) each time, 40
	 * writes or more. Now none, but for a holder descheduled for 20 ms on
	 * a loaded machine, which is published and unpublished (two writes). */
	CHECK_EQ(first_create_rev(e, prefix, key), cr);
	if (etcd_revision(e) - rev > 8)
		FAIL_AT("%lld etcd writes for 20 local grants of a cached key",
			etcd_revision(e) - rev);
}

/* The end of a test of two hosts: a clean stop leaves nothing of @key in
 * etcd (the cached acquisitions go with the lease revoked). */
static void stop_hosts(struct etcd3 *e, struct broker_proc *a, struct broker_proc *b,
		       const char *prefix, const char *key)
{
	broker_stop_clean(a);
	broker_stop_clean(b);
	CHECK_EQ(etcd_count_under(e, prefix, key, "/"), 0);
	etcd3_stop(e);
}

/*
 * One host taking a cluster lock again and again keeps its acquisition
 * (use_cached()); a second host that then asks is granted within 10 s (well
 * below --cluster-idle, 30 s: the first host gave it back because it asked),
 * with a larger token; the first gets it back the same way; a clean stop
 * leaves nothing in etcd.
 */
TEST(cluster, idle_key_stays_cached, 60)
{
	const char *key = "c/cache";
	struct broker_proc a, b;
	local_session *sa, *sb;
	uint64_t ta = 0, tb = 0;
	struct etcd3 e;

	etcd3_start(&e);
	host_start(&a, &e, NULL, NULL);
	host_start(&b, &e, NULL, NULL);
	sa = open_session(&a, "cache-a", 0, 0);
	sb = open_session(&b, "cache-b", 0, 0);
	use_cached(&e, sa, "shmlock/lock/", key, false, &ta);
	CHECK_OK(take(sb, key, false, &tb));
	CHECK(tb > ta);
	CHECK_OK(local_release(sb, key));
	CHECK_OK(take(sa, key, false, &ta));
	CHECK(ta > tb);
	CHECK_OK(local_release(sa, key));
	local_session_close(sa);
	local_session_close(sb);
	stop_hosts(&e, &a, &b, "shmlock/lock/", key);
}

/* The same for a cluster semaphore of limit 1: its slot stays taken across
 * the uses; another host waiting for it is granted within 10 s. */
TEST(cluster, idle_slots_stay_cached, 60)
{
	const char *key = "c/csem";
	struct broker_proc a, b;
	local_session *sa, *sb;
	uint64_t tok;
	struct etcd3 e;

	etcd3_start(&e);
	host_start(&a, &e, NULL, NULL);
	host_start(&b, &e, NULL, NULL);
	sa = open_session(&a, "csem-a", 0, 0);
	sb = open_session(&b, "csem-b", 0, 0);
	use_cached(&e, sa, "shmlock/lock/s/", key, true, &tok);
	CHECK_OK(take(sb, key, true, &tok));
	CHECK_OK(local_release(sb, key));
	local_session_close(sa);
	local_session_close(sb);
	stop_hosts(&e, &a, &b, "shmlock/lock/s/", key);
}

/* After --cluster-idle with no local use, a cached lock and a cached slot
 * go back to etcd by themselves (their etcd keys are deleted), and the
 * next local use takes them anew. */
TEST(cluster, idle_key_given_back, 60)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 10000);
	struct broker_proc a;
	local_session *s;
	long long cr;
	struct etcd3 e;

	etcd3_start(&e);
	host_start(&a, &e, "--cluster-idle", "300ms");
	s = open_session(&a, "idle", 0, 0);
	CHECK_OK(local_lock(s, "c/idle", &o, NULL));
	cr = first_create_rev(&e, "shmlock/lock/", "c/idle");
	CHECK(cr > 0);
	CHECK_OK(local_release(s, "c/idle"));
	CHECK(WAIT_FOR(etcd_count_under(&e, "shmlock/lock/", "c/idle", "/") == 0, 10000));
	CHECK_OK(local_lock(s, "c/idle", &o, NULL));
	CHECK(first_create_rev(&e, "shmlock/lock/", "c/idle") > cr);
	CHECK_OK(local_release(s, "c/idle"));
	CHECK_OK(local_sem_acquire(s, "c/idles", 1, &o, NULL));
	CHECK_EQ(etcd_count_under(&e, "shmlock/lock/s/", "c/idles", "/"), 1);
	CHECK_OK(local_release(s, "c/idles"));
	CHECK(WAIT_FOR(etcd_count_under(&e, "shmlock/lock/s/", "c/idles", "/") == 0, 10000));
	local_session_close(s);
	broker_stop_clean(&a);
	etcd3_stop(&e);
}

/* Cached keys keep their key entries (an open key is not reclaimed): with
 * seven eighths of --max-keys in use, idle keys are given back at once
 * rather than after --cluster-idle (30 s here), so that new keys find room. */
TEST(cluster, full_table_gives_cached_keys_back, 60)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 10000);
	struct broker_proc a;
	local_session *s;
	struct etcd3 e;
	char key[16];
	int i;

	etcd3_start(&e);
	host_start(&a, &e, "--max-keys", "8");
	s = open_session(&a, "full", 0, 0);
	for (i = 0; i < 7; i++) {
		snprintf(key, sizeof(key), "c/t%d", i);
		CHECK_OK(local_lock(s, key, &o, NULL));
		CHECK_OK(local_release(s, key));
	}
	for (i = 0; i < 7; i++) {
		snprintf(key, sizeof(key), "c/t%d", i);
		CHECK(WAIT_FOR(etcd_count_under(&e, "shmlock/lock/", key, "/") == 0, 10000));
	}
	local_session_close(s);
	broker_stop_clean(&a);
	etcd3_stop(&e);
}

/* Does a try (timeout 0) of @key on @s fail? A success is released. */
static bool try_fails(local_session *s, const char *key)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 0);
	int rc = local_lock(s, key, &o, NULL);

	if (rc == 0)
		CHECK_OK(local_release(s, key));
	return rc != 0;
}

/*
 * A cached key is kept while its host's lease lives; if its lock key is
 * deleted from etcd by hand, the next host is granted (it finds no
 * predecessor). The first host learns it when it asks etcd whether someone
 * waits (the watch saw the second host queue): its key is no longer the
 * first of the directory, so it shuts the key and stops granting it. Before,
 * it went on granting the key locally, beside the other host, until it was
 * idle for --cluster-idle.
 */
TEST(cluster, cached_key_deleted_in_etcd_is_closed, 60)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 10000);
	const char *key = "c/gone";
	char dir[200] = "shmlock/lock/", end[200], body[800], out[ETCD_OUT];
	char from64[300], to64[300];
	struct broker_proc a, b;
	local_session *sa, *sb;
	struct etcd3 e;
	size_t n;
	int i;

	etcd3_start(&e);
	host_start(&a, &e, NULL, NULL);
	host_start(&b, &e, NULL, NULL);
	sa = open_session(&a, "gone-a", 0, 0);
	sb = open_session(&b, "gone-b", 0, 0);
	CHECK_OK(local_lock(sa, key, &o, NULL));
	CHECK_OK(local_release(sa, key));
	CHECK_EQ(etcd_count_under(&e, "shmlock/lock/", key, "/"), 1);
	n = strlen(dir);
	for (i = 0; key[i]; i++)
		n += (size_t)sprintf(dir + n, "%02x", (unsigned char)key[i]);
	sprintf(dir + n, "/");
	strcpy(end, dir);
	end[n]++; /* '/' + 1 */
	etcd_b64(dir, from64);
	etcd_b64(end, to64);
	snprintf(body, sizeof(body), "{\"key\":\"%s\",\"range_end\":\"%s\"}", from64, to64);
	CHECK_OK(etcd_req(e.cport[0], "/v3/kv/deleterange", body, out));
	CHECK_OK(local_lock(sb, key, &o, NULL)); /* no predecessor: granted */
	CHECK(WAIT_FOR(try_fails(sa, key), 10000));
	CHECK_OK(local_release(sb, key));
	CHECK_OK(local_lock(sa, key, &o, NULL)); /* queued anew: served after B */
	CHECK_OK(local_release(sa, key));
	local_session_close(sa);
	local_session_close(sb);
	stop_hosts(&e, &a, &b, "shmlock/lock/", key);
}
