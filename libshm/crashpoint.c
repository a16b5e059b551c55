// SPDX-License-Identifier: MIT
#ifdef LOCAL_CRASH_POINTS
#include <stdatomic.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "crashpoint.h"

static int env_int(const char *name)
{
	const char *s = getenv(name);

	return s ? atoi(s) : 0;
}

/* The environment is read once per process: a forked child re-reads it, so
 * a test can arm a point in a child after the parent used the library. */
static _Atomic int armed = -1, stop = -1, fast_off = -1;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void forget_env(void)
{
	armed = stop = fast_off = -1;
}

static void watch_forks(void)
{
	pthread_atfork(NULL, NULL, forget_env);
}

void crash_point_hit(int n)
{
	pthread_once(&once, watch_forks);
	if (armed < 0) {
		armed = env_int("SHMLOCK_CRASH_AT");
		stop = env_int("SHMLOCK_STOP_AT");
	}
	if (armed == n)
		_exit(CRASH_EXIT_CODE);
	/* A stalled, not dead, process inside a critical section: what a
	 * SIGSTOP or a descheduled client looks like to everyone else. */
	if (stop == n)
		raise(SIGSTOP);
}

int crash_fast_path_off(void)
{
	pthread_once(&once, watch_forks);
	if (fast_off < 0)
		fast_off = getenv("SHMLOCK_NO_FAST_PATH") != NULL;
	return fast_off;
}
#else
typedef int crashpoint_c_is_empty_without_crash_points;
#endif
