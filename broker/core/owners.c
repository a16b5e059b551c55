// SPDX-License-Identifier: MIT
/*
 * Who may hold a lock word, as the broker judges it (lockword.h).
 *
 * Any admitted client can write any value into a key's or the table's lock
 * word, so a word's owner is a claim, not a fact. The broker checks it
 * against what it knows from the kernel: its own pid, and for each session
 * it tracks (by_slot, the event loop's own table), the process behind the
 * pidfd it took at the session's open. That process's pid is read from the
 * pidfd itself (/proc/self/fdinfo), never from the session's slot, which its
 * client can rewrite. A word naming anyone else is "gone": its owner died,
 * or it never was a client (a forged owner such as pid 1); either way the
 * word is broken (LW_DIED) and the next taker repairs the key.
 *
 * A process whose session just ended may still be inside a word for a
 * moment (a call it began before the end): for OWNER_LINGER_NS after its
 * session leaves the table it still counts, while it runs. We keep our own
 * duplicate of each pidfd so that liveness stays answerable after the
 * session's own descriptor is closed.
 *
 * When a session's process cannot be read (out of descriptors), nobody is
 * judged gone until it can: breaking a live owner's word would let two
 * processes into a key at once, while waiting only delays a repair.
 *
 * The judge runs on the event loop only (the cluster manager's threads use
 * the kernel's judge on their own view of the segment).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include "broker.h"
#include "clock.h"
#include "lockword.h"
#include "owners.h"

#define OWNER_LINGER_NS 2000000000ull
#define LINGER_MAX 64

/* What we know of the session in one slot. */
struct known {
	const struct bsession *bs; /* the session this was read for (NULL: none) */
	uint32_t gen;
	int fd;	      /* our duplicate of its pidfd (-1: no process to judge by) */
	uint32_t pid; /* that process's pid here (0: none) */
};

/* A process whose session ended, still allowed in a word for a moment. */
struct lingering {
	uint32_t pid;
	int fd; /* -1: free entry */
	uint64_t until_ns;
};

static struct {
	struct broker *b;
	struct known *known; /* caps.max_sessions entries */
	struct lingering linger[LINGER_MAX];
	struct lw_judge judge;
	struct blog_limit forged_log;
	bool incomplete; /* a session's process could not be read: unsure */
	uint32_t self;
	uint64_t ns_dev, ns_ino;
} own;

/* Has the process behind our pidfd @fd exited? */
static bool exited(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 0) == 1;
}

/* The pid (in our namespace) of the process behind pidfd @fd, the kernel's
 * own record of it: > 0; 0 when it has exited (or has no pid here); -1 when
 * we cannot read it (out of descriptors, say). */
static long pidfd_pid(int fd)
{
	char path[64], line[128];
	long pid = -1, v;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Pid: %ld", &v) == 1) {
			/* -1: exited; 0: not in our namespace (never admitted). */
			pid = v > 0 && v <= LW_OWNER_MASK ? v : v <= 0 ? 0 : -1;
			break;
		}
	fclose(f);
	return pid;
}

static void linger_drop(struct lingering *l)
{
	if (l->fd >= 0)
		close(l->fd);
	l->fd = -1;
	l->pid = 0;
}

/* Keep @pid (pidfd @fd, ours) allowed for a moment after its session left. */
static void linger_add(uint32_t pid, int fd, uint64_t now)
{
	struct lingering *slot = NULL;
	unsigned i;

	if (exited(fd)) {
		close(fd);
		return;
	}
	for (i = 0; i < LINGER_MAX; i++) {
		struct lingering *l = &own.linger[i];

		if (l->fd < 0 || l->until_ns <= now || exited(l->fd)) {
			linger_drop(l);
			slot = slot ? slot : l;
		} else if (!slot || (slot->fd >= 0 && l->until_ns < slot->until_ns)) {
			slot = l; /* full: the one that would end first makes room */
		}
	}
	linger_drop(slot);
	*slot = (struct lingering){ .pid = pid, .fd = fd, .until_ns = now + OWNER_LINGER_NS };
}

/* Bring our view of the session table up to date (by_slot changes only on
 * the event loop, which is where we run). */
static void sync_sessions(uint64_t now)
{
	struct broker *b = own.b;
	uint32_t i;
	long pid;

	own.incomplete = false;
	for (i = 0; i < b->seg.caps.max_sessions; i++) {
		const struct bsession *bs = b->by_slot[i];
		struct known *kn = &own.known[i];

		if (kn->bs == bs && (!bs || kn->gen == bs->gen))
			continue;
		if (kn->fd >= 0)
			linger_add(kn->pid, kn->fd, now);
		*kn = (struct known){ .bs = bs, .fd = -1 };
		if (!bs)
			continue;
		kn->gen = bs->gen;
		if (bs->pidfd < 0)
			continue;
		pid = -1;
		kn->fd = fcntl(bs->pidfd, F_DUPFD_CLOEXEC, 3);
		if (kn->fd >= 0)
			pid = pidfd_pid(kn->fd);
		if (pid > 0) {
			kn->pid = (uint32_t)pid;
			continue;
		}
		if (kn->fd >= 0)
			close(kn->fd); /* exited already: nothing of it may stay */
		kn->fd = -1;
		if (pid < 0) {
			/* Unknown for now: judge nobody gone until we know. */
			kn->bs = NULL;
			own.incomplete = true;
		}
	}
}

/* Is @owner allowed in a lock word no longer? (lw_judge.gone) */
static bool owner_gone(void *ctx, uint32_t owner)
{
	uint64_t now = mono_ns();
	bool seen = false;
	uint32_t i;

	(void)ctx;
	if (owner == 0)
		return true; /* nobody: a word no lock operation wrote */
	if (owner == own.self)
		return false;
	sync_sessions(now);
	/* Every match counts: a pid a new client reuses may still be listed
	 * for the session of its exited predecessor (whose death is queued). */
	for (i = 0; i < own.b->seg.caps.max_sessions; i++)
		if (own.known[i].pid == owner && own.known[i].fd >= 0) {
			if (!exited(own.known[i].fd))
				return false;
			seen = true;
		}
	for (i = 0; i < LINGER_MAX; i++) {
		struct lingering *l = &own.linger[i];

		if (l->fd >= 0 && l->pid == owner) {
			if (l->until_ns > now && !exited(l->fd))
				return false;
			seen = true;
		}
	}
	if (own.incomplete)
		return false; /* it may be the session we could not read */
	if (!seen && blog_allow(&own.forged_log, now))
		blog(LOG_WARNING,
		     "a lock word names pid %u, which is no process of any session "
		     "here (a forged owner, or one long gone): breaking it; the next taker "
		     "repairs the key",
		     owner);
	return true;
}

int owners_attach(struct broker *b)
{
	struct stat st;
	unsigned i;

	if (!own.known) {
		own.known = calloc(b->seg.caps.max_sessions, sizeof(*own.known));
		if (!own.known)
			return -ENOMEM;
		for (i = 0; i < b->seg.caps.max_sessions; i++)
			own.known[i].fd = -1;
		for (i = 0; i < LINGER_MAX; i++)
			own.linger[i].fd = -1;
		/* Clients compare theirs with it: equal, and their pids are ours. */
		if (stat("/proc/self/ns/pid", &st) == 0) {
			own.ns_dev = (uint64_t)st.st_dev;
			own.ns_ino = (uint64_t)st.st_ino;
		}
	}
	own.b = b;
	own.self = (uint32_t)getpid();
	own.judge = (struct lw_judge){ owner_gone, NULL };
	b->seg.lock_self = own.self;
	b->seg.lock_judge = &own.judge;
	return 0;
}

void owners_open_reply(const struct broker *b, pid_t pid, struct proto_reply *rep)
{
	(void)b;
	rep->peer_pid = pid;
	rep->pidns_dev = own.ns_dev;
	rep->pidns_ino = own.ns_ino;
}

/* The used entry named @key, without locking it; NULL if none. */
static struct seg_key *entry_named(struct segment *seg, const char *key, size_t len)
{
	uint32_t i;

	for (i = 0; i < seg->caps.max_keys; i++) {
		struct seg_key *k = &seg->keys[i];

		if (atomic_load(&k->state) == KEY_USED && k->key_len == len &&
		    !memcmp(k->key, key, len))
			return k;
	}
	return NULL;
}

int owners_reset_word(struct broker *b, const char *key, size_t len, uint32_t *owner)
{
	struct segment *seg = &b->seg;
	struct seg_key *k = entry_named(seg, key, len);
	uint32_t v;
	int err;

	*owner = 0;
	if (!k || !(v = atomic_load(&k->lock)))
		return -ENOENT;
	*owner = LW_OWNER(v);
	if (!lw_reap_if_gone(&k->lock, seg->lock_judge))
		return -EBUSY;
	err = key_trylock(seg, k);
	if (err)
		return err == -EBUSY ? -ETIMEDOUT : err;
	key_unlock(k);
	return 0;
}
