// SPDX-License-Identifier: MIT
/*
 * The lock word (libshm/lockword.c) between real processes, without a
 * broker: a dead owner is found by the waiter itself, a sleeper whose waker
 * died still gets the lock, a live owner is waited for only until the
 * deadline, and garbage in the word is taken for a dead owner.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "clock.h"
#include "harness.h"
#include "lockword.h"

static _Atomic uint32_t *shared_word(void)
{
	void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	CHECK(p != MAP_FAILED);
	return p;
}

static uint32_t me(void)
{
	return (uint32_t)getpid();
}

static uint64_t in_ms(unsigned ms)
{
	return mono_ns() + (uint64_t)ms * 1000000ull;
}

/* A child that takes @w and then exits without releasing it; left a
 * zombie (not reaped) until the caller waits for it. */
static pid_t die_holding(_Atomic uint32_t *w)
{
	pid_t pid = fork();

	CHECK(pid >= 0);
	if (pid == 0)
		_exit(lw_lock(w, me(), 0, &lw_pid_judge) == 0 ? 0 : 1);
	/* Exited (still a zombie): the word names a process that is gone. */
	CHECK(WAIT_FOR(atomic_load(w) == (uint32_t)pid && lw_pid_gone((uint32_t)pid), 5000));
	return pid;
}

TEST(lockword, a_dead_owner_is_found_by_the_waiter, 20)
{
	_Atomic uint32_t *w = shared_word();
	pid_t pid = die_holding(w);

	CHECK_EQ(lw_lock(w, me(), in_ms(5000), &lw_pid_judge), LW_RECOVER);
	CHECK_EQ(LW_OWNER(atomic_load(w)), me());
	lw_unlock(w);
	CHECK_EQ(atomic_load(w), 0);
	CHECK(WIFEXITED(pid_wait(pid, 5000)));
}

TEST(lockword, a_process_that_does_not_judge_waits_for_the_broker, 20)
{
	_Atomic uint32_t *w = shared_word();
	pid_t pid = die_holding(w);

	/* Another pid namespace: it leaves the verdict to the broker... */
	CHECK_EQ(lw_lock(w, me(), in_ms(100), NULL), -ETIMEDOUT);
	/* ... whose pidfd says the process exited. */
	CHECK(lw_reap_if_gone(w, &lw_pid_judge));
	CHECK(atomic_load(w) & LW_DIED);
	CHECK_EQ(lw_trylock(w, me()), LW_RECOVER);
	lw_unlock(w);
	CHECK(WIFEXITED(pid_wait(pid, 5000)));
}

TEST(lockword, a_sleeper_whose_waker_died_still_gets_the_lock, 20)
{
	_Atomic uint32_t *w = shared_word();
	uint64_t t0;
	pid_t pid;

	CHECK_OK(lw_lock(w, me(), 0, &lw_pid_judge));
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0)
		_exit(lw_lock(w, me(), in_ms(5000), &lw_pid_judge) == 0 ? 0 : 1);
	/* The child sleeps once it has set the waiters bit. */
	CHECK(WAIT_FOR(atomic_load(w) & LW_WAITERS, 5000));
	/* Our "unlock" dies between its store and its wake. */
	t0 = now_ms();
	atomic_store(w, 0);
	CHECK_EQ(pid_wait(pid, 5000), 0); /* exited 0: it took the lock */
	CHECK(now_ms() - t0 < 5000);
	CHECK_EQ(LW_OWNER(atomic_load(w)), (uint32_t)pid);
}

TEST(lockword, a_live_owner_is_waited_for_until_the_deadline, 20)
{
	_Atomic uint32_t *w = shared_word();
	pid_t pid = fork();
	siginfo_t si;

	CHECK(pid >= 0);
	if (pid == 0) {
		raise(SIGSTOP);
		_exit(0);
	}
	memset(&si, 0, sizeof(si));
	CHECK_OK(waitid(P_PID, (id_t)pid, &si, WSTOPPED | WNOWAIT));
	atomic_store(w, (uint32_t)pid); /* stopped inside its critical section */
	CHECK_EQ(lw_lock(w, me(), in_ms(120), &lw_pid_judge), -ETIMEDOUT);
	CHECK_EQ(lw_trylock(w, me()), -EBUSY);
	CHECK(!lw_reap_if_gone(w, &lw_pid_judge));
	CHECK_EQ(LW_OWNER(atomic_load(w)), (uint32_t)pid);
	kill(pid, SIGKILL);
	pid_wait(pid, 5000);
	CHECK(lw_reap_if_gone(w, &lw_pid_judge));
	CHECK_EQ(lw_lock(w, me(), in_ms(5000), &lw_pid_judge), LW_RECOVER);
}

TEST(lockword, garbage_in_the_word_is_a_dead_owner, 20)
{
	static const uint32_t garbage[] = { LW_WAITERS, LW_DIED, 0x3fffffffu, 0xffffffffu,
					    0x41414141u };
	_Atomic uint32_t *w = shared_word();
	unsigned i;

	for (i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++) {
		atomic_store(w, garbage[i]);
		CHECK_EQ(lw_lock(w, me(), in_ms(5000), &lw_pid_judge), LW_RECOVER);
		CHECK_EQ(LW_OWNER(atomic_load(w)), me());
		lw_unlock(w);
		CHECK_EQ(atomic_load(w), 0);
	}
}

/* The broker's judge in small: only the owners it admitted may stay. */
static bool only_me_stays(void *ctx, uint32_t owner)
{
	(void)ctx;
	return owner != me();
}

TEST(lockword, a_judge_breaks_a_live_owner_it_never_admitted, 20)
{
	static const struct lw_judge admitted = { only_me_stays, NULL };
	_Atomic uint32_t *w = shared_word();

	/* pid 1 runs for ever: the kernel alone would wait for it. */
	atomic_store(w, LW_WAITERS | 1u);
	CHECK_EQ(lw_lock(w, me(), in_ms(100), &lw_pid_judge), -ETIMEDOUT);
	CHECK(!lw_reap_if_gone(w, &lw_pid_judge));
	CHECK(lw_reap_if_gone(w, &admitted));
	CHECK_EQ(lw_lock(w, me(), in_ms(5000), &admitted), LW_RECOVER);
	lw_unlock(w);
	/* An owner it admitted is waited for. */
	atomic_store(w, me());
	CHECK_EQ(lw_lock(w, me(), in_ms(100), &admitted), -ETIMEDOUT);
}
