// SPDX-License-Identifier: MIT
/*
 * shmlock-bench: liblocal against the kernel's own locks, on this machine.
 *
 * It starts a private shmlockd ($SHMLOCK_BROKER_BIN, its own socket and
 * segment), measures and prints one table per section:
 *
 *   1. uncontended lock+release, single thread: liblocal, a process-shared
 *      robust pthread mutex, flock(2), fcntl OFD locks (uncontended.c);
 *   2. FIFO handoffs per second between 2, 4 and 8 processes on one key,
 *      next to a plain futex ping-pong between two processes (handoff.c);
 *   3. crash-release latency: how long after SIGKILL of the holder a queued
 *      waiter gets the lock, for liblocal and for flock(2) (crash_release.c);
 *   4. uncontended semaphore acquire+release next to POSIX sem_wait/sem_post
 *      (semaphores.c);
 *   5. the cost of renewing a hold's lease (leases.c);
 *   6. watch wake-up latency: a key changes -> local_watch() returns, next to
 *      a plain futex wake-up (watch.c);
 *   7. the broker's cost of expiring 100 000 leases that fall due together,
 *      with a broker of its own (leases.c).
 *   8. HTTP API acquire+release ops/s, latency and broker CPU per op for 1,
 *      10, 50 and 200 keep-alive clients on keys of their own and on one
 *      shared key, with a broker of its own on --http-listen (http.c);
 *   9. scaling with cores: N processes each locking its own key, for N = 1,
 *      2 and every online CPU, next to robust mutexes (scale.c);
 *  10. flat cost: uncontended lock+release with 10^3, 10^5 and 10^6 live
 *      keys, 10^4 sessions and 10^4 waiters on other keys, with a broker of
 *      its own with raised caps (flat.c).
 *  11. dflockd's TCP protocol acquire+release ops/s, latency and broker CPU
 *      per op for 1, 10, 50 and 200 clients on keys of their own and on one
 *      shared key, with a broker of its own on --tcp-listen, next to a
 *      do-nothing server on the same system calls (tcp.c). Sections 8 and
 *      11 share their client driver (netdrv.c); $SHMLOCK_BENCH_NET_CLIENTS
 *      ("1,200") and $SHMLOCK_BENCH_NET_KEYS ("own", "shared") narrow them.
 *
 * $SHMLOCK_BENCH_ONLY, a list of section numbers ("1,4"), runs only those
 * (for repeated measurements of one path); unset, every section runs.
 *
 * Timing never fails the run: each target is printed as MET or NOT MET and
 * the exit status is 0 either way. Only a real error exits 1: the broker
 * does not start, a call fails, mutual exclusion breaks (at once), or the
 * product stops making progress: processes hang in local_lock (reported as
 * HUNG) or leases past their deadline are never expired (STRANDED); then
 * the other measurements still run and print, and the exit status is 1.
 */
#include <gnu/libc-version.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "common.h"

static void cpu_model(char *out, size_t size)
{
	char line[256];
	FILE *f = fopen("/proc/cpuinfo", "r");

	snprintf(out, size, "unknown");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');

		if (strncmp(line, "model name", 10) || !colon)
			continue;
		colon += strspn(colon + 1, " \t") + 1;
		colon[strcspn(colon, "\n")] = '\0';
		snprintf(out, size, "%s", colon);
		break;
	}
	fclose(f);
}

static void print_machine(void)
{
	struct utsname u;
	char cpu[128];

	uname(&u);
	cpu_model(cpu, sizeof(cpu));
	printf("shmlock-bench: liblocal %d.%d against kernel and glibc locks\n",
	       LOCAL_VERSION_MAJOR, LOCAL_VERSION_MINOR);
	printf("  machine: %ld online CPUs (nproc), %s\n", sysconf(_SC_NPROCESSORS_ONLN), cpu);
	printf("  kernel:  %s %s %s %s\n", u.sysname, u.release, u.version, u.machine);
	printf("  glibc:   %s\n", gnu_get_libc_version());
	printf("  broker:  %s (socket %s, segment %s)\n", getenv("SHMLOCK_BROKER_BIN"), broker.sock,
	       broker.shm);
}

/* Is section @n selected by $SHMLOCK_BENCH_ONLY (unset: all are)? */
static bool section(int n)
{
	const char *only = getenv("SHMLOCK_BENCH_ONLY");

	return !only || !*only || number_listed(only, n);
}

int main(void)
{
	uint64_t t0 = now_ns();

	main_pid = getpid();
	/* Unbuffered-ish output for a run that prints as it goes. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	sh = shared_map(sizeof(*sh));
	broker_start(&broker, "", NULL);
	print_machine();
	if (section(1))
		bench_uncontended();
	if (section(2))
		bench_handoffs();
	if (section(3))
		bench_crash_release();
	if (section(4))
		bench_semaphores();
	if (section(5))
		bench_lease_renew();
	if (section(6))
		bench_watch();
	if (section(9))
		bench_scale();
	broker_stop(&broker, false);
	if (section(7))
		bench_lease_expiry(); /* its own broker, with room for 100 000 holds */
	if (section(8))
		bench_http(); /* its own broker, with --http-listen */
	if (section(10))
		bench_flat(); /* its own broker, with room for 10^6 keys */
	if (section(11))
		bench_tcp(); /* its own broker, with --tcp-listen */
	print_summary();
	printf("  (wall time %.1f s; timing targets never change the exit status)\n",
	       (double)(now_ns() - t0) / (double)NSEC_PER_SEC);
	return product_errors ? 1 : 0;
}
