// SPDX-License-Identifier: MIT
/*
 * Issue 18 item 2: the segment fd a client receives. It used to be a named
 * /dev/shm file, and ftruncate() on it SIGBUSed the broker and every client.
 * Now it is a memfd sealed against shrinking, growing and further seals; a
 * client refuses one that is not; the broker notices a header it no longer
 * accepts; and the segment, which has no name, is kept across restarts by
 * the keeper (by the fd store under systemd: it_systemd.c), and never
 * replaced under processes that still map it when it was lost.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
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
#include "client.h"
#include "harness.h"
#include "procinfo.h"
#include "segment.h"

static const char *const caps[] = {
	"--max-keys", "64", "--max-holds", "16", "--max-waiters", "16", "--max-sessions", "16", NULL
};

static uint32_t holders_of(local_session *s, const char *key)
{
	LOCAL_OPTS(local_key_info, ki);

	CHECK_OK(local_info(s, key, &ki));
	return ki.holders;
}

/* Child: hold @key until told "exit". */
struct hold {
	const struct broker_proc *b;
	const char *key;
};

static void holder(void *p, int in, int out)
{
	const struct hold *h = p;
	local_session *s = open_session(h->b, "holder", 0, 0);
	char buf[16];

	CHECK_OK(local_lock(s, h->key, NULL, NULL));
	say(out, "held");
	while (hear(in, buf, sizeof(buf)) == 0 && strcmp(buf, "exit"))
		;
	_exit(0);
}

/* Open a session the way liblocal does, but keep the segment fd it brings
 * instead of mapping it: what a hostile client has in hand. */
static int raw_segment_fd(const struct broker_proc *b)
{
	struct proto_open req;
	struct proto_reply rep;
	uint64_t start = 0;
	int fd = -1;

	memset(&req, 0, sizeof(req));
	proto_init_hdr(&req.hdr, MSG_OPEN, sizeof(req));
	req.behavior = LOCAL_BEHAVIOR_RELEASE;
	proc_start_time(getpid(), &start);
	req.start_time = start;
	strcpy(req.name, "attacker");
	CHECK_OK(broker_call(b->sock, &req, sizeof(req), &rep, &fd, 0));
	CHECK_OK(rep.status);
	CHECK(fd >= 0);
	return fd;
}

/* Child: every way to change the segment's size or seals, each errno. */
static void attacker(void *p, int in, int out)
{
	const struct broker_proc *b = p;
	int fd = raw_segment_fd(b), e[4];
	struct stat st;

	(void)in;
	CHECK_OK(fstat(fd, &st));
	e[0] = ftruncate(fd, 0) < 0 ? errno : 0;
	e[1] = ftruncate(fd, st.st_size * 2) < 0 ? errno : 0;
	e[2] = fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) < 0 ? errno : 0;
	e[3] = fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) < 0 ? errno : 0;
	/* A hole punched in the last page (staged values of waiters, none
	 * here) only zeroes it, as a write would: the size stays. */
	CHECK_OK(
		fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, st.st_size - 4096, 4096));
	say(out, "errnos %d %d %d %d", e[0], e[1], e[2], e[3]);
	hear(in, (char[8]){ 0 }, 8);
	_exit(0);
}

TEST(sealed, a_client_cannot_resize_or_reseal_the_segment, 30)
{
	struct broker_proc b;
	struct hold hk;
	struct child h, a;
	local_session *obs, *late;
	struct stat after;
	char line[64];
	int e[4], fd;

	broker_start(&b, caps);
	obs = open_session(&b, "obs", 0, 0);
	CHECK_OK(local_lock(obs, "s/mine", NULL, NULL));
	hk = (struct hold){ &b, "s/k" };
	child_spawn(&h, holder, &hk);
	child_expect(&h, "held", 10000);
	child_spawn(&a, attacker, &b);
	if (child_read(&a, line, sizeof(line), 10000) ||
	    sscanf(line, "errnos %d %d %d %d", &e[0], &e[1], &e[2], &e[3]) != 4)
		FAIL_AT("attacker: no answer");
	CHECK_EQ(e[0], EPERM); /* F_SEAL_SHRINK */
	CHECK_EQ(e[1], EPERM); /* F_SEAL_GROW */
	CHECK_EQ(e[2], EPERM); /* F_SEAL_SEAL */
	CHECK_EQ(e[3], EPERM);
	fd = keeper_segment_fd(&b);
	CHECK(fd >= 0);
	CHECK_OK(fstat(fd, &after));
	CHECK_EQ((size_t)after.st_size, obs->seg->size);
	close(fd);

	/* Nobody died of it: the broker, this client, the holder. */
	child_send(&a, "done");
	child_wait(&a, 5000);
	CHECK_EQ(kill(b.pid, 0), 0);
	CHECK_EQ(holders_of(obs, "s/k"), 1);
	CHECK_OK(local_held(obs, "s/mine", NULL));
	CHECK_OK(local_lock(obs, "s/other", NULL, NULL));
	CHECK_OK(local_release(obs, "s/other"));
	late = open_session(&b, "late", 0, 0);
	CHECK_RC(local_lock(late, "s/k",
			    &(struct local_acquire_opts){ .sz = sizeof(struct local_acquire_opts),
							  .timeout_ms = 0 },
			    NULL),
		 -EBUSY);
	child_send(&h, "exit");
	child_wait(&h, 5000);
	CHECK_OK(local_lock(late, "s/k",
			    &(struct local_acquire_opts){ .sz = sizeof(struct local_acquire_opts),
							  .timeout_ms = 5000 },
			    NULL));
	CHECK_OK(local_session_close(late));
	CHECK_OK(local_session_close(obs));
	CHECK_EQ(kill(b.pid, 0), 0);
	broker_stop(&b);
}

/* Child: a stand-in broker on @path that answers one MSG_OPEN with a valid
 * but unsealed segment, then acknowledges the close that follows. */
static void fake_broker(void *p, int in, int out)
{
	const char *path = p;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	static const struct seg_caps small = { .max_keys = 64,
					       .max_sessions = 16,
					       .max_waiters = 16,
					       .max_holds = 16,
					       .max_value = 64 };
	size_t size = seg_size_for(&small);
	int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), seg, i;
	void *mem;

	(void)in;
	seg = memfd_create("unsealed", MFD_CLOEXEC);
	CHECK(seg >= 0);
	CHECK_OK(ftruncate(seg, (off_t)size));
	mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, seg, 0);
	CHECK(mem != MAP_FAILED);
	CHECK_OK(seg_format(mem, size, &small));
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	CHECK_OK(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)));
	CHECK_OK(listen(lfd, 4));
	say(out, "listening");
	for (i = 0; i < 2; i++) {
		union {
			char buf[CMSG_SPACE(sizeof(int))];
			struct cmsghdr align;
		} ctl;
		struct proto_reply rep;
		struct iovec iov = { &rep, sizeof(rep) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
		struct cmsghdr *c;
		char req[512];
		int conn = accept(lfd, NULL, NULL);

		if (conn < 0 || recv(conn, req, sizeof(req), 0) <= 0)
			_exit(1);
		memset(&rep, 0, sizeof(rep));
		proto_init_hdr(&rep.hdr, MSG_REPLY, sizeof(rep));
		rep.seg_abi = SEG_ABI;
		rep.gen = 1;
		if (i == 0) {
			memset(&ctl, 0, sizeof(ctl));
			mh.msg_control = ctl.buf;
			mh.msg_controllen = sizeof(ctl.buf);
			c = CMSG_FIRSTHDR(&mh);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(c), &seg, sizeof(int));
		}
		sendmsg(conn, &mh, MSG_NOSIGNAL);
		close(conn);
	}
	say(out, "done");
	_exit(0);
}

/* liblocal maps only a segment nobody can resize. */
TEST(sealed, a_client_refuses_an_unsealed_segment, 20)
{
	struct local_session_opts o;
	local_session *s = NULL;
	struct child f;
	char dir[64] = "/tmp/shmlock-test-XXXXXX", path[96];

	snprintf(dir, sizeof(dir), "/tmp/shmlock-test-%d-XXXXXX", (int)getpid());
	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/fake.sock", dir);
	child_spawn(&f, fake_broker, path);
	child_expect(&f, "listening", 5000);
	local_session_opts_init(&o);
	o.socket_path = path;
	o.broker_wait_ms = 0;
	CHECK_RC(local_session_open(&o, &s), -LOCAL_EPROTO);
	CHECK(s == NULL);
	child_expect(&f, "done", 5000); /* and it gave the session back */
	child_wait(&f, 5000);
	unlink(path);
	rmdir(dir);
}

/*
 * The broker re-validates the live header on each periodic scan, not only
 * when a client opens a session: a header it no longer accepts is logged
 * loudly, and so is its return.
 */
TEST(sealed, a_bad_header_is_noticed_by_the_periodic_scan, 20)
{
	struct broker_proc b;
	local_session *obs;
	uint64_t magic;

	broker_start(&b, caps);
	obs = open_session(&b, "obs", 0, 0);
	magic = obs->seg->hdr->magic;
	obs->seg->hdr->magic = ~magic;
	CHECK(WAIT_FOR(broker_log_has(&b, "header no longer validates"), 5000));
	obs->seg->hdr->magic = magic;
	CHECK(WAIT_FOR(broker_log_has(&b, "header validates again"), 5000));
	CHECK_OK(local_session_close(open_session(&b, "after", 0, 0)));
	CHECK_OK(local_session_close(obs));
	broker_stop(&b);
}

/* The keeper of @b (the broker's fork: same command line), or 0. */
static pid_t keeper_pid(const struct broker_proc *b)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	pid_t found = 0;

	while (d && !found && (e = readdir(d))) {
		char path[64], comm[32] = "", cmd[4096];
		ssize_t n, i;
		FILE *f;
		int fd, pid = atoi(e->d_name);

		if (pid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/comm", pid);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (!fgets(comm, sizeof(comm), f))
			comm[0] = '\0';
		fclose(f);
		if (strncmp(comm, "shmlockd-keeper", 15))
			continue;
		snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
		fd = open(path, O_RDONLY);
		n = fd >= 0 ? read(fd, cmd, sizeof(cmd) - 1) : -1;
		if (fd >= 0)
			close(fd);
		for (i = 0; i < n; i++)
			if (!cmd[i])
				cmd[i] = ' ';
		cmd[n > 0 ? n : 0] = '\0';
		if (strstr(cmd, b->sock))
			found = (pid_t)pid;
	}
	if (d)
		closedir(d);
	return found;
}

/*
 * Without systemd: the keeper keeps the segment, holds and all, across a
 * broker crash. Lose the keeper too and the segment is gone from the broker's
 * reach, but not from its holder's: the next broker finds the holder mapping
 * a segment of its label and refuses (exit 3), naming it, even told to
 * replace it; once the holder is gone it starts afresh.
 */
TEST(sealed, a_lost_segment_is_not_replaced_under_its_holders, 40)
{
	static const char *const replace[] = { "--replace-segment", NULL };
	struct broker_proc b;
	struct hold hk;
	struct child h;
	local_session *s;
	char want[64];
	pid_t kp;

	broker_start(&b, caps);
	hk = (struct hold){ &b, "s/k" };
	child_spawn(&h, holder, &hk);
	child_expect(&h, "held", 10000);
	broker_signal_wait(&b, SIGKILL);
	broker_restart(&b);
	s = open_session(&b, "obs", 0, 0);
	CHECK_EQ(holders_of(s, "s/k"), 1);
	CHECK_OK(local_session_close(s));

	broker_signal_wait(&b, SIGKILL);
	kp = keeper_pid(&b);
	CHECK(kp > 0);
	CHECK_OK(kill(kp, SIGKILL));
	CHECK(WAIT_FOR(keeper_segment_fd(&b) < 0 && kill(kp, 0) < 0, 5000));
	CHECK_EQ(broker_refuses(&b, NULL, 10000), 3);
	snprintf(want, sizeof(want), "pid %d (", (int)h.pid);
	CHECK(broker_log_has(&b, want));
	CHECK(broker_log_has(&b, "refusing to replace the segment memfd:"));
	CHECK_EQ(broker_refuses(&b, replace, 10000), 3);

	child_send(&h, "exit");
	child_wait(&h, 10000);
	/* Root may not inspect every process either: the operator's word. */
	broker_restart_with(&b, replace);
	s = open_session(&b, "obs", 0, 0);
	CHECK_OK(local_lock(s, "s/k",
			    &(struct local_acquire_opts){ .sz = sizeof(struct local_acquire_opts),
							  .timeout_ms = 0 },
			    NULL));
	CHECK_OK(local_session_close(s));
	broker_stop(&b);
}

/* Child: map @p's old named segment (as a client of an older broker
 * would) until told "exit". */
static void old_client(void *p, int in, int out)
{
	const struct broker_proc *b = p;
	int fd = shm_open(b->shm, O_RDWR, 0);
	struct stat st;
	char buf[16];
	void *mem;

	CHECK(fd >= 0);
	CHECK_OK(fstat(fd, &st));
	mem = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(mem != MAP_FAILED);
	close(fd);
	say(out, "mapped");
	while (hear(in, buf, sizeof(buf)) == 0 && strcmp(buf, "exit"))
		;
	_exit(0);
}

/*
 * The upgrade from a broker that kept the segment in /dev/shm: the named
 * segment it left (ours, 0600) cannot be sealed, so it is not adopted; while
 * an old client maps it the new broker refuses (exit 3) and names it, and
 * once nobody does (and the operator says so for what it cannot inspect),
 * it removes the file and starts on a sealed memfd.
 */
TEST(sealed, an_old_named_segment_is_replaced_only_once_unmapped, 30)
{
	static const struct seg_caps small = { .max_keys = 64,
					       .max_sessions = 16,
					       .max_waiters = 16,
					       .max_holds = 16,
					       .max_value = 64 };
	size_t size = seg_size_for(&small);
	struct broker_proc b;
	struct child c;
	char path[128], want[64];
	struct stat st;
	void *mem;
	int fd;

	broker_start(&b, caps);
	broker_signal_wait(&b, SIGTERM);
	CHECK_OK(keeper_end(&b));
	fd = shm_open(b.shm, O_RDWR | O_CREAT | O_EXCL, 0600);
	CHECK(fd >= 0);
	CHECK_OK(fchmod(fd, 0600));
	CHECK_OK(ftruncate(fd, (off_t)size));
	mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(mem != MAP_FAILED);
	CHECK_OK(seg_format(mem, size, &small));
	munmap(mem, size);
	close(fd);
	child_spawn(&c, old_client, &b);
	child_expect(&c, "mapped", 5000);

	CHECK_EQ(broker_refuses(&b, NULL, 10000), 3);
	snprintf(path, sizeof(path), "/dev/shm%s", b.shm);
	CHECK(broker_log_has(&b, "named segment"));
	snprintf(want, sizeof(want), "pid %d (", (int)c.pid);
	CHECK(broker_log_has(&b, want));
	CHECK_OK(stat(path, &st));

	child_send(&c, "exit");
	child_wait(&c, 5000);
	/* As for any segment it cannot use: the operator's word covers the
	 * processes it may not inspect (even root may be denied some). */
	broker_restart_with(&b, (const char *const[]){ "--replace-segment", NULL });
	CHECK(broker_log_has(&b, "removing it"));
	CHECK_EQ(stat(path, &st), -1);
	CHECK_OK(local_session_close(open_session(&b, "s", 0, 0)));
	broker_stop(&b);
}
