// SPDX-License-Identifier: MIT
/*
 * The segment: a sealed memfd that outlives the broker. Clients get it over
 * the socket with F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL set, so none can
 * resize it (a shrunk segment SIGBUSes every process that maps it) or add a
 * seal of its own; a named /dev/shm file cannot be sealed, which is why the
 * segment has no name any more. Across broker restarts it is kept by
 * systemd's fd store (notify.c) and by the keeper (keeper.c), and at
 * start-up we attach to the one they hold (holders keep their locks) and
 * create a new one only when there is none, or when the old one cannot be
 * used and no live process maps it any more. A segment that is lost (no
 * store, no keeper) while processes still map it is never replaced under
 * them either: they are found in /proc by the memfd's label. See
 * shmlockd(8), "SEGMENT AND SOCKET PATHS" and "UPGRADES", and
 * docs/upgrades.md.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "broker.h"
#include "clock.h"

/*
 * Owner-only, although a memfd has no name to open: reopening it through
 * /proc/PID/fd checks this mode (clients get the fd over the socket).
 */
#define SEG_MODE 0600
/* What a segment handed to clients carries (libshm/client.c checks the
 * first two). F_SEAL_WRITE is not one: clients write the locks. */
#define SEG_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

/* The memfd's label, shown in /proc/PID/maps as "/memfd:LABEL (deleted)":
 * --shm-name without its slash. */
static void seg_label(const struct broker *b, char *buf, size_t size)
{
	snprintf(buf, size, "%s", b->opts.shm_name + 1);
}

/* A description of our own of the object behind @fd: same memory, but its
 * own file locks (the in-use mark and the flock are per description). */
static int reopen(int fd, int flags)
{
	char path[64];
	int r;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	r = open(path, flags | O_CLOEXEC);
	return r < 0 ? -errno : r;
}

static bool sealed(int fd)
{
	int s = fcntl(fd, F_GET_SEALS);

	return s >= 0 && (s & SEG_SEALS) == SEG_SEALS;
}

/*
 * Map and validate the segment behind @fd (the description the keeper and the
 * fd store hold); takes @fd only on success. Clients get, and we map, a
 * description of our own, which carries the in-use mark (below).
 */
static int attach_fd(struct broker *b, int fd)
{
	struct stat st;
	void *mem;
	int err, cfd;

	if (!sealed(fd))
		return -LOCAL_EPROTO; /* an unsealed (named) segment of older brokers */
	if (fstat(fd, &st) < 0 || st.st_size < (off_t)sizeof(struct seg_header))
		return -LOCAL_ECORRUPT;
	cfd = reopen(fd, O_RDWR);
	if (cfd < 0)
		return cfd;
	mem = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, cfd, 0);
	if (mem == MAP_FAILED) {
		err = -errno;
		close(cfd);
		return err;
	}
	err = seg_bind(&b->seg, mem, (size_t)st.st_size);
	if (!err)
		err = owners_attach(b); /* who may hold a lock word: owners.c */
	if (err) {
		munmap(mem, (size_t)st.st_size);
		close(cfd);
		return err;
	}
	b->mem = mem;
	b->mem_size = (size_t)st.st_size;
	b->shm_fd = cfd;
	b->keep_fd = fd;
	return 0;
}

/* Why attach_fd() would not use a segment, for the log. */
static const char *unusable(int err)
{
	return err == -LOCAL_EPROTO ? "not sealed: a named segment of an older broker"
				    : local_strerror(err);
}

/*
 * Why a file found under the segment's old name (brokers before the memfd)
 * is not ours to look into, or NULL. Names in /dev/shm are predictable and
 * the directory is world-writable: another user may have put a file there.
 */
static const char *not_ours(const struct stat *st)
{
	if (!S_ISREG(st->st_mode))
		return "not a regular file";
	if (st->st_uid != geteuid())
		return "owned by another user";
	if (st->st_mode & (S_ISUID | S_ISGID | S_ISVTX | S_IRWXO))
		return "open to every user";
	return NULL;
}

/*
 * "In use" mark: every broker takes a shared OFD lock on the open file
 * description it hands to clients. Their mappings keep that description, and
 * so the lock, alive after the broker is gone, whoever they run as; a broker
 * that must replace the segment tries an exclusive lock on a description of
 * its own, which fails while any such mapping (or fd) remains. The keeper and
 * the fd store hold another description, without the mark. It complements
 * the /proc scan, which cannot see other users' processes unless we are root.
 */
static int users_lock(int fd, short type)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };

	return fcntl(fd, F_OFD_SETLK, &fl) < 0 ? -errno : 0;
}

#define USERS_NAMED 8

struct users {
	pid_t pid[USERS_NAMED];
	char comm[USERS_NAMED][17];
	unsigned n;	 /* processes seen mapping it */
	unsigned hidden; /* processes whose mappings we may not read */
	bool marked;	 /* an OFD lock says a client may still map it */
};

/* What to look for in /proc/PID/maps: a file by device and inode, or, for a
 * segment we no longer hold, a path ("/memfd:LABEL", "/dev/shm/NAME"). */
struct target {
	const struct stat *st;
	const char *path[2];
};

static bool path_is(const char *have, const char *want)
{
	size_t n = want ? strlen(want) : 0;

	return n && !strncmp(have, want, n) && (!have[n] || !strcmp(have + n, " (deleted)"));
}

static bool maps_file(FILE *f, const struct target *t)
{
	unsigned maj, min;
	unsigned long long ino;
	char *line = NULL;
	size_t cap = 0;
	bool found = false;
	int at;

	while (!found && getline(&line, &cap, f) > 0) {
		at = 0;
		if (sscanf(line, "%*x-%*x %*s %*x %x:%x %llu %n", &maj, &min, &ino, &at) < 3)
			continue;
		line[strcspn(line, "\n")] = '\0';
		if (t->st)
			found = ino == (unsigned long long)t->st->st_ino &&
				maj == major(t->st->st_dev) && min == minor(t->st->st_dev);
		else if (at)
			found = path_is(line + at, t->path[0]) || path_is(line + at, t->path[1]);
	}
	free(line);
	return found;
}

/* The live processes mapping @t, by /proc/PID/maps. */
static void scan_users(const struct target *t, struct users *u)
{
	DIR *d = opendir("/proc");
	struct dirent *e;

	if (!d) {
		u->hidden++;
		return;
	}
	while ((e = readdir(d))) {
		char path[64], *end;
		long pid = strtol(e->d_name, &end, 10);
		FILE *f;

		if (*end || pid <= 0 || pid == getpid())
			continue;
		snprintf(path, sizeof(path), "/proc/%ld/maps", pid);
		f = fopen(path, "re");
		if (!f) {
			if (errno == EACCES || errno == EPERM)
				u->hidden++;
			continue;
		}
		if (maps_file(f, t)) {
			if (u->n < USERS_NAMED) {
				u->pid[u->n] = (pid_t)pid;
				snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
				fclose(f);
				f = fopen(path, "re");
				if (!f || !fgets(u->comm[u->n], sizeof(u->comm[0]), f))
					strcpy(u->comm[u->n], "?");
				u->comm[u->n][strcspn(u->comm[u->n], "\n")] = '\0';
			}
			u->n++;
		}
		if (f)
			fclose(f);
	}
	closedir(d);
}

/*
 * Whether anyone may still use the segment @t, which we will not use: a
 * process is seen mapping it, or its in-use mark is held (tested on @fd, a
 * description of our own, or -1 when there is none to test with). Seeing
 * neither proves nothing about processes we may not inspect (other users',
 * unless we are root; even root may be denied some): clients of brokers
 * before the mark would not hold it. Then only the operator can say
 * (--replace-segment); @strict false: we have no reason to think there is a
 * segment at all (a first start), and look only at what we can see.
 */
static bool in_use(struct broker *b, const struct target *t, int fd, bool strict, struct users *u)
{
	memset(u, 0, sizeof(*u));
	scan_users(t, u);
	if (fd >= 0 && users_lock(fd, F_WRLCK) == -EAGAIN)
		u->marked = true;
	else if (fd >= 0)
		users_lock(fd, F_UNLCK);
	if (!strict)
		u->hidden = 0;
	return u->n || u->marked || (u->hidden && !b->opts.replace_segment);
}

static void describe_users(const struct users *u, char *buf, size_t size)
{
	size_t len = 0;
	unsigned i;

	buf[0] = '\0';
	for (i = 0; i < u->n && i < USERS_NAMED; i++)
		len += (size_t)snprintf(buf + len, len < size ? size - len : 0, "%spid %d (%s)",
					i ? ", " : "", (int)u->pid[i], u->comm[i]);
	if (u->n > USERS_NAMED && len < size)
		len += (size_t)snprintf(buf + len, size - len, " and %u more", u->n - USERS_NAMED);
	if (len >= size)
		return;
	if (u->marked && (u->hidden || !u->n))
		snprintf(buf + len, size - len,
			 "%sprocesses this broker cannot see (its in-use "
			 "mark is held; %u processes could not be inspected)",
			 u->n ? "; and maybe " : "", u->hidden);
	else if (!u->n)
		snprintf(buf + len, size - len,
			 "maybe one of %u processes this broker cannot "
			 "inspect (no in-use mark held, but clients of older brokers hold none): "
			 "make sure none of them uses it, then start with --replace-segment",
			 u->hidden);
}

/*
 * Wait (up to --replace-wait) until nobody uses the segment @t (@what: how
 * to name it), which we will not use. 0 when it may be replaced; else the
 * broker must not start: old holders still run on it, and a fresh segment
 * would let a new client take a key one of them holds.
 */
static int wait_unused(struct broker *b, const struct target *t, int fd, bool strict,
		       const char *what, const char *why)
{
	uint64_t deadline = mono_ns() + (uint64_t)b->opts.replace_wait_ms * 1000000u;
	struct timespec tick = { 0, 100 * 1000 * 1000 };
	char who[512];
	struct users u;
	sigset_t stop;
	bool told = false;

	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	while (in_use(b, t, fd, strict, &u)) {
		describe_users(&u, who, sizeof(who));
		if (mono_ns() >= deadline) {
			blog(LOG_ERR,
			     "refusing to replace %s (%s): it cannot be used; still in "
			     "use by %s. They may hold locks in it: stop them (or let them "
			     "exit), then start the broker again, or start it with "
			     "--replace-segment --replace-wait SECONDS to wait for them "
			     "(shmlockd(8), UPGRADES)",
			     what, why, who);
			b->exit_code = EXIT_SEG_IN_USE;
			return -EBUSY;
		}
		if (!told)
			blog(LOG_WARNING,
			     "%s (%s) cannot be used; waiting up to %u s for its "
			     "users to exit: %s",
			     what, why, b->opts.replace_wait_ms / 1000, who);
		told = true;
		if (sigtimedwait(&stop, NULL, &tick) > 0)
			return -EINTR;
	}
	return 0;
}

/* wait_unused() for the segment behind @fd, tested on a description of our
 * own; @marked_fd: whether @fd itself may carry the mark (a stored fd of a
 * broker before the memfd), which then cannot be tested. */
static int wait_fd_unused(struct broker *b, int fd, bool marked_fd, const char *what,
			  const char *why)
{
	struct stat st;
	struct target t = { .st = &st };
	int own = marked_fd ? -1 : reopen(fd, O_RDWR), err; /* F_WRLCK needs write */

	if (fstat(fd, &st) < 0) {
		err = -errno;
	} else {
		err = wait_unused(b, &t, own, true, what, why);
		if (!err)
			blog(LOG_WARNING, "%s (%s) is used by no process; replacing it", what, why);
	}
	if (own >= 0)
		close(own);
	return err;
}

/*
 * The segment a previous broker put in systemd's fd store: preferred over the
 * keeper's (under systemd the keeper dies with the service's processes).
 * One we cannot use is checked like the keeper's: nobody may still map it.
 * @ino: the stored object's inode, or 0.
 */
static int attach_stored(struct broker *b, ino_t *ino)
{
	struct stat st;
	int fd = notify_stored_fd("segment"), err;

	if (fd < 0)
		return -ENOENT;
	if (fstat(fd, &st) < 0) {
		close(fd);
		return -ENOENT;
	}
	err = segment_fd_is_ours(b, fd, "systemd's fd store");
	if (err) {
		close(fd);
		return err;
	}
	err = attach_fd(b, fd);
	if (err) {
		blog(LOG_WARNING, "segment from the fd store unusable (%s)", unusable(err));
		err = wait_fd_unused(b, fd, !sealed(fd), "the segment kept in the fd store",
				     unusable(err));
		close(fd);
		return err ?: -ENOENT;
	}
	*ino = st.st_ino;
	b->seg_from_store = true;
	return 0;
}

/*
 * The segment the keeper holds (a broker ran here before). -ENOENT when none
 * answers: @lost says whether one should have (its socket is there, but
 * nobody listens: it was killed).
 */
static int fetch_kept(struct broker *b, int *fd, bool *lost)
{
	char path[sizeof(b->opts.socket_path) + 8];
	int err;

	*fd = -1;
	*lost = false;
	if (keeper_path(b->opts.socket_path, path, sizeof(path)))
		return -ENOENT; /* keeper_start() says why */
	err = keeper_fetch(path, fd);
	if (err == -ECONNREFUSED)
		*lost = true;
	if (err == -ECONNREFUSED || err == -ENOENT)
		return -ENOENT;
	if (err)
		blog(LOG_ERR, "cannot get the segment from its keeper at %s: %s", path,
		     strerror(-err));
	else if ((err = segment_fd_is_ours(b, *fd, path)) != 0) {
		close(*fd);
		*fd = -1;
	}
	return err;
}

/* The keeper answered, but we serve another segment (the fd store's): it
 * must not hand out the one we did not take. */
static void drop_keeper(struct broker *b, const char *why)
{
	char path[sizeof(b->opts.socket_path) + 8];

	if (keeper_path(b->opts.socket_path, path, sizeof(path)) == 0) {
		blog(LOG_WARNING, "the keeper at %s held %s; it is replaced", path, why);
		keeper_quit(path);
	}
}

/*
 * No segment to attach to. Before making one, make sure no live process
 * still maps the one that was lost (@lost: the keeper was killed; then
 * processes we cannot inspect count too), found by the memfd's label, nor a
 * named segment of an older broker.
 */
static int nobody_left(struct broker *b, bool lost)
{
	char label[300], memfd[320], named[320], what[400];
	struct target t = { .path = { memfd, NULL } };
	struct stat st;
	int fd, err;

	seg_label(b, label, sizeof(label));
	snprintf(memfd, sizeof(memfd), "/memfd:%s", label);
	snprintf(what, sizeof(what), "the segment memfd:%s", label);
	err = wait_unused(b, &t, -1, lost, what,
			  lost ? "its keeper is gone, and no fd store holds it"
			       : "no keeper or fd store holds it");
	if (err)
		return err;
	/* Brokers before the memfd kept it in /dev/shm under --shm-name. Only
	 * one of ours is looked at: a file of another user there is nothing
	 * to us any more. */
	snprintf(named, sizeof(named), "/dev/shm%s", b->opts.shm_name);
	if (lstat(named, &st) < 0 || not_ours(&st))
		return 0;
	fd = open(named, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return 0;
	t = (struct target){ .st = &st };
	snprintf(what, sizeof(what), "the named segment %s of an older broker", named);
	err = wait_unused(b, &t, fd, true, what, "a named segment cannot be sealed");
	close(fd);
	if (err)
		return err;
	blog(LOG_WARNING, "%s is used by no process; removing it", what);
	unlink(named);
	return 0;
}

static int create_new(struct broker *b)
{
	size_t size = seg_size_for(&b->opts.caps);
	char label[300];
	void *mem;
	int fd, err;

	if (!size)
		return -EINVAL;
	seg_label(b, label, sizeof(label));
	fd = memfd_create(label, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (fchmod(fd, SEG_MODE) < 0 || ftruncate(fd, (off_t)size) < 0) {
		err = -errno;
		goto fail;
	}
	mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (mem == MAP_FAILED) {
		err = -errno;
		goto fail;
	}
	err = seg_format(mem, size, &b->opts.caps);
	munmap(mem, size);
	/* Sealed before anyone else can have it. */
	if (!err && fcntl(fd, F_ADD_SEALS, SEG_SEALS) < 0)
		err = -errno;
	if (!err)
		err = attach_fd(b, fd);
	if (!err)
		return 0;
fail:
	close(fd);
	return err;
}

/*
 * One broker per segment: an flock on it, held for our life. It is taken on
 * a description of its own, never the one passed to clients: their mappings
 * keep that open file description (and so any lock on it) alive after we die.
 */
static int claim(struct broker *b)
{
	b->lock_fd = reopen(b->shm_fd, O_RDONLY);
	if (b->lock_fd < 0)
		return b->lock_fd;
	if (flock(b->lock_fd, LOCK_EX | LOCK_NB) == 0) {
		b->owns_segment = true;
		return 0;
	}
	blog(LOG_ERR, "segment %s is in use by another broker (pid %u)", b->opts.shm_name,
	     atomic_load(&b->seg.hdr->broker_pid));
	return -EBUSY;
}

/* Ours now: mark it in use and have it kept across our restarts. */
static int took(struct broker *b)
{
	int err;

	users_lock(b->shm_fd, F_RDLCK);
	if (b->keeper)
		return 0;
	err = keeper_start(b, b->keep_fd);
	if (err && b->exit_code)
		return err; /* an unsafe path: refused as for the control socket */
	if (err)
		blog(LOG_WARNING, "without a keeper the segment survives a restart only in "
				  "the fd store, if there is one");
	return 0;
}

static int adopted(struct broker *b)
{
	int err = claim(b);

	if (!err)
		err = took(b);
	if (err)
		return err;
	blog(LOG_NOTICE, "attached existing segment %s (%zu bytes%s)", b->opts.shm_name,
	     b->mem_size, b->seg_from_store ? ", from the fd store" : ", from its keeper");
	if (memcmp(&b->seg.caps, &b->opts.caps, sizeof(b->seg.caps)))
		blog(LOG_WARNING,
		     "segment %s keeps its own capacities; restart with a "
		     "new --shm-name to change them",
		     b->opts.shm_name);
	return 0;
}

static int create(struct broker *b)
{
	int err = create_new(b);

	b->created_segment = !err;
	if (!err)
		err = claim(b);
	if (!err)
		err = took(b);
	if (err)
		blog(LOG_ERR, "cannot create segment %s: %s", b->opts.shm_name,
		     local_strerror(err));
	else
		blog(LOG_INFO, "created segment %s (%zu bytes, sealed memfd)", b->opts.shm_name,
		     b->mem_size);
	return err;
}

int shm_setup(struct broker *b)
{
	ino_t stored = 0;
	struct stat st;
	bool lost;
	int fd, err;

	err = attach_stored(b, &stored);
	if (err && err != -ENOENT)
		return err;
	err = fetch_kept(b, &fd, &lost);
	if (err && err != -ENOENT && !b->mem)
		return err;
	if (fd >= 0 && b->mem) {
		if (fstat(fd, &st) == 0 && st.st_ino == stored)
			b->keeper = true; /* the same one */
		else
			drop_keeper(b, "another segment than the fd store");
		close(fd);
	} else if (fd >= 0) {
		err = attach_fd(b, fd);
		if (!err) {
			b->keeper = true;
		} else {
			/* Another layout or a header we reject: never guess at its
			 * contents, and never replace it under holders still on it. */
			err = wait_fd_unused(b, fd, false, "the segment its keeper holds",
					     unusable(err));
			close(fd);
			if (err)
				return err;
			drop_keeper(b, "the segment replaced");
		}
	}
	if (b->mem)
		return adopted(b);
	err = nobody_left(b, lost);
	return err ?: create(b);
}

/*
 * Whether the live header still validates (a client may write into it):
 * checked on each periodic scan and before each session open. A header we no
 * longer accept is said loudly once, and no session is opened on it (new
 * clients would refuse it anyway) until it validates again. We keep serving
 * on our own copy of the layout, which never changes.
 */
int shm_revalidate(struct broker *b)
{
	struct segment now;
	int err = seg_bind(&now, b->mem, b->mem_size);

	if (!err && (memcmp(&now.caps, &b->seg.caps, sizeof(now.caps)) ||
		     now.index_size != b->seg.index_size))
		err = -LOCAL_ECORRUPT;
	if (err && !b->seg_rejected)
		blog(LOG_CRIT,
		     "the segment's header no longer validates (%s): a client wrote "
		     "into it; refusing new sessions until it does (holders carry on). "
		     "shmlockd --check says more",
		     local_strerror(err));
	else if (!err && b->seg_rejected)
		blog(LOG_WARNING, "the segment's header validates again; opening sessions");
	b->seg_rejected = err != 0;
	return err;
}

void shm_teardown(struct broker *b)
{
	if (b->mem)
		munmap(b->mem, b->mem_size);
	if (b->shm_fd >= 0)
		close(b->shm_fd);
	if (b->keep_fd >= 0)
		close(b->keep_fd);
	if (b->lock_fd >= 0)
		close(b->lock_fd);
	/* Only a broker that owned and served the segment may end it; or one
	 * that made it for this run and failed to start (a socket taken, say):
	 * nobody can have used it, and it must not outlive us unused. */
	if (b->opts.destroy_segment_on_exit && b->owns_segment && b->served) {
		keeper_stop(b);
	} else if (b->created_segment && b->owns_segment && !b->served) {
		blog(LOG_NOTICE, "start-up failed: dropping segment %s, created for this run",
		     b->opts.shm_name);
		keeper_stop(b);
	}
}
