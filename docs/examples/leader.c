// SPDX-License-Identifier: MIT
/*
 * leader — leader election with liblocal, after Consul's leader-election
 * guide:
 *
 *   campaign   local_lock() of the leader key, with a value describing the
 *              node (here "node-N pid P"); it blocks while another leads;
 *   discover   local_info(): the holder's value, session id, name and pid;
 *   observe    local_watch(): block until the key changes;
 *   step down  local_release() (or die: the broker releases the key, and the
 *              session's lock-delay keeps the next leader from acting while
 *              the old one might still be finishing a request).
 *
 * Three node processes campaign; one wins, the others follow and watch. The
 * leader is then killed; a follower takes over after the lock-delay and the
 * remaining node sees the new leader's value. Prints what happens and exits 0
 * when done (1 on any failure or after 20 s).
 *
 * Build: cc leader.c $(pkg-config --cflags --libs liblocal) -o leader
 * Run:   leader          (shmlockd running on the default socket or
 *                         $SHMLOCK_SOCKET)
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <liblocal.h>

#define NODES 3
#define KEY "demo/service/leader"
#define LOCK_DELAY_MS 500 /* Consul's default is 15 s; short for a demo */
#define DEADLINE_MS 20000

static int report_fd; /* node -> parent: one line per event */

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* One line to the parent; short lines on a pipe are written whole. */
static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...)
{
	char buf[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	if (n < 0 || n > (int)sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	if (write(report_fd, buf, (size_t)n) != n)
		_exit(1);
}

struct node {
	int id;
	local_session *s;
};

/* Observe: print every change of leader, and tell the parent. */
static void *observe(void *arg)
{
	struct node *n = arg;
	char value[128], last[128] = "";
	/* The value is copied into our buffer, up to its size: value_len says
	 * how long it really is. */
	LOCAL_OPTS(local_key_info, ki, .value_buf = value, .value_buf_size = sizeof(value));
	struct local_key_info *info = &ki;
	uint64_t index = 0;
	int err;

	for (;;) {
		err = local_watch(n->s, KEY, index, -1, info);
		if (err) {
			fprintf(stderr, "node-%d: watch failed: %s\n", n->id, local_strerror(err));
			break;
		}
		index = info->modify_index;
		if (!info->holders || info->value_len >= sizeof(last))
			continue;
		if (info->value_len == strlen(last) && !memcmp(value, last, info->value_len))
			continue;
		memcpy(last, value, info->value_len);
		last[info->value_len] = '\0';
		printf("  node-%d: the leader is now '%s' (session %.8s..., pid %d)\n", n->id, last,
		       info->holder_session, (int)info->holder_pid);
		fflush(stdout);
		report("sees %d %s", n->id, last);
	}
	return NULL;
}

static void node_main(int id)
{
	struct local_session_opts so;
	LOCAL_OPTS(local_acquire_opts, ao, .timeout_ms = -1);
	char name[32], value[64], leader[64];
	LOCAL_OPTS(local_key_info, ki, .value_buf = leader, .value_buf_size = sizeof(leader));
	struct local_key_info *info = &ki;
	struct node n = { .id = id };
	uint64_t token, t0;
	pthread_t watcher;
	int err;

	snprintf(name, sizeof(name), "node-%d", id);
	snprintf(value, sizeof(value), "node-%d pid %d", id, (int)getpid());
	local_session_opts_init(&so); /* socket: $SHMLOCK_SOCKET or the default */
	so.name = name;
	so.lock_delay_ms = LOCK_DELAY_MS;
	err = local_session_open(&so, &n.s);
	if (err) {
		fprintf(stderr, "%s: cannot open a session: %s\n", name, local_strerror(err));
		_exit(1);
	}
	/* Discover: who leads now, if anyone? */
	err = local_info(n.s, KEY, info);
	if (err)
		fprintf(stderr, "%s: info: %s\n", name, local_strerror(err));
	else if (info->holders)
		printf("  %s: discovered leader '%.*s'\n", name,
		       (int)(info->value_len < sizeof(leader) ? info->value_len : sizeof(leader)),
		       leader);
	else
		printf("  %s: no leader yet\n", name);
	fflush(stdout);
	if (pthread_create(&watcher, NULL, observe, &n))
		_exit(1);
	/* Campaign: blocks until this node leads. */
	ao.value = value;
	ao.value_len = strlen(value);
	t0 = now_ms();
	err = local_lock(n.s, KEY, &ao, &token);
	if (err) {
		fprintf(stderr, "%s: campaign failed: %s\n", name, local_strerror(err));
		_exit(1);
	}
	printf("  %s: elected leader after %llu ms (fencing token %llu)\n", name,
	       (unsigned long long)(now_ms() - t0), (unsigned long long)token);
	fflush(stdout);
	report("elected %d", id);
	/* Lead until killed. A real leader would pass the token to the
	 * resources it guards, which check it with local_check_token(), and
	 * step down with local_release(). */
	for (;;)
		pause();
}

static int read_line(int fd, char *buf, size_t size, uint64_t deadline)
{
	size_t n = 0;

	while (n + 1 < size) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int64_t left = (int64_t)(deadline - now_ms());
		char c;

		if (left <= 0 || poll(&p, 1, (int)left) != 1 || read(fd, &c, 1) != 1)
			return -1;
		if (c == '\n')
			break;
		buf[n++] = c;
	}
	buf[n] = '\0';
	return 0;
}

/*
 * Read reports until node @leader is elected and every other live node has
 * seen its value. Returns 0, or -1 on timeout.
 */
static int wait_for_leader(int fd, const pid_t *pids, int *leader, uint64_t deadline)
{
	int elected = -1, sees[NODES], i, id, who, need;
	char line[256], value[128];

	for (i = 0; i < NODES; i++)
		sees[i] = -1;
	for (;;) {
		if (elected >= 0) {
			for (i = 0, need = 0; i < NODES; i++)
				need += pids[i] > 0 && i != elected && sees[i] != elected;
			if (!need) {
				*leader = elected;
				return 0;
			}
		}
		if (read_line(fd, line, sizeof(line), deadline))
			return -1;
		if (sscanf(line, "elected %d", &id) == 1 && id >= 0 && id < NODES) {
			elected = id;
		} else if (sscanf(line, "sees %d node-%d pid", &who, &id) == 2 && who >= 0 &&
			   who < NODES && id >= 0 && id < NODES) {
			/* The value must name the live process, not an old one. */
			snprintf(value, sizeof(value), "sees %d node-%d pid %d", who, id,
				 (int)pids[id]);
			if (!strcmp(line, value))
				sees[who] = id;
		}
	}
}

int main(void)
{
	uint64_t deadline = now_ms() + DEADLINE_MS, t0;
	pid_t pids[NODES];
	int fds[2], leader, next, i, status = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (pipe(fds))
		return 1;
	printf("leader election: %d nodes campaign for '%s'\n", NODES, KEY);
	for (i = 0; i < NODES; i++) {
		fflush(stdout);
		pids[i] = fork();
		if (pids[i] < 0)
			return 1;
		if (pids[i] == 0) {
			close(fds[0]);
			report_fd = fds[1];
			node_main(i);
		}
	}
	close(fds[1]);
	if (wait_for_leader(fds[0], pids, &leader, deadline)) {
		fprintf(stderr, "leader: no leader elected and seen in time\n");
		status = 1;
		goto out;
	}
	printf("leader: node-%d leads and every node knows it; killing it (SIGKILL)\n", leader);
	t0 = now_ms();
	kill(pids[leader], SIGKILL);
	waitpid(pids[leader], NULL, 0);
	pids[leader] = 0;
	if (wait_for_leader(fds[0], pids, &next, deadline) || next == leader) {
		fprintf(stderr, "leader: no follower took over in time\n");
		status = 1;
		goto out;
	}
	printf("leader: node-%d took over %llu ms after node-%d died (lock-delay %d ms), "
	       "and the others see it\n",
	       next, (unsigned long long)(now_ms() - t0), leader, LOCK_DELAY_MS);
out:
	for (i = 0; i < NODES; i++)
		if (pids[i] > 0) {
			kill(pids[i], SIGKILL);
			waitpid(pids[i], NULL, 0);
		}
	printf("leader: %s\n", status ? "FAILED" : "done");
	return status;
}
