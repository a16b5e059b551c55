// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "paths.h"

static int fit(int n, size_t size)
{
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

int paths_runtime_dir(char *buf, size_t size)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");

	if (xdg && *xdg)
		return fit(snprintf(buf, size, "%s", xdg), size);
	if (geteuid() == 0)
		return fit(snprintf(buf, size, "/run"), size);
	return fit(snprintf(buf, size, "/run/user/%u", (unsigned)geteuid()), size);
}

/* The user's own broker: under $XDG_RUNTIME_DIR, or where logind puts it. */
static int user_socket(char *buf, size_t size)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");

	if (xdg && *xdg)
		return fit(snprintf(buf, size, "%s/shmlock/shmlockd.sock", xdg), size);
	return fit(snprintf(buf, size, "/run/user/%u/shmlock/shmlockd.sock", (unsigned)geteuid()),
		   size);
}

int paths_socket(char *buf, size_t size)
{
	const char *env = getenv("SHMLOCK_SOCKET");

	if (env && *env)
		return fit(snprintf(buf, size, "%s", env), size);
	if (geteuid() == 0)
		return fit(snprintf(buf, size, "%s", PATHS_SYSTEM_SOCKET), size);
	return user_socket(buf, size);
}

int paths_candidates(const char *explicit_path, struct paths_list *out)
{
	const char *env = getenv("SHMLOCK_SOCKET");

	memset(out, 0, sizeof(*out));
	if (!explicit_path && env && *env)
		explicit_path = env;
	if (explicit_path) {
		out->given = true;
		out->n = 1;
		return fit(snprintf(out->path[0], PATHS_LEN, "%s", explicit_path), PATHS_LEN);
	}
	if (geteuid() != 0 && user_socket(out->path[out->n], PATHS_LEN) == 0)
		out->n++;
	strcpy(out->path[out->n++], PATHS_SYSTEM_SOCKET);
	return 0;
}

const char *paths_unsafe(const char *path)
{
	char dir[PATHS_LEN], *slash;
	struct stat st;
	uid_t me = geteuid();

	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return NULL; /* relative or in /: only ever given, never defaulted */
	*slash = '\0';
	if (lstat(dir, &st) < 0)
		return NULL;
	if (!S_ISDIR(st.st_mode))
		return "its directory is not a directory";
	if (st.st_mode & (S_IWGRP | S_IWOTH))
		return "its directory is writable by other users";
	slash = strrchr(dir, '/');
	if (slash == dir)
		slash[1] = '\0';
	else
		*slash = '\0';
	/* Who could have made the directory: the parent's owner and writers. */
	if (stat(dir, &st) < 0)
		return "its parent directory cannot be checked";
	if (st.st_uid != 0 && st.st_uid != me)
		return "its parent directory is owned by another user";
	if (st.st_mode & (S_IWGRP | S_IWOTH))
		return "its parent directory is writable by other users";
	return NULL;
}

int paths_shm_name(char *buf, size_t size)
{
	if (geteuid() == 0)
		return fit(snprintf(buf, size, "/shmlock"), size);
	return fit(snprintf(buf, size, "/shmlock-%u", (unsigned)geteuid()), size);
}
