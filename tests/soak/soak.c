// SPDX-License-Identifier: MIT
/*
 * shmlock-soak: the kill soak (make soak SECONDS=N).
 *
 * Starts its own broker on a temporary socket and segment, forks client
 * processes (client.c) and runs a chaos loop that SIGKILLs random clients
 * (respawning them) and, now and then, the broker (restarting it on the same
 * socket and segment). A watchdog reports any operation that runs far past
 * its deadline (a lost wake-up looks like that). When the time is up the
 * clients finish, and the run checks that every slot of every kind came
 * back: only the checker's own session, no hold, no waiter, no node, and the
 * segment invariants of tests/invariants.c.
 *
 * Usage: shmlock-soak [--seconds N] [--clients N] [--seed N] [--verbose]
 * Exit status: 0 clean, 1 violations or leaks, 2 could not run.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../invariants.h"
#include "soak.h"

#define STALL_FOREVER_MS 20000ull /* a wait without deadline: others hold ~ms */
#define STALL_SLACK_MS 10000ull	  /* past a timed operation's own deadline */
#define DRAIN_MS 30000ull	  /* clients finishing after stop */
#define SETTLE_MS 15000ull	  /* broker cleanup after the last client */

const char *const soak_key_name[SOAK_KEYS] = { "soak/lock0", "soak/lock1", "soak/lock2",
					       "soak/lock3", "soak/sem0",  "soak/sem1" };
const char *const soak_op_name[OP_COUNT] = {
#define X(name, text) text,
	SOAK_OPS(X)
#undef X
};
static const char *const outcome_name[OUT_COUNT] = {
	"grants",
	"busy",
	"timeouts",
	"watches fired",
	"lease losses",
	"session losses",
	"open retries",
	"orphaned closes",
	"over the limit only with expired marks",
	"unsettled occupancy reads",
};

static struct soak_shared *sh;
static struct soak_config cfg;
static pid_t clients[SOAK_MAX_CLIENTS], broker;
static unsigned long kills, broker_kills, broker_terms, stalls, crashes;
static volatile sig_atomic_t interrupted;

uint64_t soak_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void soak_violation(struct soak_shared *s, const char *fmt, ...)
{
	uint32_t i = atomic_fetch_add(&s->nmsg, 1);
	char line[SOAK_MSG_LEN];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	atomic_fetch_add(&s->violations, 1);
	fprintf(stderr, "soak: VIOLATION: %s\n", line);
	if (i < SOAK_MSGS)
		memcpy(s->msg[i], line, sizeof(line));
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull; /* splitmix64 */
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static void spawn(unsigned i)
{
	uint32_t inc = atomic_load(&sh->slot[i].inc);
	pid_t p;

	atomic_store(&sh->slot[i].op_start_ns, 0);
	fflush(NULL);
	p = fork();
	if (p < 0) {
		perror("soak: fork");
		exit(2);
	}
	if (p == 0) {
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		soak_client(sh, &cfg, i, inc, mix(cfg.seed ^ ((uint64_t)i << 40) ^ inc));
	}
	clients[i] = p;
}

/* Kill client @i: mark its occupancy stale first, then SIGKILL and reap. */
static void kill_client(unsigned i)
{
	atomic_fetch_add(&sh->slot[i].inc, 1);
	kill(clients[i], SIGKILL);
	waitpid(clients[i], NULL, 0);
	clients[i] = 0;
}

static int broker_up(void)
{
	if (soak_broker_start(&cfg, &broker)) {
		soak_violation(sh, "the broker could not be (re)started; log %s", cfg.log);
		return -1;
	}
	return 0;
}

static void broker_down(int sig)
{
	kill(broker, sig);
	waitpid(broker, NULL, 0);
	broker = 0;
}

/* ---- diagnostics --------------------------------------------------------- */

static local_session *checker_session(unsigned timeout_ms)
{
	uint64_t end = soak_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	struct local_session_opts o;
	local_session *s = NULL;
	int rc;

	local_session_opts_init(&o);
	o.socket_path = cfg.sock;
	o.name = "soak-checker";
	o.lock_delay_ms = 0;
	do {
		rc = local_session_open(&o, &s);
		if (!rc)
			return s;
		sleep_ms(10);
	} while (soak_now_ns() < end);
	fprintf(stderr, "soak: checker cannot open a session: %s\n", local_strerror(rc));
	return NULL;
}

/* Print every used key and node, raw: the evidence for a bug report. */
static void dump_segment(local_session *s)
{
	struct segment *seg = s->seg;
	uint32_t i;

	fprintf(stderr, "soak: segment dump (token counter %llu)\n",
		(unsigned long long)atomic_load(&seg->hdr->token_counter));
	for (i = 0; i < seg->caps.max_keys; i++) {
		struct seg_key *k = &seg->keys[i];

		if (atomic_load(&k->state) != KEY_USED)
			continue;
		fprintf(stderr,
			"  key %u %s: kind %u limit %u holders %u waiters %u watchers %u q %d..%d "
			"h %d fast %#llx delay_until %llu token %llu lock_index %llu modify %llu\n",
			i, k->key, k->kind, k->limit, k->holders, k->waiters,
			atomic_load(&k->watchers), (int)k->q_head, (int)k->q_tail, (int)k->h_head,
			(unsigned long long)atomic_load(&k->fast),
			(unsigned long long)k->delay_until_ns, (unsigned long long)k->token,
			(unsigned long long)atomic_load(&k->lock_index),
			(unsigned long long)atomic_load(&k->modify_index));
	}
	for (i = 0; i < seg->nnodes; i++) {
		struct seg_node *n = &seg->nodes[i];
		uint64_t w = atomic_load(&n->word);
		const struct seg_session *ss;

		if (!w)
			continue;
		ss = seg_session_at(seg, NODE_SESSION(w));
		fprintf(stderr,
			"  node %u: state %u session %u (gen %u; slot state %u gen %u pid %d) "
			"key %u seq %llu token %llu hold %d next %d prev %d futex %u lease %llu\n",
			i, NODE_STATE(w), NODE_SESSION(w), n->session_gen,
			ss ? SESS_STATE(atomic_load(&ss->state_gen)) : 99,
			ss ? SESS_GEN(atomic_load(&ss->state_gen)) : 0, ss ? ss->pid : -1,
			NODE_KEY(w), (unsigned long long)n->seq, (unsigned long long)n->token,
			(int)n->hold, (int)n->next, (int)n->prev, atomic_load(&n->futex),
			(unsigned long long)n->lease_until_ns);
	}
	for (i = 0; i < seg->caps.max_sessions; i++) {
		const struct seg_session *ss = &seg->sessions[i];
		uint64_t sg = atomic_load(&ss->state_gen);

		if (SESS_STATE(sg) != SESS_FREE)
			fprintf(stderr, "  session %u: state %u gen %u pid %d name %s ttl %u\n", i,
				SESS_STATE(sg), SESS_GEN(sg), ss->pid, ss->name, ss->ttl_ms);
	}
}

static void dump_clients(void)
{
	uint64_t now = soak_now_ns();
	unsigned i;

	for (i = 0; i < cfg.clients; i++) {
		uint64_t st = atomic_load(&sh->slot[i].op_start_ns);
		unsigned k = atomic_load(&sh->slot[i].op_key);

		if (st)
			fprintf(stderr, "  client %u (pid %d): %s %s for %llu ms (timeout %lld)\n",
				i, (int)clients[i], soak_op_name[atomic_load(&sh->slot[i].op)],
				k < SOAK_KEYS ? soak_key_name[k] : "-",
				(unsigned long long)((now - st) / 1000000),
				(long long)atomic_load(&sh->slot[i].op_timeout_ms));
	}
}

static void diagnose(void)
{
	local_session *s;

	dump_clients();
	if (!broker)
		return;
	s = checker_session(2000);
	if (s) {
		dump_segment(s);
		local_session_close(s);
	}
}

/* ---- the run ----------------------------------------------------------- */

/* An operation far past its deadline: a lost wake-up or a stuck key. */
static bool stalled(unsigned i, uint64_t now)
{
	uint64_t st = atomic_load(&sh->slot[i].op_start_ns);
	int64_t t = atomic_load(&sh->slot[i].op_timeout_ms);
	uint64_t limit = t < 0 ? STALL_FOREVER_MS : (uint64_t)t + STALL_SLACK_MS;

	return clients[i] && st && now > st && (now - st) / 1000000 > limit;
}

static void watchdog(void)
{
	uint64_t now = soak_now_ns();
	unsigned i;

	for (i = 0; i < cfg.clients; i++) {
		unsigned k = atomic_load(&sh->slot[i].op_key);

		if (!stalled(i, now))
			continue;
		stalls++;
		soak_violation(sh, "client %u (pid %d): %s %s has not returned in %llu ms", i,
			       (int)clients[i], soak_op_name[atomic_load(&sh->slot[i].op)],
			       k < SOAK_KEYS ? soak_key_name[k] : "-",
			       (unsigned long long)((now - atomic_load(&sh->slot[i].op_start_ns)) /
						    1000000));
		diagnose();
		kill_client(i);
		if (!atomic_load(&sh->stop))
			spawn(i);
	}
}

/* Reap what exited without being killed by us. */
static void reap(void)
{
	int status;
	pid_t p;
	unsigned i;

	while ((p = waitpid(-1, &status, WNOHANG)) > 0) {
		if (p == broker) {
			broker = 0;
			soak_violation(sh, "the broker exited by itself (status %#x); log %s",
				       status, cfg.log);
			if (!atomic_load(&sh->stop))
				broker_up();
			continue;
		}
		for (i = 0; i < cfg.clients && clients[i] != p; i++)
			;
		if (i == cfg.clients)
			continue;
		clients[i] = 0;
		atomic_fetch_add(&sh->slot[i].inc, 1);
		if (WIFEXITED(status) && (WEXITSTATUS(status) == 3 ||
					  (WEXITSTATUS(status) == 0 && atomic_load(&sh->stop)))) {
			/* 3: closed with holds while the broker was down */
		} else {
			crashes++;
			soak_violation(sh, "client %u (pid %d) died by itself (status %#x)", i,
				       (int)p, status);
		}
		if (!atomic_load(&sh->stop))
			spawn(i);
	}
}

static void chaos(void)
{
	uint64_t rng = mix(cfg.seed ^ 0xc4a05), end;

	end = soak_now_ns() + (uint64_t)cfg.seconds * 1000000000ull;
	while (soak_now_ns() < end && !interrupted) {
		sleep_ms(5 + rng_below(&rng, 40));
		reap();
		watchdog();
		if (rng_below(&rng, 3) == 0) {
			unsigned i = rng_below(&rng, cfg.clients);

			if (clients[i]) {
				kill_client(i);
				kills++;
				spawn(i);
			}
		}
		if (broker && rng_below(&rng, 120) == 0) {
			/* Clients keep locking without it; new sessions wait. */
			if (rng_below(&rng, 4)) {
				broker_down(SIGKILL);
				broker_kills++;
			} else {
				broker_down(SIGTERM);
				broker_terms++;
			}
			sleep_ms(rng_below(&rng, 400));
			reap();
			broker_up();
		}
	}
}

/* Stop the clients and wait for them to finish (they release and close). */
static void drain(void)
{
	uint64_t end = soak_now_ns() + DRAIN_MS * 1000000ull;
	unsigned i, left;

	atomic_store(&sh->stop, 1);
	if (!broker)
		broker_up();
	for (;;) {
		reap();
		watchdog();
		for (left = 0, i = 0; i < cfg.clients; i++)
			left += clients[i] != 0;
		if (!left)
			return;
		if (soak_now_ns() > end)
			break;
		sleep_ms(5);
	}
	soak_violation(sh, "%u clients still running %llu s after stop", left,
		       (unsigned long long)(DRAIN_MS / 1000));
	diagnose();
	for (i = 0; i < cfg.clients; i++)
		if (clients[i])
			kill_client(i);
}

/* Everything must come back: only our session, no hold, no waiter, no node. */
static int final_check(void)
{
	uint64_t end = soak_now_ns() + SETTLE_MS * 1000000ull, max;
	LOCAL_OPTS(local_stats, st);
	local_session *s;
	unsigned k, nodes = 0;
	int bad = 0, rc;

	s = checker_session(10000);
	if (!s)
		return 1;
	do {
		rc = local_stats(s, &st);
		nodes = used_nodes(s);
		if (!rc && st.sessions == 1 && st.holds == 0 && st.waiters == 0 && nodes == 0)
			break;
		sleep_ms(10);
	} while (soak_now_ns() < end);
	printf("  final: sessions %u, holds %u, waiters %u, nodes in use %u, keys %u; broker "
	       "counted %llu grants, %llu handoffs, %llu timeouts, %llu crash cleanups, %llu "
	       "repairs, %llu lease expiries, %llu quarantined\n",
	       st.sessions, st.holds, st.waiters, nodes, st.keys, (unsigned long long)st.grants,
	       (unsigned long long)st.handoffs, (unsigned long long)st.timeouts,
	       (unsigned long long)st.crash_cleanups, (unsigned long long)st.repairs,
	       (unsigned long long)st.lease_expiries, (unsigned long long)st.quarantined);
	if (rc || st.sessions != 1 || st.holds || st.waiters || nodes) {
		fprintf(stderr, "soak: LEAK: capacity did not return within %llu s\n",
			(unsigned long long)(SETTLE_MS / 1000));
		dump_segment(s);
		bad++;
	}
	rc = segment_violations(s);
	if (rc) {
		fprintf(stderr, "soak: %d segment invariant violation(s) after the run\n", rc);
		dump_segment(s);
		bad++;
	}
	if (st.quarantined) {
		fprintf(stderr, "soak: %llu key(s) quarantined during the run\n",
			(unsigned long long)st.quarantined);
		bad++;
	}
	/* One more grant per key: still above everything granted on it. */
	for (k = 0; k < SOAK_KEYS; k++) {
		LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 1000);
		uint64_t tok = 0;

		max = atomic_load(&sh->max_token[k]);
		rc = k < SOAK_LOCKS
			     ? local_lock(s, soak_key_name[k], &o, &tok)
			     : local_sem_acquire(s, soak_key_name[k], SOAK_SEM_LIMIT, &o, &tok);
		if (rc || tok <= max) {
			fprintf(stderr, "soak: final grant of %s: %s, token %llu (max seen %llu)\n",
				soak_key_name[k], local_strerror(rc), (unsigned long long)tok,
				(unsigned long long)max);
			bad++;
		}
		local_release(s, soak_key_name[k]);
	}
	local_session_close(s);
	return bad;
}

static void summary(int leaks)
{
	unsigned long long total = 0;
	unsigned i;

	for (i = 0; i < OP_COUNT; i++)
		total += atomic_load(&sh->ops[i]);
	printf("  operations %llu:", total);
	for (i = 0; i < OP_COUNT; i++)
		printf("%s %s %llu", i ? "," : "", soak_op_name[i],
		       (unsigned long long)atomic_load(&sh->ops[i]));
	printf("\n  outcomes:");
	for (i = 0; i < OUT_COUNT; i++)
		printf("%s %s %llu", i ? "," : "", outcome_name[i],
		       (unsigned long long)atomic_load(&sh->outcomes[i]));
	printf("\n  client kills %lu, broker restarts %lu (%lu SIGKILL, %lu SIGTERM), stalls %lu, "
	       "client crashes %lu\n",
	       kills, broker_kills + broker_terms, broker_kills, broker_terms, stalls, crashes);
	printf("  violations %llu, leak checks failed %d\n",
	       (unsigned long long)atomic_load(&sh->violations), leaks);
	for (i = 0; i < atomic_load(&sh->nmsg) && i < SOAK_MSGS; i++)
		printf("    %s\n", sh->msg[i]);
}

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

static void usage(FILE *f)
{
	fputs("Usage: shmlock-soak [--seconds N] [--clients N] [--seed N] [--verbose]\n"
	      "Kill soak against $SHMLOCK_BROKER_BIN; exit 0 clean, 1 violations or leaks.\n",
	      f);
}

static int parse(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "seconds", required_argument, NULL, 's' },
		{ "clients", required_argument, NULL, 'c' },
		{ "seed", required_argument, NULL, 'r' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	cfg.seconds = 60;
	cfg.clients = 12;
	cfg.seed = mix((uint64_t)time(NULL) ^ (uint64_t)getpid() << 20);
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			cfg.seconds = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'c':
			cfg.clients = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'r':
			cfg.seed = strtoull(optarg, NULL, 0);
			break;
		case 'v':
			cfg.verbose = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -1;
		}
	}
	if (cfg.clients < 1 || cfg.clients > SOAK_MAX_CLIENTS || cfg.seconds < 1) {
		fprintf(stderr, "soak: --clients 1..%d, --seconds >= 1\n", SOAK_MAX_CLIENTS);
		return -1;
	}
	cfg.broker_bin = getenv("SHMLOCK_BROKER_BIN");
	if (!cfg.broker_bin) {
		fprintf(stderr, "soak: set SHMLOCK_BROKER_BIN (make soak does)\n");
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	char cmd[128];
	unsigned i;
	int leaks;

	if (parse(argc, argv))
		return 2;
	snprintf(cfg.dir, sizeof(cfg.dir), "/tmp/shmlock-soak-%d-XXXXXX", (int)getpid());
	if (!mkdtemp(cfg.dir)) {
		perror("soak: mkdtemp");
		return 2;
	}
	snprintf(cfg.sock, sizeof(cfg.sock), "%s/sock", cfg.dir);
	snprintf(cfg.log, sizeof(cfg.log), "%s/broker.log", cfg.dir);
	snprintf(cfg.shm, sizeof(cfg.shm), "/shmlock-soak-%d", (int)getpid());
	shm_unlink(cfg.shm);
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED) {
		perror("soak: mmap");
		return 2;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("soak: %u s, %u clients, %u locks + %u semaphores (limit %u), seed %#llx\n",
	       cfg.seconds, cfg.clients, SOAK_LOCKS, SOAK_SEMS, SOAK_SEM_LIMIT,
	       (unsigned long long)cfg.seed);
	if (broker_up())
		return 2;
	for (i = 0; i < cfg.clients; i++)
		spawn(i);
	chaos();
	drain();
	leaks = final_check();
	summary(leaks);
	if (broker)
		broker_down(SIGTERM);
	shm_unlink(cfg.shm);
	if (atomic_load(&sh->violations) || leaks) {
		printf("soak: FAIL (seed %#llx; broker log kept in %s)\n",
		       (unsigned long long)cfg.seed, cfg.log);
		return 1;
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", cfg.dir);
	if (system(cmd) != 0)
		fprintf(stderr, "soak: could not remove %s\n", cfg.dir);
	printf("soak: PASS\n");
	return 0;
}
