// SPDX-License-Identifier: MIT
/* Segment layout: sizing, formatting (broker) and validation (everyone). */
#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lockword.h"
#include "segment.h"

#define ALIGN64(x) (((x) + 63) & ~(uint64_t)63)

/* Documented limits of the broker's capacity flags (shmlockd(8)). */
#define CAP_KEYS_MAX (1u << 22)
#define CAP_SESSIONS_MAX (1u << 20)    /* node words keep 24 bits of slot */
#define CAP_NODES_MAX ((1u << 24) - 1) /* the fast word keeps 24 bits of node + 1 */

int seg_caps_valid(const struct seg_caps *c)
{
	if (c->max_keys < 1 || c->max_keys > CAP_KEYS_MAX)
		return -EINVAL;
	if (c->max_sessions < 1 || c->max_sessions > CAP_SESSIONS_MAX)
		return -EINVAL;
	if (c->max_holds < 1 || c->max_waiters < 1 ||
	    (uint64_t)c->max_holds + c->max_waiters > CAP_NODES_MAX)
		return -EINVAL;
	if (c->max_value > LOCAL_VALUE_MAX)
		return -EINVAL;
	return 0;
}

static uint32_t index_size_for(uint32_t max_keys)
{
	uint32_t n = 16;

	while (n < 2 * max_keys)
		n <<= 1;
	return n;
}

struct layout {
	uint64_t off_sessions, off_keys, off_index, off_nodes, off_values, off_lease_bits;
	uint64_t off_staged, size;
};

static void layout_for(const struct seg_caps *c, struct layout *l)
{
	uint64_t nnodes = (uint64_t)c->max_holds + c->max_waiters;

	l->off_sessions = ALIGN64(sizeof(struct seg_header));
	l->off_keys =
		ALIGN64(l->off_sessions + (uint64_t)c->max_sessions * sizeof(struct seg_session));
	l->off_index = ALIGN64(l->off_keys + (uint64_t)c->max_keys * sizeof(struct seg_key));
	l->off_nodes =
		ALIGN64(l->off_index + (uint64_t)index_size_for(c->max_keys) * sizeof(uint32_t));
	l->off_values = ALIGN64(l->off_nodes + nnodes * sizeof(struct seg_node));
	l->off_lease_bits = ALIGN64(l->off_values + (uint64_t)c->max_keys * 2 * c->max_value);
	l->off_staged = ALIGN64(l->off_lease_bits + (nnodes + 63) / 64 * sizeof(uint64_t));
	l->size = ALIGN64(l->off_staged + (uint64_t)c->max_waiters * c->max_value);
}

size_t seg_size_for(const struct seg_caps *caps)
{
	struct layout l;

	if (seg_caps_valid(caps))
		return 0;
	layout_for(caps, &l);
	return (size_t)l.size;
}

static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int seg_format(void *mem, size_t size, const struct seg_caps *caps)
{
	struct seg_header *h = mem;
	struct segment seg;
	struct layout l;
	uint32_t i, j;

	if (seg_caps_valid(caps))
		return -EINVAL;
	layout_for(caps, &l);
	if (size < l.size)
		return -EINVAL;
	memset(mem, 0, sizeof(*h)); /* a fresh shm object is zero already */
	h->header_size = sizeof(*h);
	h->size = l.size;
	h->caps = *caps;
	h->index_size = index_size_for(caps->max_keys);
	h->session_size = sizeof(struct seg_session);
	h->key_size = sizeof(struct seg_key);
	h->node_size = sizeof(struct seg_node);
	h->off_sessions = l.off_sessions;
	h->off_keys = l.off_keys;
	h->off_index = l.off_index;
	h->off_nodes = l.off_nodes;
	h->off_values = l.off_values;
	h->off_lease_bits = l.off_lease_bits;
	h->off_staged = l.off_staged;
	/* Seeding from the clock keeps tokens growing across segment
	 * re-creation and reboots, not only within one segment's life. */
	h->created_realtime_ns = realtime_ns();
	atomic_store(&h->token_counter, h->created_realtime_ns);
	seg.hdr = h;
	seg.caps = *caps;
	seg.index_size = h->index_size;
	seg.nnodes = caps->max_holds + caps->max_waiters;
	seg.keys = (struct seg_key *)((char *)mem + l.off_keys);
	seg.nodes = (struct seg_node *)((char *)mem + l.off_nodes);
	for (i = 0; i < caps->max_keys; i++) {
		seg.keys[i].q_head = seg.keys[i].q_tail = seg.keys[i].h_head = IDX_NONE;
		for (j = 0; j < SEG_KEY_SLOTS; j++)
			atomic_store(seg_key_slot(&seg.keys[i], j), FAST_SLOW);
	}
	for (i = 0; i < seg.nnodes; i++) {
		seg.nodes[i].next = IDX_NONE;
		seg.nodes[i].prev = IDX_NONE;
		seg.nodes[i].hold = IDX_NONE;
	}
	h->abi = SEG_ABI;
	/* The magic goes last: a half-formatted segment never validates. */
	atomic_thread_fence(memory_order_release);
	h->magic = SEG_MAGIC;
	return 0;
}

int seg_bind(struct segment *seg, void *mem, size_t size)
{
	const struct seg_header *h = mem;
	struct layout l;

	if (size < sizeof(*h) || h->magic != SEG_MAGIC)
		return -LOCAL_ECORRUPT;
	if (h->abi != SEG_ABI)
		return -LOCAL_EVERSION;
	if (h->header_size != sizeof(*h) || h->session_size != sizeof(struct seg_session) ||
	    h->key_size != sizeof(struct seg_key) || h->node_size != sizeof(struct seg_node))
		return -LOCAL_EVERSION;
	if (seg_caps_valid(&h->caps))
		return -LOCAL_ECORRUPT;
	/* Recompute the layout from the caps; never follow stored offsets that
	 * disagree with it. */
	layout_for(&h->caps, &l);
	if (l.size > size || h->size != l.size || h->off_sessions != l.off_sessions ||
	    h->off_keys != l.off_keys || h->off_index != l.off_index ||
	    h->off_nodes != l.off_nodes || h->off_values != l.off_values ||
	    h->off_lease_bits != l.off_lease_bits || h->off_staged != l.off_staged ||
	    h->index_size != index_size_for(h->caps.max_keys))
		return -LOCAL_ECORRUPT;
	seg->hdr = (struct seg_header *)mem;
	seg->size = size;
	seg->caps = h->caps;
	seg->index_size = h->index_size;
	seg->nnodes = h->caps.max_holds + h->caps.max_waiters;
	seg->sessions = (struct seg_session *)((char *)mem + l.off_sessions);
	seg->keys = (struct seg_key *)((char *)mem + l.off_keys);
	seg->index = (_Atomic uint32_t *)((char *)mem + l.off_index);
	seg->nodes = (struct seg_node *)((char *)mem + l.off_nodes);
	seg->values = (char *)mem + l.off_values;
	seg->lease_bits = (_Atomic uint64_t *)((char *)mem + l.off_lease_bits);
	seg->staged = (char *)mem + l.off_staged;
	seg->lock_timeout_ms = 0;
	seg->lock_budget_ns = 0;
	seg->lock_budgeted = false;
	/* Rings go to the broker (the broker's loop turns ring_local on). */
	seg->ring_local = false;
	seg->rung_local = false;
	/* Until a session says how the broker sees us: our own pid. */
	seg->lock_self = (uint32_t)getpid();
	seg->lock_judge = &lw_pid_judge;
	return 0;
}

void seg_cluster_set_prefixes(struct seg_header *h, const char (*prefixes)[SEG_CLUSTER_PREFIX_MAX],
			      uint32_t n)
{
	uint32_t i;

	if (n > SEG_CLUSTER_PREFIXES)
		n = SEG_CLUSTER_PREFIXES;
	/* None while they change: a key created meanwhile is not a cluster
	 * key, and the broker re-reads every key after (publish_prefixes()). */
	__atomic_store_n(&h->cluster_nprefix, 0, __ATOMIC_RELEASE);
	for (i = 0; i < n; i++) {
		size_t len = strnlen(prefixes[i], SEG_CLUSTER_PREFIX_MAX - 1);

		memset(h->cluster_prefix[i], 0, SEG_CLUSTER_PREFIX_MAX);
		memcpy(h->cluster_prefix[i], prefixes[i], len);
		h->cluster_prefix_len[i] = (uint32_t)len;
	}
	__atomic_store_n(&h->cluster_nprefix, n, __ATOMIC_RELEASE);
}
