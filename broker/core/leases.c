// SPDX-License-Identifier: MIT
/*
 * Lease expiry. Clients mark a hold node in the lease bitmap and ring the
 * segment's doorbell (lease_note()); a small thread sleeps on that futex and
 * turns each ring into an eventfd event for the loop, which drains the
 * bitmap into the timer heap. When a deadline comes, the hold is re-checked
 * under its key mutex: renewed holds are re-armed, expired ones released with
 * lock-delay. Cost grows with the leases that fall due, not with the holds.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <syslog.h>
#include <unistd.h>

#include "broker.h"
#include "clock.h"
#include "futex.h"

/* Rings within this window after a wake-up are taken together, so a client
 * taking leased locks in a loop costs the broker at most ~2000 wake-ups a
 * second (the ring that wakes the thread is passed on at once, the ones
 * that follow within the window together). */
#define DOORBELL_COALESCE_NS 1000000L

static void *doorbell_thread(void *arg)
{
	const struct timespec coalesce = { 0, DOORBELL_COALESCE_NS };
	struct broker *b = arg;
	struct seg_header *h = b->seg.hdr;
	uint64_t one = 1;
	uint32_t v;

	while (!atomic_load(&b->leases_stop)) {
		/* Snapshot, then have the loop drain: a ring after the snapshot
		 * changes the doorbell, so we do not sleep through it. The first
		 * round drains what was noted before this thread started. */
		v = atomic_load(&h->broker_doorbell);
		if (write(b->lease_efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			break;
		atomic_store(&h->broker_listening, 1);
		if (atomic_load(&h->broker_doorbell) == v && !atomic_load(&b->leases_stop))
			futex_wait_until(&h->broker_doorbell, v, 0);
		atomic_store(&h->broker_listening, 0);
		/* Tell the loop at once (an HTTP client may be waiting on this
		 * grant), then let the rings of the next millisecond gather:
		 * the write at the top of the loop covers them. */
		if (write(b->lease_efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			break;
		nanosleep(&coalesce, NULL);
	}
	return NULL;
}

/*
 * One heap entry per node at a time: b->lease_at[i] is the deadline the heap
 * holds for node i. A later deadline needs no new entry (the earlier one
 * fires, re-checks and re-arms), so the heap stays within the node count
 * however often leases are taken and renewed.
 */
static void schedule_at(struct broker *b, uint32_t i, uint64_t at)
{
	if (b->lease_at[i] && b->lease_at[i] <= at)
		return;
	b->lease_at[i] = at;
	broker_schedule(b, at, TIMER_LEASE, i, 0);
}

static void schedule_node(struct broker *b, uint32_t i)
{
	uint64_t until = b->seg.nodes[i].lease_until_ns;

	if (until)
		schedule_at(b, i, until);
}

/* After a restart: every leased hold recorded in the segment. */
static void rescan(struct broker *b)
{
	uint32_t i;

	for (i = 0; i < b->seg.nnodes; i++)
		if (NODE_STATE(atomic_load(&b->seg.nodes[i].word)) == NODE_HOLDING)
			schedule_node(b, i);
}

/* The doorbell thread's eventfd: leases to schedule, and grants to waiters
 * the faces armed. */
static void doorbell_rang(struct broker *b, int fd, uint32_t events, void *ctx)
{
	(void)fd;
	(void)events;
	(void)ctx;
	leases_drain(b);
	faces_doorbell(b);
}

int leases_start(struct broker *b)
{
	int err;

	b->lease_at = calloc(b->seg.nnodes, sizeof(*b->lease_at));
	if (!b->lease_at)
		return -ENOMEM;
	b->lease_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (b->lease_efd < 0)
		return -errno;
	err = loop_watch(b, b->lease_efd, EPOLLIN, doorbell_rang, NULL);
	if (err)
		return err;
	rescan(b);
	err = pthread_create(&b->lease_thread, NULL, doorbell_thread, b);
	if (err)
		return -err;
	b->lease_thread_running = true;
	return 0;
}

void leases_stop(struct broker *b)
{
	if (b->lease_thread_running) {
		atomic_store(&b->leases_stop, true);
		atomic_fetch_add(&b->seg.hdr->broker_doorbell, 1);
		futex_wake(&b->seg.hdr->broker_doorbell, INT32_MAX);
		pthread_join(b->lease_thread, NULL);
		b->lease_thread_running = false;
	}
	if (b->lease_efd >= 0)
		close(b->lease_efd);
	b->lease_efd = -1;
	free(b->lease_at);
	b->lease_at = NULL;
}

void leases_drain(struct broker *b)
{
	uint64_t count;

	if (read(b->lease_efd, &count, sizeof(count)) < 0 && errno != EAGAIN)
		blog(LOG_WARNING, "lease eventfd: %s", strerror(errno));
	leases_collect(b);
}

void leases_collect(struct broker *b)
{
	uint32_t words = (b->seg.nnodes + 63) / 64, w;

	for (w = 0; w < words; w++) {
		/* A load first: most words are 0, and a locked exchange on each
		 * would cost more than the rest of a turn. */
		uint64_t bits = atomic_load_explicit(&b->seg.lease_bits[w], memory_order_relaxed)
					? atomic_exchange(&b->seg.lease_bits[w], 0)
					: 0;

		while (bits) {
			uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(bits);

			bits &= bits - 1;
			if (i < b->seg.nnodes)
				schedule_node(b, i);
		}
	}
}

/* Remember, in the holder's session slot, that this hold expired. */
void record_expiry(struct segment *seg, uint32_t slot, uint32_t key, uint64_t token, uint32_t why)
{
	struct seg_session *s = seg_session_at(seg, slot);
	uint32_t i;

	if (!s)
		return;
	i = atomic_fetch_add(&s->expired_next, 1) % SESS_EXPIRED_SLOTS;
	s->expired[i].token = token;
	s->expired[i].why = why;
	atomic_store(&s->expired[i].key, key + 1);
}

void lease_due(struct broker *b, uint32_t i, uint64_t at)
{
	struct segment *seg = &b->seg;
	struct seg_node *n = seg_node_at(seg, i);
	uint64_t w, now = mono_ns();
	uint32_t wake = IDX_NONE, more[64], nmore = 0, j;
	struct seg_key *k;
	char id[33];
	int r;

	if (!n || b->lease_at[i] != at)
		return; /* superseded by an earlier entry for this node */
	b->lease_at[i] = 0;
	w = atomic_load(&n->word);
	if (NODE_STATE(w) != NODE_HOLDING || !(k = seg_key_at(seg, NODE_KEY(w))))
		return;
	r = key_lock_timed(seg, k, BROKER_LOCK_MS);
	if (r == -LOCAL_ECORRUPT)
		return; /* quarantined: its holds end with it (shmlock reset) */
	if (r) {
		schedule_at(b, i, now + 100000000ull); /* busy: try again */
		return;
	}
	w = atomic_load(&n->word);
	if (NODE_STATE(w) != NODE_HOLDING || NODE_KEY(w) != seg_key_index(seg, k) ||
	    !n->lease_until_ns ||
	    key_find_hold_locked(seg, k, (struct owner){ NODE_SESSION(w), n->session_gen }) ==
		    IDX_NONE) {
		key_unlock(k); /* released, or not a hold any more */
		return;
	}
	if (n->lease_until_ns > now) {
		schedule_at(b, i, n->lease_until_ns); /* renewed */
		key_unlock(k);
		return;
	}
	record_expiry(seg, NODE_SESSION(w), seg_key_index(seg, k), n->token, SESS_EXPIRED_LEASE);
	session_public_id(NODE_SESSION(w), n->session_gen, id, sizeof(id));
	if (blog_allow(&b->expiry_log, now))
		blog(LOG_NOTICE, "lease of %.*s held by session %s expired; released",
		     (int)k->key_len, k->key, id);
	wake = key_release_hold_locked(seg, k, i, REL_LOST);
	nmore = key_grant_pending_locked(seg, k, more, 64);
	if (k->delay_until_ns > now)
		broker_schedule(b, k->delay_until_ns, TIMER_DELAY, seg_key_index(seg, k), 0);
	atomic_fetch_add(&seg->hdr->stats.lease_expiries, 1);
	/* Wake under the mutex (see release_slow() in libshm/api.c). */
	if (wake != IDX_NONE)
		waiter_wake(seg, wake);
	for (j = 0; j < nmore; j++)
		waiter_wake(seg, more[j]);
	key_unlock(k);
}
