// SPDX-License-Identifier: MIT
/*
 * The segment outlives the broker: at start-up we attach to the one already
 * there (holders keep their locks across a broker restart) and create a new
 * one only when none exists, or when the old one cannot be used and no live
 * process maps it any more. A file under the name that is not ours (another
 * owner, a mode open to all, a link) is never adopted. See shmlockd(8),
 * "SEGMENT FILE AND SOCKET PATHS" and "UPGRADES", and docs/upgrades.md.
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
 * Segment files are owner-only: clients get the fd over the socket (after
 * the allow lists), so nobody needs to open the name. A group or world
 * mode would let a user the allow lists refuse read and write the locks.
 */
#define SEG_MODE 0600

/* Map and validate the segment behind @fd; takes @fd only on success. */
static int attach_fd(struct broker *b, int fd)
{
	struct stat st;
	void *mem;
	int err;

	if (fstat(fd, &st) < 0 || st.st_size < (off_t)sizeof(struct seg_header))
		return -LOCAL_ECORRUPT;
	mem = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (mem == MAP_FAILED)
		return -errno;
	err = seg_bind(&b->seg, mem, (size_t)st.st_size);
	if (err) {
		munmap(mem, (size_t)st.st_size);
		return err;
	}
	b->mem = mem;
	b->mem_size = (size_t)st.st_size;
	b->shm_fd = fd;
	return 0;
}

/*
 * Why a file found under the segment's name is not ours to adopt, or NULL.
 * Names in /dev/shm are predictable and the directory is world-writable:
 * another user may have put a file there first, to be adopted (and then
 * read and written by its owner) or to stop us from starting.
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

/* Ours, but with group access (what brokers before this one gave it): narrow
 * it. Holders keep their mappings; only opening by name changes. */
static void narrow_mode(struct broker *b, int fd, const struct stat *st)
{
	if (!(st->st_mode & S_IRWXG))
		return;
	if (fchmod(fd, SEG_MODE) == 0)
		blog(LOG_NOTICE, "segment %s was mode %04o; now %04o (clients get it from the "
		     "socket)", b->opts.shm_name, (unsigned)(st->st_mode & 07777), SEG_MODE);
	else
		blog(LOG_WARNING, "cannot narrow segment %s to mode %04o: %s", b->opts.shm_name,
		     SEG_MODE, strerror(errno));
}

/*
 * "In use" mark: every broker takes a shared OFD lock on the open file
 * description it hands to clients. Their mappings keep that description, and
 * so the lock, alive after the broker is gone, whoever they run as; a broker
 * that must replace the segment tries an exclusive lock on a description of
 * its own, which fails while any such mapping (or fd) remains. It complements
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

static bool maps_file(FILE *f, const struct stat *st)
{
	unsigned maj, min;
	unsigned long long ino;
	char *line = NULL;
	size_t cap = 0;
	bool found = false;

	while (!found && getline(&line, &cap, f) > 0)
		found = sscanf(line, "%*x-%*x %*s %*x %x:%x %llu", &maj, &min, &ino) == 3 &&
			ino == (unsigned long long)st->st_ino && maj == major(st->st_dev) &&
			min == minor(st->st_dev);
	free(line);
	return found;
}

/* The live processes mapping the file @st, by device and inode in
 * /proc/PID/maps (the name may be gone, "(deleted)"). */
static void scan_users(const struct stat *st, struct users *u)
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
		if (maps_file(f, st)) {
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
 * Whether anyone may still use the segment @st, which we will not use: a
 * process is seen mapping it, or its in-use mark is held (tested on @fd, a
 * description of our own, or -1 when there is none to test with). Seeing
 * neither proves nothing about processes we may not inspect (other users',
 * unless we are root; even root may be denied some): clients of brokers
 * before the mark would not hold it. Then only the operator can say
 * (--replace-segment).
 */
static bool in_use(struct broker *b, const struct stat *st, int fd, struct users *u)
{
	memset(u, 0, sizeof(*u));
	scan_users(st, u);
	if (fd >= 0 && users_lock(fd, F_WRLCK) == -EAGAIN)
		u->marked = true;
	else if (fd >= 0)
		users_lock(fd, F_UNLCK);
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
		len += (size_t)snprintf(buf + len, size - len, " and %u more",
					u->n - USERS_NAMED);
	if (len >= size)
		return;
	if (u->marked && (u->hidden || !u->n))
		snprintf(buf + len, size - len, "%sprocesses this broker cannot see (its in-use "
			 "mark is held; %u processes could not be inspected)",
			 u->n ? "; and maybe " : "", u->hidden);
	else if (!u->n)
		snprintf(buf + len, size - len, "maybe one of %u processes this broker cannot "
			 "inspect (no in-use mark held, but clients of older brokers hold none): "
			 "make sure none of them uses it, then start with --replace-segment",
			 u->hidden);
}

/* The name's file in the file system, for messages. */
static const char *shm_path(const struct broker *b, char *buf, size_t size)
{
	snprintf(buf, size, "/dev/shm%s", b->opts.shm_name);
	return buf;
}

/*
 * Wait (up to --replace-wait) until nobody uses the segment @st, which we
 * will not use. 0 when it may be replaced; else the broker must not start:
 * old holders still run on it, and a fresh segment would let a new client
 * take a key one of them holds.
 */
static int wait_unused(struct broker *b, const struct stat *st, int fd, const char *what,
		       const char *why)
{
	uint64_t deadline = mono_ns() + (uint64_t)b->opts.replace_wait_ms * 1000000u;
	struct timespec tick = { 0, 100 * 1000 * 1000 };
	char who[512], path[300];
	struct users u;
	sigset_t stop;
	bool told = false;

	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	while (in_use(b, st, fd, &u)) {
		describe_users(&u, who, sizeof(who));
		if (mono_ns() >= deadline) {
			blog(LOG_ERR, "refusing to replace %s %s (%s): %s; still in use by %s. They "
			     "may hold locks in it: stop them (or let them exit), then start the "
			     "broker again, or start it with --replace-segment --replace-wait "
			     "SECONDS to wait for them (shmlockd(8), UPGRADES)", what,
			     shm_path(b, path, sizeof(path)), why, "it cannot be used", who);
			b->exit_code = EXIT_SEG_IN_USE;
			return -EBUSY;
		}
		if (!told)
			blog(LOG_WARNING, "%s %s (%s) cannot be used; waiting up to %u s for its "
			     "users to exit: %s", what, shm_path(b, path, sizeof(path)), why,
			     b->opts.replace_wait_ms / 1000, who);
		told = true;
		if (sigtimedwait(&stop, NULL, &tick) > 0)
			return -EINTR;
	}
	return 0;
}

/* Open the segment's name without following a link; fills @st (also when
 * the name is there but not ours to open: a link, another user's file). */
static int open_name(struct broker *b, struct stat *st)
{
	char path[300];
	int fd = shm_open(b->opts.shm_name, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0), err;

	memset(st, 0, sizeof(*st));
	if (fd >= 0) {
		if (fstat(fd, st) == 0)
			return fd;
		err = -errno;
		close(fd);
		return err;
	}
	err = -errno;
	if (err != -ENOENT && lstat(shm_path(b, path, sizeof(path)), st) < 0)
		memset(st, 0, sizeof(*st));
	return err;
}

/*
 * The segment a previous broker put in systemd's fd store: preferred over the
 * name, which an operator or a tmp cleaner may have unlinked or replaced
 * while the holders still use the stored one. One we cannot use is checked
 * like one found by name: nobody may still map it (@bad: its identity).
 */
static int attach_stored(struct broker *b, struct stat *bad)
{
	struct stat st_fd, st_name;
	int fd = notify_stored_fd("segment"), err;
	char path[300];

	if (fd < 0)
		return -ENOENT;
	if (fstat(fd, &st_fd) < 0) {
		close(fd);
		return -ENOENT;
	}
	err = attach_fd(b, fd);
	if (err) {
		blog(LOG_WARNING, "segment from the fd store unusable (%s)", local_strerror(err));
		*bad = st_fd;
		close(fd);
		return wait_unused(b, &st_fd, -1, "the segment kept in the fd store",
				   local_strerror(err)) ?: -ENOENT;
	}
	narrow_mode(b, fd, &st_fd);
	b->seg_from_store = true;
	if (stat(shm_path(b, path, sizeof(path)), &st_name) < 0 ||
	    st_name.st_ino != st_fd.st_ino || st_name.st_dev != st_fd.st_dev)
		blog(LOG_WARNING, "%s no longer names the segment kept in the fd store; serving "
		     "the stored one", b->opts.shm_name);
	return 0;
}

static int create_new(struct broker *b)
{
	size_t size = seg_size_for(&b->opts.caps);
	void *mem;
	int fd, err;

	if (!size)
		return -EINVAL;
	/* O_EXCL: a name taken meanwhile is not ours (and no link is followed). */
	fd = shm_open(b->opts.shm_name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		      SEG_MODE);
	if (fd < 0)
		return -errno;
	fchmod(fd, SEG_MODE); /* whatever the umask */
	if (ftruncate(fd, (off_t)size) < 0) {
		err = -errno;
		goto fail;
	}
	mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (mem == MAP_FAILED) {
		err = -errno;
		goto fail;
	}
	err = seg_format(mem, size, &b->opts.caps);
	if (!err)
		err = seg_bind(&b->seg, mem, size);
	if (err) {
		munmap(mem, size);
		goto fail;
	}
	b->mem = mem;
	b->mem_size = size;
	b->shm_fd = fd;
	return 0;
fail:
	close(fd);
	shm_unlink(b->opts.shm_name);
	return err;
}

/*
 * One broker per segment: an flock on the shm object, held for our life. It
 * is taken on a descriptor of its own, never the one passed to clients: their
 * mappings keep that open file description (and so any lock on it) alive
 * after we die. Opened through /proc so that it is the object we mapped, even
 * one from the fd store whose name is gone.
 */
static int claim(struct broker *b)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/self/fd/%d", b->shm_fd);
	b->lock_fd = open(path, O_RDONLY | O_CLOEXEC);
	if (b->lock_fd < 0)
		return -errno;
	if (flock(b->lock_fd, LOCK_EX | LOCK_NB) == 0) {
		b->owns_segment = true;
		return 0;
	}
	blog(LOG_ERR, "segment %s is in use by another broker (pid %u)", b->opts.shm_name,
	     atomic_load(&b->seg.hdr->broker_pid));
	return -EBUSY;
}

static int adopted(struct broker *b)
{
	int err = claim(b);

	if (err)
		return err;
	users_lock(b->shm_fd, F_RDLCK);
	blog(LOG_NOTICE, "attached existing segment %s (%zu bytes%s)", b->opts.shm_name,
	     b->mem_size, b->seg_from_store ? ", from the fd store" : "");
	if (memcmp(&b->seg.caps, &b->opts.caps, sizeof(b->seg.caps)))
		blog(LOG_WARNING, "segment %s keeps its own capacities; restart with a "
		     "new --shm-name to change them", b->opts.shm_name);
	return 0;
}

static int create(struct broker *b)
{
	int err = create_new(b);

	if (!err)
		err = claim(b);
	if (err == -EEXIST) {
		blog(LOG_ERR, "cannot create segment %s: the name was taken meanwhile",
		     b->opts.shm_name);
		b->exit_code = EXIT_SEG_FOREIGN;
	} else if (err) {
		blog(LOG_ERR, "cannot create segment %s: %s", b->opts.shm_name,
		     local_strerror(err));
	} else {
		users_lock(b->shm_fd, F_RDLCK);
		blog(LOG_INFO, "created segment %s (%zu bytes)", b->opts.shm_name, b->mem_size);
	}
	return err;
}

/* Replace what the name holds (@why: the reason) once nobody uses it. */
static int replace(struct broker *b, int fd, const struct stat *st, const char *why)
{
	char path[300];
	int err = wait_unused(b, st, fd, "segment", why);

	if (fd >= 0)
		close(fd);
	if (err)
		return err;
	blog(LOG_WARNING, "segment %s (%s) is used by no process; replacing it",
	     shm_path(b, path, sizeof(path)), why);
	if (shm_unlink(b->opts.shm_name) < 0 && errno != ENOENT) {
		err = -errno;
		blog(LOG_ERR, "cannot remove %s: %s; its owner (uid %u) or root must remove it",
		     path, strerror(-err), (unsigned)st->st_uid);
		b->exit_code = EXIT_SEG_FOREIGN;
		return err;
	}
	return create(b);
}

int shm_setup(struct broker *b)
{
	struct stat st, bad_store = { 0 };
	const char *why;
	char path[300];
	int fd, err;

	err = attach_stored(b, &bad_store);
	if (!err)
		return adopted(b);
	if (err != -ENOENT)
		return err;
	fd = open_name(b, &st);
	if (fd == -ENOENT)
		return create(b);
	if (fd < 0 && fd != -ELOOP && fd != -EACCES && fd != -EISDIR && fd != -ENXIO) {
		blog(LOG_ERR, "cannot open segment %s: %s", b->opts.shm_name, strerror(-fd));
		return fd;
	}
	why = fd < 0 && S_ISLNK(st.st_mode) ? "a symbolic link" : not_ours(&st);
	if (fd < 0 && !why)
		why = "not openable by this user";
	if (why) {
		if (b->opts.replace_segment)
			return replace(b, fd, &st, why);
		blog(LOG_ERR, "refusing segment %s: %s (uid %u, mode %04o), not this broker's "
		     "(uid %u, mode %04o); another user may have planted it. Check what it is, "
		     "then remove it (rm %s), use another --shm-name, or start with "
		     "--replace-segment to replace it once no process maps it",
		     shm_path(b, path, sizeof(path)), why, (unsigned)st.st_uid,
		     (unsigned)(st.st_mode & 07777), (unsigned)geteuid(), SEG_MODE, path);
		b->exit_code = EXIT_SEG_FOREIGN;
		if (fd >= 0)
			close(fd);
		return -EPERM;
	}
	narrow_mode(b, fd, &st);
	err = attach_fd(b, fd);
	if (!err)
		return adopted(b);
	/* The one the fd store held: its in-use mark is the store's own. */
	if (bad_store.st_ino == st.st_ino && bad_store.st_dev == st.st_dev) {
		close(fd);
		fd = -1;
	}
	/* Another layout or a header we reject: never guess at its contents,
	 * and never replace it under holders still running on it. */
	return replace(b, fd, &st, local_strerror(err));
}

void shm_teardown(struct broker *b)
{
	if (b->mem)
		munmap(b->mem, b->mem_size);
	if (b->shm_fd >= 0)
		close(b->shm_fd);
	if (b->lock_fd >= 0)
		close(b->lock_fd);
	/* Only a broker that owned and served the segment may remove it. */
	if (b->opts.destroy_segment_on_exit && b->owns_segment && b->served)
		shm_unlink(b->opts.shm_name);
}
