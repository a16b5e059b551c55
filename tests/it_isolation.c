// SPDX-License-Identifier: MIT
/*
 * What the runner promises every test (isolate.h): its own HOME and
 * XDG_RUNTIME_DIR, and as root an empty /run and /dev/shm and a loopback
 * of its own, so that a broker on the host's default socket, or a port
 * the host or another test listens on, is never met.
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"

static bool dir_is_empty(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	bool empty = true;

	CHECK(d != NULL);
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			empty = false;
	closedir(d);
	return empty;
}

TEST(isolation, each_test_has_its_own_runtime_dir_and_home, 10)
{
	const char *rt = getenv("XDG_RUNTIME_DIR"), *home = getenv("HOME");
	struct stat st;

	CHECK(rt && strstr(rt, "/shmlock-run-"));
	CHECK(home && strstr(home, "/shmlock-run-"));
	CHECK_OK(stat(rt, &st));
	CHECK_EQ(st.st_mode & 07777, 0700);
	CHECK_EQ(st.st_uid, geteuid());
	CHECK_OK(stat(home, &st));
	CHECK(S_ISDIR(st.st_mode));
}

TEST(isolation, root_sees_an_empty_run_and_dev_shm, 10)
{
	if (geteuid() != 0) {
		printf("SKIPPED: not root, no namespaces ");
		return;
	}
	/* The system broker's socket directory cannot be there. */
	CHECK(access("/run/shmlock", F_OK) < 0 && errno == ENOENT);
	CHECK(dir_is_empty("/run"));
	CHECK(dir_is_empty("/dev/shm"));
}

/* The namespace @kind ("net", "mnt") of process @pid, as /proc names it. */
static void ns_of(const char *pid, const char *kind, char *buf, size_t size)
{
	char path[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%s/ns/%s", pid, kind);
	n = readlink(path, buf, size - 1);
	if (n < 0)
		FAIL_AT("readlink %s: %s", path, strerror(errno));
	buf[n] = '\0';
}

TEST(isolation, root_has_network_and_mounts_of_its_own, 10)
{
	char mine[64], hosts[64], runner[16];

	if (geteuid() != 0) {
		printf("SKIPPED: not root, no namespaces ");
		return;
	}
	/* The runner, our parent, stays in the host's namespaces. */
	snprintf(runner, sizeof(runner), "%d", (int)getppid());
	ns_of("self", "net", mine, sizeof(mine));
	ns_of(runner, "net", hosts, sizeof(hosts));
	CHECK(strcmp(mine, hosts));
	ns_of("self", "mnt", mine, sizeof(mine));
	ns_of(runner, "mnt", hosts, sizeof(hosts));
	CHECK(strcmp(mine, hosts));
}
