// SPDX-License-Identifier: MIT
/*
 * Sessions: open, close, invalidation (process death, TTL), the sweep that
 * releases a session's holds and removes its waiters, and re-adoption of the
 * sessions recorded in a segment after a broker restart.
 *
 * Every client can write every session slot, so the slot is what clients
 * read, never what the broker decides by: which slots are taken, who opened
 * a session and whether its process lives come from this broker's own table
 * (struct bsession, b->sweeps) and the kernel (SO_PEERCRED, pidfds, /proc).
 * A slot that is not free but that no session of ours owns is a client's
 * writing, and is swept and freed (sessions_reclaim_untracked()).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/pidfd.h>
#include <sys/random.h>
#include <syslog.h>
#include <unistd.h>

#include "broker.h"
#include "client.h"
#include "clock.h"
#include "futex.h"
#include "procinfo.h"
#include "seg_check.h"

static unsigned long id_hash(const uint8_t id[16])
{
	unsigned long h;

	memcpy(&h, id, sizeof(h)); /* ids are random: any 8 bytes will do */
	return h;
}

static int id_match(struct cds_lfht_node *node, const void *key)
{
	const struct bsession *bs = caa_container_of(node, struct bsession, node);

	return !memcmp(bs->id, key, sizeof(bs->id));
}

int sessions_init(struct broker *b)
{
	b->by_id = cds_lfht_new_flavor(64, 64, 0, CDS_LFHT_AUTO_RESIZE, &urcu_memb_flavor, NULL);
	b->by_slot = calloc(b->seg.caps.max_sessions, sizeof(*b->by_slot));
	b->sweeps = calloc(b->seg.caps.max_sessions, sizeof(*b->sweeps));
	return b->by_id && b->by_slot && b->sweeps ? 0 : -ENOMEM;
}

static void bsession_free_rcu(struct rcu_head *head)
{
	free(caa_container_of(head, struct bsession, rcu));
}

static void process_exited(struct broker *b, int fd, uint32_t events, void *slot)
{
	(void)fd;
	(void)events;
	session_died(b, (uint32_t)(uintptr_t)slot);
}

#ifdef LOCAL_CRASH_POINTS
/* Test builds: while the file $SHMLOCK_FAIL_PIDFD_WATCH names exists, watching
 * a process fails as at the kernel's epoll watch limit, which a test cannot
 * reach without exhausting the host's. */
static bool pidfd_watch_fails(void)
{
	const char *path = getenv("SHMLOCK_FAIL_PIDFD_WATCH");

	return path && access(path, F_OK) == 0;
}
#else
#define pidfd_watch_fails() false
#endif

/* Watch the process behind @pidfd: its exit ends the session in @slot. */
static int watch_process(struct broker *b, int pidfd, uint32_t slot)
{
	if (pidfd_watch_fails())
		return -ENOSPC;
	return loop_watch(b, pidfd, EPOLLIN, process_exited, (void *)(uintptr_t)slot);
}

static void unwatch_pidfd(struct broker *b, int *fd)
{
	if (*fd >= 0) {
		loop_unwatch(b, *fd);
		close(*fd);
		*fd = -1;
	}
}

static void forget(struct broker *b, struct bsession *bs)
{
	unwatch_pidfd(b, &bs->pidfd);
	unwatch_pidfd(b, &bs->bound_pidfd);
	b->by_slot[bs->slot] = NULL;
	urcu_memb_read_lock();
	cds_lfht_del(b->by_id, &bs->node);
	urcu_memb_read_unlock();
	urcu_memb_call_rcu(&bs->rcu, bsession_free_rcu);
}

void sessions_fini(struct broker *b)
{
	uint32_t i;

	for (i = 0; b->by_slot && i < b->seg.caps.max_sessions; i++)
		if (b->by_slot[i])
			forget(b, b->by_slot[i]);
	urcu_memb_barrier();
	if (b->by_id)
		cds_lfht_destroy(b->by_id, NULL);
	free(b->by_slot);
	free(b->sweeps);
}

/* Who opened a session, as the kernel told us. */
struct creator {
	pid_t pid;
	uid_t uid;
	uint64_t start_time;
};

/*
 * Enter a session in our table and watch its process. A process we cannot
 * watch (epoll at its watch limit, out of memory) gets no session: its death
 * would go unseen and its holds stay for ever. On failure @pidfd is still
 * the caller's.
 */
static int track(struct broker *b, uint32_t slot, uint32_t gen, const uint8_t *id, int pidfd,
		 const struct creator *who, bool no_process_check)
{
	struct bsession *bs = calloc(1, sizeof(*bs));
	int err;

	if (!bs)
		return -ENOMEM;
	if (pidfd >= 0) {
		err = watch_process(b, pidfd, slot);
		if (err) {
			blog(LOG_ERR, "cannot watch pid %d (%s): no session for it", (int)who->pid,
			     strerror(-err));
			free(bs);
			return err;
		}
	}
	memcpy(bs->id, id, sizeof(bs->id));
	bs->slot = slot;
	bs->gen = gen;
	bs->pidfd = pidfd;
	bs->bound_pidfd = -1;
	bs->creator_pid = who->pid;
	bs->uid = who->uid;
	bs->start_time = who->start_time;
	bs->no_process_check = no_process_check;
	cds_lfht_node_init(&bs->node);
	urcu_memb_read_lock();
	cds_lfht_add(b->by_id, id_hash(id), &bs->node);
	urcu_memb_read_unlock();
	b->by_slot[slot] = bs;
	return 0;
}

static int reclaim_stray(struct broker *b, uint32_t slot);

/*
 * A slot for a new session, by our own table: one no session of ours has
 * and we owe no sweep. A free one first; else a stray (marked taken by a
 * client) is reclaimed now rather than the open refused.
 */
static uint32_t free_slot(struct broker *b)
{
	static uint32_t hint;
	uint32_t n = b->seg.caps.max_sessions, i, stray = IDX_NONE;

	for (i = 0; i < n; i++) {
		uint32_t s = (hint + i) % n;

		if (b->by_slot[s] || b->sweeps[s].pending)
			continue;
		if (SESS_STATE(atomic_load(&b->seg.sessions[s].state_gen)) == SESS_FREE) {
			hint = s + 1;
			return s;
		}
		if (stray == IDX_NONE)
			stray = s;
	}
	if (stray != IDX_NONE && reclaim_stray(b, stray) == 0)
		return stray;
	return IDX_NONE;
}

void session_public_id(uint32_t slot, uint32_t gen, char *out, size_t size)
{
	snprintf(out, size, "s%ug%u", slot, gen);
}

/*
 * A process with @pid is opening a session. If an earlier process with that
 * pid died and its pidfd event is still queued, handle that death first:
 * once this process holds lock words under the same pid, reaping the dead
 * one's words would take a live owner's. (Until its session opens, the new
 * process cannot hold any: it has no session to act in.)
 */
static void reap_reused_pid(struct broker *b, pid_t pid)
{
	uint32_t i;

	for (i = 0; i < b->seg.caps.max_sessions; i++)
		if (b->by_slot[i] && b->by_slot[i]->creator_pid == pid)
			session_died(b, i);
}

int session_open(struct broker *b, const struct proto_open *req, int pidfd, pid_t pid, uid_t uid,
		 uint64_t start_time, struct proto_reply *rep)
{
	const struct creator who = { pid, uid, start_time };
	uint32_t slot, gen;
	struct seg_session *s;
	uint8_t id[16];
	int err;

	reap_reused_pid(b, pid);
	slot = free_slot(b);
	if (slot == IDX_NONE) {
		blog(LOG_WARNING, "session table full (--max-sessions=%u)",
		     b->seg.caps.max_sessions);
		return -LOCAL_EMAXSESSIONS;
	}
	if (getrandom(id, sizeof(id), 0) != sizeof(id))
		return -EAGAIN;
	s = &b->seg.sessions[slot];
	gen = SESS_GEN(atomic_load(&s->state_gen)) + 1;
	memcpy(s->id, id, sizeof(id));
	memcpy(s->name, req->name, sizeof(s->name));
	s->pid = (req->flags & LOCAL_SESSION_NO_PROCESS_CHECK) ? 0 : pid;
	s->creator_pid = pid;
	s->uid = uid;
	s->start_time = start_time;
	s->created_ns = mono_ns();
	s->ttl_ms = req->ttl_ms;
	s->lock_delay_ms = req->lock_delay_ms;
	s->behavior = req->behavior;
	s->flags = req->flags;
	s->closing_lost = 0;
	atomic_store(&s->renewed_ns, s->created_ns);
	/* Without a process check too, the pidfd stays: the session outlives
	 * its process, but the lock words that process held must not. */
	err = track(b, slot, gen, id, pidfd, &who, req->flags & LOCAL_SESSION_NO_PROCESS_CHECK);
	if (err)
		return err; /* the caller closes pidfd */
	/* Published last: clients check this word before using the slot. */
	atomic_store(&s->state_gen, SESS_PACK(SESS_ACTIVE, gen));
	if (s->ttl_ms)
		broker_schedule(b, s->created_ns + (uint64_t)s->ttl_ms * 1000000ull, TIMER_TTL,
				slot, gen);
	atomic_fetch_add(&b->seg.hdr->stats.sessions_opened, 1);
	rep->slot = slot;
	rep->gen = gen;
	owners_open_reply(b, pid, rep);
	memcpy(rep->id, id, sizeof(id));
	blog(LOG_DEBUG, "session %u opened for pid %d (%s)", slot, (int)pid, s->name);
	return 0;
}

struct sweep_log {
	char keys[512];
	size_t len;
	unsigned count;
};

static void note_key(struct sweep_log *l, const struct seg_key *k)
{
	int n;

	l->count++;
	if (l->len + k->key_len + 3 >= sizeof(l->keys))
		return;
	n = snprintf(l->keys + l->len, sizeof(l->keys) - l->len, "%s%.*s", l->len ? ", " : "",
		     (int)k->key_len, k->key);
	if (n > 0)
		l->len += (size_t)n;
}

/* Is the process that opened the session being swept in @slot still
 * running? As we recorded it: the slot's own fields are a client's to write. */
static bool creator_alive(const struct broker *b, uint32_t slot)
{
	const struct slot_sweep *w = &b->sweeps[slot];
	uint64_t start;

	return w->creator_pid > 0 && w->start_time &&
	       proc_start_time(w->creator_pid, &start) == 0 && start == w->start_time;
}

/* Remove one node of a closing session from its key; returns a node to wake. */

static uint32_t sweep_node_locked(struct broker *b, struct seg_key *k, uint32_t i, bool lost,
				  struct sweep_log *log, bool *busy)
{
	struct segment *seg = &b->seg;
	struct seg_node *n = &seg->nodes[i];
	uint64_t w = atomic_load(&n->word);
	uint32_t wake = IDX_NONE;

	switch (NODE_STATE(w)) {
	case NODE_CLAIMED:
		/* Claimed under this mutex by an operation that died in it. */
		atomic_compare_exchange_strong(&n->word, &w, 0);
		break;
	case NODE_FAST_CLAIMED:
		/* Not named by the fast word (key_lock() made a named one, a
		 * lock-free hold, NODE_HOLDING): a lock-free acquire filling it
		 * in, or a lock-free release about to free it, without the
		 * mutex. If its process lives, that thread frees it (with a
		 * plain store); freeing it here could let its next stores land
		 * on a node someone else claimed. */
		if (creator_alive(b, NODE_SESSION(w) % seg->caps.max_sessions))
			*busy = true;
		else
			atomic_compare_exchange_strong(&n->word, &w, 0);
		break;
	case NODE_HOLDING:
		if (k->kind == LOCAL_KIND_LOCK && k->h_head != i) {
			/* Not the holder the fast word names: same as above. */
			atomic_compare_exchange_strong(&n->word, &w, 0);
			break;
		}
		note_key(log, k);
		wake = key_release_hold_locked(seg, k, i, REL_SESSION_END | (lost ? REL_LOST : 0));
		break;
	case NODE_WAITING:
		queue_unlink_locked(seg, k, i);
		atomic_store(&n->word, 0);
		k->waiters--;
		key_touch_locked(k);
		wake = i; /* a thread of a closing session may sleep there */
		break;
	case NODE_WATCHING:
		/* A watch of a session that ended: it must not pin the key. A
		 * thread still in local_watch() wakes on the change and leaves. */
		if (atomic_compare_exchange_strong(&n->word, &w, 0))
			atomic_fetch_sub(&k->watchers, 1);
		key_touch_locked(k);
		futex_wake(key_change_futex(k), INT32_MAX); /* even if it was the last */
		break;
	case NODE_GRANTED:
		/* Handed a hold its process never took up: nobody acted under
		 * it, so it goes back without lock-delay. */
		if (n->hold < seg->nnodes &&
		    atomic_load(&seg->nodes[n->hold].word) ==
			    NODE_PACK(NODE_HOLDING, NODE_SESSION(w), NODE_KEY(w)))
			wake = key_release_hold_locked(seg, k, n->hold, REL_SESSION_END);
		/* Its thread may still sleep there (a process that lives, its
		 * session ended by a TTL or an operator) with nobody to wake
		 * it: a granter that died before its wake-up call leaves that
		 * to the broker, whose wake finds no granted node once this
		 * one is freed. Woken, it finds its node gone and returns. */
		if (atomic_compare_exchange_strong(&n->word, &w, 0))
			waiter_wake(seg, i);
		break;
	}
	return wake;
}

/*
 * Release everything @slot holds and remove its queued requests. The slot is
 * marked CLOSING first, so no client can link a new node for it while we scan
 * (see grant_uncontended_locked()). b->sweeps[slot] names its process (zero:
 * none known); a key that is busy leaves the sweep pending there, retried by
 * TIMER_SWEEP, and the slot ours until it ends. 0, or -EBUSY then.
 */
static int sweep(struct broker *b, uint32_t slot, uint32_t gen, bool lost, const char *why)
{
	struct segment *seg = &b->seg;
	struct seg_session *s = &seg->sessions[slot];
	struct slot_sweep *pend = &b->sweeps[slot];
	uint64_t sg = SESS_PACK(SESS_CLOSING, gen);
	struct sweep_log log = { .len = 0 };
	uint32_t step, busy = 0, quiet;
	char id[33];
	int r;

	s->closing_lost = lost;
	atomic_store(&s->state_gen, sg);
	/* Waiter nodes first: a grant the dead process never took up returns
	 * its hold without lock-delay, before the hold itself is visited as a
	 * lost one (found by the spin model). */
	for (step = 0; step < seg->nnodes; step++) {
		uint32_t i = (step + seg->caps.max_holds) % seg->nnodes;
		uint64_t w = atomic_load(&seg->nodes[i].word);
		uint32_t wake[64], nwake = 0, j;
		struct seg_key *k;

		if (!w || NODE_SESSION(w) != slot)
			continue;
		k = seg_key_at(seg, NODE_KEY(w));
		r = k ? key_lock_timed(seg, k, BROKER_LOCK_MS) : -LOCAL_ECORRUPT;
		if (r == -ETIMEDOUT) {
			busy++; /* someone sits in this key's mutex: come back */
			continue;
		}
		if (r) {
			/* A node pointing at no usable key (quarantined): just
			 * free it; but one in flight (unnamed, lock-free: a key
			 * handle keeps one between holds) is its process's to
			 * free while that process lives, as in
			 * sweep_node_locked(), and as a reset leaves it. */
			if (NODE_STATE(w) == NODE_FAST_CLAIMED && k &&
			    !seg_node_is_hold(seg, i, w) && creator_alive(b, slot)) {
				busy++;
				continue;
			}
			atomic_compare_exchange_strong(&seg->nodes[i].word, &w, 0);
			continue;
		}
		w = atomic_load(&seg->nodes[i].word);
		if (w && NODE_SESSION(w) == slot && seg_key_at(seg, NODE_KEY(w)) == k) {
			bool in_flight = false;
			uint32_t x = sweep_node_locked(b, k, i, lost, &log, &in_flight);

			busy += in_flight;
			if (x != IDX_NONE)
				wake[nwake++] = x;
			nwake += key_grant_pending_locked(seg, k, wake + nwake, 63);
		}
		if (k->delay_until_ns > mono_ns())
			broker_schedule(b, k->delay_until_ns, TIMER_DELAY, seg_key_index(seg, k),
					0);
		/* Wake under the mutex: a broker dying in between leaves it
		 * EOWNERDEAD, and repair wakes the granted waiters. */
		for (j = 0; j < nwake; j++)
			waiter_wake(seg, wake[j]);
		key_unlock(k);
	}
	session_public_id(slot, gen, id, sizeof(id));
	if (busy) {
		/* Stay CLOSING (no new nodes can appear) and retry the rest,
		 * saying so less and less often while it lasts. */
		pend->pending = true;
		pend->lost = lost;
		pend->gen = gen;
		if (blog_backoff_allow(&pend->busy_log, mono_ns(), &quiet))
			blog(LOG_WARNING,
			     "session %s: %u key(s) busy (a stalled process, one of its "
			     "operations in flight, or a key handle's kept node); retrying "
			     "(%u such line(s) left out)",
			     id, busy, quiet);
		broker_schedule(b, mono_ns() + 1000000000ull, TIMER_SWEEP, slot, gen);
		return -EBUSY;
	}
	if (log.count)
		blog(lost ? LOG_NOTICE : LOG_DEBUG, "session %s (%s, pid %d) %s; released %u: %s",
		     id, s->name, s->pid, why, log.count, log.keys);
	else
		blog(lost ? LOG_INFO : LOG_DEBUG, "session %s (%s, pid %d) %s", id, s->name, s->pid,
		     why);
	memset(s->id, 0, sizeof(s->id));
	atomic_store(&s->state_gen, SESS_PACK(SESS_FREE, gen));
	atomic_fetch_add(&seg->hdr->stats.sessions_closed, 1);
	memset(pend, 0, sizeof(*pend));
	return 0;
}

/* Begin the sweep of @slot, whose process is @who (NULL: none known). */
static int sweep_slot(struct broker *b, uint32_t slot, uint32_t gen, const struct creator *who,
		      bool lost, const char *why)
{
	struct slot_sweep *pend = &b->sweeps[slot];

	memset(pend, 0, sizeof(*pend));
	if (who) {
		pend->creator_pid = who->pid;
		pend->start_time = who->start_time;
	}
	return sweep(b, slot, gen, lost, why);
}

void session_sweep_due(struct broker *b, uint32_t slot, uint32_t gen)
{
	const struct slot_sweep *pend;

	if (slot >= b->seg.caps.max_sessions)
		return;
	pend = &b->sweeps[slot];
	if (pend->pending && pend->gen == gen)
		sweep(b, slot, gen, pend->lost, "cleaned up after a stalled key was freed");
}

static void end_session(struct broker *b, uint32_t slot, bool lost, const char *why)
{
	struct bsession *bs;
	struct creator who;
	uint32_t gen;

	faces_session_ended(b, slot); /* its requests in flight end first */
	bs = b->by_slot[slot];
	if (!bs)
		return;
	who = (struct creator){ bs->creator_pid, bs->uid, bs->start_time };
	gen = bs->gen;
	forget(b, bs);
	sweep_slot(b, slot, gen, &who, lost, why);
}

/*
 * A slot that is not free, but that no session of ours owns and we owe no
 * sweep: a client wrote it (marked a free slot live, or a slot it does not
 * own CLOSING). Nothing in it is believed: what is linked under its number
 * is released as a closing session's would be (without lock-delay: no
 * session of ours lost anything), and it is freed. 0, or -EBUSY: the sweep
 * continues later, and the slot stays ours to free.
 */
static int reclaim_stray(struct broker *b, uint32_t slot)
{
	uint32_t gen = SESS_GEN(atomic_load(&b->seg.sessions[slot].state_gen));

	return sweep_slot(b, slot, gen, NULL, false,
			  "reclaimed: marked in use, but no session of this broker's");
}

void sessions_reclaim_untracked(struct broker *b)
{
	static struct blog_backoff said; /* a client may keep at it */
	uint32_t i, n = 0, quiet;

	for (i = 0; i < b->seg.caps.max_sessions; i++) {
		if (b->by_slot[i] || b->sweeps[i].pending ||
		    SESS_STATE(atomic_load(&b->seg.sessions[i].state_gen)) == SESS_FREE)
			continue;
		reclaim_stray(b, i);
		n++;
	}
	if (n && blog_backoff_allow(&said, mono_ns(), &quiet))
		blog(LOG_WARNING,
		     "%u session slot(s) marked in use that no session of this "
		     "broker owns (a client wrote the table): reclaimed (%u such line(s) left "
		     "out)",
		     n, quiet);
}

uint32_t session_slot_of(struct broker *b, const uint8_t id[16])
{
	struct cds_lfht_iter it;
	struct cds_lfht_node *node;
	uint32_t slot = IDX_NONE;

	urcu_memb_read_lock();
	cds_lfht_lookup(b->by_id, id_hash(id), id_match, id, &it);
	node = cds_lfht_iter_get_node(&it);
	if (node)
		slot = caa_container_of(node, struct bsession, node)->slot;
	urcu_memb_read_unlock();
	return slot;
}

int session_close_id(struct broker *b, const uint8_t id[16], bool voluntary)
{
	uint32_t slot = session_slot_of(b, id);

	if (slot == IDX_NONE)
		return -LOCAL_ESESSION;
	end_session(b, slot, !voluntary, voluntary ? "closed" : "destroyed by an operator");
	return 0;
}

void session_end_slot(struct broker *b, uint32_t slot, bool lost, const char *why)
{
	if (slot < b->seg.caps.max_sessions && b->by_slot[slot])
		end_session(b, slot, lost, why);
}

/*
 * Keys with room, a queue and no lock-delay: a grant that found the hold
 * table full stopped there ("retried on the next release"), but on such a
 * key no release may ever come. Read without locks, as a hint.
 */
void grant_stranded(struct broker *b)
{
	uint32_t i;

	for (i = 0; i < b->seg.caps.max_keys; i++) {
		const struct seg_key *k = &b->seg.keys[i];

		if (atomic_load(&k->state) == KEY_USED && k->waiters && k->holders < k->limit &&
		    k->delay_until_ns <= mono_ns())
			key_delay_due(b, i);
	}
}

void repair_dead_mutexes(struct broker *b)
{
	uint32_t n = segment_repair_dead_mutexes(&b->seg), w;

	if (n)
		blog(LOG_NOTICE, "repaired %u key(s) whose mutex owner died mid-operation", n);
	/* A releaser wakes its waiter after unlocking the key: one that died
	 * in between left the new holder asleep (and no mutex to repair). */
	w = segment_wake_granted(&b->seg);
	if (w)
		blog(LOG_INFO, "woke %u granted waiter(s) left asleep", w);
}

int force_release(struct broker *b, const struct proto_force_release *req)
{
	struct segment *seg = &b->seg;
	uint32_t *nodes, *wake, n = 0, nwake = 0, i, steps = 0;
	struct seg_key *k;
	char id[33];
	int err;

	err = keytab_find_timed(seg, req->key, req->key_len, false, &k, BROKER_LOCK_MS);
	if (err)
		return err == -ENOENT ? -LOCAL_ENOTHELD : err; /* -ETIMEDOUT: try again */
	nodes = calloc((size_t)k->holders + 1, sizeof(*nodes));
	wake = calloc((size_t)k->holders + 1, sizeof(*wake));
	if (!nodes || !wake) {
		key_unlock(k);
		free(nodes);
		free(wake);
		return -ENOMEM;
	}
	/* Collect first: each release may hand its node to a waiter. */
	for (i = k->h_head; i < seg->nnodes && n < k->holders && steps++ < seg->nnodes;
	     i = seg->nodes[i].next) {
		struct seg_session *s =
			seg_session_at(seg, NODE_SESSION(atomic_load(&seg->nodes[i].word)));

		if (req->all || (s && !memcmp(s->id, req->holder, sizeof(s->id))))
			nodes[n++] = i;
	}
	for (i = 0; i < n; i++) {
		uint64_t w = atomic_load(&seg->nodes[nodes[i]].word);
		struct seg_session *s = seg_session_at(seg, NODE_SESSION(w));
		uint32_t x;

		if (NODE_STATE(w) != NODE_HOLDING || !s)
			continue;
		session_public_id(NODE_SESSION(w), SESS_GEN(atomic_load(&s->state_gen)), id,
				  sizeof(id));
		blog_audit(LOG_NOTICE, "operator released %.*s from session %s (%s, pid %d)",
			   (int)k->key_len, k->key, id, s->name, s->pid);
		x = key_release_hold_locked(seg, k, nodes[i], REL_LOST);
		if (x != IDX_NONE)
			wake[nwake++] = x;
	}
	if (k->delay_until_ns > mono_ns())
		broker_schedule(b, k->delay_until_ns, TIMER_DELAY, seg_key_index(seg, k), 0);
	for (i = 0; i < nwake; i++)
		waiter_wake(seg, wake[i]);
	key_unlock(k);
	free(nodes);
	free(wake);
	return n ? 0 : -LOCAL_ENOTHELD;
}

/* Has the process behind @fd exited? (-1: it had already.) */
static bool pidfd_exited(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return fd < 0 || poll(&p, 1, 0) == 1;
}

int session_bind(struct broker *b, const uint8_t id[16], pid_t peer, pid_t pid)
{
	uint32_t slot = session_slot_of(b, id);
	struct bsession *bs;
	pid_t parent = 0;
	int fd, err;

	if (slot == IDX_NONE || !(bs = b->by_slot[slot]) || bs->pidfd < 0)
		return -LOCAL_ESESSION;
	/* Only the session's own process, for a child of its own: that child
	 * cannot be reaped, so its pid not reused, while its parent waits for
	 * this answer. */
	if (peer != bs->creator_pid)
		return -LOCAL_EDENIED;
	fd = (int)pidfd_open(pid, 0);
	if (fd < 0)
		return -EINVAL;
	if (proc_parent(pid, &parent) || parent != peer) {
		close(fd);
		return -EINVAL;
	}
	err = watch_process(b, fd, slot);
	if (err) {
		/* Unwatched, the child's exit would go unseen: not bound. */
		blog(LOG_ERR, "cannot watch pid %d (%s): not bound", (int)pid, strerror(-err));
		close(fd);
		return err;
	}
	unwatch_pidfd(b, &bs->bound_pidfd);
	bs->bound_pidfd = fd;
	bs->bound_pid = pid;
	return 0;
}

/*
 * The process of session @slot (generation @gen) has exited, and the session
 * stays (no process check, or a bound process runs): the nodes it had in
 * flight, unnamed lock-free claims (an operation it died in, or the node a
 * key handle kept between holds), are nobody's now, since no other process
 * acts for the session (a child after fork() cannot). Freed as the sweep
 * frees a dead process's at its session's end, instead of staying in use
 * until then; its holds, named ones included, stay the session's. (A claim
 * that died before writing its session_gen is left to that sweep.)
 */
static void drop_in_flight(struct broker *b, uint32_t slot, uint32_t gen)
{
	struct segment *seg = &b->seg;
	uint32_t i;

	for (i = 0; i < seg->caps.max_holds; i++) {
		struct seg_node *n = &seg->nodes[i];
		uint64_t w = atomic_load(&n->word);

		if (NODE_STATE(w) != NODE_FAST_CLAIMED || NODE_SESSION(w) != slot ||
		    n->session_gen != gen || seg_node_is_hold(seg, i, w))
			continue;
		/* Its process is gone: nothing names it again. */
		atomic_compare_exchange_strong(&n->word, &w, 0);
	}
}

void session_died(struct broker *b, uint32_t slot)
{
	struct bsession *bs;
	bool main_gone;

	if (slot >= b->seg.caps.max_sessions || !(bs = b->by_slot[slot]))
		return;
	/* A stale event from this epoll batch may name a slot that a new
	 * session took meanwhile: only a readable pidfd means death. */
	main_gone = bs->pidfd >= 0 && pidfd_exited(bs->pidfd);
	if (bs->bound_pidfd >= 0 && pidfd_exited(bs->bound_pidfd)) {
		unwatch_pidfd(b, &bs->bound_pidfd);
		if (bs->pidfd >= 0 && !main_gone)
			return; /* the session's own process still runs */
	} else if (!main_gone) {
		return;
	}
	if (main_gone) {
		/* First the lock words it died inside of: marked, the sweep
		 * below (or whoever comes first) takes them and repairs. */
		segment_mark_gone_owners(&b->seg);
		unwatch_pidfd(b, &bs->pidfd);
	}
	if (bs->no_process_check || bs->bound_pidfd >= 0) {
		/* No process check (the session outlives its process), or a
		 * bound process still runs: only the locks were its. */
		if (bs->bound_pidfd >= 0)
			blog(LOG_INFO,
			     "session slot %u: its process exited; kept until pid %d, "
			     "bound to it, exits too",
			     slot, (int)bs->bound_pid);
		if (main_gone)
			drop_in_flight(b, slot, bs->gen);
		repair_dead_mutexes(b);
		return;
	}
	atomic_fetch_add(&b->seg.hdr->stats.crash_cleanups, 1);
	/* Sweep first: it wakes the next waiters; then the keys the process
	 * may have died inside of without holding anything there. */
	end_session(b, slot, true, "invalidated: its process exited");
	repair_dead_mutexes(b);
}

void session_ttl_due(struct broker *b, uint32_t slot, uint32_t gen)
{
	struct seg_session *s = seg_session_at(&b->seg, slot);
	uint64_t due;

	if (!s || !b->by_slot[slot] || b->by_slot[slot]->gen != gen)
		return; /* ended already */
	due = atomic_load(&s->renewed_ns) + (uint64_t)s->ttl_ms * 1000000ull;
	if (due > mono_ns()) {
		broker_schedule(b, due, TIMER_TTL, slot, gen); /* renewed meanwhile */
		return;
	}
	atomic_fetch_add(&b->seg.hdr->stats.ttl_expiries, 1);
	end_session(b, slot, true, "invalidated: TTL expired");
}

void key_delay_due(struct broker *b, uint32_t idx)
{
	struct seg_key *k = seg_key_at(&b->seg, idx);
	uint32_t wake[64], n, i;

	if (!k || atomic_load(&k->state) != KEY_USED)
		return;
	if (key_lock_timed(&b->seg, k, BROKER_LOCK_MS)) {
		broker_schedule(b, mono_ns() + 100000000ull, TIMER_DELAY, idx, 0);
		return;
	}
	if (k->delay_until_ns > mono_ns()) {
		broker_schedule(b, k->delay_until_ns, TIMER_DELAY, idx, 0);
		n = 0;
	} else {
		n = key_grant_pending_locked(&b->seg, k, wake, 64);
	}
	for (i = 0; i < n; i++)
		waiter_wake(&b->seg, wake[i]);
	key_unlock(k);
	if (n == 64)
		broker_schedule(b, 0, TIMER_DELAY, idx, 0); /* more to grant */
}

/*
 * A pidfd on @pid if it is the process that the slot @s says opened its
 * session, by what the kernel says of it: the start time and uid recorded
 * (a slot of ours never records a start time of 0), and it maps this
 * segment, as a client does while its session is open. A client that wrote
 * another live process into a slot (pid 1, its real start time and uid)
 * names one that does not. Only where /proc will not show the mappings
 * (another user's process, and we are not root) are start time and uid
 * enough. -1 otherwise; *@who filled in on success.
 */
static int adopt_pidfd(const struct broker *b, const struct seg_session *s, pid_t pid,
		       struct creator *who)
{
	uint64_t start;
	uid_t uid;
	int fd = pid > 0 && s->start_time ? (int)pidfd_open(pid, 0) : -1, mapped;

	if (fd < 0)
		return -1;
	mapped = proc_maps_fd(pid, b->shm_fd);
	if (proc_start_time(pid, &start) || start != s->start_time || proc_euid(pid, &uid) ||
	    uid != s->uid || !(mapped == 1 || mapped == -EACCES) || pidfd_exited(fd)) {
		/* Gone, reused, or not the process the slot names; the pidfd
		 * still open last says the reads above were of that process. */
		close(fd);
		return -1;
	}
	*who = (struct creator){ pid, uid, start };
	return fd;
}

void sessions_adopt(struct broker *b)
{
	struct segment *seg = &b->seg;
	unsigned adopted = 0, dead = 0;
	uint64_t now = mono_ns();
	uint32_t i;

	for (i = 0; i < seg->caps.max_sessions; i++) {
		struct seg_session *s = &seg->sessions[i];
		uint64_t sg = atomic_load(&s->state_gen);
		struct creator who = { 0 };
		int fd = -1;

		if (SESS_STATE(sg) == SESS_CLOSING) {
			/* Its process, if the kernel agrees with the slot: a node
			 * it is filling in must not be freed under it. */
			fd = adopt_pidfd(b, s, s->creator_pid, &who);
			if (fd >= 0)
				close(fd);
			sweep_slot(b, i, SESS_GEN(sg), fd >= 0 ? &who : NULL, s->closing_lost,
				   "closed (finished after broker restart)");
			continue;
		}
		if (SESS_STATE(sg) != SESS_ACTIVE)
			continue;
		if (!seg_session_sane(s)) {
			/* Written over while we were down: trust nothing in it. */
			blog(LOG_WARNING, "session slot %u damaged (%s); ending it", i,
			     seg_session_problem(s));
			sweep_slot(b, i, SESS_GEN(sg), NULL, true,
				   "ended: its slot was found damaged at restart");
			continue;
		}
		if (s->pid &&
		    (s->pid != s->creator_pid || (fd = adopt_pidfd(b, s, s->pid, &who)) < 0)) {
			dead++;
			atomic_fetch_add(&seg->hdr->stats.crash_cleanups, 1);
			sweep_slot(b, i, SESS_GEN(sg), NULL, true,
				   "invalidated: its process exited while the broker was down, or "
				   "is not the one its slot names");
			continue;
		}
		/* No process check: watch its process for the lock words only
		 * (gone already: repair_dead_mutexes() below finds them). */
		if (!s->pid)
			fd = adopt_pidfd(b, s, s->creator_pid, &who);
		if (track(b, i, SESS_GEN(sg), s->id, fd, &who, !s->pid)) {
			if (fd >= 0)
				close(fd);
			/* Its process, when known, may live: a node it has in
			 * flight (a key handle keeps one) waits for it. */
			sweep_slot(b, i, SESS_GEN(sg), fd >= 0 ? &who : NULL, true,
				   "ended: its process cannot be watched");
			continue;
		}
		if (s->ttl_ms)
			broker_schedule(
				b, atomic_load(&s->renewed_ns) + (uint64_t)s->ttl_ms * 1000000ull,
				TIMER_TTL, i, SESS_GEN(sg));
		adopted++;
	}
	repair_dead_mutexes(b);
	/* Resume lock-delays and grant what a dead broker left pending. */
	for (i = 0; i < seg->caps.max_keys; i++) {
		struct seg_key *k = &seg->keys[i];

		if (atomic_load(&k->state) != KEY_USED)
			continue;
		if (k->delay_until_ns > now)
			broker_schedule(b, k->delay_until_ns, TIMER_DELAY, i, 0);
		else if (k->waiters)
			key_delay_due(b, i);
	}
	if (adopted || dead)
		blog(LOG_NOTICE, "re-adopted %u live sessions, cleaned up %u dead ones", adopted,
		     dead);
}
