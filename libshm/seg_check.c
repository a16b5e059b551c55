// SPDX-License-Identifier: MIT
/* Validation of session slots, shared by the broker and shmlockd --check. */
#include <string.h>

#include "seg_check.h"

const char *seg_session_problem(const struct seg_session *s)
{
	if (!memchr(s->name, '\0', sizeof(s->name)))
		return "name not terminated";
	if (s->lock_delay_ms > LOCAL_LOCK_DELAY_MAX_MS)
		return "lock-delay over its maximum";
	if (s->behavior != LOCAL_BEHAVIOR_RELEASE && s->behavior != LOCAL_BEHAVIOR_DELETE)
		return "unknown behavior";
	if (s->flags & ~SESS_FLAGS_ALL)
		return "unknown flag bits";
	if (s->pid < 0 || s->creator_pid < 0)
		return "negative pid";
	/* A slot without a process check records no pid to watch. */
	if ((s->flags & SESS_FLAG_NO_PROCESS_CHECK) && s->pid)
		return "pid recorded for a session without a process check";
	/* The broker records the start time of every process it checks, and
	 * checks the one that opened the session. */
	if (s->pid && !s->start_time)
		return "no start time recorded for its process";
	if (s->pid && s->pid != s->creator_pid)
		return "its process is not the one that opened it";
	return NULL;
}
