// SPDX-License-Identifier: MIT
/*
 * Who waits for a key, and for how long: local_admin_waiters() and the
 * queue in `shmlock info`.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker_fixture.h"
#include "harness.h"

struct waiter {
	local_session *s;
	int rc;
};

static void *wait_for_lock(void *arg)
{
	struct waiter *w = arg;
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 20000);

	w->rc = local_lock(w->s, "q/k", &o, NULL);
	if (!w->rc)
		w->rc = local_release(w->s, "q/k");
	return NULL;
}

static unsigned waiters_of(local_session *s)
{
	LOCAL_OPTS(local_key_info, ki);

	return local_info(s, "q/k", &ki) ? 0 : ki.waiters;
}

struct seen {
	struct local_waiter v[4];
	unsigned n;
};

static int collect(const struct local_waiter *w, void *arg)
{
	struct seen *s = arg;

	CHECK(w->sz >= sizeof(struct local_waiter));
	if (s->n < 4)
		s->v[s->n] = *w;
	s->n++;
	return 0;
}

/* `shmlock info ARGS...` with its standard output in @out. */
static int cli(char *out, size_t size, const char *a1, const char *a2, const char *a3)
{
	const char *bin = getenv("SHMLOCK_CLI_BIN");
	int fd[2], status;
	size_t len = 0;
	ssize_t n;
	pid_t pid;

	if (!bin)
		FAIL_AT("SHMLOCK_CLI_BIN is not set (run through 'make test')");
	CHECK(!pipe(fd));
	pid = fork();
	CHECK(pid >= 0);
	if (!pid) {
		dup2(fd[1], 1);
		close(fd[0]);
		execl(bin, bin, "info", a1, a2, a3, (char *)NULL);
		_exit(127);
	}
	close(fd[1]);
	while (len + 1 < size && (n = read(fd[0], out + len, size - len - 1)) > 0)
		len += (size_t)n;
	out[len] = '\0';
	close(fd[0]);
	CHECK_EQ(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(waiters, info_shows_who_waits_and_for_how_long, 40)
{
	struct waiter w1 = { NULL, -1 }, w2 = { NULL, -1 };
	LOCAL_OPTS(local_acquire_opts, try, .timeout_ms = 0);
	char sockarg[160], out[8192];
	struct seen seen = { .n = 0 };
	struct broker_proc b;
	local_session *h;
	pthread_t t1, t2;
	const char *p1, *p2;

	broker_start(&b, NULL);
	h = open_session(&b, "holder", 0, 0);
	w1.s = open_session(&b, "first-waiter", 0, 0);
	w2.s = open_session(&b, "second-waiter", 0, 0);
	/* No key, no queue. */
	CHECK_OK(local_admin_waiters(b.sock, "q/k", collect, &seen));
	CHECK_EQ(seen.n, 0);
	CHECK_OK(local_lock(h, "q/k", &try, NULL));
	CHECK_EQ(pthread_create(&t1, NULL, wait_for_lock, &w1), 0);
	CHECK(WAIT_FOR(waiters_of(h) == 1, 10000));
	CHECK_EQ(pthread_create(&t2, NULL, wait_for_lock, &w2), 0);
	CHECK(WAIT_FOR(waiters_of(h) == 2, 10000));

	CHECK_OK(local_admin_waiters(b.sock, "q/k", collect, &seen));
	CHECK_EQ(seen.n, 2);
	/* In queue order, whatever the node table's. */
	CHECK_EQ(seen.v[0].position, 1);
	CHECK(!strcmp(seen.v[0].name, "first-waiter"));
	CHECK(!strcmp(seen.v[0].session, local_session_id(w1.s)));
	CHECK_EQ(seen.v[0].pid, getpid());
	CHECK_EQ(seen.v[1].position, 2);
	CHECK(!strcmp(seen.v[1].name, "second-waiter"));
	/* The first queued first: it has waited at least as long. */
	CHECK(seen.v[0].waiting_ms >= seen.v[1].waiting_ms);
	CHECK(seen.v[0].waiting_ms < 60000);
	CHECK_RC(local_admin_waiters(b.sock, "q/k", NULL, NULL), -EINVAL);
	CHECK_RC(local_admin_waiters(b.sock, "", collect, &seen), -EINVAL);

	snprintf(sockarg, sizeof(sockarg), "-socket=%s", b.sock);
	CHECK_EQ(cli(out, sizeof(out), sockarg, "q/k", NULL), 0);
	p1 = strstr(out, "first-waiter");
	p2 = strstr(out, "second-waiter");
	if (!strstr(out, "QUEUED") || !strstr(out, "WAITING") || !p1 || !p2 || p1 > p2)
		FAIL_AT("shmlock info does not show the queue in order:\n%s", out);
	CHECK_EQ(cli(out, sizeof(out), "-json", sockarg, "q/k"), 0);
	p1 = strstr(out, "\"queue\"");
	if (!p1 || !strstr(p1, "\"position\": 1") || !strstr(p1, "\"waiting_ms\"") ||
	    !strstr(p1, "\"first-waiter\""))
		FAIL_AT("shmlock info -json has no queue:\n%s", out);

	CHECK_OK(local_release(h, "q/k"));
	CHECK_EQ(pthread_join(t1, NULL), 0);
	CHECK_EQ(pthread_join(t2, NULL), 0);
	CHECK_OK(w1.rc);
	CHECK_OK(w2.rc);
	seen.n = 0;
	CHECK_OK(local_admin_waiters(b.sock, "q/k", collect, &seen));
	CHECK_EQ(seen.n, 0);
	local_session_close(w1.s);
	local_session_close(w2.s);
	local_session_close(h);
	broker_stop(&b);
}
