// SPDX-License-Identifier: MIT
/* Robust lock words (see lockword.h): a futex word holding the owner's pid. */
#include <errno.h>
#include <poll.h>
#include <sys/pidfd.h>
#include <unistd.h>

#include "clock.h"
#include "crashpoint.h"
#include "futex.h"
#include "lockword.h"

bool lw_pid_gone(uint32_t pid)
{
	struct pollfd p = { .events = POLLIN };
	bool gone;

	/* 0 is nobody: a word that names no owner but is not free was
	 * written by no lock operation, so nobody will ever free it. */
	if (pid == 0)
		return true;
	p.fd = pidfd_open((pid_t)pid, 0);
	if (p.fd < 0)
		return errno == ESRCH || errno == EINVAL;
	/* Readable once the process has exited, zombie or not. */
	gone = poll(&p, 1, 0) == 1;
	close(p.fd);
	return gone;
}

static bool pid_gone(void *ctx, uint32_t owner)
{
	(void)ctx;
	return lw_pid_gone(owner);
}

const struct lw_judge lw_pid_judge = { pid_gone, NULL };

static bool judged_gone(const struct lw_judge *judge, uint32_t owner)
{
	return judge && judge->gone(judge->ctx, owner);
}

/* Mark @w, seen holding @v, as left by a dead owner; wake every sleeper. */
static bool mark_died(_Atomic uint32_t *w, uint32_t v)
{
	if (!atomic_compare_exchange_strong(w, &v, v | LW_DIED | LW_WAITERS))
		return false;
	/* The dead owner will not wake anyone: wake all, the first repairs. */
	futex_wake(w, INT32_MAX);
	return true;
}

int lw_lock(_Atomic uint32_t *w, uint32_t self, uint64_t deadline_ns, const struct lw_judge *judge)
{
	uint32_t want = self, v;
	uint64_t check_at = 0, now, until;
	bool checked = false;

	for (;;) {
		v = atomic_load_explicit(w, memory_order_relaxed);
		if (v == 0) {
			if (atomic_compare_exchange_weak_explicit(w, &v, want, memory_order_acquire,
								  memory_order_relaxed)) {
				CRASH_POINT(LOCK_WORD_TAKEN);
				return 0;
			}
			continue;
		}
		if (v & LW_DIED) {
			if (atomic_compare_exchange_weak_explicit(w, &v, want | (v & LW_WAITERS),
								  memory_order_acquire,
								  memory_order_relaxed))
				return LW_RECOVER;
			continue;
		}
		if (!(v & LW_WAITERS)) {
			if (!atomic_compare_exchange_weak(w, &v, v | LW_WAITERS))
				continue;
			v |= LW_WAITERS;
		}
		/* Having slept, we may not be the last: keep the bit when we take
		 * it, so that our unlock wakes the next one. */
		want = self | LW_WAITERS;
		now = mono_ns();
		if (deadline_ns && now >= deadline_ns) {
			/* Never give up on an owner without asking once whether
			 * it still runs (a short wait may end before check_at). */
			if (judge && !checked) {
				checked = true;
				if (judged_gone(judge, LW_OWNER(v)))
					mark_died(w, v);
				continue;
			}
			return -ETIMEDOUT;
		}
		if (!check_at) {
			check_at = now + LW_CHECK_NS;
		} else if (now >= check_at) {
			/* The same owner for a while: stopped, or dead unseen. */
			check_at = now + LW_CHECK_NS;
			checked = true;
			if (judged_gone(judge, LW_OWNER(v)))
				mark_died(w, v);
			continue;
		}
		until = check_at;
		if (deadline_ns && deadline_ns < until)
			until = deadline_ns;
		/* Bounded by check_at: a wake lost to an unlocker that died
		 * between its store and its wake costs one slice, not forever. */
		futex_wait_until(w, v, until);
	}
}

int lw_trylock(_Atomic uint32_t *w, uint32_t self)
{
	uint32_t v = atomic_load_explicit(w, memory_order_relaxed);

	if (v == 0 && atomic_compare_exchange_strong_explicit(w, &v, self, memory_order_acquire,
							      memory_order_relaxed))
		return 0;
	if ((v & LW_DIED) &&
	    atomic_compare_exchange_strong_explicit(w, &v, self | (v & LW_WAITERS),
						    memory_order_acquire, memory_order_relaxed))
		return LW_RECOVER;
	return -EBUSY;
}

void lw_unlock(_Atomic uint32_t *w)
{
	uint32_t v = atomic_exchange_explicit(w, 0, memory_order_release);

	/* Dying here strands no sleeper for long: each one's sleep ends at
	 * its next owner check (LW_CHECK_NS), and it finds the word free. */
	CRASH_POINT(LOCK_WORD_RELEASED);
	if (v & LW_WAITERS)
		futex_wake(w, 1);
}

bool lw_reap_if_gone(_Atomic uint32_t *w, const struct lw_judge *judge)
{
	uint32_t v = atomic_load(w);

	if (v == 0)
		return false;
	if (v & LW_DIED)
		return true;
	return judged_gone(judge, LW_OWNER(v)) && (mark_died(w, v) || (atomic_load(w) & LW_DIED));
}
