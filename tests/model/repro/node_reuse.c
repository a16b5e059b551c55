// Repro: grant_waiter_locked() stores GRANTED before it unlinks the waiter
// node from the queue. A waiter that sees GRANTED (spinning, or woken by a
// signal) frees the node at once; its next enqueue (its hint gives the same
// node back) links it into another key's queue; the granter's unlink then
// reads and writes that other queue's links.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include "broker_fixture.h"
#include "harness.h"
#include <pthread.h>
#include <string.h>
#include "client.h"

static int paused[2], go[2];

void __real_queue_unlink_locked(struct segment *seg, struct seg_key *k, uint32_t n);
void __wrap_queue_unlink_locked(struct segment *seg, struct seg_key *k, uint32_t n)
{
	char c;

	if (getenv("PAUSE_UNLINK")) { /* the releaser, between GRANTED and unlink */
		unsetenv("PAUSE_UNLINK");
		write(paused[1], "p", 1);
		read(go[0], &c, 1);
	}
	__real_queue_unlink_locked(seg, k, n);
}

static void on_usr1(int sig)
{
	(void)sig;
}

static pid_t spawn_waiter(struct broker_proc *b, const char *first, const char *then)
{
	pid_t p = fork();

	if (p == 0) {
		struct sigaction sa = { .sa_handler = on_usr1 }; /* no SA_RESTART */
		local_session *s = open_session(b, "w", 0, 0);

		sigaction(SIGUSR1, &sa, NULL);
		CHECK_OK(local_lock(s, first, NULL, NULL));
		if (then)
			local_lock(s, then, NULL, NULL);
		pause();
		_exit(0);
	}
	return p;
}

static local_session *r;

static void *release_a(void *arg)
{
	(void)arg;
	setenv("PAUSE_UNLINK", "1", 1);
	CHECK_OK(local_release(r, "a"));
	return NULL;
}

static void show(struct segment *seg, const char *name)
{
	uint32_t i;

	for (i = 0; i < seg->caps.max_keys; i++) {
		struct seg_key *k = &seg->keys[i];
		uint32_t h = k->q_head;

		if (atomic_load(&k->state) != KEY_USED || strcmp(k->key, name))
			continue;
		printf("  key %s (#%u): waiters %u, q_head %d", name, i, k->waiters, (int)h);
		if (h < seg->nnodes)
			printf(" -> node %u: state %u, key #%u", h,
			       NODE_STATE(atomic_load(&seg->nodes[h].word)),
			       NODE_KEY(atomic_load(&seg->nodes[h].word)));
		printf(", q_tail %d\n", (int)k->q_tail);
	}
}

int main(void)
{
	struct broker_proc b;
	LOCAL_OPTS(local_key_info, info);
	LOCAL_OPTS(local_stats, st);
	local_session *t;
	pthread_t th;
	pid_t w, x;
	char c;

	setvbuf(stdout, NULL, _IONBF, 0);
	pipe(paused);
	pipe(go);
	broker_start(&b, NULL);
	t = open_session(&b, "t", 0, 0);
	r = open_session(&b, "r", 0, 0);
	CHECK_OK(local_lock(t, "b", NULL, NULL));
	CHECK_OK(local_lock(r, "a", NULL, NULL));
	x = spawn_waiter(&b, "b", NULL); /* x queues on b */
	CHECK(WAIT_FOR((local_info(t, "b", &info), info.waiters == 1), 5000));
	w = spawn_waiter(&b, "a", "b"); /* w queues on a, later on b */
	CHECK(WAIT_FOR((local_info(t, "a", &info), info.waiters == 1), 5000));
	usleep(100000); /* w parks */
	pthread_create(&th, NULL, release_a, NULL);
	read(paused[0], &c, 1); /* a granted to w, w not yet unlinked from a */
	kill(w, SIGUSR1);	/* w's futex wait returns EINTR: it sees GRANTED */
	CHECK(WAIT_FOR((local_info(t, "b", &info), info.waiters == 2), 5000));
	printf("w took a and queued on b; before the granter's unlink:\n");
	show(t->seg, "a");
	show(t->seg, "b");
	write(go[1], "g", 1);
	pthread_join(th, NULL);
	printf("after the granter's unlink:\n");
	show(t->seg, "a");
	show(t->seg, "b");
	local_stats(t, &st);
	printf("repairs so far: %llu\n", (unsigned long long)st.repairs);
	kill(w, SIGKILL);
	kill(x, SIGKILL);
	broker_stop(&b);
	return 0;
}
