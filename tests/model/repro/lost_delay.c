// Repro: a waiter handed the lock but killed before it took it up (here:
// stopped, then SIGKILLed) still imposes its session's lock-delay.
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
#include "broker_fixture.h"
#include "harness.h"

int main(void)
{
	struct broker_proc b;
	LOCAL_OPTS(local_key_info, info);
	local_session *s;
	pid_t w;

	broker_start(&b, NULL);
	s = open_session(&b, "holder", 0, 0);
	CHECK_OK(local_lock(s, "k", NULL, NULL));
	w = fork();
	if (w == 0) {
		local_session *ws = open_session(&b, "waiter", 5000, 0); /* 5 s lock-delay */
		local_lock(ws, "k", NULL, NULL);
		_exit(0);
	}
	CHECK(WAIT_FOR((local_info(s, "k", &info), info.waiters == 1), 5000));
	usleep(100000); /* parked */
	kill(w, SIGSTOP);
	CHECK_OK(local_release(s, "k")); /* hands over to the stopped waiter */
	CHECK_OK(local_info(s, "k", &info));
	printf("after handoff: holder pid %d (waiter %d)\n", info.holder_pid, (int)w);
	kill(w, SIGKILL); /* dies without ever returning from local_lock() */
	waitpid(w, NULL, 0);
	CHECK(WAIT_FOR((local_info(s, "k", &info), info.holders == 0), 5000));
	printf("after the waiter's death: holders %u, lock-delay remaining %llu ms (documented: "
	       "0)\n",
	       info.holders, (unsigned long long)info.lock_delay_remaining_ms);
	printf("try-lock now: %s\n",
	       local_strerror(local_lock(
		       s, "k",
		       &(struct local_acquire_opts){ .sz = sizeof(struct local_acquire_opts),
						     .timeout_ms = 0 },
		       NULL)));
	broker_stop(&b);
	return 0;
}
