// SPDX-License-Identifier: MIT
/*
 * Cluster keys on etcd (docs/cluster.md) against a real 3-member etcd
 * cluster on loopback ports (etcd_fixture.h), and two or three brokers with their own sockets and segments standing for
 * hosts: mutual exclusion and rising tokens across hosts, FIFO across hosts,
 * a member killed, all of etcd stopped (local holds end before the lease can
 * expire, nobody is granted meanwhile, recovery after), a broker killed (its
 * cluster locks pass on after the lease TTL).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "broker_fixture.h"
#include "crashpoint.h"
#include "etcd_fixture.h"
#include "harness.h"
#include "key_fixture.h"
#include "net_fixture.h"

#define TTL_S "3"
#define MARGIN_MS "1000"
#define CLUSTER_SEQ_BITS_T 24 /* libshm/keyops.h, CLUSTER_SEQ_BITS */
#define CLUSTER_SEM_MAX_T 64  /* libshm/keyops.h, CLUSTER_SEM_MAX */

/* How many hosts hold or wait for @key's cluster lock in etcd (-1: no
 * answer from any member). */
static int etcd_queue_len(const struct etcd3 *e, const char *key)
{
	return etcd_count_under(e, "shmlock/lock/", key, "/");
}

/* A host reaching etcd at @eps, with an etcd lease of TTL @ttl_s; with
 * @http_port, its HTTP API there (token "tok"); with @linger_ms, that
 * --cluster-linger and its log at level info. */
static void host_start_at(struct broker_proc *b, const char *eps, int http_port, const char *ttl_s,
			  const char *linger_ms)
{
	static char listen[32];
	const char *extra[] = { "--cluster",
				eps,
				"--cluster-prefix",
				"c/",
				"--cluster-lease-ttl",
				ttl_s,
				"--cluster-margin",
				MARGIN_MS,
				"--cluster-batch",
				"4",
				NULL,
				NULL,
				NULL,
				NULL,
				NULL,
				NULL };

	if (http_port) {
		snprintf(listen, sizeof(listen), "127.0.0.1:%d", http_port);
		extra[10] = "--http-listen";
		extra[11] = listen;
		extra[12] = "--auth-token";
		extra[13] = "tok";
		extra[14] = "--http-extensions"; /* 409 lease_expired says why */
	} else if (linger_ms) {
		extra[10] = "--cluster-linger";
		extra[11] = linger_ms;
		extra[12] = "--log-level";
		extra[13] = "info";
	}
	broker_start(b, extra);
}

static void host_start_ttl(struct broker_proc *b, const struct etcd3 *e, int http_port,
			   const char *ttl_s)
{
	host_start_at(b, e->eps, http_port, ttl_s, NULL);
}

static void host_start_http(struct broker_proc *b, const struct etcd3 *e, int http_port)
{
	host_start_ttl(b, e, http_port, TTL_S);
}

static void host_start(struct broker_proc *b, const struct etcd3 *e)
{
	host_start_http(b, e, 0);
}

/* POST to the HTTP API at @port with @session; the HTTP status, the body in
 * @out (4096 bytes). */
static long api_post(int port, const char *path, const char *session, const char *body, char *out)
{
	const char *const hdrs[] = { "Authorization: Bearer tok",
				     session ? strf("X-Dflockd-Session: %s", session) : NULL,
				     NULL };

	return http_fetch(&(struct http_req){ .method = "POST",
					      .url = strf("http://127.0.0.1:%d%s", port, path),
					      .headers = hdrs,
					      .body = body ? body : "",
					      .timeout_ms = 10000 },
			  out, 4096);
}

/* ---- shared record of grants, in grant order ---------------------------- */

struct record {
	_Atomic int inside, overlaps;
	_Atomic uint32_t n;
	uint64_t token[1024];
	int host[1024];
	_Atomic uint64_t granted_ms; /* test_fifo, test_down: when a waiter got it */
	_Atomic int stop;	     /* semaphore_batch: the workers stop */
};

static struct record *record_new(void)
{
	struct record *r =
		mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	CHECK(r != MAP_FAILED);
	memset(r, 0, sizeof(*r));
	return r;
}

/* A process on host @host taking @key @rounds times, recording each grant. */
static pid_t worker(const struct broker_proc *b, int host, const char *key, int rounds,
		    struct record *r)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		local_session *s = open_session(b, "worker", 0, 0);
		int i;

		for (i = 0; i < rounds; i++) {
			uint64_t tok;
			uint32_t at;

			CHECK_OK(local_lock(s, key, NULL, &tok));
			if (atomic_fetch_add(&r->inside, 1) != 0)
				atomic_fetch_add(&r->overlaps, 1);
			at = atomic_fetch_add(&r->n, 1);
			if (at < 1024) {
				r->token[at] = tok;
				r->host[at] = host;
			}
			usleep(500);
			atomic_fetch_sub(&r->inside, 1);
			CHECK_OK(local_release(s, key));
		}
		local_session_close(s);
		_exit(0);
	}
	return pid;
}

static void reap(pid_t *pids, int n)
{
	int i, st;

	for (i = 0; i < n; i++) {
		CHECK(waitpid(pids[i], &st, 0) == pids[i]);
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			FAIL_AT("worker %d failed (status %#x)", i, st);
	}
}

/* No overlap; tokens strictly rising in grant order; both hosts served, and
 * the key moved between them. A record left at 0 is a grant whose taker was
 * SIGKILLed before it wrote it down (kill_soak): skipped. */
static void check_record(const struct record *r, uint32_t want, uint64_t above)
{
	uint32_t i, moves = 0, last = UINT32_MAX;

	CHECK_EQ(atomic_load(&r->overlaps), 0);
	if (want <= 1024)
		CHECK_EQ(atomic_load(&r->n), want);
	else
		want = 1024; /* a soak: the first 1024 grants were recorded */
	for (i = 0; i < want; i++) {
		if (!r->token[i])
			continue;
		if (last == UINT32_MAX) {
			if (r->token[i] <= above)
				FAIL_AT("first token %llu (host %d) not above %llu",
					(unsigned long long)r->token[i], r->host[i],
					(unsigned long long)above);
		} else {
			if (r->token[i] <= r->token[last])
				FAIL_AT("token %u (%llu, host %d) not above %u (%llu, host %d)", i,
					(unsigned long long)r->token[i], r->host[i], last,
					(unsigned long long)r->token[last], r->host[last]);
			moves += r->host[i] != r->host[last];
		}
		last = i;
	}
	CHECK(last != UINT32_MAX);
	CHECK(moves >= 1);
}

/* Mutual exclusion across two hosts, tokens rising across them. */
TEST(cluster, exclusion_tokens, 60)
{
	struct broker_proc a, b;
	struct record *r = record_new();
	struct etcd3 e;
	pid_t pids[4];

	etcd3_start(&e);
	host_start(&a, &e);
	host_start(&b, &e);
	pids[0] = worker(&a, 0, "c/x", 12, r);
	pids[1] = worker(&a, 0, "c/x", 12, r);
	pids[2] = worker(&b, 1, "c/x", 12, r);
	pids[3] = worker(&b, 1, "c/x", 12, r);
	reap(pids, 4);
	check_record(r, 48, 0);
	/* Host-local keys are untouched by the gate. */
	{
		local_session *s = open_session(&a, "local", 0, 0);
		LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 0);

		CHECK_OK(local_lock(s, "local/x", &o, NULL));
		CHECK_OK(local_release(s, "local/x"));
		local_session_close(s);
	}
	broker_stop_clean(&a);
	broker_stop_clean(&b);
	CHECK_EQ(etcd_queue_len(&e, "c/x"), 0); /* a clean stop leaves nothing */
	etcd3_stop(&e);
}

static pid_t waiter_at(const struct broker_proc *b, int host, const char *key, struct record *r)
{
	return worker(b, host, key, 1, r);
}

/* FIFO across hosts: the order in which hosts asked etcd is the order of
 * their grants. */
TEST(cluster, fifo_hosts, 60)
{
	struct broker_proc h[3];
	struct record *r = record_new();
	local_session *s;
	struct etcd3 e;
	pid_t pids[2];
	uint64_t tok;

	etcd3_start(&e);
	host_start(&h[0], &e);
	host_start(&h[1], &e);
	host_start(&h[2], &e);
	s = open_session(&h[0], "first", 0, 0);
	CHECK_OK(local_lock(s, "c/f", NULL, &tok));
	pids[0] = waiter_at(&h[1], 1, "c/f", r);
	CHECK(WAIT_FOR(etcd_queue_len(&e, "c/f") == 2, 10000));
	pids[1] = waiter_at(&h[2], 2, "c/f", r);
	CHECK(WAIT_FOR(etcd_queue_len(&e, "c/f") == 3, 10000));
	CHECK_EQ(atomic_load(&r->n), 0);
	CHECK_OK(local_release(s, "c/f"));
	reap(pids, 2);
	CHECK_EQ(atomic_load(&r->n), 2);
	CHECK_EQ(r->host[0], 1);
	CHECK_EQ(r->host[1], 2);
	CHECK(r->token[0] > tok && r->token[1] > r->token[0]);
	local_session_close(s);
	broker_stop_clean(&h[0]);
	broker_stop_clean(&h[1]);
	broker_stop_clean(&h[2]);
	etcd3_stop(&e);
}

/* One member killed: the quorum goes on, and so do exclusion and tokens. */
TEST(cluster, member_killed, 60)
{
	struct broker_proc a, b;
	struct record *r = record_new();
	local_session *s;
	struct etcd3 e;
	pid_t pids[4];
	uint64_t before;

	etcd3_start(&e);
	host_start(&a, &e);
	host_start(&b, &e);
	s = open_session(&a, "before", 0, 0);
	CHECK_OK(local_lock(s, "c/m", NULL, &before));
	CHECK_OK(local_release(s, "c/m"));
	local_session_close(s);
	/* The first endpoint, the one every broker asks first. */
	etcd3_kill(&e, 0);
	pids[0] = worker(&a, 0, "c/m", 8, r);
	pids[1] = worker(&b, 1, "c/m", 8, r);
	pids[2] = worker(&a, 0, "c/m", 8, r);
	pids[3] = worker(&b, 1, "c/m", 8, r);
	reap(pids, 4);
	check_record(r, 32, before);
	broker_stop_clean(&a);
	broker_stop_clean(&b);
	etcd3_stop(&e);
}

/* All of etcd stopped: the local holds end before the lease could expire at
 * etcd (liblocal's and an HTTP client's), nobody else is granted meanwhile,
 * and all recovers after. */
TEST(cluster, etcd_down, 60)
{
	struct broker_proc a, b;
	struct record *r = record_new();
	local_session *s;
	struct etcd3 e;
	uint64_t tok, t0, ended = 0;
	char out[4096], sess[64], body[128], *p;
	int rc, port = free_port();
	pid_t pid;

	etcd3_start(&e);
	host_start_http(&a, &e, port);
	host_start(&b, &e);
	s = open_session(&a, "holder", 0, 0);
	CHECK_OK(local_lock(s, "c/d", NULL, &tok));
	/* An HTTP client holds another cluster key on host A. */
	CHECK_EQ(api_post(port, "/v1/sessions", NULL, NULL, out), 200);
	CHECK((p = strstr(out, "\"session_id\":\"")) && sscanf(p + 14, "%32[0-9a-f]", sess) == 1);
	CHECK_EQ(api_post(port, "/v1/locks/c%2Fhttp", sess, "{\"acquire_timeout_s\": 10}", out),
		 200);
	CHECK((p = strstr(out, "\"token\":\"")) != NULL);
	snprintf(body, sizeof(body), "{\"token\": \"%.*s\"}", (int)strcspn(p + 9, "\""), p + 9);
	pid = waiter_at(&b, 1, "c/d", r);
	CHECK(WAIT_FOR(etcd_queue_len(&e, "c/d") == 2, 10000));
	etcd3_signal(&e, SIGSTOP);
	t0 = now_ms();
	/* The hold ends by the local deadline: at most TTL - margin after the
	 * last renewal, which was before t0. Before the TTL in any case. */
	while ((rc = local_held(s, "c/d", NULL)) == 0 && now_ms() - t0 < 10000)
		usleep(1000);
	ended = now_ms() - t0;
	fprintf(stderr, "    the hold ended %llu ms after etcd stopped (TTL %s s, margin %s ms)\n",
		(unsigned long long)ended, TTL_S, MARGIN_MS);
	CHECK_RC(rc, -LOCAL_ECLUSTER);
	if (ended >= (uint64_t)atoi(TTL_S) * 1000)
		FAIL_AT("hold ended %llu ms after etcd stopped: not before the TTL",
			(unsigned long long)ended);
	/* The HTTP client's hold ended too: its release says why (409
	 * lease_expired, as host_start_http() runs with --http-extensions; by
	 * default dflockd's 404 not_held, as for any hold that is gone). */
	CHECK_EQ(api_post(port, "/v1/locks/c%2Fhttp/release", sess, body, out), 409);
	CHECK(strstr(out, "lease_expired") && strstr(out, "cluster"));
	/* Nobody else is granted while etcd is away (past the TTL too). */
	usleep((useconds_t)(atoi(TTL_S) * 1000 - (int)ended + 500) * 1000);
	CHECK_EQ(atomic_load(&r->n), 0);
	etcd3_signal(&e, SIGCONT);
	/* Recovery: the waiter on the other host gets the key. */
	CHECK(WAIT_FOR(atomic_load(&r->n) == 1, 20000));
	reap(&pid, 1);
	CHECK(r->token[0] > tok);
	CHECK_OK(local_lock(s, "c/d", NULL, &tok));
	CHECK(tok > r->token[0]);
	CHECK_OK(local_release(s, "c/d"));
	local_session_close(s);
	broker_stop_clean(&a);
	broker_stop_clean(&b);
	etcd3_stop(&e);
}

/* `shmlock lock -socket=SOCK KEY CHILD` on @b, CHILD writing its pid to
 * @pidfile and sleeping: shmlock's pid. */
static pid_t cli_lock(const struct broker_proc *b, const char *key, const char *pidfile)
{
	const char *cli = getenv("SHMLOCK_CLI_BIN");
	char sock[160], child[600];
	pid_t pid;

	snprintf(child, sizeof(child), "echo $$ > %s.tmp && mv %s.tmp %s && exec sleep 60", pidfile,
		 pidfile, pidfile);
	if (!cli)
		FAIL_AT("SHMLOCK_CLI_BIN is not set (run through 'make check')");
	snprintf(sock, sizeof(sock), "-socket=%s", b->sock);
	fflush(NULL);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		/* No lock-delay: its host is lost to the other one, which would
		 * honour the default 15 s (broker_killed tests that). */
		execl(cli, "shmlock", "lock", sock, "-lock-delay=0", key, child, (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* The pid in @path, once written. */
static pid_t read_pid(const char *path)
{
	FILE *f;
	int pid = 0;

	if (!WAIT_FOR((f = fopen(path, "re")) != NULL, 10000))
		FAIL_AT("%s never written", path);
	if (fscanf(f, "%d", &pid) != 1)
		pid = 0;
	fclose(f);
	CHECK(pid > 0);
	return pid;
}

/* Is a SIGKILL pending for @pid (sent, not yet acted on)? */
static bool sigkill_pending(pid_t pid)
{
	char path[64], line[256];
	unsigned long long mask;
	bool yes = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return true;
	while (!yes && fgets(line, sizeof(line), f))
		if (sscanf(line, "ShdPnd: %llx", &mask) == 1 ||
		    sscanf(line, "SigPnd: %llx", &mask) == 1)
			yes = mask & (1ull << (SIGKILL - 1));
	fclose(f);
	return yes;
}

/* Has process @pid ended (gone, a zombie, exiting, or SIGKILLed)? */
static bool ended(pid_t pid)
{
	char path[64], buf[512], *p;
	unsigned long flags = 0;
	FILE *f;
	bool z = true;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return true;
	/* Dead, or dying: a SIGKILLed holder runs no more code of its own once
	 * it exits (PF_EXITING, 0x4, in field 9), and its session's socket
	 * closes during the exit, before it becomes a zombie: the broker may
	 * rightly hand its key on while /proc still shows it running. */
	if (fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')')))
		z = p[2] == 'Z' || p[2] == 'X' ||
		    (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %lu", &flags) == 1 && (flags & 0x4));
	else
		z = false;
	fclose(f);
	return z || sigkill_pending(pid);
}

/*
 * A broker stopped (SIGSTOP) past its TTL: no broker is left to end its
 * host's holds, so the clients end them themselves at the deadline the
 * broker published (local_held() says LOCAL_ECLUSTER, `shmlock lock` stops
 * its child), and no other local waiter is granted; all before the other
 * host is granted. Then the broker comes back and its host queues again.
 */
TEST(cluster, broker_stopped, 60)
{
	struct broker_proc a, b;
	struct record *r = record_new(), *ra = record_new();
	local_session *s;
	struct local_key_info *info = calloc(1, sizeof(*info));
	struct etcd3 e;
	uint64_t tok;
	pid_t pid, pid2, lpid, cpid, child;
	char pidfile[160];
	int rc, st;

	CHECK(info);
	memset(info, 0, sizeof(*info));
	info->sz = sizeof(*info); /* local_info() wants it (growable structs) */
	etcd3_start(&e);
	host_start(&a, &e);
	host_start(&b, &e);
	s = open_session(&a, "holder", 0, 0);
	CHECK_OK(local_lock(s, "c/s", NULL, &tok));
	snprintf(pidfile, sizeof(pidfile), "%s/child.pid", a.dir);
	cpid = cli_lock(&a, "c/t", pidfile);
	child = read_pid(pidfile);
	CHECK(WAIT_FOR(local_info(s, "c/t", info) == 0 && info->holders == 1, 10000));
	lpid = waiter_at(&a, 0, "c/s", ra); /* a local waiter behind the holder */
	pid = waiter_at(&b, 1, "c/s", r);   /* and one on the other host */
	CHECK(WAIT_FOR(etcd_queue_len(&e, "c/s") == 2, 10000));
	pid2 = worker(&b, 1, "c/t", 1, r);
	CHECK(WAIT_FOR(etcd_queue_len(&e, "c/t") == 2, 10000));
	kill(a.pid, SIGSTOP);
	/* -ETIMEDOUT is no answer, not a loss: the broker may have been
	 * stopped inside the key's mutex, and before the host's deadline
	 * nothing can be said (shmlock lock asks again, as here). */
	while ((rc = local_held(s, "c/s", NULL)) == 0 || rc == -ETIMEDOUT)
		usleep(1000);
	CHECK_RC(rc, -LOCAL_ECLUSTER);
	CHECK(WAIT_FOR(ended(child), 10000)); /* shmlock stopped its child */
	/* Neither key has gone to the other host, nor to the local waiter. */
	CHECK_EQ(atomic_load(&r->n), 0);
	CHECK_EQ(atomic_load(&ra->n), 0);
	/* The other host gets both once host A's lease expires at etcd. */
	CHECK(WAIT_FOR(atomic_load(&r->n) == 2, 15000));
	CHECK_EQ(atomic_load(&ra->n), 0);
	CHECK(r->token[0] > tok);
	/* Broker A back: its stale hold ended, its waiter queues in etcd and
	 * gets the key after the other host. */
	kill(a.pid, SIGCONT);
	CHECK(waitpid(cpid, &st, 0) == cpid);
	reap(&pid, 1);
	reap(&pid2, 1);
	CHECK(WAIT_FOR(atomic_load(&ra->n) == 1, 15000));
	reap(&lpid, 1);
	CHECK(ra->token[0] > r->token[0] && ra->token[0] > r->token[1]);
	free(info);
	broker_stop(&a);
	broker_stop_clean(&b);
	etcd3_stop(&e);
}

/* A process that takes a cluster key again and again does not starve the
 * other host: its batch ends after --cluster-batch grants (or the batch
 * time), although its host's queue never looks empty. */
TEST(cluster, no_starvation, 60)
{
	struct broker_proc a, b;
	struct record *r = record_new();
	_Atomic int *stop = (_Atomic int *)&r->inside;
	local_session *s;
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 10000);
	struct etcd3 e;
	uint64_t tok;
	pid_t pid;
	int st;

	etcd3_start(&e);
	host_start(&a, &e);
	host_start(&b, &e);
	fflush(NULL);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		local_session *ls = open_session(&a, "greedy", 0, 0);

		while (!atomic_load(stop)) {
			uint64_t until;

			CHECK_OK(local_lock(ls, "c/g", NULL, NULL));
			atomic_fetch_add(&r->n, 1);
			until = now_ms() + 2; /* busy inside: its host is never seen idle */
			while (now_ms() < until)
				;
			CHECK_OK(local_release(ls, "c/g"));
		}
		_exit(0);
	}
	CHECK(WAIT_FOR(atomic_load(&r->n) > 20, 10000));
	s = open_session(&b, "other", 0, 0);
	CHECK_OK(local_lock(s, "c/g", &o, &tok));
	CHECK_OK(local_release(s, "c/g"));
	atomic_store(stop, 1);
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	local_session_close(s);
	broker_stop_clean(&a);
	broker_stop_clean(&b);
	etcd3_stop(&e);
}

/* ---- the kill soak ---------------------------------------------------------
 *
 * Holders on three hosts take one cluster key in a loop while the test
 * SIGKILLs holders at random (inside and outside the key) and, in a long run,
 * SIGKILLs brokers and restarts them, at once (the lease is re-adopted) or
 * after the lease's TTL (it expires at etcd; the host queues anew). Checked
 * at every grant, with no limit on the run's length:
 *  - exclusion, by an overlap detector that owes nothing to the broker: the
 *    pid of the last holder, which must have released or ended (the
 *    broker's pidfd releases a SIGKILLed holder's hold);
 *  - fencing tokens strictly rising in grant order, across hosts;
 *  - FIFO across hosts: a token's high bits are the etcd create revision of
 *    the host's cluster-lock key (docs/cluster.md, "Tokens"), so revisions
 *    that never fall in grant order mean hosts were served in the order they
 *    queued in etcd; and every host is served.
 * $SHMLOCK_CLUSTER_SOAK_S sets the length (default 4 s, as in make check;
 * brokers are killed only in runs of 20 s or more); `make cluster-soak`
 * runs a long one (scripts/cluster-soak.sh).
 */

#define SOAK_HOSTS 3
#define SOAK_WORKERS 6
#define SOAK_ERRS 8 /* distinct error codes recorded */
#define SOAK_LOCK_DELAY_MS 50
/* After its length, a run goes on until every host has been
 * served (and, for a lock, the key has moved between hosts), for at most
 * this much longer: a host still unserved then is starved. */
#define SOAK_SERVE_GRACE_MS 30000

struct soak {
	uint32_t limit;			  /* 1: a lock; more: a semaphore of that many slots */
	_Atomic int inside[SOAK_WORKERS]; /* pids granted and not yet out, 0: free */
	_Atomic uint64_t changes;	  /* counts each store to inside[], after it */
	_Atomic uint64_t grants, overlaps, regress, rev_fall, moves, errors;
	_Atomic uint64_t per_host[SOAK_HOSTS];
	_Atomic int err_code[SOAK_ERRS]; /* which errors liblocal returned, and how often */
	_Atomic uint64_t err_count[SOAK_ERRS];
	uint64_t last_tok; /* written inside the key only (locks) */
	int last_host;
	char what[256]; /* the first violation */
};

__attribute__((format(printf, 2, 3))) static void soak_note(struct soak *k, const char *fmt, ...)
{
	va_list ap;

	if (k->what[0])
		return;
	va_start(ap, fmt);
	vsnprintf(k->what, sizeof(k->what), fmt, ap);
	va_end(ap);
}

/* Count error @rc under its code, so a run can say which errors it met. */
static void soak_error(struct soak *k, int rc)
{
	uint32_t i;

	atomic_fetch_add(&k->errors, 1);
	for (i = 0; i < SOAK_ERRS; i++) {
		int want = 0;

		if (atomic_compare_exchange_strong(&k->err_code[i], &want, rc) || want == rc) {
			atomic_fetch_add(&k->err_count[i], 1);
			return;
		}
	}
}

/* Set entry @i from @was to @p, counting the change. */
static void soak_set(struct soak *k, uint32_t i, int was, int p)
{
	if (atomic_compare_exchange_strong(&k->inside[i], &was, p))
		atomic_fetch_add(&k->changes, 1);
}

/* Record @me as inside the key; the number of live processes inside,
 * itself included. An entry left by a SIGKILLed worker counts no more once
 * that worker has ended, and one with our own pid is such a leftover (we
 * were not inside: the pid was reused). The entries are counted from a
 * snapshot: read again while a change was counted during the read (else a
 * read stopped half-way could see a leaver's entry and, further on, that of
 * the process its release let in, never inside together). */
static uint32_t soak_enter(struct soak *k, int me)
{
	int seen[SOAK_WORKERS];
	uint32_t i, n;
	uint64_t before;
	bool placed = false;

	for (i = 0; i < SOAK_WORKERS; i++)
		if (atomic_load(&k->inside[i]) == me)
			soak_set(k, i, me, 0);
	for (i = 0; i < SOAK_WORKERS && !placed; i++) {
		int p = atomic_load(&k->inside[i]);

		if ((!p || ended(p)) && atomic_compare_exchange_strong(&k->inside[i], &p, me)) {
			atomic_fetch_add(&k->changes, 1);
			placed = true;
		}
	}
	CHECK(placed); /* one entry per worker: a free or ended one exists */
	do {
		before = atomic_load(&k->changes);
		for (i = 0; i < SOAK_WORKERS; i++)
			seen[i] = atomic_load(&k->inside[i]);
	} while (atomic_load(&k->changes) != before);
	for (i = n = 0; i < SOAK_WORKERS; i++)
		n += seen[i] == me || (seen[i] && !ended(seen[i]));
	return n;
}

static void soak_leave(struct soak *k, int me)
{
	uint32_t i;

	for (i = 0; i < SOAK_WORKERS; i++)
		soak_set(k, i, me, 0);
}

/* Rising tokens and FIFO across hosts, checked at a lock's grant (a
 * semaphore's holders are granted side by side: no order to check). */
static void soak_check_order(struct soak *k, int host, uint64_t tok)
{
	if (tok <= k->last_tok) {
		atomic_fetch_add(&k->regress, 1);
		soak_note(k, "token %llu not above %llu (host %d after %d)",
			  (unsigned long long)tok, (unsigned long long)k->last_tok, host,
			  k->last_host);
	}
	if ((tok >> CLUSTER_SEQ_BITS_T) < (k->last_tok >> CLUSTER_SEQ_BITS_T)) {
		atomic_fetch_add(&k->rev_fall, 1);
		soak_note(k, "revision of token %llu below that of %llu (host %d after %d)",
			  (unsigned long long)tok, (unsigned long long)k->last_tok, host,
			  k->last_host);
	}
	if (k->last_tok && host != k->last_host)
		atomic_fetch_add(&k->moves, 1);
	k->last_tok = tok;
	k->last_host = host;
}

/* A soak worker: takes @key in a loop on @b. Errors (its broker killed, the
 * host's deadline passed) are counted and the worker goes on, reopening its
 * session when the broker is back. */
static pid_t soak_worker(const struct broker_proc *b, int host, const char *key, struct soak *k)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		struct local_session_opts so;
		local_session *s = NULL;
		int me = (int)getpid();

		local_session_opts_init(&so);
		so.socket_path = b->sock;
		so.name = "soak";
		/* A holder SIGKILLed inside leaves the key in lock-delay. The
		 * default 15 s would leave it idle for most of a short run;
		 * a short one still puts every such kill through the delay,
		 * with the other hosts waiting on it. */
		so.lock_delay_ms = SOAK_LOCK_DELAY_MS;
		for (;;) {
			uint64_t tok;
			uint32_t n;
			int rc;

			while (!s && local_session_open(&so, &s)) {
				s = NULL;
				usleep(20000);
			}
			rc = k->limit == 1 ? local_lock(s, key, NULL, &tok)
					   : local_sem_acquire(s, key, k->limit, NULL, &tok);
			if (rc) {
				soak_error(k, rc);
				local_session_close(s);
				s = NULL;
				continue;
			}
			n = soak_enter(k, me);
			if (n > k->limit) {
				atomic_fetch_add(&k->overlaps, 1);
				soak_note(k,
					  "pid %d (host %d) granted with %u processes inside, "
					  "limit %u",
					  me, host, n - 1, k->limit);
			}
			if (k->limit == 1)
				soak_check_order(k, host, tok);
			atomic_fetch_add(&k->grants, 1);
			atomic_fetch_add(&k->per_host[host], 1);
			usleep(200);
			soak_leave(k, me);
			rc = local_release(s, key);
			if (rc) {
				soak_error(k, rc);
				local_session_close(s);
				s = NULL;
			}
		}
	}
	return pid;
}

static bool soak_all_served(struct soak *k)
{
	uint32_t i;

	for (i = 0; i < SOAK_HOSTS; i++)
		if (!atomic_load(&k->per_host[i]))
			return false;
	return k->limit > 1 || atomic_load(&k->moves) >= 1;
}

/* Is a run that was to end at @end over at @now? Its length is the least;
 * then the wait for every host to be served, which on a slow build (TSan) or
 * a busy machine can take longer, bounded by SOAK_SERVE_GRACE_MS. */
static bool soak_done(struct soak *k, uint64_t now, uint64_t end)
{
	if (now < end)
		return false;
	return soak_all_served(k) || now >= end + SOAK_SERVE_GRACE_MS;
}

static unsigned int soak_seconds(void)
{
	const char *s = getenv("SHMLOCK_CLUSTER_SOAK_S");
	int n = s ? atoi(s) : 0;

	return n > 0 ? (unsigned int)n : 4;
}

/* Holders of @key (a lock for @limit 1, else a semaphore) on three hosts,
 * SIGKILLed at random, and in a long run brokers too; then the checks. */
static void run_soak(const char *key, uint32_t limit)
{
	struct broker_proc h[SOAK_HOSTS];
	struct soak *k =
		mmap(NULL, sizeof(*k), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	unsigned int secs = soak_seconds(), seed;
	bool brokers = secs >= 20;
	uint64_t start, end, next_broker, next_report, hdown_until[SOAK_HOSTS] = { 0 };
	uint64_t kills = 0, bkills = 0, readopt = 0, expire = 0;
	struct etcd3 e;
	pid_t pids[SOAK_WORKERS];
	uint32_t i;

	CHECK(k != MAP_FAILED);
	memset(k, 0, sizeof(*k));
	k->limit = limit;
	seed = getenv("SHMLOCK_CLUSTER_SOAK_SEED")
		       ? (unsigned)atoi(getenv("SHMLOCK_CLUSTER_SOAK_SEED"))
		       : 42;
	etcd3_start(&e);
	for (i = 0; i < SOAK_HOSTS; i++)
		host_start(&h[i], &e);
	for (i = 0; i < SOAK_WORKERS; i++)
		pids[i] = soak_worker(&h[i % SOAK_HOSTS], (int)(i % SOAK_HOSTS), key, k);
	srand(seed);
	start = now_ms();
	end = start + secs * 1000ull;
	next_broker = start + 5000;
	next_report = start + 60000;
	while (!soak_done(k, now_ms(), end)) {
		uint64_t now;

		usleep(20000 + (useconds_t)(rand() % 30000));
		now = now_ms();
		i = (uint32_t)rand() % SOAK_WORKERS;
		kill(pids[i], SIGKILL);
		waitpid(pids[i], NULL, 0);
		kills++;
		pids[i] = soak_worker(&h[i % SOAK_HOSTS], (int)(i % SOAK_HOSTS), key, k);
		for (i = 0; i < SOAK_HOSTS; i++)
			if (hdown_until[i] && now >= hdown_until[i]) {
				broker_restart(&h[i]);
				hdown_until[i] = 0;
			}
		if (brokers && now >= next_broker) {
			/* One broker at a time, so that a quorum of hosts is
			 * always up and the others go on being served. */
			for (i = 0; i < SOAK_HOSTS && !hdown_until[i]; i++)
				;
			if (i == SOAK_HOSTS) {
				i = (uint32_t)rand() % SOAK_HOSTS;
				broker_signal_wait(&h[i], SIGKILL);
				bkills++;
				if (rand() % 2) { /* within the TTL: re-adopted */
					broker_restart(&h[i]);
					readopt++;
				} else { /* past it: the lease expires at etcd */
					hdown_until[i] = now + (uint64_t)atoi(TTL_S) * 1000 + 1500;
					expire++;
				}
			}
			next_broker = now + 5000 + (uint64_t)(rand() % 10000);
		}
		if (now >= next_report) {
			fprintf(stderr,
				"    %llu s: %llu grants, %llu holder kills, %llu broker kills, "
				"%llu overlaps\n",
				(unsigned long long)(now - start) / 1000,
				(unsigned long long)atomic_load(&k->grants),
				(unsigned long long)kills, (unsigned long long)bkills,
				(unsigned long long)atomic_load(&k->overlaps));
			next_report = now + 60000;
		}
	}
	for (i = 0; i < SOAK_WORKERS; i++) {
		kill(pids[i], SIGKILL);
		waitpid(pids[i], NULL, 0);
	}
	for (i = 0; i < SOAK_HOSTS; i++)
		if (hdown_until[i])
			broker_restart(&h[i]);
	fprintf(stderr,
		"    %s, limit %u, %u s (ran %.1f s), seed %u: %llu grants (hosts %llu/%llu/%llu), "
		"%llu cross-host moves, %llu holder kills, %llu broker kills (%llu restarted "
		"within "
		"the TTL, %llu after), %llu overlaps, %llu token regressions, %llu revision falls, "
		"%llu errors\n",
		key, limit, secs, (double)(now_ms() - start) / 1000, seed,
		(unsigned long long)atomic_load(&k->grants),
		(unsigned long long)atomic_load(&k->per_host[0]),
		(unsigned long long)atomic_load(&k->per_host[1]),
		(unsigned long long)atomic_load(&k->per_host[2]),
		(unsigned long long)atomic_load(&k->moves), (unsigned long long)kills,
		(unsigned long long)bkills, (unsigned long long)readopt, (unsigned long long)expire,
		(unsigned long long)atomic_load(&k->overlaps),
		(unsigned long long)atomic_load(&k->regress),
		(unsigned long long)atomic_load(&k->rev_fall),
		(unsigned long long)atomic_load(&k->errors));
	for (i = 0; i < SOAK_ERRS && atomic_load(&k->err_code[i]); i++)
		fprintf(stderr, "    error %d (%s): %llu\n", atomic_load(&k->err_code[i]),
			local_strerror(atomic_load(&k->err_code[i])),
			(unsigned long long)atomic_load(&k->err_count[i]));
	if (k->what[0])
		FAIL_AT("%s", k->what);
	CHECK(atomic_load(&k->grants) > 20);
	if (limit == 1)
		CHECK(atomic_load(&k->moves) >= 1);
	for (i = 0; i < SOAK_HOSTS; i++)
		CHECK(atomic_load(&k->per_host[i]) > 0);
	for (i = 0; i < SOAK_HOSTS; i++)
		broker_stop_clean(&h[i]);
	etcd3_stop(&e);
}

/* Exclusion, rising tokens and FIFO across hosts while holders (and, in a
 * long run, brokers) are SIGKILLed at random. */
TEST(cluster, kill_soak, 90)
{
	run_soak("c/soak", 1);
}

/* The same for a semaphore of 2 slots across the three hosts: never more
 * than 2 processes inside, every host served. */
TEST(cluster, sem_kill_soak, 90)
{
	run_soak("c/semsoak", 2);
}

/* A broker SIGKILLed and restarted within its lease's deadline re-adopts the
 * lease kept in the segment: its host's hold goes on past the TTL, nobody
 * else is granted, and the key passes on at its release. The restart must
 * renew the lease before the local deadline (TTL - margin after the last
 * renewal): with the suite's 3 s that left 1-2 s for a broker to start and
 * reach etcd, which a loaded machine missed ("lost the cluster key's lock"
 * under a stall injector, 1 whole-suite run in 2). 6 s leaves 4-5 s. */
#define RESTART_TTL_S "6"
TEST(cluster, broker_restart, 60)
{
	struct broker_proc a, b;
	struct record *r = record_new();
	local_session *s;
	struct etcd3 e;
	uint64_t tok, tok2;
	pid_t pid;

	etcd3_start(&e);
	host_start_ttl(&a, &e, 0, RESTART_TTL_S);
	host_start_ttl(&b, &e, 0, RESTART_TTL_S);
	s = open_session(&a, "holder", 0, 0);
	CHECK_OK(local_lock(s, "c/r", NULL, &tok));
	pid = waiter_at(&b, 1, "c/r", r);
	CHECK(WAIT_FOR(etcd_queue_len(&e, "c/r") == 2, 10000));
	/* Host A's batch (100 ms) ends with host B waiting: A yields, its
	 * gate closed while the holder goes on. The restart must re-adopt a
	 * key held so too (it ended the hold when only open keys were). Not
	 * announced: this leaves it the time. */
	usleep(400000);
	broker_signal_wait(&a, SIGKILL);
	broker_restart(&a);
	/* Past the TTL: the old broker's lease would have expired by now had
	 * the new one not renewed it. A negative condition: nothing announces
	 * it, so wait it out. */
	usleep((atoi(RESTART_TTL_S) * 1000 + 1500) * 1000);
	CHECK_OK(local_held(s, "c/r", &tok2));
	CHECK_EQ(tok2, tok);
	CHECK_EQ(atomic_load(&r->n), 0);
	CHECK_EQ(etcd_queue_len(&e, "c/r"), 2);
	/* Handed on at the release, as if nothing had happened. */
	CHECK_OK(local_release(s, "c/r"));
	CHECK(WAIT_FOR(atomic_load(&r->n) == 1, 10000));
	reap(&pid, 1);
	CHECK(r->token[0] > tok);
	/* The restarted broker takes it back as usual. */
	CHECK_OK(local_lock(s, "c/r", NULL, &tok2));
	CHECK(tok2 > r->token[0]);
	CHECK_OK(local_release(s, "c/r"));
	local_session_close(s);
	broker_stop_clean(&a);
	broker_stop_clean(&b);
	etcd3_stop(&e);
}

/* ---- values, leaders, watches and lock-delay across hosts ------------------ */

/* `shmlock leader [-json] KEY` on @b: its exit status, stdout in @out. */
static int cli_leader(const struct broker_proc *b, const char *key, bool json, char *out,
		      size_t size)
{
	const char *cli = getenv("SHMLOCK_CLI_BIN");
	char cmd[600];
	size_t n;
	FILE *f;
	int st;

	if (!cli)
		FAIL_AT("SHMLOCK_CLI_BIN is not set (run through 'make check')");
	snprintf(cmd, sizeof(cmd), "%s leader %s -socket=%s %s 2>/dev/null", cli,
		 json ? "-json" : "", b->sock, key);
	fflush(NULL);
	f = popen(cmd, "r");
	CHECK(f);
	n = fread(out, 1, size - 1, f);
	out[n] = '\0';
	st = pclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

struct info_v {
	struct local_key_info ki;
	char value[256];
};

static void info_v_init(struct info_v *v)
{
	memset(v, 0, sizeof(*v));
	v->ki.sz = sizeof(v->ki);
	v->ki.value_buf = v->value;
	v->ki.value_buf_size = sizeof(v->value) - 1;
}

/* Watch @key on @s until its value is @want (the watch must wake: a change
 * made on another host reaches this host's watchers). */
static bool watch_value(local_session *s, const char *key, const char *want, uint64_t *idx)
{
	uint64_t end = now_ms() + 10000;
	struct info_v v;

	while (now_ms() < end) {
		int rc;

		info_v_init(&v);
		rc = local_watch(s, key, *idx, 2000, &v.ki);
		/* A host whose lease renewal came late under load loses its
		 * cluster keys for a moment (LOCAL_ECLUSTER): a watcher watches
		 * again, as a client would, within the same deadline. */
		if (rc == -LOCAL_ECLUSTER) {
			fprintf(stderr, "    watch of %s: the host lost the key; watching again\n",
				key);
			usleep(50000);
			continue;
		}
		if (rc != 0 && rc != -ETIMEDOUT)
			FAIL_AT("local_watch: %d", rc);
		if (rc == 0)
			*idx = v.ki.modify_index;
		v.value[v.ki.value_len < sizeof(v.value) ? v.ki.value_len : 0] = '\0';
		if (rc == 0 && v.ki.value_len == strlen(want) && !strcmp(v.value, want))
			return true;
	}
	return false;
}

/*
 * The holder's value on one host is seen on the other: `shmlock leader`
 * there prints it (-json names the holder and its token), a local watch
 * there wakes at each change of it and at the release, after which the
 * other host has no leader.
 */
TEST(cluster, values_leader_watch, 60)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = -1, .value = "A1", .value_len = 2);
	struct broker_proc a, b;
	local_session *sa, *sb;
	struct info_v v;
	struct etcd3 e;
	uint64_t tok, idx;
	char out[4096], want[64];

	etcd3_start(&e);
	host_start(&a, &e);
	host_start(&b, &e);
	sa = open_session(&a, "leader-a", 0, 0);
	sb = open_session(&b, "watcher-b", 0, 0);
	info_v_init(&v);
	CHECK_OK(local_info(sb, "c/v", &v.ki));
	idx = v.ki.modify_index;
	CHECK_OK(local_lock(sa, "c/v", &o, &tok));
	CHECK(watch_value(sb, "c/v", "A1", &idx));
	CHECK(WAIT_FOR(cli_leader(&b, "c/v", false, out, sizeof(out)) == 0, 5000));
	if (strcmp(out, "A1\n"))
		FAIL_AT("leader on the other host: %s", out);
	CHECK_EQ(cli_leader(&b, "c/v", true, out, sizeof(out)), 0);
	snprintf(want, sizeof(want), "%llu\"", (unsigned long long)tok); /* padded */
	if (!strstr(out, "leader-a") || !strstr(out, want))
		FAIL_AT("leader -json on the other host: %s", out);
	/* A new value (re-acquiring replaces it) reaches the other host. */
	o.value = "A2";
	CHECK_OK(local_lock(sa, "c/v", &o, NULL));
	CHECK(watch_value(sb, "c/v", "A2", &idx));
	/* Released: the other host's watch wakes, and it has no leader. */
	CHECK_OK(local_release(sa, "c/v"));
	info_v_init(&v);
	CHECK_OK(local_watch(sb, "c/v", idx, 10000, &v.ki));
	CHECK(v.ki.modify_index > idx);
	CHECK(WAIT_FOR(cli_leader(&b, "c/v", false, out, sizeof(out)) == 1, 5000));
	local_session_close(sa);
	local_session_close(sb);
	broker_stop_clean(&a);
	broker_stop_clean(&b);
	etcd3_stop(&e);
}

/*
 * A broker SIGKILLed: its host's holds pass on after the lease TTL. And as
 * its holder had a lock-delay, the next host to take the key holds its
 * grants back for that lock-delay (its local_info() shows it pending)
 * before its waiter is granted.
 */
TEST(cluster, broker_killed, 60)
{
	struct broker_proc a, b;
	struct record *r = record_new();
	local_session *sa, *sb;
	struct info_v v;
	struct etcd3 e;
	uint64_t tok, end, t0;
	bool delayed = false;
	pid_t pid;
	char out[4096];

	etcd3_start(&e);
	host_start(&a, &e);
	host_start(&b, &e);
	sa = open_session(&a, "holder", 800, 0);
	sb = open_session(&b, "looker", 0, 0);
	CHECK_OK(local_lock(sa, "c/d", NULL, &tok));
	/* Published (the leader seen on B) with the lock-delay it would owe. */
	CHECK(WAIT_FOR(cli_leader(&b, "c/d", false, out, sizeof(out)) == 0, 5000));
	pid = waiter_at(&b, 1, "c/d", r);
	CHECK(WAIT_FOR(etcd_queue_len(&e, "c/d") == 2, 10000));
	broker_signal_wait(&a, SIGKILL);
	t0 = now_ms();
	end = t0 + (uint64_t)atoi(TTL_S) * 1000 + 8000;
	while (atomic_load(&r->n) == 0 && now_ms() < end) {
		info_v_init(&v);
		if (local_info(sb, "c/d", &v.ki) == 0 && v.ki.lock_delay_remaining_ms > 0 &&
		    atomic_load(&r->n) == 0)
			delayed = true;
		usleep(5000);
	}
	CHECK_EQ(atomic_load(&r->n), 1);
	reap(&pid, 1);
	CHECK(delayed);
	CHECK(r->token[0] > tok);
	fprintf(stderr, "    passed on %llu ms after the broker was killed (lock-delay 800 ms)\n",
		(unsigned long long)(now_ms() - t0));
	local_session_close(sb);
	broker_stop(&a);
	broker_stop_clean(&b);
	etcd3_stop(&e);
}

/* A process on host @host taking semaphore @key (limit 2) @rounds times,
 * counting who is inside at once (r->overlaps: a third one). */
static pid_t sem_worker_n(const struct broker_proc *b, int host, const char *key, uint32_t limit,
			  int rounds, struct record *r)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		local_session *s = open_session(b, "sem-worker", 0, 0);
		int i;

		for (i = 0; i < rounds; i++) {
			uint64_t tok;
			uint32_t at;

			CHECK_OK(local_sem_acquire(s, key, limit, NULL, &tok));
			if (atomic_fetch_add(&r->inside, 1) >= (int)limit)
				atomic_fetch_add(&r->overlaps, 1);
			at = atomic_fetch_add(&r->n, 1);
			if (at < 1024) {
				r->token[at] = tok;
				r->host[at] = host;
			}
			usleep(2000);
			atomic_fetch_sub(&r->inside, 1);
			CHECK_OK(local_release(s, key));
		}
		local_session_close(s);
		_exit(0);
	}
	return pid;
}

static pid_t sem_worker(const struct broker_proc *b, int host, const char *key, int rounds,
			struct record *r)
{
	return sem_worker_n(b, host, key, 2, rounds, r);
}

/* How many hosts wait for slots of semaphore @key in etcd (their waiter keys,
 * NS "s/" hex(key) "/w/" lease; -1: no answer). */
static int etcd_sem_waiters(const struct etcd3 *e, const char *key)
{
	return etcd_count_under(e, "shmlock/lock/s/", key, "/w/");
}

/*
 * FIFO across hosts for a cluster semaphore (the etcd semaphore recipe: a
 * waiter key per host, its create revision the host's place), on hosts
 * @h[0..2] (part of semaphore_hosts, which has started them: one etcd
 * cluster and three brokers fewer in make check). A slot that is free while
 * an earlier host waits for it is that host's: here the earlier host is the
 * test itself, with a waiter key under a lease of its own. Then three hosts:
 * the slot held on A passes to B, which queued first, then to C.
 */
static void sem_fifo_checks(const struct etcd3 *e, struct broker_proc *const h[3])
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 10000);
	LOCAL_OPTS(local_acquire_opts, shortw, .timeout_ms = 700);
	struct record *r = record_new();
	char out[4096], body[1200], wk[700] = "shmlock/lock/s/", wk64[1000], lease[32], *p;
	const char *key = "c/qw";
	local_session *sa, *sb;
	pid_t pids[2];
	size_t n;
	int i;

	/* An earlier host waiting for one slot of two. */
	CHECK_OK(etcd_req(e->cport[0], "/v3/lease/grant", "{\"TTL\":60}", out));
	p = strstr(out, "\"ID\":\"");
	CHECK(p);
	snprintf(lease, sizeof(lease), "%lld", atoll(p + 6));
	n = strlen(wk);
	for (i = 0; key[i]; i++)
		n += (size_t)sprintf(wk + n, "%02x", (unsigned char)key[i]);
	sprintf(wk + n, "/w/%016llx", (unsigned long long)atoll(lease));
	etcd_b64(wk, wk64);
	snprintf(body, sizeof(body), "{\"key\":\"%s\",\"value\":\"MQ==\",\"lease\":\"%s\"}", wk64,
		 lease);
	CHECK_OK(etcd_req(e->cport[0], "/v3/kv/put", body, out));
	sa = open_session(h[0], "sem-fifo", 0, 0);
	sb = open_session(h[1], "sem-late", 0, 0);
	CHECK_OK(local_sem_acquire(sa, key, 2, &o, NULL)); /* one slot left: its */
	CHECK_RC(local_sem_acquire(sb, key, 2, &shortw, NULL), -ETIMEDOUT);
	/* That host served (its waiter key gone): ours. */
	snprintf(body, sizeof(body), "{\"key\":\"%s\"}", wk64);
	CHECK_OK(etcd_req(e->cport[0], "/v3/kv/deleterange", body, out));
	CHECK_OK(local_release(sa, key));
	local_session_close(sb);
	/* Three hosts, one slot: B queues, then C; A's release goes to B. */
	key = "c/q1";
	CHECK_OK(local_sem_acquire(sa, key, 1, &o, NULL));
	pids[0] = sem_worker_n(h[1], 1, key, 1, 1, r);
	CHECK(WAIT_FOR(etcd_sem_waiters(e, key) == 1, 10000));
	pids[1] = sem_worker_n(h[2], 2, key, 1, 1, r);
	CHECK(WAIT_FOR(etcd_sem_waiters(e, key) == 2, 10000));
	CHECK_EQ(atomic_load(&r->n), 0);
	CHECK_OK(local_release(sa, key));
	reap(pids, 2);
	CHECK_EQ(atomic_load(&r->overlaps), 0);
	CHECK_EQ(atomic_load(&r->n), 2);
	CHECK_EQ(r->host[0], 1);
	CHECK_EQ(r->host[1], 2);
	CHECK(WAIT_FOR(etcd_sem_waiters(e, key) == 0, 10000)); /* nobody left queued */
	local_session_close(sa);
}

/* A cluster semaphore has one etcd key per slot, at most 64: a larger limit
 * on a cluster key is refused (LOCAL_ELIMIT), not silently lowered; a
 * host-local key keeps any limit. Refused before etcd is asked: no etcd here. */
TEST(cluster, semaphore_cap, 30)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 0);
	const char *extra[] = { "--cluster", "etcd://127.0.0.1:1", "--cluster-prefix", "c/", NULL };
	struct broker_proc a;
	local_session *s;

	broker_start(&a, extra);
	s = open_session(&a, "cap", 0, 0);
	CHECK_RC(local_sem_acquire(s, "c/big", CLUSTER_SEM_MAX_T + 1, &o, NULL), -LOCAL_ELIMIT);
	CHECK_OK(local_sem_acquire(s, "l/big", CLUSTER_SEM_MAX_T + 1, &o, NULL));
	CHECK_OK(local_release(s, "l/big"));
	local_session_close(s);
	broker_stop_clean(&a);
}

/*
 * FIFO across hosts first (sem_fifo_checks(), with a third host). Then:
 * a cluster semaphore's limit holds across hosts and its slots are shared:
 * with one slot of two taken on host A, host B gets the other at once; a
 * third taker on either host waits; a slot given back on B goes to A.
 * Then processes on both hosts take turns: never more than two inside.
 */
TEST(cluster, semaphore_hosts, 60)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 10000);
	LOCAL_OPTS(local_acquire_opts, shortw, .timeout_ms = 700);
	struct broker_proc a, b, c;
	struct record *r = record_new();
	local_session *sa, *sb, *sc, *sd;
	uint64_t t1, t2, t3;
	struct etcd3 e;
	pid_t pids[4];
	uint32_t i, j;

	etcd3_start(&e);
	host_start(&a, &e);
	host_start(&b, &e);
	host_start(&c, &e);
	{
		struct broker_proc *const h[3] = { &a, &b, &c };

		sem_fifo_checks(&e, h);
	}
	broker_stop_clean(&c);
	sa = open_session(&a, "sem-a", 0, 0);
	sc = open_session(&a, "sem-a2", 0, 0);
	sb = open_session(&b, "sem-b", 0, 0);
	sd = open_session(&b, "sem-b2", 0, 0);
	CHECK_OK(local_sem_acquire(sa, "c/sem", 2, &o, &t1));
	CHECK_OK(local_sem_acquire(sb, "c/sem", 2, &o, &t2)); /* while A holds one */
	CHECK(t1 != t2);
	CHECK_RC(local_sem_acquire(sc, "c/sem", 2, &shortw, NULL), -ETIMEDOUT);
	CHECK_RC(local_sem_acquire(sd, "c/sem", 2, &shortw, NULL), -ETIMEDOUT);
	CHECK_OK(local_release(sb, "c/sem"));
	CHECK_OK(local_sem_acquire(sc, "c/sem", 2, &o, &t3)); /* B's slot, now A's */
	CHECK(t3 != t1 && t3 != t2);
	CHECK_OK(local_release(sa, "c/sem"));
	CHECK_OK(local_release(sc, "c/sem"));
	local_session_close(sa);
	local_session_close(sb);
	local_session_close(sc);
	local_session_close(sd);
	pids[0] = sem_worker(&a, 0, "c/sem", 10, r);
	pids[1] = sem_worker(&a, 0, "c/sem", 10, r);
	pids[2] = sem_worker(&b, 1, "c/sem", 10, r);
	pids[3] = sem_worker(&b, 1, "c/sem", 10, r);
	reap(pids, 4);
	CHECK_EQ(atomic_load(&r->overlaps), 0);
	CHECK_EQ(atomic_load(&r->n), 40);
	for (i = 0; i < 40; i++) /* tokens unique */
		for (j = i + 1; j < 40; j++)
			if (r->token[i] == r->token[j])
				FAIL_AT("token %llu granted twice",
					(unsigned long long)r->token[i]);
	/* A broker restarted within its TTL re-adopts its lease but not its
	 * semaphore slots: its holds end, and the slot is given back to the
	 * other host at once (not kept while the re-adopted lease lives). */
	sa = open_session(&a, "sem-a3", 0, 0);
	CHECK_OK(local_sem_acquire(sa, "c/one", 1, &o, NULL));
	broker_signal_wait(&a, SIGKILL);
	broker_restart(&a);
	sb = open_session(&b, "sem-b3", 0, 0);
	CHECK_OK(local_sem_acquire(sb, "c/one", 1, &o, NULL));
	CHECK_OK(local_release(sb, "c/one"));
	local_session_close(sb);
	local_session_close(sa);
	broker_stop_clean(&a);
	broker_stop_clean(&b);
	etcd3_stop(&e);
}

/*
 * A host whose processes take a cluster semaphore's slots in turn, with a
 * local waiter always queued (five processes, limit 2: every release hands
 * its slot on), does not starve another host: once the other host queued,
 * a slot held past the batch (--cluster-batch 4 here, or the batch time) is
 * given back in etcd rather than handed on, and the other host gets it.
 * Never more than two inside, across the hosts. Then the same for one
 * process alone taking a slot again and again.
 */
TEST(cluster, semaphore_batch, 60)
{
	/* Starved is never: 10 s (as no_starvation) leaves a TSan build on a
	 * loaded machine room for a batch of 4 and the etcd round trips. */
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 10000);
	struct record *r = record_new();
	_Atomic int *stop = &r->stop;
	struct broker_proc a, b;
	local_session *s;
	struct etcd3 e;
	pid_t pids[5];
	uint32_t before;
	int i, st;

	etcd3_start(&e);
	host_start(&a, &e);
	host_start(&b, &e);
	for (i = 0; i < 5; i++) {
		fflush(NULL);
		pids[i] = fork();
		CHECK(pids[i] >= 0);
		if (pids[i] == 0) {
			local_session *ls = open_session(&a, "greedy", 0, 0);

			while (!atomic_load(stop)) {
				uint64_t until;

				CHECK_OK(local_sem_acquire(ls, "c/sb", 2, NULL, NULL));
				if (atomic_fetch_add(&r->inside, 1) >= 2)
					atomic_fetch_add(&r->overlaps, 1);
				atomic_fetch_add(&r->n, 1);
				until = now_ms() + 2; /* busy inside: a waiter always queued */
				while (now_ms() < until)
					;
				atomic_fetch_sub(&r->inside, 1);
				CHECK_OK(local_release(ls, "c/sb"));
			}
			local_session_close(ls);
			_exit(0);
		}
	}
	CHECK(WAIT_FOR(atomic_load(&r->n) > 40, 10000));
	s = open_session(&b, "other", 0, 0);
	CHECK_OK(local_sem_acquire(s, "c/sb", 2, &o, NULL)); /* starved before: -ETIMEDOUT */
	if (atomic_fetch_add(&r->inside, 1) >= 2)
		atomic_fetch_add(&r->overlaps, 1);
	usleep(20000); /* inside for a while: A's processes must keep to one slot */
	atomic_fetch_sub(&r->inside, 1);
	CHECK_OK(local_release(s, "c/sb"));
	/* A goes on: its local waiters queued again for the slot given back. */
	before = atomic_load(&r->n);
	CHECK(WAIT_FOR(atomic_load(&r->n) > before + 10, 10000));
	atomic_store(stop, 1);
	for (i = 0; i < 5; i++)
		CHECK(waitpid(pids[i], &st, 0) == pids[i] && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK_EQ(atomic_load(&r->overlaps), 0);
	/* One process taking a slot (limit 1) again and again, with no local
	 * waiter: its slot is never idle for --cluster-linger, but its new
	 * holds count in the batch as well. */
	atomic_store(stop, 0);
	atomic_store(&r->n, 0);
	fflush(NULL);
	pids[0] = fork();
	CHECK(pids[0] >= 0);
	if (pids[0] == 0) {
		local_session *ls = open_session(&a, "greedy1", 0, 0);

		while (!atomic_load(stop)) {
			uint64_t until;

			CHECK_OK(local_sem_acquire(ls, "c/s1", 1, NULL, NULL));
			atomic_fetch_add(&r->n, 1);
			until = now_ms() + 2; /* busy inside: hardly ever seen idle */
			while (now_ms() < until)
				;
			CHECK_OK(local_release(ls, "c/s1"));
		}
		local_session_close(ls);
		_exit(0);
	}
	CHECK(WAIT_FOR(atomic_load(&r->n) > 40, 10000));
	CHECK_OK(local_sem_acquire(s, "c/s1", 1, &o, NULL)); /* starved before */
	CHECK_OK(local_release(s, "c/s1"));
	atomic_store(stop, 1);
	CHECK(waitpid(pids[0], &st, 0) == pids[0] && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	local_session_close(s);
	broker_stop_clean(&a);
	broker_stop_clean(&b);
	etcd3_stop(&e);
}

/* @b's log, to stderr (a failure's evidence). */
static void print_log(const struct broker_proc *b)
{
	char cmd[200];

	snprintf(cmd, sizeof(cmd), "cat '%s' >&2", b->log);
	if (system(cmd))
		fprintf(stderr, "    (no log at %s)\n", b->log);
}

#ifdef LOCAL_CRASH_POINTS
/* Take cluster key @key on @s: a lock, or (@sem) a semaphore of limit 1. */
static int take(local_session *s, const char *key, bool sem, const struct local_acquire_opts *o,
		uint64_t *tok)
{
	return sem ? local_sem_acquire(s, key, 1, o, tok) : local_lock(s, key, o, tok);
}

/*
 * A client stopped inside a cluster key's mutex (its release, at a crash
 * point) while its host loses its etcd lease: the broker cannot close the
 * key then. The host gets a new lease, and another host takes the key in
 * etcd; the key opened under the old lease must stay shut under the new one
 * (no local grant while the other host holds it: for a semaphore of limit 1,
 * no holder beyond it), be closed and logged once its mutex frees, and be
 * served through etcd again once the other host lets go (it never was).
 */
static void unclosed_case(const char *key, bool sem)
{
	LOCAL_OPTS(local_acquire_opts, shortw, .timeout_ms = 1500);
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 10000);
	struct broker_proc a, b;
	struct record *r = record_new();
	local_session *sa, *sb;
	struct etcd3 e;
	uint64_t tb, ta;
	long long lease;
	pid_t x;
	int st, rc;

	etcd3_start(&e);
	host_start_at(&a, e.eps, 0, "6", "5");
	host_start(&b, &e);
	fflush(NULL);
	x = fork();
	CHECK(x >= 0);
	if (x == 0) {
		char num[8];
		local_session *s;
		uint64_t tok;

		snprintf(num, sizeof(num), "%d", CP_REL_UNLINKED);
		setenv("SHMLOCK_STOP_AT", num, 1);
		setenv("SHMLOCK_NO_FAST_PATH", "1", 1);
		s = open_session(&a, "stalled", 0, 0);
		if (take(s, key, sem, NULL, &tok))
			_exit(2);
		r->token[0] = tok;
		local_release(s, key); /* stops inside, holding the key's mutex */
		_exit(0);
	}
	CHECK(waitpid(x, &st, WUNTRACED) == x && WIFSTOPPED(st));
	lease = sem ? etcd_lease_under(&e, "shmlock/lock/s/", key, "/00000000")
		    : etcd_lease_under(&e, "shmlock/lock/", key, "/");
	CHECK(lease != 0);
	/* Host A's lease ends at etcd (as if it expired): its cluster lock
	 * (its slot) goes, and host B takes the key. */
	etcd_revoke(&e, lease);
	sb = open_session(&b, "other", 0, 0);
	CHECK_OK(take(sb, key, sem, &o, &tb));
	CHECK(tb > r->token[0]);
	/* Host A saw it and has a new lease. */
	if (!WAIT_FOR(broker_log_count(&a, "lease gone at etcd") >= 1 &&
			      broker_log_count(&a, "granted") >= 2,
		      15000))
		FAIL_AT("host A got no new lease (log: %s)", a.log);
	CHECK(broker_log_has(&a, "could not be closed"));
	/* The stopped client goes on: its release ends, the mutex frees. */
	kill(x, SIGCONT);
	CHECK(waitpid(x, &st, 0) == x && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* No grant on host A while host B holds the key. */
	sa = open_session(&a, "late", 0, 0);
	rc = take(sa, key, sem, &shortw, &ta);
	if (rc == 0)
		FAIL_AT("%s granted on host A (token %llu) while host B holds it (token %llu)", key,
			(unsigned long long)ta, (unsigned long long)tb);
	CHECK_RC(rc, -ETIMEDOUT);
	if (!WAIT_FOR(broker_log_has(&a, "after its lease ended"), 10000)) {
		print_log(&a);
		FAIL_AT("host A never said it closed %s", key);
	}
	/* Served again through etcd once host B lets go. */
	CHECK_OK(local_release(sb, key));
	rc = take(sa, key, sem, &o, &ta);
	if (rc)
		FAIL_AT("host A not served after the stall healed: %d", rc);
	CHECK(ta > tb);
	CHECK_OK(local_release(sa, key));
	local_session_close(sa);
	local_session_close(sb);
	broker_stop_clean(&a);
	broker_stop_clean(&b);
	etcd3_stop(&e);
}

/*
 * A releaser stopped inside a cluster key's mutex in the middle of a local
 * handoff (the waiter's hold written, the grant not yet made) while its
 * host loses its lease; another host takes the key. When the releaser goes
 * on, its handoff ends under a lease the host no longer holds: the waiter
 * must give that grant back and wait on, and be granted only through etcd
 * again, with a token above the other host's.
 */
TEST(cluster, stale_handoff_is_given_back, 60)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 10000);
	struct broker_proc a, b;
	struct record *r = record_new();
	local_session *sb;
	struct etcd3 e;
	uint64_t tb;
	long long lease;
	pid_t x, w;
	int st;

	etcd3_start(&e);
	host_start_at(&a, e.eps, 0, "6", "5");
	host_start(&b, &e);
	fflush(NULL);
	x = fork();
	CHECK(x >= 0);
	if (x == 0) {
		char num[8];
		local_session *s;
		uint64_t tok;

		snprintf(num, sizeof(num), "%d", CP_HANDOFF_HOLD_SET);
		setenv("SHMLOCK_STOP_AT", num, 1);
		setenv("SHMLOCK_NO_FAST_PATH", "1", 1);
		s = open_session(&a, "stalled", 0, 0);
		if (local_lock(s, "c/h", NULL, &tok))
			_exit(2);
		r->token[0] = tok;
		atomic_store(&r->inside, 1);
		if (!WAIT_FOR(info_of(s, "c/h")->waiters == 1, 20000))
			_exit(3);
		local_release(s, "c/h"); /* stops inside its handoff */
		_exit(0);
	}
	CHECK(WAIT_FOR(atomic_load(&r->inside) == 1, 20000));
	w = fork();
	CHECK(w >= 0);
	if (w == 0) {
		LOCAL_OPTS(local_acquire_opts, long_wait, .timeout_ms = 40000);
		local_session *s = open_session(&a, "waiter", 0, 0);
		uint64_t tok = 0;
		int rc = local_lock(s, "c/h", &long_wait, &tok);

		r->token[1] = tok;
		r->host[1] = rc;
		if (!rc)
			local_release(s, "c/h");
		_exit(0);
	}
	CHECK(waitpid(x, &st, WUNTRACED) == x && WIFSTOPPED(st));
	lease = etcd_lease_under(&e, "shmlock/lock/", "c/h", "/");
	CHECK(lease != 0);
	etcd_revoke(&e, lease);
	sb = open_session(&b, "other", 0, 0);
	CHECK_OK(local_lock(sb, "c/h", &o, &tb));
	CHECK(tb > r->token[0]);
	if (!WAIT_FOR(broker_log_count(&a, "lease gone at etcd") >= 1 &&
			      broker_log_count(&a, "granted") >= 2,
		      15000))
		FAIL_AT("host A got no new lease (log: %s)", a.log);
	/* The releaser goes on: its handoff ends under the old lease. */
	kill(x, SIGCONT);
	CHECK(waitpid(x, &st, 0) == x && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	if (!WAIT_FOR(broker_log_has(&a, "after its lease ended"), 10000)) {
		print_log(&a);
		FAIL_AT("host A never said it closed c/h");
	}
	/* Host B lets go: the waiter is served through etcd, above B. */
	CHECK_OK(local_release(sb, "c/h"));
	CHECK(waitpid(w, &st, 0) == w && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK_RC(r->host[1], 0);
	if (r->token[1] <= tb)
		FAIL_AT("the waiter on host A returned token %llu, not above host B's %llu: a "
			"handoff under a lost lease was kept",
			(unsigned long long)r->token[1], (unsigned long long)tb);
	local_session_close(sb);
	broker_stop_clean(&a);
	broker_stop_clean(&b);
	etcd3_stop(&e);
}

TEST(cluster, unclosed_key_shut_under_a_later_lease, 60)
{
	unclosed_case("c/u", false);
}

TEST(cluster, unclosed_semaphore_shut_then_served, 60)
{
	unclosed_case("c/us", true);
}
#endif

/*
 * A broker stopped (SIGSTOP) while it lingers on a semaphore slot it is
 * about to give back, and its lease ends meanwhile: another host takes that
 * slot, under the same etcd name. The resumed broker must not delete it
 * (every delete is guarded by the lease the slot was taken under, and a
 * resumed broker checks its lease before it writes), and must not admit a
 * holder beyond the limit.
 */
TEST(cluster, resumed_broker_keeps_off_another_hosts_slot, 60)
{
	LOCAL_OPTS(local_acquire_opts, shortw, .timeout_ms = 1500);
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 10000);
	struct broker_proc a, b;
	local_session *sa, *sb;
	struct etcd3 e;
	long long lease;
	int rc;

	etcd3_start(&e);
	/* TTL 6 s: the stop below ends well before the local deadline, so
	 * only etcd can tell host A that its lease is gone. */
	host_start_at(&a, e.eps, 0, "6", "1000");
	host_start(&b, &e);
	sa = open_session(&a, "sem-a", 0, 0);
	sb = open_session(&b, "sem-b", 0, 0);
	CHECK_OK(local_sem_acquire(sa, "c/sl", 1, &o, NULL));
	lease = etcd_lease_under(&e, "shmlock/lock/s/", "c/sl", "/00000000");
	CHECK(lease != 0);
	CHECK_OK(local_release(sa, "c/sl")); /* the slot lingers 1 s on host A */
	usleep(200000); /* the manager has seen the release (it ticks every 50 ms) */
	kill(a.pid, SIGSTOP);
	etcd_revoke(&e, lease);
	CHECK_OK(local_sem_acquire(sb, "c/sl", 1, &o, NULL)); /* the slot, now host B's */
	CHECK(etcd_lease_under(&e, "shmlock/lock/s/", "c/sl", "/00000000") != lease);
	usleep(1500000); /* host A stays stopped past its linger */
	kill(a.pid, SIGCONT);
	if (!WAIT_FOR(broker_log_has(&a, "lease gone at etcd"), 10000))
		FAIL_AT("host A never saw its lease gone (log: %s)", a.log);
	CHECK_EQ(etcd_count_under(&e, "shmlock/lock/s/", "c/sl", "/00000000"), 1);
	/* Limit 1, held on host B: nobody on host A. */
	rc = local_sem_acquire(sa, "c/sl", 1, &shortw, NULL);
	if (rc == 0)
		FAIL_AT("a second holder of c/sl (limit 1) on host A");
	CHECK_RC(rc, -ETIMEDOUT);
	CHECK_OK(local_release(sb, "c/sl"));
	CHECK_OK(local_sem_acquire(sa, "c/sl", 1, &o, NULL));
	CHECK_OK(local_release(sa, "c/sl"));
	local_session_close(sa);
	local_session_close(sb);
	broker_stop_clean(&a);
	broker_stop_clean(&b);
	etcd3_stop(&e);
}

/*
 * One etcd member stopped (SIGSTOP: it accepts connections and never
 * answers), the quorum intact: a host that asked it first keeps its lease
 * and its holds, failing over to the other members within each renewal.
 * The member stopped is a follower (a stopped leader costs an election,
 * which the TTL here would not cover on a loaded machine).
 */
TEST(cluster, stopped_member_costs_no_hold, 60)
{
	static char eps[160];
	struct broker_proc a;
	local_session *s;
	struct etcd3 e;
	uint64_t t0, lost = 0;
	int f = -1, i, rc = 0;

	etcd3_start(&e);
	for (i = 0; i < 3 && f < 0; i++)
		if (WAIT_FOR(etcd_is_leader(&e, i) >= 0, 5000) && etcd_is_leader(&e, i) == 0)
			f = i;
	CHECK(f >= 0);
	/* The follower first: every thread of the broker asks it first. */
	snprintf(eps, sizeof(eps), "etcd://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", e.cport[f],
		 e.cport[(f + 1) % 3], e.cport[(f + 2) % 3]);
	host_start_at(&a, eps, 0, TTL_S, "5");
	s = open_session(&a, "holder", 0, 0);
	CHECK_OK(local_lock(s, "c/h", NULL, NULL));
	kill(e.pid[f], SIGSTOP);
	t0 = now_ms();
	/* Two local deadlines (TTL - margin) and more. */
	while (now_ms() - t0 <
	       2000ull * (uint64_t)(atoi(TTL_S) * 1000 - atoi(MARGIN_MS)) / 1000 + 1000) {
		rc = local_held(s, "c/h", NULL);
		if (rc) {
			lost = now_ms() - t0;
			break;
		}
		usleep(10000);
	}
	kill(e.pid[f], SIGCONT);
	if (rc)
		FAIL_AT("the hold was lost %llu ms after one member (of 3) stopped: %d",
			(unsigned long long)lost, rc);
	CHECK_OK(local_release(s, "c/h"));
	local_session_close(s);
	broker_stop_clean(&a);
	etcd3_stop(&e);
}

/*
 * All of etcd restarted while a host holds a key and another waits: the
 * holding host's lease ends locally (its deadline passes while etcd is
 * away) and it gives that lease up. A restarted etcd extends every lease
 * by its TTL, so the lease must be revoked, retried until etcd answers, for
 * the waiting host to be served at once rather than a TTL later (10 s here:
 * it is served well within that).
 */
TEST(cluster, lease_revoked_after_etcd_restart, 90)
{
	struct broker_proc a, b;
	struct record *r = record_new();
	local_session *s;
	struct etcd3 e;
	uint64_t tok, back;
	pid_t pid;
	int i;

	etcd3_start(&e);
	/* TTL 10 s, margin 6 s: the local deadline is 4 s after a renewal. */
	{
		const char *extra[] = { "--cluster",
					e.eps,
					"--cluster-prefix",
					"c/",
					"--cluster-lease-ttl",
					"10",
					"--cluster-margin",
					"6000",
					"--log-level",
					"info",
					NULL };

		broker_start(&a, extra);
	}
	host_start(&b, &e);
	s = open_session(&a, "holder", 0, 0);
	CHECK_OK(local_lock(s, "c/rv", NULL, &tok));
	pid = waiter_at(&b, 1, "c/rv", r);
	CHECK(WAIT_FOR(etcd_queue_len(&e, "c/rv") == 2, 10000));
	for (i = 0; i < 3; i++)
		etcd3_kill(&e, i);
	/* Host A's deadline passes: the hold ends, the lease is given up. */
	CHECK(WAIT_FOR(local_held(s, "c/rv", NULL) == -LOCAL_ECLUSTER, 10000));
	for (i = 0; i < 3; i++)
		etcd3_spawn(&e, i);
	etcd3_wait_healthy(&e);
	back = now_ms();
	if (!WAIT_FOR(atomic_load(&r->n) == 1, 8000)) {
		print_log(&a);
		FAIL_AT("host B not served %llu ms after etcd came back (the old lease lives 10 s)",
			(unsigned long long)(now_ms() - back));
	}
	fprintf(stderr, "    host B served %llu ms after etcd came back\n",
		(unsigned long long)(now_ms() - back));
	reap(&pid, 1);
	CHECK(r->token[0] > tok);
	CHECK(broker_log_has(&a, "revoked"));
	local_session_close(s);
	broker_stop_clean(&a);
	broker_stop_clean(&b);
	etcd3_stop(&e);
}
