// SPDX-License-Identifier: MIT
/* Each test's own environment (isolate.h). */
#include <errno.h>
#include <ftw.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "isolate.h"

int isolate_run_dir_make(char *buf, size_t size)
{
	const char *tmp = getenv("TMPDIR");
	int n = snprintf(buf, size, "%s/shmlock-run-XXXXXX", tmp && *tmp ? tmp : "/tmp");

	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	return mkdtemp(buf) ? 0 : -errno;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

void isolate_remove_tree(const char *dir)
{
	nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* A fresh tmpfs over @path, seen by this mount namespace only. */
static int private_tmpfs(const char *path, const char *mode)
{
	return mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, mode) ? -errno : 0;
}

/* A new network namespace has a loopback interface that is down. */
static int loopback_up(void)
{
	struct ifreq ifr = { 0 };
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), r = 0;

	if (fd < 0)
		return -errno;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) ||
	    (ifr.ifr_flags |= IFF_UP, ioctl(fd, SIOCSIFFLAGS, &ifr)))
		r = -errno;
	close(fd);
	return r;
}

static int namespaces(void)
{
	int r;

	if (unshare(CLONE_NEWNS | CLONE_NEWNET))
		return errno == EPERM ? 0 : -errno;
	/* Our mounts must not propagate back to the host's namespace. (The
	 * kernel ignores source and type here; valgrind wants them readable.) */
	if (mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL))
		return -errno;
	r = private_tmpfs("/run", "mode=0755");
	if (!r)
		r = private_tmpfs("/dev/shm", "mode=1777");
	if (!r)
		r = loopback_up();
	return r;
}

static int make_dir(const char *parent, const char *name, mode_t mode, char *out, size_t size)
{
	int n = snprintf(out, size, "%s/%s", parent, name);

	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	if (mkdir(out, mode) && errno != EEXIST)
		return -errno;
	return 0;
}

int isolate_test(const char *test_dir, bool host)
{
	char run[512], home[512];
	int r;

	if (mkdir(test_dir, 0755) && errno != EEXIST)
		return -errno;
	r = make_dir(test_dir, "run", 0700, run, sizeof(run));
	if (!r)
		r = make_dir(test_dir, "home", 0700, home, sizeof(home));
	if (r)
		return r;
	setenv("XDG_RUNTIME_DIR", run, 1);
	setenv("HOME", home, 1);
	/* Dispositions as a login shell leaves them, not as the suite was
	 * started: under nohup or as a shell's background job SIGHUP, SIGINT
	 * and SIGQUIT arrive ignored, and exec() passes that on to every
	 * shmlock and broker a test starts. */
	signal(SIGHUP, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	signal(SIGQUIT, SIG_DFL);
	return host ? 0 : namespaces();
}
