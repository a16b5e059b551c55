// SPDX-License-Identifier: MIT
/*
 * The files the broker opens or makes by name: the segment's old name in world-writable
 * /dev/shm (the segment is a sealed memfd now, with no name: a file planted
 * there is nothing to the broker), the sockets and their directories. Each
 * attack is staged as root, with files of another user (nobody), and the
 * broker must refuse with its documented exit status or ignore them, and
 * leave them alone.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker_fixture.h"
#include "harness.h"
#include "keeper_proto.h"
#include "net_fixture.h"
#include "segment.h"

#define NOBODY 65534u

/* shmlockd(8), EXIT STATUS */
#define EXIT_SEG_IN_USE 3
#define EXIT_SEG_FOREIGN 4
#define EXIT_UNSAFE_PATH 5

static const struct seg_caps small = {
	.max_keys = 64, .max_sessions = 16, .max_waiters = 64, .max_holds = 64, .max_value = 64
};

static void shm_file(const struct broker_proc *b, char *buf, size_t size)
{
	snprintf(buf, size, "/dev/shm%s", b->shm);
}

/* A broker started and stopped: its names are set, nothing runs. */
static void names_only(struct broker_proc *b, const char *const *flags)
{
	broker_start(b, flags);
	broker_signal_wait(b, SIGTERM);
	keeper_end(b);
	shm_unlink(b->shm);
}

/* Plant the segment's name as nobody's 0666 file: garbage, or a valid
 * segment (which the old broker adopted, handing its owner every lock). */
static void plant_segment(const struct broker_proc *b, bool valid)
{
	size_t size = valid ? seg_size_for(&small) : 4096;
	int fd = shm_open(b->shm, O_RDWR | O_CREAT | O_EXCL, 0666);
	void *mem;

	CHECK(fd >= 0);
	CHECK_OK(fchmod(fd, 0666));
	CHECK_OK(fchown(fd, NOBODY, NOBODY));
	CHECK_OK(ftruncate(fd, (off_t)size));
	mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(mem != MAP_FAILED);
	if (valid)
		CHECK_OK(seg_format(mem, size, &small));
	else
		memset(mem, 'A', size);
	munmap(mem, size);
	close(fd);
}

static void check_planted_untouched(const struct broker_proc *b, bool valid)
{
	char path[128], head[8];
	struct stat st;
	int fd;

	shm_file(b, path, sizeof(path));
	CHECK_OK(lstat(path, &st));
	CHECK(S_ISREG(st.st_mode));
	CHECK_EQ(st.st_uid, NOBODY);
	CHECK_EQ(st.st_mode & 07777, 0666);
	fd = open(path, O_RDONLY);
	CHECK(fd >= 0);
	CHECK_EQ(pread(fd, head, sizeof(head), 0), (ssize_t)sizeof(head));
	close(fd);
	if (valid) {
		uint64_t magic = SEG_MAGIC;

		CHECK(!memcmp(head, &magic, sizeof(head)));
	} else {
		CHECK(!memcmp(head, "AAAAAAAA", sizeof(head)));
	}
}

/* The segment @b's keeper holds: a sealed memfd of ours, owner-only, and
 * not the file @planted (NULL: none). */
static void check_ours(const struct broker_proc *b, const char *planted)
{
	struct stat st, pst;
	int fd = keeper_segment_fd(b), seals;

	CHECK(fd >= 0);
	CHECK_OK(fstat(fd, &st));
	CHECK(S_ISREG(st.st_mode));
	CHECK_EQ(st.st_uid, geteuid());
	CHECK_EQ(st.st_mode & 07777, 0600);
	seals = fcntl(fd, F_GET_SEALS);
	CHECK_EQ(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
		 F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	if (planted && stat(planted, &pst) == 0)
		CHECK(pst.st_ino != st.st_ino || pst.st_dev != st.st_dev);
	close(fd);
}

/*
 * Issue 18 item 6: another user pre-creates the segment's old name. The
 * broker, root here, no longer looks at names: it neither adopts the file (a
 * valid segment, or garbage) nor refuses to start because of it, changes
 * nothing in it, and serves a sealed memfd of its own.
 */
TEST(files, a_segment_planted_by_another_user_is_never_adopted, 30)
{
	struct broker_proc b;
	char path[128];
	int valid;

	names_only(&b, NULL);
	shm_file(&b, path, sizeof(path));
	for (valid = 0; valid < 2; valid++) {
		plant_segment(&b, valid);
		broker_restart(&b);
		check_ours(&b, path);
		CHECK_OK(local_session_close(open_session(&b, "s", 0, 0)));
		broker_signal_wait(&b, SIGTERM);
		CHECK_OK(keeper_end(&b));
		check_planted_untouched(&b, valid);
		shm_unlink(b.shm);
	}
	broker_stop(&b);
}

/* A link planted under the name is not followed, and its target left alone. */
TEST(files, a_link_under_the_segment_name_is_never_followed, 20)
{
	struct broker_proc b;
	char path[128], target[128];
	struct stat st;
	int fd;

	names_only(&b, NULL);
	snprintf(target, sizeof(target), "%s/secret", b.dir);
	fd = open(target, O_RDWR | O_CREAT | O_EXCL, 0600);
	CHECK(fd >= 0);
	CHECK_EQ(write(fd, "secret", 6), 6);
	close(fd);
	shm_file(&b, path, sizeof(path));
	CHECK_OK(symlink(target, path));
	CHECK_OK(lchown(path, NOBODY, NOBODY));
	broker_restart(&b);
	check_ours(&b, target);
	CHECK_OK(lstat(path, &st));
	CHECK(S_ISLNK(st.st_mode));
	CHECK_OK(stat(target, &st));
	CHECK_EQ(st.st_size, 6);
	CHECK_EQ(st.st_mode & 07777, 0600);
	unlink(path);
	broker_stop(&b);
}

/* Child as nobody (group nobody): ask @b's keeper for the segment; exits
 * 0 if it got it. */
static int keeper_as_nobody(const struct broker_proc *b)
{
	pid_t pid = fork();
	int status;

	if (pid == 0) {
		gid_t g = NOBODY;

		if (setgroups(1, &g) || setgid(NOBODY) || setuid(NOBODY))
			_exit(99);
		_exit(keeper_segment_fd(b) >= 0 ? 0 : 1);
	}
	status = pid_wait(pid, 10000);
	CHECK(WIFEXITED(status));
	CHECK(WEXITSTATUS(status) != 99);
	return WEXITSTATUS(status);
}

/*
 * Issue 11 item 3: a member of the socket's group whom --allow-uid refuses
 * must not reach the locks without the broker. The segment has no name to
 * open; its keeper, whose socket is in that group too, answers only the
 * broker's user and root; the memfd itself is 0600. `shmlockd --check`
 * still works for root.
 */
TEST(files, the_segment_is_owner_only, 30)
{
	static const char *const flags[] = { "--socket-group", "65534", "--allow-uid", "4242",
					     NULL };
	struct broker_proc b;
	local_session *s;
	char path[160], out[4096];
	struct stat st;

	broker_start(&b, flags);
	s = open_session(&b, "s", 0, 0);
	CHECK_OK(local_lock(s, "files/k", NULL, NULL));
	shm_file(&b, path, sizeof(path));
	CHECK_EQ(stat(path, &st), -1); /* no name */
	check_ours(&b, NULL);
	CHECK_OK(keeper_path(b.sock, path, sizeof(path)));
	CHECK_OK(stat(path, &st));
	CHECK_EQ(st.st_gid, NOBODY); /* reachable by the group, yet: */
	CHECK_EQ(keeper_as_nobody(&b), 1);
	CHECK_EQ(broker_check(&b, out, sizeof(out)), 0);
	CHECK(strstr(out, "healthy"));

	/* Kept across a restart, holds and all. */
	broker_signal_wait(&b, SIGTERM);
	CHECK_EQ(broker_check(&b, out, sizeof(out)), 0);
	broker_restart(&b);
	CHECK_OK(local_held(s, "files/k", NULL));
	CHECK_OK(local_session_close(s));
	broker_stop(&b);
}

/* Holds "files/k" in a session of its own until told "exit". */
static void holder(void *arg, int in, int out)
{
	const struct broker_proc *b = arg;
	local_session *s = open_session(b, "holder", 0, 0);
	char buf[16];

	CHECK_OK(local_lock(s, "files/k", NULL, NULL));
	say(out, "held");
	while (hear(in, buf, sizeof(buf)) == 0 && strcmp(buf, "exit"))
		;
	_exit(0);
}

static int try_key(const struct broker_proc *b)
{
	struct local_session_opts o;
	local_session *s;
	int rc;

	local_session_opts_init(&o);
	o.socket_path = b->sock;
	o.broker_wait_ms = 0;
	rc = local_session_open(&o, &s);
	if (rc)
		return rc;
	rc = local_lock(s, "files/k",
			&(struct local_acquire_opts){ .sz = sizeof(struct local_acquire_opts),
						      .timeout_ms = 0 },
			NULL);
	local_session_close(s);
	return rc;
}

static void scribble_abi(const struct broker_proc *b)
{
	uint32_t abi = SEG_ABI + 1;
	int fd = keeper_segment_fd(b);

	CHECK(fd >= 0);
	CHECK_EQ(pwrite(fd, &abi, sizeof(abi), offsetof(struct seg_header, abi)),
		 (ssize_t)sizeof(abi));
	close(fd);
}

/*
 * Issue 11 item 1: a segment of another layout is never replaced while a
 * holder still runs on it. The broker refuses (exit 3) and names the
 * holder, even told to replace it; `--check` says what to do; the
 * operator's path (--replace-segment --replace-wait) waits for the holder
 * to exit and then starts a broker on a fresh segment.
 */
TEST(files, an_unusable_segment_is_not_replaced_under_its_holders, 60)
{
	static const char *const replace_1s[] = { "--replace-segment", "--replace-wait", "1",
						  NULL };
	static const char *const replace_30s[] = { "--replace-segment", "--replace-wait", "30",
						   NULL };
	struct broker_proc b;
	struct child h;
	char buf[64], out[4096];

	broker_start(&b, NULL);
	child_spawn(&h, holder, &b);
	child_expect(&h, "held", 10000);
	broker_signal_wait(&b, SIGTERM);
	scribble_abi(&b);

	CHECK_EQ(broker_refuses(&b, NULL, 10000), EXIT_SEG_IN_USE);
	snprintf(buf, sizeof(buf), "pid %d (", (int)h.pid);
	CHECK(broker_log_has(&b, buf));
	CHECK(broker_log_has(&b, "refusing to replace"));
	CHECK_EQ(try_key(&b), -LOCAL_ENOSOCKET); /* no broker: no socket */
	CHECK_EQ(broker_refuses(&b, replace_1s, 10000), EXIT_SEG_IN_USE);
	CHECK_EQ(try_key(&b), -LOCAL_ENOSOCKET); /* no broker: no socket */
	CHECK_EQ(broker_check(&b, out, sizeof(out)), 1);
	CHECK(strstr(out, "--replace-segment"));

	/* The operator starts a broker that waits for the old holder. */
	broker_spawn(&b, replace_30s);
	CHECK(WAIT_FOR(broker_log_has(&b, "waiting up to 30 s"), 10000));
	CHECK_EQ(try_key(&b), -LOCAL_ENOSOCKET); /* no broker: no socket */
	child_send(&h, "exit");
	child_wait(&h, 10000);
	broker_wait_ready(&b, 10000);
	CHECK(broker_log_has(&b, "replacing it"));
	check_ours(&b, NULL);
	CHECK_OK(try_key(&b));
	broker_stop(&b);
}

/* A root-only file for planted links to point at. */
static void make_secret(const struct broker_proc *b, char *target, size_t size)
{
	int fd;

	snprintf(target, size, "%s/secret", b->dir);
	fd = open(target, O_RDWR | O_CREAT | O_EXCL, 0600);
	CHECK(fd >= 0);
	CHECK_OK(fchmod(fd, 0600));
	close(fd);
}

static void check_secret_untouched(const char *target)
{
	struct stat st;

	CHECK_OK(stat(target, &st));
	CHECK_EQ(st.st_mode & 07777, 0600);
	CHECK_EQ(st.st_uid, 0);
	CHECK_EQ(st.st_gid, 0);
}

/* A link named @path to @target, owned by nobody, as another user plants it. */
static void plant_link(const char *target, const char *path)
{
	unlink(path);
	CHECK_OK(symlink(target, path));
	CHECK_OK(lchown(path, NOBODY, NOBODY));
}

/* The control socket at @rel under the test's directory. */
static void use_socket(struct broker_proc *b, const char *rel)
{
	snprintf(b->sock, sizeof(b->sock), "%s/%s", b->dir, rel);
}

/*
 * Issue 18 item 7: a socket path in a directory another user can write (or
 * owns, or reaches through a link of its own) is refused, exit 5, and a link
 * planted where the socket goes never makes the broker change its target's
 * mode or group; for the HTTP socket too. A name taken by anything but a
 * stale socket of ours stays. Directories the broker creates are 0755 and
 * its own, its sockets born 0660 with the --socket-group.
 */
TEST(files, a_socket_where_others_can_write_is_refused, 60)
{
	static const char *const group[] = { "--socket-group", "65534", NULL };
	static const mode_t open_modes[] = { 0777, 01777, 0775 };
	struct broker_proc b;
	char target[160], ww[160], path[200], safe_sock[128];
	const char *more[3] = { "--http-socket", path, NULL };
	struct stat st;
	size_t i;

	names_only(&b, group);
	strcpy(safe_sock, b.sock);
	make_secret(&b, target, sizeof(target));
	snprintf(ww, sizeof(ww), "%s/ww", b.dir);
	CHECK_OK(mkdir(ww, 0700));
	for (i = 0; i < sizeof(open_modes) / sizeof(open_modes[0]); i++) {
		CHECK_OK(chmod(ww, open_modes[i]));
		use_socket(&b, "ww/sock");
		plant_link(target, b.sock);
		CHECK_EQ(broker_refuses(&b, NULL, 10000), EXIT_UNSAFE_PATH);
		CHECK(broker_log_has(&b, "writable by other users"));
		CHECK_OK(lstat(b.sock, &st));
		CHECK(S_ISLNK(st.st_mode));
		check_secret_untouched(target);

		strcpy(b.sock, safe_sock);
		snprintf(path, sizeof(path), "%s/http.sock", ww);
		plant_link(target, path);
		CHECK_EQ(broker_refuses(&b, more, 10000), EXIT_UNSAFE_PATH);
		CHECK_OK(lstat(path, &st));
		CHECK(S_ISLNK(st.st_mode));
		check_secret_untouched(target);
	}

	/* A directory of another user, a link of another user on the way. */
	snprintf(path, sizeof(path), "%s/theirs", b.dir);
	CHECK_OK(mkdir(path, 0755));
	CHECK_OK(chown(path, NOBODY, NOBODY));
	use_socket(&b, "theirs/sock");
	CHECK_EQ(broker_refuses(&b, NULL, 10000), EXIT_UNSAFE_PATH);
	CHECK(broker_log_has(&b, "owned by another user"));
	snprintf(path, sizeof(path), "%s/link", b.dir);
	plant_link(b.dir, path);
	use_socket(&b, "link/sock");
	CHECK_EQ(broker_refuses(&b, NULL, 10000), EXIT_UNSAFE_PATH);
	CHECK(broker_log_has(&b, "symbolic link owned by another user"));

	/* The name taken by a file: left alone. */
	use_socket(&b, "secret");
	CHECK_EQ(broker_refuses(&b, NULL, 10000), EXIT_UNSAFE_PATH);
	check_secret_untouched(target);

	/* What the broker makes itself (under the runtime directory only:
	 * it_find.c, socket_dirs_are_made_only_under_the_runtime_dir). */
	use_socket(&b, "new/deeper/sock");
	snprintf(path, sizeof(path), "%s/http.sock", b.dir);
	setenv("XDG_RUNTIME_DIR", b.dir, 1);
	broker_restart_with(&b, more);
	unsetenv("XDG_RUNTIME_DIR");
	snprintf(ww, sizeof(ww), "%s/new", b.dir);
	CHECK_OK(lstat(ww, &st));
	CHECK(S_ISDIR(st.st_mode));
	CHECK_EQ(st.st_mode & 07777, 0755);
	CHECK_EQ(st.st_uid, geteuid());
	snprintf(ww, sizeof(ww), "%s/new/deeper", b.dir);
	CHECK_OK(lstat(ww, &st));
	CHECK_EQ(st.st_mode & 07777, 0755);
	CHECK_OK(lstat(b.sock, &st));
	CHECK(S_ISSOCK(st.st_mode));
	CHECK_EQ(st.st_mode & 07777, 0660);
	CHECK_EQ(st.st_gid, NOBODY);
	/* Served after the control socket: wait until it listens. */
	CHECK(WAIT_FOR(unix_answers(path, SOCK_STREAM), 5000));
	CHECK_OK(lstat(path, &st));
	CHECK(S_ISSOCK(st.st_mode));
	CHECK_EQ(st.st_mode & 07777, 0660);
	CHECK_EQ(st.st_gid, NOBODY);
	CHECK_OK(local_session_close(open_session(&b, "s", 0, 0)));
	/* Restarted over its own stale sockets (SIGKILL leaves them). */
	broker_signal_wait(&b, SIGKILL);
	broker_restart_with(&b, more);
	broker_stop(&b);
}

/* The broker of @b run as nobody (@b's uid and gid set), its log appended
 * to @b's. */
static pid_t spawn_as_nobody(struct broker_proc *b, bool replace)
{
	broker_spawn(b, replace ? (const char *const[]){ "--replace-segment", NULL } : NULL);
	return b->pid;
}

/* Exit status of the broker of @b run as nobody, expected to refuse. */
static int refusal_as_nobody(struct broker_proc *b, bool replace)
{
	return broker_refuses(
		b, replace ? (const char *const[]){ "--replace-segment", NULL } : NULL, 10000);
}

/*
 * Issue 11 item 1, for a broker that is not root: it cannot read the
 * /proc/PID/maps of a holder of another user (root here). The in-use mark
 * (an OFD lock on the descriptor clients map) tells it the segment of another
 * layout is still in use: exit 3, even told --replace-segment. With the
 * holder gone and no mark held, it still cannot know that no process of
 * another user maps it: it replaces the segment only when the operator says
 * so (--replace-segment).
 */
TEST(files, a_broker_not_root_sees_holders_it_cannot_inspect, 60)
{
	struct broker_proc b, bn;
	struct child h;
	char dir[100];
	struct stat st;
	pid_t pid;
	int status, fd;

	names_only(&b, NULL);
	CHECK_OK(chmod(b.dir, 0755));
	snprintf(dir, sizeof(dir), "%s/nobody", b.dir);
	CHECK_OK(mkdir(dir, 0700));
	CHECK_OK(chown(dir, NOBODY, NOBODY));
	broker_beside(&b, &bn, "nobody/sock");
	bn.uid = NOBODY;
	bn.gid = NOBODY;

	pid = spawn_as_nobody(&bn, false);
	CHECK(WAIT_FOR(unix_answers(bn.sock, SOCK_SEQPACKET), 5000));
	fd = keeper_segment_fd(&bn);
	CHECK(fd >= 0);
	CHECK_OK(fstat(fd, &st));
	close(fd);
	CHECK_EQ(st.st_uid, NOBODY);
	CHECK_EQ(st.st_mode & 07777, 0600);
	child_spawn(&h, holder, &bn);
	child_expect(&h, "held", 10000);
	kill(pid, SIGTERM);
	status = pid_wait(pid, 10000);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	scribble_abi(&bn);

	CHECK_EQ(refusal_as_nobody(&bn, false), EXIT_SEG_IN_USE);
	CHECK(broker_log_has(&b, "in-use mark is held"));
	CHECK_EQ(refusal_as_nobody(&bn, true), EXIT_SEG_IN_USE);
	CHECK_EQ(try_key(&bn), -LOCAL_ENOSOCKET);

	child_send(&h, "exit");
	child_wait(&h, 10000);
	CHECK_EQ(refusal_as_nobody(&bn, false), EXIT_SEG_IN_USE);
	CHECK(broker_log_has(&b, "cannot inspect (no in-use mark held"));
	pid = spawn_as_nobody(&bn, true);
	CHECK(WAIT_FOR(unix_answers(bn.sock, SOCK_SEQPACKET), 5000));
	CHECK(broker_log_has(&b, "replacing it"));
	CHECK_OK(try_key(&bn));
	fd = keeper_segment_fd(&bn);
	CHECK(fd >= 0);
	CHECK_OK(fstat(fd, &st));
	close(fd);
	CHECK_EQ(st.st_uid, NOBODY);
	kill(pid, SIGTERM);
	pid_wait(pid, 10000);
	keeper_end(&bn);
	broker_stop(&b);
}
