/* SPDX-License-Identifier: MIT */
/*
 * Each test's own environment, made in its forked child before its body
 * runs: a HOME and an XDG_RUNTIME_DIR of its own under the run's temporary
 * directory and, when the runner may (root), private mount and network
 * namespaces in which /run and /dev/shm are empty tmpfs and the loopback
 * interface is the test's alone. So no test ever reaches the host's broker
 * (/run/shmlock/shmlockd.sock, the /shmlock segment) or a port another test
 * or the host listens on, and tests can run side by side.
 */
#ifndef SHMLOCK_TEST_ISOLATE_H
#define SHMLOCK_TEST_ISOLATE_H

#include <stdbool.h>
#include <stddef.h>

/* Make the run's directory (mkdtemp under $TMPDIR or /tmp) into @buf.
 * 0 or -errno. */
int isolate_run_dir_make(char *buf, size_t size);

/* Remove @dir and everything below it; errors are ignored (a test may have
 * left a file it could not remove, e.g. one owned by nobody). */
void isolate_remove_tree(const char *dir);

/*
 * In the test's child: make @test_dir with run/ (0700) and home/ below it
 * and point XDG_RUNTIME_DIR and HOME at them; SIGHUP, SIGINT and SIGQUIT
 * back to their default action. Unless @host (a test that
 * must see the host's own /run, /dev/shm or network), enter new mount and
 * network namespaces as described above. 0 or -errno; -EPERM from the
 * namespaces (not root, or a container without CAP_SYS_ADMIN) is not an
 * error: the test then runs with its own directories only.
 */
int isolate_test(const char *test_dir, bool host);

#endif
