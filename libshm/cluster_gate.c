// SPDX-License-Identifier: MIT
/*
 * Cluster keys, the client's side (docs/cluster.md): which keys are
 * cluster keys (the prefixes the broker published in the segment header), and
 * the bell that tells the broker's cluster thread to look at them. The gate
 * itself is cluster_gated() (keyops.h); the broker's side is
 * broker/cluster_*.c.
 */
#include <string.h>

#include "futex.h"
#include "keyops.h"

static void ring(struct seg_header *h, uint32_t what)
{
	atomic_fetch_add(&h->cluster_bell, what);
	/* After the add, as broker_ring(): a listener that announced itself
	 * is woken, one that did not re-reads the bell. */
	if (atomic_load(&h->cluster_listening))
		futex_wake(&h->cluster_bell, 1);
}

void cluster_ring(struct seg_header *h)
{
	ring(h, CLUSTER_BELL_FIND);
}

void cluster_ring_release(struct seg_header *h)
{
	ring(h, 1);
}

bool cluster_prefix_match(const struct segment *seg, const char *key, size_t len)
{
	const struct seg_header *h = seg->hdr;
	uint32_t n = __atomic_load_n(&h->cluster_nprefix, __ATOMIC_ACQUIRE), i;

	/* Bounded whatever a peer wrote: the counts are clamped here. */
	if (n > SEG_CLUSTER_PREFIXES)
		n = SEG_CLUSTER_PREFIXES;
	for (i = 0; i < n; i++) {
		uint32_t plen = h->cluster_prefix_len[i];

		if (plen && plen < SEG_CLUSTER_PREFIX_MAX && plen <= len &&
		    !memcmp(key, h->cluster_prefix[i], plen))
			return true;
	}
	return false;
}
