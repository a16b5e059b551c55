// SPDX-License-Identifier: MIT
/*
 * 5. The cost of renewing a hold's lease: local_renew() on a held lock.
 * 7. The broker's cost of expiring 100 000 leases that fall due together:
 *    a broker of its own with room for them, EXP_PROCS processes that take
 *    EXP_LEASES keys with local_lock() + lease_ms so that every lease ends
 *    within one millisecond after a common deadline, and the time from that
 *    deadline until every hold is gone, with the broker's CPU time for it.
 *    Leases still held well past it are reported as stranded (a product
 *    error), with whether one more lease note to the broker frees them.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

/* ---- 5. lease renew ------------------------------------------------------ */

#define KEY_RENEW "bench/renew"
#define RENEW_LEASE_MS 30000
#define SYSCALL_COUNT_OPS 10000

static int loop_renew_keep(void *arg, uint64_t n)
{
	local_session *s = arg;
	uint64_t remaining;
	int err = 0;

	while (n-- && !err)
		err = local_renew(s, KEY_RENEW, 0, &remaining);
	return err;
}

static int loop_renew_set(void *arg, uint64_t n)
{
	local_session *s = arg;
	uint64_t remaining;
	int err = 0;

	while (n-- && !err)
		err = local_renew(s, KEY_RENEW, RENEW_LEASE_MS, &remaining);
	return err;
}

static int renew_setup(local_session **s)
{
	const LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 0, .lease_ms = RENEW_LEASE_MS);
	int err = open_session(s);

	return err ? err : local_lock(*s, KEY_RENEW, &o, NULL);
}

/* In the syscall-counting child: a session and a hold of its own. */
static int count_setup(void **arg)
{
	local_session *s;
	int err = renew_setup(&s);

	*arg = s;
	return err;
}

void bench_lease_renew(void)
{
	struct op_result keep, set;
	local_session *s;
	long calls;
	int err, nr;

	err = renew_setup(&s);
	if (err)
		fatal("lease renew setup: %s", local_strerror(err));
	keep = measure_ops(loop_renew_keep, s, "local_renew(lease_ms=0)");
	set = measure_ops(loop_renew_set, s, "local_renew(lease_ms=30000)");
	err = local_release(s, KEY_RENEW);
	if (err)
		fatal("local_release after renew: %s", local_strerror(err));
	local_session_close(s);
	calls = count_syscalls(count_setup, loop_renew_keep, SYSCALL_COUNT_OPS, &nr);

	printf("\n5. Lease renew, one thread, a held lock with a %d s lease\n",
	       RENEW_LEASE_MS / 1000);
	printf("   (ns per local_renew(); best and median of %d runs of %llu ms)\n\n", UNC_RUNS,
	       UNC_RUN_NS / NSEC_PER_MSEC);
	printf("  %-44s %10s %12s\n", "call", "best ns/op", "median ns/op");
	printf("  %-44s %10.1f %12.1f\n", "local_renew(lease_ms=0: keep the length)", keep.best,
	       keep.median);
	printf("  %-44s %10.1f %12.1f\n", "local_renew(lease_ms=30000)", set.best, set.median);
	if (calls < 0) {
		printf("\n  system calls per renew: unknown (seccomp not available)\n");
		add_target(false, "lease renew makes no system call (not measured: no seccomp)");
		return;
	}
	printf("\n  system calls per renew: %.3f (%ld in %d renews, counted under seccomp)\n",
	       (double)calls / SYSCALL_COUNT_OPS, calls, SYSCALL_COUNT_OPS);
	if (calls)
		printf("  first system call: number %d\n", nr);
	add_target(calls == 0, "lease renew makes no system call, as liblocal.h says (%ld in %d)",
		   calls, SYSCALL_COUNT_OPS);
}

/* ---- 7. expiring 100 000 leases ------------------------------------------ */

#define EXP_LEASES 100000
#define EXP_PROCS 4
/* The common deadline: this long after the children start taking keys.
 * Taking them must end EXP_QUIET_NS before it, or it is tried once more
 * with a later deadline. */
#define EXP_SETUP_NS (1000 * NSEC_PER_MSEC)
/* Read the counters and the broker's CPU time this long before it. */
#define EXP_QUIET_NS (20 * NSEC_PER_MSEC)
/* Stop waiting after no expiry for EXP_STALL_NS, or EXP_MAX_NS in all. */
#define EXP_STALL_NS (1000 * NSEC_PER_MSEC)
#define EXP_MAX_NS (10 * NSEC_PER_SEC)
#define EXP_POLL_NS (5 * NSEC_PER_MSEC)

#define KEY_KICK "bench/lease-kick"

static const char *const exp_broker_flags[] = { "--max-holds",	  "110000", "--max-keys", "110000",
						"--max-sessions", "64",	    NULL };

struct expiry_shared {
	_Alignas(64) _Atomic uint64_t deadline_ns; /* every lease ends here (+1 ms) */
	_Atomic uint32_t done;			   /* children with all their keys */
	_Atomic uint32_t late;			   /* keys taken after the deadline */
	_Atomic uint64_t taken_ns;		   /* when the last child finished */
};

static struct broker exp_broker;
static struct expiry_shared *es;

static int expiry_child(int idx)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 0);
	uint64_t deadline, t, taken;
	char key[64];
	local_session *s;
	int i, err;

	err = open_session_at(&exp_broker, &s);
	if (err)
		return child_fail("session open", err);
	if (barrier_wait())
		return 1;
	deadline = atomic_load(&es->deadline_ns);
	for (i = 0; i < EXP_LEASES / EXP_PROCS; i++) {
		snprintf(key, sizeof(key), "bench/lease/%d/%d", idx, i);
		/* Round up: each lease ends in [deadline, deadline + 1 ms). */
		t = now_ns();
		if (t + NSEC_PER_MSEC > deadline) {
			atomic_fetch_add(&es->late, 1);
			o.lease_ms = 1;
		} else {
			o.lease_ms = (uint32_t)((deadline - t + NSEC_PER_MSEC - 1) / NSEC_PER_MSEC);
		}
		err = local_lock(s, key, &o, NULL);
		if (err)
			return child_fail("local_lock with lease", err);
	}
	t = now_ns();
	taken = atomic_load(&es->taken_ns);
	while (taken < t && !atomic_compare_exchange_weak(&es->taken_ns, &taken, t))
		;
	atomic_fetch_add(&es->done, 1);
	/* Stay alive, holding, until the parent has seen every lease expire:
	 * a session that ends releases its holds without expiry. */
	while (!atomic_load(&sh->stop))
		futex_wait(&sh->stop, 0, 100 * NSEC_PER_MSEC);
	err = local_session_close(s);
	return err ? child_fail("session close", err) : 0;
}

static long long file_size(const char *path)
{
	struct stat st;

	return stat(path, &st) ? -1 : (long long)st.st_size;
}

static void read_stats(local_session *probe, struct local_stats *st)
{
	int err = local_stats(probe, st);

	if (err)
		fatal("local_stats: %s", local_strerror(err));
}

static void end_children(pid_t *pids)
{
	atomic_store(&sh->stop, 1);
	futex_wake(&sh->stop, INT_MAX);
	if (!reap_finished(pids, EXP_PROCS, now_ns() + END_TIMEOUT_MS * NSEC_PER_MSEC,
			   "lease expiry"))
		fatal("lease expiry: children did not end in %d ms", END_TIMEOUT_MS);
}

/* Start the children and let them take every key with a lease that ends
 * @budget_ns from now. False if they were not done in time. */
static bool take_leases(uint64_t budget_ns, pid_t *pids, uint64_t *setup_ns, double *cpu_ms)
{
	uint64_t t0, give_up;
	double cpu0;
	int i;

	reset_shared();
	memset(es, 0, sizeof(*es));
	for (i = 0; i < EXP_PROCS; i++)
		pids[i] = spawn(expiry_child, i);
	cpu0 = proc_cpu_ms(exp_broker.pid);
	atomic_store(&es->deadline_ns, now_ns() + budget_ns);
	t0 = barrier_open(EXP_PROCS, "lease expiry");
	give_up = now_ns() + budget_ns + EXP_MAX_NS;
	while (atomic_load(&es->done) < EXP_PROCS) {
		for (i = 0; i < EXP_PROCS; i++)
			if (reap_finished(&pids[i], 1, 0, "lease expiry child"))
				fatal("lease expiry child %d ended early: %s", i, child_error());
		if (now_ns() > give_up)
			fatal("lease expiry: children still taking keys after %llu ms",
			      (unsigned long long)((give_up - t0) / NSEC_PER_MSEC));
		sleep_ns(1 * NSEC_PER_MSEC);
	}
	*setup_ns = atomic_load(&es->taken_ns) - t0;
	*cpu_ms = proc_cpu_ms(exp_broker.pid) - cpu0;
	return !atomic_load(&es->late) && *setup_ns + EXP_QUIET_NS <= budget_ns;
}

struct expiry_result {
	uint64_t setup_ns;
	double setup_cpu_ms;
	uint64_t stats_ns;	  /* one local_stats() call, before the deadline */
	uint64_t t_first, t_last; /* first and last expiry seen, after the deadline */
	uint64_t t_done;	  /* no hold left; 0: never */
	uint64_t max_poll_ns;
	uint64_t expiries, holds_left;
	double cpu_ms;
	long long log_bytes;
	uint64_t kick_ns; /* stranded holds gone this long after a new lease */
	uint32_t kick_left;
};

/*
 * Holds left past their deadline with no expiry for EXP_STALL_NS: take one
 * more key with a lease (which notes a new lease to the broker), and see
 * whether the stranded ones go then.
 */
static void kick(local_session *probe, struct expiry_result *r)
{
	const LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 0, .lease_ms = 60000);
	uint64_t t0 = now_ns();
	LOCAL_OPTS(local_stats, st);
	int err;

	err = local_lock(probe, KEY_KICK, &o, NULL);
	if (err)
		fatal("lease expiry: local_lock %s: %s", KEY_KICK, local_strerror(err));
	do {
		sleep_ns(EXP_POLL_NS);
		read_stats(probe, &st);
	} while (st.holds > 1 && now_ns() - t0 < EXP_STALL_NS);
	if (st.holds <= 1)
		r->kick_ns = now_ns() - t0;
	r->kick_left = st.holds ? st.holds - 1 : 0;
	err = local_release(probe, KEY_KICK);
	if (err)
		fatal("lease expiry: local_release %s: %s", KEY_KICK, local_strerror(err));
}

/* From just before the deadline until no hold is left (or none expires). */
static void measure_expiry(local_session *probe, struct expiry_result *r)
{
	uint64_t deadline = atomic_load(&es->deadline_ns), t, prev, progress, e0, n = 0;
	LOCAL_OPTS(local_stats, st);
	double cpu0;
	long long log0;

	sleep_until_ns(deadline - EXP_QUIET_NS);
	t = now_ns();
	read_stats(probe, &st);
	r->stats_ns = now_ns() - t;
	if (st.holds != EXP_LEASES)
		fatal("lease expiry: %u holds before the deadline, expected %d", st.holds,
		      EXP_LEASES);
	e0 = st.lease_expiries;
	log0 = file_size(exp_broker.log);
	cpu0 = proc_cpu_ms(exp_broker.pid);
	sleep_until_ns(deadline);
	prev = progress = deadline;
	for (;;) {
		read_stats(probe, &st);
		t = now_ns();
		if (t - prev > r->max_poll_ns)
			r->max_poll_ns = t - prev;
		prev = t;
		if (st.lease_expiries - e0 > n) {
			n = st.lease_expiries - e0;
			if (!r->t_first)
				r->t_first = t - deadline;
			r->t_last = t - deadline;
			progress = t;
		}
		if (!st.holds) {
			r->t_done = t - deadline;
			break;
		}
		if (t - progress > EXP_STALL_NS || t - deadline > EXP_MAX_NS)
			break;
		sleep_ns(EXP_POLL_NS);
	}
	r->cpu_ms = proc_cpu_ms(exp_broker.pid) - cpu0;
	r->log_bytes = file_size(exp_broker.log) - log0;
	r->expiries = n;
	r->holds_left = st.holds;
	if (!r->t_done)
		kick(probe, r);
}

static double ms(uint64_t ns)
{
	return (double)ns / (double)NSEC_PER_MSEC;
}

static void print_expiry(const struct expiry_result *r)
{
	double per = r->expiries ? r->cpu_ms * 1000.0 / (double)r->expiries : 0;

	printf("\n7. Broker cost of expiring %d leases that fall due together\n", EXP_LEASES);
	printf("   (own broker: --max-holds 110000 --max-keys 110000 --max-sessions 64;\n"
	       "   %d processes took %d keys each with local_lock(timeout_ms=0, lease_ms)\n"
	       "   so that every lease ends within 1 ms after one common deadline; times\n"
	       "   from that deadline, seen by polling local_stats() with %llu ms pauses;\n"
	       "   broker CPU = utime+stime of /proc/PID/stat, in %ld Hz ticks)\n\n",
	       EXP_PROCS, EXP_LEASES / EXP_PROCS, EXP_POLL_NS / NSEC_PER_MSEC,
	       sysconf(_SC_CLK_TCK));
	printf("  taking the %d leased keys:  %8.1f ms (broker CPU meanwhile %.0f ms)\n",
	       EXP_LEASES, ms(r->setup_ns), r->setup_cpu_ms);
	printf("  one local_stats() call:       %8.1f ms (longest poll period %.1f ms)\n",
	       ms(r->stats_ns), ms(r->max_poll_ns));
	if (r->t_first)
		printf("  first expiry seen:            %8.1f ms after the deadline\n",
		       ms(r->t_first));
	if (r->t_done)
		printf("  all holds gone:               %8.1f ms after the deadline"
		       " (%.2f us per expiry)\n",
		       ms(r->t_done), ms(r->t_done) * 1000.0 / EXP_LEASES);
	printf("  broker CPU for the expiries:  %8.0f ms (%.2f us per expiry)\n", r->cpu_ms, per);
	printf("  lease_expiries counted:       %8llu\n", (unsigned long long)r->expiries);
	printf("  broker log written:           %8lld bytes (%.0f per expiry)\n", r->log_bytes,
	       r->expiries ? (double)r->log_bytes / (double)r->expiries : 0.0);
	if (r->t_done && r->expiries != EXP_LEASES)
		printf("  NOTE: every hold is gone but only %llu were counted as lease expiries\n",
		       (unsigned long long)r->expiries);
	if (!r->t_done) {
		printf("  STRANDED: %llu of %d holds still held past their deadline, no expiry for"
		       " %llu ms\n  (the last one %.1f ms after the deadline). ",
		       (unsigned long long)r->holds_left, EXP_LEASES,
		       (unsigned long long)(EXP_STALL_NS / NSEC_PER_MSEC), ms(r->t_last));
		if (r->kick_ns)
			printf("One more local_lock() with a lease\n  (a new lease note to the"
			       " broker) had all of them expired within %.1f ms.\n",
			       ms(r->kick_ns));
		else
			printf("One more local_lock() with a lease\n  did not help: %u still held"
			       " %llu ms later.\n",
			       r->kick_left, (unsigned long long)(EXP_STALL_NS / NSEC_PER_MSEC));
		product_errors++;
	}
	add_target(r->t_done != 0, "all %d leases due together expired (%llu stranded)", EXP_LEASES,
		   (unsigned long long)(r->t_done ? 0 : r->holds_left));
	add_target(r->expiries && per <= 10.0,
		   "lease expiry costs the broker <= 10 us each (%.2f us)", per);
}

void bench_lease_expiry(void)
{
	uint64_t budget = EXP_SETUP_NS;
	struct expiry_result r;
	local_session *probe;
	pid_t pids[EXP_PROCS];
	int err;

	memset(&r, 0, sizeof(r));
	broker_start(&exp_broker, "leases", exp_broker_flags);
	err = open_session_at(&exp_broker, &probe);
	if (err)
		fatal("session open: %s", local_strerror(err));
	es = shared_map(sizeof(*es));
	while (!take_leases(budget, pids, &r.setup_ns, &r.setup_cpu_ms)) {
		if (budget > EXP_SETUP_NS)
			fatal("lease expiry: taking %d keys took %.0f ms, past a %.0f ms deadline",
			      EXP_LEASES, ms(r.setup_ns), ms(budget));
		/* A slow or busy machine: once more, with time to spare. */
		end_children(pids);
		budget = 4 * r.setup_ns + EXP_QUIET_NS;
	}
	measure_expiry(probe, &r);
	end_children(pids);
	local_session_close(probe);
	broker_stop(&exp_broker, false);
	shared_unmap(es, sizeof(*es));
	es = NULL;
	print_expiry(&r);
}
