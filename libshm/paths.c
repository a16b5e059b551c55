// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "paths.h"

static int fit(int n, size_t size)
{
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

int paths_socket(char *buf, size_t size)
{
	const char *env = getenv("SHMLOCK_SOCKET"), *xdg;

	if (env && *env)
		return fit(snprintf(buf, size, "%s", env), size);
	if (geteuid() == 0)
		return fit(snprintf(buf, size, "/run/shmlock/shmlockd.sock"), size);
	xdg = getenv("XDG_RUNTIME_DIR");
	if (xdg && *xdg)
		return fit(snprintf(buf, size, "%s/shmlock/shmlockd.sock", xdg), size);
	return fit(snprintf(buf, size, "/tmp/shmlock-%u/shmlockd.sock", (unsigned)geteuid()), size);
}

int paths_shm_name(char *buf, size_t size)
{
	if (geteuid() == 0)
		return fit(snprintf(buf, size, "/shmlock"), size);
	return fit(snprintf(buf, size, "/shmlock-%u", (unsigned)geteuid()), size);
}
