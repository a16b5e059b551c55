// SPDX-License-Identifier: MIT
/*
 * 2. FIFO handoffs per second between 2, 4 and 8 processes on one key, next
 *    to a plain futex ping-pong between two processes.
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "common.h"

/* HANDOFF_ROUNDS rounds; in each, every liblocal case runs for HANDOFF_RUN_NS
 * next to a ping-pong run as long (paired, so that the load of the
 * shared machine hits both; the ping-pong alone swung 37k-316k/s between
 * runs). Short runs, many pairs: about 9 s for the section. No progress at
 * all for STALL_NS means a hang; after stop, the processes get
 * FINISH_TIMEOUT_MS to come back before they are declared stuck. */
#define HANDOFF_ROUNDS 9
#define HANDOFF_RUN_NS (150 * NSEC_PER_MSEC)
#define STALL_NS (300 * NSEC_PER_MSEC)
#define FINISH_TIMEOUT_MS 1000

#define KEY_HANDOFF "bench/handoff"

/* Per-process results, one cache line each. */
struct slot {
	_Atomic uint64_t acquisitions;
	_Atomic uint64_t handoffs;
	uint64_t vol_csw;
	uint64_t invol_csw;
	uint64_t cpu_us; /* user + system time of the timed loop */
} __attribute__((aligned(64)));

/* This section's part of the shared memory, mapped before any fork. */
struct handoff_shared {
	int pin_cpu; /* >= 0: every process of the run on this one CPU */
	/* Ping-pong futex word, alone on its line. */
	_Alignas(64) _Atomic uint32_t turn;
	/* Written only by the holder of the benchmarked lock. */
	_Alignas(64) _Atomic int32_t inside; /* holder's index + 1, 0 when free */
	_Atomic int32_t last_owner;
	_Atomic uint32_t violations;
	struct slot per[MAX_PROCS];
};

static struct handoff_shared *hs;

/* In a child, before the barrier: the run's CPU, if it has one. */
static int pin(void)
{
	cpu_set_t set;

	if (hs->pin_cpu < 0)
		return 0;
	CPU_ZERO(&set);
	CPU_SET(hs->pin_cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set) ? child_fail("sched_setaffinity", -errno)
						       : 0;
}

/* The CPU pinned runs use: the last one this process may run on. */
static int last_cpu(void)
{
	cpu_set_t set;
	int i;

	if (sched_getaffinity(0, sizeof(set), &set))
		return -1;
	for (i = CPU_SETSIZE - 1; i >= 0; i--)
		if (CPU_ISSET(i, &set))
			return i;
	return -1;
}

static void end_rusage(int idx, const struct rusage *before)
{
	struct rusage after;

	getrusage(RUSAGE_SELF, &after);
	hs->per[idx].vol_csw = (uint64_t)(after.ru_nvcsw - before->ru_nvcsw);
	hs->per[idx].invol_csw = (uint64_t)(after.ru_nivcsw - before->ru_nivcsw);
	hs->per[idx].cpu_us = (uint64_t)((after.ru_utime.tv_sec - before->ru_utime.tv_sec +
					  after.ru_stime.tv_sec - before->ru_stime.tv_sec) *
						 1000000 +
					 (after.ru_utime.tv_usec - before->ru_utime.tv_usec) +
					 (after.ru_stime.tv_usec - before->ru_stime.tv_usec));
}

/* Inside the lock: check exclusion and count changes of owner. */
static void critical_section(int idx, uint64_t *handoffs)
{
	if (atomic_exchange_explicit(&hs->inside, idx + 1, memory_order_relaxed))
		atomic_fetch_add(&hs->violations, 1);
	if (atomic_load_explicit(&hs->last_owner, memory_order_relaxed) != idx) {
		atomic_store_explicit(&hs->last_owner, idx, memory_order_relaxed);
		(*handoffs)++;
	}
	atomic_store_explicit(&hs->inside, 0, memory_order_relaxed);
}

/* Counts go out as they change (a plain store to our own line), so the
 * parent sees progress and knows how far a run got if it hangs. */
static void publish(int idx, uint64_t acquisitions, uint64_t handoffs)
{
	atomic_store_explicit(&hs->per[idx].acquisitions, acquisitions, memory_order_relaxed);
	atomic_store_explicit(&hs->per[idx].handoffs, handoffs, memory_order_relaxed);
}

static int handoff_child(int idx)
{
	uint64_t acquisitions = 0, handoffs = 0;
	struct rusage before;
	local_session *s;
	int err;

	/* Sessions are per process: open it here, after the fork. */
	err = open_session(&s);
	if (err)
		return child_fail("session open", err);
	if (pin() || barrier_wait())
		return 1;
	getrusage(RUSAGE_SELF, &before);
	while (!atomic_load_explicit(&sh->stop, memory_order_relaxed)) {
		err = local_lock(s, KEY_HANDOFF, NULL, NULL);
		if (err)
			return child_fail("local_lock", err);
		critical_section(idx, &handoffs);
		publish(idx, ++acquisitions, handoffs);
		err = local_release(s, KEY_HANDOFF);
		if (err)
			return child_fail("local_release", err);
	}
	end_rusage(idx, &before);
	err = local_session_close(s);
	return err ? child_fail("session close", err) : 0;
}

/*
 * Two processes pass one shared futex word back and forth: the word says
 * whose turn it is; a pass stores the other's number and wakes it. Every pass
 * is one handoff, a round trip is two.
 */
static int pingpong_child(int idx)
{
	uint32_t me = (uint32_t)idx, other = me ^ 1, v;
	uint64_t passes = 0;
	struct rusage before;

	if (pin() || barrier_wait())
		return 1;
	getrusage(RUSAGE_SELF, &before);
	while (!atomic_load_explicit(&sh->stop, memory_order_relaxed)) {
		while ((v = atomic_load(&hs->turn)) != me) {
			if (atomic_load(&sh->stop))
				goto out;
			futex_wait(&hs->turn, v, 0);
		}
		atomic_store(&hs->turn, other);
		futex_wake(&hs->turn, 1);
		passes++;
		publish(idx, passes, passes);
	}
out:
	end_rusage(idx, &before);
	return 0;
}

struct handoff_result {
	double handoffs_per_s;
	double acquisitions_per_s;
	double vol_csw_per_handoff;
	double invol_csw_per_handoff;
	double cpu_ns_per_handoff; /* all processes' CPU time / handoffs */
	bool hung;
	char note[320];
};

static uint64_t total_acquisitions(int n)
{
	uint64_t sum = 0;
	int i;

	for (i = 0; i < n; i++)
		sum += atomic_load_explicit(&hs->per[i].acquisitions, memory_order_relaxed);
	return sum;
}

/* Sleep through the run, waking every 10 ms to watch progress. Ends when
 * the time is up or when nothing moved for STALL_NS; *last gets the time of
 * the last progress seen. */
static uint64_t watch_run(uint64_t t0, int n, uint64_t *last)
{
	uint64_t seen = 0, now, cur;

	*last = t0;
	for (;;) {
		sleep_ns(10 * NSEC_PER_MSEC);
		now = now_ns();
		cur = total_acquisitions(n);
		if (cur != seen) {
			seen = cur;
			*last = now;
		}
		if (now - t0 >= HANDOFF_RUN_NS || now - *last >= STALL_NS)
			return now;
	}
}

static void read_wchan(pid_t pid, char *out, size_t size)
{
	char path[64];
	FILE *f;

	snprintf(out, size, "?");
	snprintf(path, sizeof(path), "/proc/%d/wchan", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return;
	if (!fgets(out, (int)size, f))
		snprintf(out, size, "?");
	fclose(f);
}

/* Some children never came back after stop: say what the key looks like,
 * then kill them. The broker releases their sessions (lock-delay 0). */
static void diagnose_hang(pid_t *pids, int n, uint64_t stalled_ms, struct handoff_result *r)
{
	static LOCAL_OPTS(local_key_info, info);
	char wchan[64] = "?", holder[96] = "";
	local_session *probe;
	int i, stuck = 0;

	for (i = 0; i < n; i++)
		if (pids[i] && !stuck++)
			read_wchan(pids[i], wchan, sizeof(wchan));
	memset(&info, 0, sizeof(info));
	if (!open_session(&probe)) {
		local_info(probe, KEY_HANDOFF, &info);
		local_session_close(probe);
	}
	for (i = 0; i < n; i++)
		if (pids[i] && info.holder_pid == pids[i])
			snprintf(holder, sizeof(holder),
				 " The holder (pid %d) is one of them: granted, never woken.",
				 (int)info.holder_pid);
	snprintf(r->note, sizeof(r->note),
		 "HUNG: progress stopped %llu ms into the run; %d of %d processes still in "
		 "local_lock %d ms after stop (wchan %s); key: %u holder(s), %u waiter(s).%s",
		 (unsigned long long)stalled_ms, stuck, n, FINISH_TIMEOUT_MS, wchan, info.holders,
		 info.waiters, holder);
	for (i = 0; i < n; i++)
		if (pids[i]) {
			kill(pids[i], SIGKILL);
			reap(pids[i], END_TIMEOUT_MS);
		}
	r->hung = true;
	product_errors++;
}

/* One timed run of @fn in @n processes. */
static struct handoff_result handoff_run(child_fn fn, int n, int cpu, const char *what)
{
	uint64_t t0, t1, last, acq = 0, hand = 0, vcsw = 0, icsw = 0, cpu_us = 0;
	struct handoff_result r = { .hung = false };
	pid_t pids[MAX_PROCS];
	double secs;
	int i;

	reset_shared();
	memset(hs, 0, sizeof(*hs));
	hs->pin_cpu = cpu;
	atomic_store(&hs->last_owner, -1);
	for (i = 0; i < n; i++)
		pids[i] = spawn(fn, i);
	t0 = barrier_open(n, what);
	t1 = watch_run(t0, n, &last);
	atomic_store(&sh->stop, 1);
	/* A ping-pong process may sleep on turn: give it a value nobody waits
	 * for and wake it, so it sees stop. */
	atomic_store(&hs->turn, 2);
	futex_wake(&hs->turn, INT_MAX);
	if (!reap_finished(pids, n, now_ns() + FINISH_TIMEOUT_MS * NSEC_PER_MSEC, what)) {
		diagnose_hang(pids, n, (last - t0) / NSEC_PER_MSEC, &r);
		t1 = last; /* the rate below is the rate while it still ran */
	}
	if (atomic_load(&hs->violations))
		fatal("%s: MUTUAL EXCLUSION VIOLATED %u times", what, atomic_load(&hs->violations));
	for (i = 0; i < n; i++) {
		acq += hs->per[i].acquisitions;
		hand += hs->per[i].handoffs;
		vcsw += hs->per[i].vol_csw;
		icsw += hs->per[i].invol_csw;
		cpu_us += hs->per[i].cpu_us;
	}
	secs = t1 > t0 ? (double)(t1 - t0) / (double)NSEC_PER_SEC : 1e-9;
	r.handoffs_per_s = (double)hand / secs;
	r.acquisitions_per_s = (double)acq / secs;
	r.vol_csw_per_handoff = hand ? (double)vcsw / (double)hand : 0;
	r.invol_csw_per_handoff = hand ? (double)icsw / (double)hand : 0;
	r.cpu_ns_per_handoff = hand ? (double)cpu_us * 1000.0 / (double)hand : 0;
	return r;
}

#define NPROCS 3
static const int procs[NPROCS] = { 2, 4, 8 };

/* Each liblocal case's runs, and the ping-pong run paired with each. */
struct handoff_series {
	double fifo[HANDOFF_ROUNDS], pp[HANDOFF_ROUNDS], acq[HANDOFF_ROUNDS];
	double vcsw[HANDOFF_ROUNDS], icsw[HANDOFF_ROUNDS];
	double fifo_cpu[HANDOFF_ROUNDS], pp_cpu[HANDOFF_ROUNDS]; /* ns per handoff */
	int runs;
	bool hung;
	struct handoff_result hang; /* the run that hung */
};

/* One pair: a ping-pong run and a liblocal run, the order alternating from
 * round to round, so that neither side always runs first. */
static void handoff_pair(struct handoff_series *s, int n, int cpu, int round, const char *name)
{
	struct handoff_result pp, fifo;

	if ((round + n / 2) % 2) {
		pp = handoff_run(pingpong_child, 2, cpu, "futex ping-pong");
		fifo = handoff_run(handoff_child, n, cpu, name);
	} else {
		fifo = handoff_run(handoff_child, n, cpu, name);
		pp = handoff_run(pingpong_child, 2, cpu, "futex ping-pong");
	}
	if (pp.hung)
		fatal("futex ping-pong hung: %s", pp.note);
	if (fifo.hung) {
		s->hung = true;
		s->hang = fifo;
		return;
	}
	s->fifo[s->runs] = fifo.handoffs_per_s;
	s->pp[s->runs] = pp.handoffs_per_s;
	s->acq[s->runs] = fifo.acquisitions_per_s;
	s->vcsw[s->runs] = fifo.vol_csw_per_handoff;
	s->icsw[s->runs] = fifo.invol_csw_per_handoff;
	s->fifo_cpu[s->runs] = fifo.cpu_ns_per_handoff;
	s->pp_cpu[s->runs] = pp.cpu_ns_per_handoff;
	s->runs++;
}

static double median_of(const double *v, int n)
{
	double c[HANDOFF_ROUNDS];

	memcpy(c, v, (size_t)n * sizeof(*c));
	return paired_summary(c, c, n).meas;
}

static void print_handoff_row(const char *name, const struct handoff_series *s)
{
	struct paired p, c;

	if (s->hung && !s->runs) {
		printf("  %-26s %11s   (%.0f/s while it ran)\n", name, "HUNG",
		       s->hang.handoffs_per_s);
		return;
	}
	p = paired_summary(s->fifo, s->pp, s->runs);
	c = paired_summary(s->fifo_cpu, s->pp_cpu, s->runs);
	printf("  %-26s %9.0f %9.0f-%-9.0f %6.2f %5.2f-%-5.2f %7.2f %6.2f %6.0f %6.2f\n", name,
	       p.meas, p.meas_lo, p.meas_hi, p.ratio, p.ratio_lo, p.ratio_hi,
	       median_of(s->vcsw, s->runs), median_of(s->icsw, s->runs), c.meas, c.ratio);
}

void bench_handoffs(void)
{
	static struct handoff_series fifo[NPROCS], pinned;
	double pp_all[HANDOFF_ROUNDS * NPROCS];
	int i, r, npp = 0, cpu = last_cpu();
	struct paired p, pp;
	char name[64], text[96];

	hs = shared_map(sizeof(*hs));
	memset(fifo, 0, sizeof(fifo));
	memset(&pinned, 0, sizeof(pinned));
	for (r = 0; r < HANDOFF_ROUNDS; r++) {
		for (i = 0; i < NPROCS; i++) {
			if (fifo[i].hung)
				continue; /* a hang ends that series; the others go on */
			snprintf(name, sizeof(name), "FIFO handoff, %d processes", procs[i]);
			handoff_pair(&fifo[i], procs[i], -1, r, name);
		}
		if (cpu >= 0 && !pinned.hung)
			handoff_pair(&pinned, procs[NPROCS - 1], cpu, r,
				     "FIFO handoff, 8 processes on one CPU");
	}
	shared_unmap(hs, sizeof(*hs));
	hs = NULL;
	for (i = 0; i < NPROCS; i++) {
		memcpy(pp_all + npp, fifo[i].pp, (size_t)fifo[i].runs * sizeof(double));
		npp += fifo[i].runs;
	}
	pp = paired_summary(pp_all, pp_all, npp);

	printf("\n2. Handoffs per second on one key (%d rounds; in each, every liblocal run\n"
	       "   of %llu ms is paired with a futex ping-pong run of the same length, just\n"
	       "   before or after it; the ratio is the median over the pairs)\n",
	       HANDOFF_ROUNDS, HANDOFF_RUN_NS / NSEC_PER_MSEC);
	printf("   unit: handoffs/s = times per second the lock (or the futex turn) passes\n"
	       "   from one process to another. liblocal: acquisitions whose previous holder\n"
	       "   was another process (each process loops local_lock(NULL opts) + release).\n"
	       "   ping-pong: passes of one shared futex word between 2 processes\n"
	       "   (FUTEX_WAIT/FUTEX_WAKE, not private); 1 round trip = 2 handoffs.\n"
	       "   vs p-p: liblocal's rate / its paired ping-pong run's, median and range.\n"
	       "   csw: voluntary / involuntary context switches per handoff, all processes.\n"
	       "   CPU ns: user + system time of all processes per handoff; x p-p: over the\n"
	       "   paired ping-pong run's per pass (median of the pairs): the cost of a\n"
	       "   handoff, whatever share of the machine the runs got.\n\n");
	printf("  %-26s %9s %19s %6s %11s %7s %6s %6s %6s\n", "mechanism", "handoffs/s", "min-max",
	       "vs p-p", "min-max", "vol.csw", "inv.csw", "CPU ns", "x p-p");
	printf("  %-26s %9.0f %9.0f-%-9.0f %6.2f %11s\n", "futex ping-pong, 2 procs", pp.meas,
	       pp.meas_lo, pp.meas_hi, 1.0, "");
	for (i = 0; i < NPROCS; i++) {
		snprintf(name, sizeof(name), "liblocal FIFO, %d procs", procs[i]);
		print_handoff_row(name, &fifo[i]);
	}
	if (cpu >= 0) {
		p = paired_summary(pinned.pp, pinned.pp, pinned.runs);
		printf("\n  all on CPU %d (no idle CPU to wake on: a handoff is the wake, the\n"
		       "  switch and the code; the steadiest pairing on a shared machine):\n",
		       cpu);
		printf("  %-26s %9.0f %9.0f-%-9.0f %6.2f\n", "futex ping-pong, 2 procs", p.meas,
		       p.meas_lo, p.meas_hi, 1.0);
		print_handoff_row("liblocal FIFO, 8 procs", &pinned);
	}
	printf("\n  acquisitions/s, median (including re-acquisitions without a handoff):");
	for (i = 0; i < NPROCS; i++)
		printf(" %d procs %.0f%s", procs[i], median_of(fifo[i].acq, fifo[i].runs),
		       i < NPROCS - 1 ? "," : "\n");
	printf("  (2 procs: a release hands over only if the other process has queued by\n"
	       "   then; when it has not run yet, the holder takes the key again lock-free)\n");
	for (i = 0; i < NPROCS; i++)
		if (fifo[i].hung)
			printf("  %d procs: %s\n", procs[i], fifo[i].hang.note);
	/* The figure that matters is for 8 processes; 2 and 4 are context. */
	i = NPROCS - 1;
	if (fifo[i].hung) {
		add_target(false, "FIFO handoffs, %d procs >= 2/3 of futex ping-pong (HUNG)",
			   procs[i]);
		return;
	}
	p = paired_summary(fifo[i].fifo, fifo[i].pp, fifo[i].runs);
	add_target(p.ratio * 3 >= 2, "FIFO handoffs, %d procs >= 2/3 of futex ping-pong: %s",
		   procs[i], paired_text(&p, text, sizeof(text)));
	if (cpu < 0)
		return;
	if (pinned.hung) {
		add_target(false, "FIFO handoffs, 8 procs on one CPU >= 2/3 of futex ping-pong "
				  "(HUNG)");
		return;
	}
	p = paired_summary(pinned.fifo, pinned.pp, pinned.runs);
	add_target(p.ratio * 3 >= 2,
		   "FIFO handoffs, 8 procs on one CPU >= 2/3 of futex ping-pong: %s",
		   paired_text(&p, text, sizeof(text)));
}
