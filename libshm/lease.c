// SPDX-License-Identifier: MIT
/*
 * Leases on holds. A hold's deadline lives in its node; the broker keeps a
 * heap of deadlines and expires holds within milliseconds of them. Clients
 * tell the broker about a new (or earlier) deadline by setting the node's bit
 * in the segment's lease bitmap and ringing its doorbell; a later deadline
 * (the usual renew) needs no message: the broker re-checks the node when the
 * old deadline comes and re-arms. So the broker's work grows with the leases
 * that fall due, not with the holds.
 */
#include <errno.h>

#include "client.h"
#include "clock.h"
#include "futex.h"

void broker_ring(struct seg_header *h)
{
	atomic_fetch_add(&h->broker_doorbell, 1);
	/* After the add: a broker thread that announced itself before it
	 * went to sleep is woken; one that did not re-reads the doorbell. */
	if (atomic_load(&h->broker_listening))
		futex_wake(&h->broker_doorbell, 1);
}

void seg_ring(struct segment *seg)
{
	if (seg->ring_local)
		seg->rung_local = true; /* the broker's loop looks before it sleeps */
	else
		broker_ring(seg->hdr);
}

void lease_note(struct segment *seg, uint32_t node)
{
	atomic_fetch_or(&seg->lease_bits[node / 64], 1ull << (node % 64));
	seg_ring(seg);
}

uint64_t lease_deadline(uint32_t lease_ms)
{
	return lease_ms ? mono_ns() + (uint64_t)lease_ms * 1000000ull : 0;
}

int local_renew(local_session *s, const char *key, uint32_t lease_ms, uint64_t *remaining_ms)
{
	struct seg_node *n;
	struct seg_key *k;
	uint64_t old;
	uint32_t h, len;
	size_t klen;
	int err;

	err = api_enter(s, key, &klen);
	if (err)
		return err;
	err = keytab_find(s->seg, key, klen, false, &k);
	if (err)
		return err == -ENOENT
			       ? (session_is(s->seg, s->who) ? -LOCAL_ENOTHELD : -LOCAL_ESESSION)
			       : err;
	h = key_find_hold_locked(s->seg, k, s->who);
	if (h == IDX_NONE) {
		key_unlock(k);
		return api_not_held(s, seg_key_index(s->seg, k), true);
	}
	n = &s->seg->nodes[h];
	len = lease_ms ? lease_ms : n->lease_ms;
	if (!len) {
		key_unlock(k);
		return -EINVAL; /* no lease to renew, and no length given */
	}
	/* Under the key mutex: the broker expires leases under it too, so a
	 * renew either lands before the expiry or finds the hold gone. */
	old = n->lease_until_ns;
	n->lease_until_ns = lease_deadline(len);
	n->lease_ms = len;
	if (!old || n->lease_until_ns < old)
		lease_note(s->seg, h);
	key_unlock(k);
	if (remaining_ms)
		*remaining_ms = len;
	return 0;
}
