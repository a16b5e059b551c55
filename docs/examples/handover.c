// SPDX-License-Identifier: MIT
/*
 * handover — the `make run` demo: two processes share one lock through
 * shmlockd. A takes it, B queues, A hands it over on release; then B is
 * killed while holding it and C gets it as soon as the broker notices.
 *
 * Build: cc handover.c $(pkg-config --cflags --libs liblocal) -o handover
 * Run:   handover [--wait-for-broker]   (with shmlockd running)
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <liblocal.h>

static const char *const key = "demo/printer";

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static local_session *session(const char *name)
{
	struct local_session_opts o;
	local_session *s;
	int err;

	local_session_opts_init(&o);
	o.name = name;
	o.lock_delay_ms = 0; /* hand over at once when a holder dies */
	err = local_session_open(&o, &s);
	if (err) {
		fprintf(stderr, "%s: cannot open a session: %s\n", name, local_strerror(err));
		_exit(1);
	}
	return s;
}

/* The broker may still be starting (make run starts us first). */
static int wait_for_broker(double seconds)
{
	double end = now_s() + seconds;
	local_session *s;
	int err;

	/* No socket yet, or one nobody listens on yet. */
	while (((err = local_session_open(NULL, &s)) == -LOCAL_ENOSOCKET ||
		err == -LOCAL_EREFUSED) &&
	       now_s() < end)
		usleep(20000);
	if (!err)
		local_session_close(s);
	return err;
}

/* Take the lock, say so, then either hold until killed or release. */
static void holder(const char *name, int release_after_ms, int ready_fd)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = -1, .value = name,
		   .value_len = strlen(name));
	local_session *s = session(name);
	uint64_t token;
	double t0 = now_s();
	int err;

	if (local_lock(s, key,
		       &(struct local_acquire_opts){ .sz = sizeof(struct local_acquire_opts),
						     .timeout_ms = 0 },
		       NULL) == -EBUSY)
		printf("  %s: '%s' is busy, queueing (FIFO)\n", name, key);
	fflush(stdout);
	err = local_lock(s, key, &o, &token);
	if (err) {
		printf("  %s: lock failed: %s\n", name, local_strerror(err));
		_exit(1);
	}
	printf("  %s (pid %d): got '%s' after %.1f ms, fencing token %llu\n", name, (int)getpid(),
	       key, (now_s() - t0) * 1e3, (unsigned long long)token);
	fflush(stdout);
	if (ready_fd >= 0 && write(ready_fd, "x", 1) != 1)
		_exit(1);
	if (release_after_ms < 0)
		pause(); /* until killed */
	usleep((useconds_t)release_after_ms * 1000);
	printf("  %s: releasing\n", name);
	fflush(stdout);
	local_release(s, key);
	local_session_close(s);
	_exit(0);
}

static pid_t spawn(const char *name, int release_after_ms, int ready_fd)
{
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid == 0)
		holder(name, release_after_ms, ready_fd);
	return pid;
}

int main(int argc, char **argv)
{
	int ready[2], err;
	pid_t a, b, c;
	char ch;

	if (argc > 1 && !strcmp(argv[1], "--wait-for-broker")) {
		err = wait_for_broker(10);
		if (err) {
			fprintf(stderr, "demo: broker not reachable: %s\n", local_strerror(err));
			return 1;
		}
	}
	if (pipe(ready))
		return 1;
	printf("\nshmlock demo: one lock, three processes\n");
	a = spawn("A", 500, ready[1]);
	if (read(ready[0], &ch, 1) != 1)
		return 1;
	b = spawn("B", -1, ready[1]); /* waits, then holds until killed */
	waitpid(a, NULL, 0);
	if (read(ready[0], &ch, 1) != 1)
		return 1;
	c = spawn("C", 0, ready[1]);
	usleep(200000); /* let C queue behind B: a demo, not a test */
	printf("  demo: SIGKILL B while it holds the lock\n");
	fflush(stdout);
	kill(b, SIGKILL);
	waitpid(b, NULL, 0);
	if (read(ready[0], &ch, 1) != 1)
		return 1;
	waitpid(c, NULL, 0);
	printf("shmlock demo done: the broker keeps running (Ctrl-C to stop it)\n\n");
	return 0;
}
