// SPDX-License-Identifier: MIT
/*
 * libFuzzer target: a segment whose contents are hostile. The input first
 * overwrites the header (must be refused or accepted consistently), then,
 * on a freshly formatted small segment, arbitrary bytes land in one key
 * entry (its lock word included) and a few nodes; locking that key (which checks, repairs or
 * quarantines it) and running repair must never crash, hang or read out of
 * bounds (ASan), whatever the bytes say.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "keyops.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct seg_caps caps = {
	.max_keys = 4, .max_sessions = 4, .max_waiters = 4, .max_holds = 4, .max_value = 16
};

static void *arena(size_t *size)
{
	static void *mem;
	static size_t sz;

	if (!mem) {
		sz = seg_size_for(&caps);
		mem = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (mem == MAP_FAILED)
			abort();
	}
	*size = sz;
	return mem;
}

/* Bytes into a struct from @skip on. */
static size_t scribble(void *dst, size_t skip, size_t len, const uint8_t *data, size_t size)
{
	size_t n = size < len - skip ? size : len - skip;

	memcpy((char *)dst + skip, data, n);
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct segment seg;
	struct seg_key *k;
	size_t sz, used;
	void *mem = arena(&sz);
	uint32_t i;

	/* Fresh each run: nothing (a lock word left held) carries over. */
	memset(mem, 0, sz);
	if (seg_format(mem, sz, &caps) || seg_bind(&seg, mem, sz))
		abort();
	/* 1: a damaged header is refused, or describes the same layout. */
	if (size >= 64) {
		struct seg_header saved = *seg.hdr;
		struct segment other;

		memcpy((char *)seg.hdr + 8, data, 56);
		if (seg_bind(&other, mem, sz) == 0 && other.nnodes != seg.nnodes)
			abort();
		*seg.hdr = saved;
	}
	/* 2: a damaged key entry and nodes. */
	/* The lock word too: it names an owner pid and is never followed. A
	 * live owner it names (this process, init) is not waited for: as the
	 * broker's event loop with its turn's budget spent, each lock is one
	 * try and one look at the owner. */
	seg.lock_budgeted = true;
	seg.lock_budget_ns = 0;
	k = &seg.keys[1];
	used = scribble(k, 0, sizeof(*k), data, size);
	data += used;
	size -= used;
	for (i = 0; i < seg.nnodes && size; i++) {
		used = scribble(&seg.nodes[i], 0, sizeof(seg.nodes[i]), data, size);
		data += used;
		size -= used;
	}
	if (key_lock(&seg, k) == 0)
		key_unlock(k);
	for (i = 0; i < caps.max_keys; i++)
		if (key_lock(&seg, &seg.keys[i]) == 0)
			key_unlock(&seg.keys[i]);
	return 0;
}
