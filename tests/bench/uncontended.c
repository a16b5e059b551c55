// SPDX-License-Identifier: MIT
/*
 * 1. Uncontended lock+release, single thread: liblocal by name and by key
 *    handle, a process-shared robust pthread mutex, flock(2), fcntl OFD
 *    locks.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "common.h"

#define KEY_UNCONTENDED "bench/uncontended"

struct uncontended {
	local_session *s;
	local_key *h; /* KEY_UNCONTENDED, opened once */
	pthread_mutex_t *mutex;
	int flock_fd;
	int ofd_fd;
};

static int loop_liblocal_try(void *arg, uint64_t n)
{
	static const LOCAL_OPTS(local_acquire_opts, try_once, .timeout_ms = 0);
	struct uncontended *u = arg;
	int err = 0;

	while (n-- && !err) {
		err = local_lock(u->s, KEY_UNCONTENDED, &try_once, NULL);
		if (!err)
			err = local_release(u->s, KEY_UNCONTENDED);
	}
	return err;
}

static int loop_liblocal_wait(void *arg, uint64_t n)
{
	struct uncontended *u = arg;
	int err = 0;

	while (n-- && !err) {
		err = local_lock(u->s, KEY_UNCONTENDED, NULL, NULL);
		if (!err)
			err = local_release(u->s, KEY_UNCONTENDED);
	}
	return err;
}

static int loop_handle_try(void *arg, uint64_t n)
{
	static const LOCAL_OPTS(local_acquire_opts, try_once, .timeout_ms = 0);
	struct uncontended *u = arg;
	int err = 0;

	while (n-- && !err) {
		err = local_key_lock(u->h, &try_once, NULL);
		if (!err)
			err = local_key_release(u->h);
	}
	return err;
}

static int loop_handle_wait(void *arg, uint64_t n)
{
	struct uncontended *u = arg;
	int err = 0;

	while (n-- && !err) {
		err = local_key_lock(u->h, NULL, NULL);
		if (!err)
			err = local_key_release(u->h);
	}
	return err;
}

static int loop_robust_mutex(void *arg, uint64_t n)
{
	struct uncontended *u = arg;
	int err = 0;

	while (n-- && !err) {
		err = pthread_mutex_lock(u->mutex);
		if (!err)
			err = pthread_mutex_unlock(u->mutex);
	}
	return -err;
}

static int loop_flock(void *arg, uint64_t n)
{
	struct uncontended *u = arg;

	while (n--)
		if (flock(u->flock_fd, LOCK_EX) || flock(u->flock_fd, LOCK_UN))
			return -errno;
	return 0;
}

static int loop_ofd(void *arg, uint64_t n)
{
	struct flock lk = { .l_whence = SEEK_SET }; /* whole file; l_pid must be 0 */
	struct flock un = { .l_whence = SEEK_SET };
	struct uncontended *u = arg;

	lk.l_type = F_WRLCK;
	un.l_type = F_UNLCK;
	while (n--)
		if (fcntl(u->ofd_fd, F_OFD_SETLKW, &lk) || fcntl(u->ofd_fd, F_OFD_SETLKW, &un))
			return -errno;
	return 0;
}

static void uncontended_setup(struct uncontended *u)
{
	pthread_mutexattr_t a;
	int err;

	err = open_session(&u->s);
	if (err)
		fatal("session open: %s", local_strerror(err));
	err = local_key_open(u->s, KEY_UNCONTENDED, &u->h);
	if (err)
		fatal("key handle open: %s", local_strerror(err));
	u->mutex = shared_map(sizeof(*u->mutex));
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	err = pthread_mutex_init(u->mutex, &a);
	pthread_mutexattr_destroy(&a);
	if (err)
		fatal("pthread_mutex_init: %s", strerror(err));
	/* Two opens: flock and OFD locks both belong to the open file description. */
	u->flock_fd = open(broker.file, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	u->ofd_fd = open(broker.file, O_RDWR | O_CLOEXEC);
	if (u->flock_fd < 0 || u->ofd_fd < 0)
		fatal("open %s: %s", broker.file, strerror(errno));
}

static void uncontended_teardown(struct uncontended *u)
{
	pthread_mutex_destroy(u->mutex);
	shared_unmap(u->mutex, sizeof(*u->mutex));
	close(u->flock_fd);
	close(u->ofd_fd);
	local_key_close(u->h);
	local_session_close(u->s);
}

/* The handle's target is judged on paired runs (common.h): short runs of
 * the mutex and of both handle entry points back to back, in alternating
 * order, so that a load that comes and goes weighs on both sides of a pair
 * alike; the figure is the median of the pairs' own ratios. */
#define HANDLE_PAIRS 15
#define HANDLE_RUN_NS (20 * NSEC_PER_MSEC)

/* Each of the handle's two entry points against the mutex, paired: the
 * slower of the two medians is the handle's figure. */
static struct paired handle_vs_mutex(struct uncontended *u)
{
	double try[HANDLE_PAIRS], wait[HANDLE_PAIRS], mutex[HANDLE_PAIRS];
	struct paired t, w;
	int i;

	for (i = 0; i < HANDLE_PAIRS; i++) {
		if (i % 2)
			mutex[i] = ns_per_op(loop_robust_mutex, u, HANDLE_RUN_NS, "robust mutex");
		try[i] = ns_per_op(loop_handle_try, u, HANDLE_RUN_NS,
				   "liblocal handle (timeout_ms=0)");
		wait[i] = ns_per_op(loop_handle_wait, u, HANDLE_RUN_NS,
				    "liblocal handle (NULL opts)");
		if (!(i % 2))
			mutex[i] = ns_per_op(loop_robust_mutex, u, HANDLE_RUN_NS, "robust mutex");
	}
	t = paired_summary(try, mutex, HANDLE_PAIRS);
	w = paired_summary(wait, mutex, HANDLE_PAIRS);
	return t.ratio > w.ratio ? t : w;
}

static void print_unc_row(const char *name, struct op_result r, double base)
{
	printf("  %-44s %10.1f %12.1f %11.2fx\n", name, r.best, r.median, r.best / base);
}

void bench_uncontended(void)
{
	struct op_result mutex, try, wait, htry, hwait, fl, ofd;
	struct uncontended u;
	struct paired hp;
	double lib, handle;
	char buf[64];

	uncontended_setup(&u);
	mutex = measure_ops(loop_robust_mutex, &u, "robust mutex");
	try = measure_ops(loop_liblocal_try, &u, "liblocal (timeout_ms=0)");
	wait = measure_ops(loop_liblocal_wait, &u, "liblocal (NULL opts)");
	htry = measure_ops(loop_handle_try, &u, "liblocal handle (timeout_ms=0)");
	hwait = measure_ops(loop_handle_wait, &u, "liblocal handle (NULL opts)");
	hp = handle_vs_mutex(&u);
	fl = measure_ops(loop_flock, &u, "flock");
	ofd = measure_ops(loop_ofd, &u, "OFD lock");
	uncontended_teardown(&u);

	printf("\n1. Uncontended lock+release, one thread, same key/lock every time\n");
	printf("   (ns per lock+release pair; best and median of %d runs of %llu ms)\n\n", UNC_RUNS,
	       UNC_RUN_NS / NSEC_PER_MSEC);
	printf("  %-44s %10s %12s %12s\n", "mechanism", "best ns/op", "median ns/op", "vs mutex");
	print_unc_row("robust process-shared pthread mutex", mutex, mutex.best);
	print_unc_row("liblocal local_lock(timeout_ms=0)+release", try, mutex.best);
	print_unc_row("liblocal local_lock(NULL opts)+release", wait, mutex.best);
	print_unc_row("liblocal local_key_lock(timeout_ms=0)+rel.", htry, mutex.best);
	print_unc_row("liblocal local_key_lock(NULL opts)+release", hwait, mutex.best);
	print_unc_row("flock(2) LOCK_EX + LOCK_UN", fl, mutex.best);
	print_unc_row("fcntl F_OFD_SETLKW F_WRLCK + F_UNLCK", ofd, mutex.best);

	/* Judge liblocal by the slower of its two entry points, by name and
	 * by handle alike. */
	lib = try.best > wait.best ? try.best : wait.best;
	handle = htry.best > hwait.best ? htry.best : hwait.best;
	printf("\n  liblocal / robust mutex = %.2f    handle / robust mutex = %.2f"
	       "    flock / liblocal = %.2f    OFD / liblocal = %.2f\n",
	       lib / mutex.best, handle / mutex.best, fl.best / lib, ofd.best / lib);
	printf("  handle / robust mutex, paired runs of %llu ms: %s; handle %.1f ns,"
	       " mutex %.1f ns (medians)\n",
	       HANDLE_RUN_NS / NSEC_PER_MSEC, paired_text(&hp, buf, sizeof(buf)), hp.meas, hp.base);
	/* A mutex in shared memory is what a program would use instead. */
	add_target(lib <= 2 * mutex.best, "uncontended liblocal <= 2x robust mutex (%.2fx)",
		   lib / mutex.best);
	/* A key handle is for the program that would otherwise keep a mutex of
	 * its own per key: within 30% of one. */
	add_target(hp.ratio <= 1.3,
		   "uncontended key handle <= 1.3x robust mutex, paired (%.2fx: %.1f ns, mutex "
		   "%.1f ns)",
		   hp.ratio, hp.meas, hp.base);
	add_target(fl.best >= 10 * lib, "uncontended liblocal >= 10x faster than flock (%.1fx)",
		   fl.best / lib);
}
