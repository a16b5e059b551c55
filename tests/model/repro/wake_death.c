// Repro: a releaser killed between key_unlock() and waiter_wake() leaves a
// parked waiter (no timeout) asleep forever, holding the granted lock.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "broker_fixture.h"
#include "harness.h"
#include "keyops.h"

void __real_waiter_wake(struct segment *seg, uint32_t n);
void __wrap_waiter_wake(struct segment *seg, uint32_t n)
{
	if (getenv("DIE_BEFORE_WAKE"))
		raise(SIGKILL); /* dies after key_unlock(), before the wake */
	__real_waiter_wake(seg, n);
}

int main(void)
{
	struct broker_proc b;
	LOCAL_OPTS(local_key_info, info);
	local_session *s;
	int up[2], st;
	pid_t r, w;
	char c;

	broker_start(&b, NULL);
	pipe(up);
	r = fork();
	if (r == 0) {
		local_session *rs = open_session(&b, "releaser", 0, 0);
		CHECK_OK(local_lock(rs, "k", NULL, NULL));
		write(up[1], "r", 1);
		sleep(1); /* the waiter queues and parks (it spins ~4 us) */
		setenv("DIE_BEFORE_WAKE", "1", 1);
		local_release(rs, "k");
		_exit(0);
	}
	read(up[0], &c, 1);
	w = fork();
	if (w == 0) {
		local_session *ws = open_session(&b, "waiter", 0, 0);
		uint64_t tok;
		CHECK_OK(local_lock(ws, "k", NULL, &tok)); /* no timeout */
		printf("waiter: granted token %llu\n", (unsigned long long)tok);
		_exit(0);
	}
	waitpid(r, &st, 0);
	printf("releaser: %s %d\n", WIFSIGNALED(st) ? "killed by signal" : "exited",
	       WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	s = open_session(&b, "observer", 0, 0);
	sleep(5);
	CHECK_OK(local_info(s, "k", &info));
	printf("after 5 s: holders %u waiters %u holder pid %d (waiter pid %d); waiter %s\n",
	       info.holders, info.waiters, info.holder_pid, (int)w,
	       waitpid(w, &st, WNOHANG) == w ? "returned" : "STILL ASLEEP");
	kill(w, SIGKILL);
	broker_stop(&b);
	return 0;
}
