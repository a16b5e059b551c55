// SPDX-License-Identifier: MIT
#ifdef LOCAL_CRASH_POINTS
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "crashpoint.h"

void crash_point_hit(int n)
{
	static _Atomic int armed = -1;

	if (armed < 0) {
		const char *s = getenv("SHMLOCK_CRASH_AT");

		armed = s ? atoi(s) : 0;
	}
	if (armed == n)
		_exit(CRASH_EXIT_CODE);
}

int crash_fast_path_off(void)
{
	static _Atomic int off = -1;

	if (off < 0)
		off = getenv("SHMLOCK_NO_FAST_PATH") != NULL;
	return off;
}
#else
typedef int crashpoint_c_is_empty_without_crash_points;
#endif
