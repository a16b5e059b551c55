// SPDX-License-Identifier: MIT
/* Units without a broker: segment layout, protocol decoding, errors. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "client.h"
#include "harness.h"
#include "lockword.h"
#include "proto.h"

static const struct seg_caps small_caps = {
	.max_keys = 8, .max_sessions = 4, .max_waiters = 8, .max_holds = 8, .max_value = 32
};

static void *map_anon(size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	CHECK(p != MAP_FAILED);
	return p;
}

TEST(unit, caps_are_range_checked, 10)
{
	struct seg_caps c = small_caps;

	CHECK_OK(seg_caps_valid(&c));
	c.max_keys = 0;
	CHECK_RC(seg_caps_valid(&c), -EINVAL);
	c = small_caps;
	c.max_value = LOCAL_VALUE_MAX + 1;
	CHECK_RC(seg_caps_valid(&c), -EINVAL);
	c = small_caps;
	c.max_sessions = (1u << 20) + 1; /* node words keep 24 bits of slot */
	CHECK_RC(seg_caps_valid(&c), -EINVAL);
	CHECK_EQ(seg_size_for(&c), 0);
}

TEST(unit, format_then_bind_and_reject_damage, 10)
{
	size_t size = seg_size_for(&small_caps);
	struct segment seg;
	struct seg_header *h;
	void *mem;

	CHECK(size > 0);
	mem = map_anon(size);
	CHECK_OK(seg_format(mem, size, &small_caps));
	CHECK_OK(seg_bind(&seg, mem, size));
	CHECK_EQ(seg.caps.max_keys, 8);
	CHECK_EQ(seg.nnodes, 16);
	CHECK(seg.index_size >= 16 && (seg.index_size & (seg.index_size - 1)) == 0);
	h = mem;
	CHECK(atomic_load(&h->token_counter) > 1600000000ull * 1000000000ull);
	CHECK_RC(seg_bind(&seg, mem, size - 64), -LOCAL_ECORRUPT);
	h->abi = SEG_ABI + 1;
	CHECK_RC(seg_bind(&seg, mem, size), -LOCAL_EVERSION);
	h->abi = SEG_ABI;
	h->off_nodes += 64;
	CHECK_RC(seg_bind(&seg, mem, size), -LOCAL_ECORRUPT);
	h->off_nodes -= 64;
	h->caps.max_keys = 0;
	CHECK_RC(seg_bind(&seg, mem, size), -LOCAL_ECORRUPT);
	h->caps.max_keys = 8;
	h->magic ^= 1;
	CHECK_RC(seg_bind(&seg, mem, size), -LOCAL_ECORRUPT);
	CHECK_RC(seg_bind(&seg, mem, 8), -LOCAL_ECORRUPT);
}

TEST(unit, key_checks, 10)
{
	char k[LOCAL_KEY_MAX + 1];

	memset(k, 'a', sizeof(k));
	CHECK_RC(key_check(k, 0), -EINVAL);
	CHECK_RC(key_check(NULL, 3), -EINVAL);
	CHECK_OK(key_check(k, 1));
	CHECK_OK(key_check(k, LOCAL_KEY_MAX));
	CHECK_RC(key_check(k, LOCAL_KEY_MAX + 1), -ENAMETOOLONG);
	CHECK(key_hash("a", 1) != key_hash("b", 1));
}

TEST(unit, keytab_creates_finds_and_reclaims, 10)
{
	size_t size = seg_size_for(&small_caps);
	void *mem = map_anon(size);
	struct seg_key *k, *again;
	struct segment seg;
	char name[16];
	int i;

	CHECK_OK(seg_format(mem, size, &small_caps));
	CHECK_OK(seg_bind(&seg, mem, size));
	CHECK_RC(keytab_find(&seg, "x", 1, false, &k), -ENOENT);
	for (i = 0; i < 8; i++) {
		snprintf(name, sizeof(name), "key/%d", i);
		CHECK_OK(keytab_find(&seg, name, strlen(name), true, &k));
		/* Pretend held, so nothing is idle (a semaphore: a lock's holder
		 * would be read from its fast word, which has none here). */
		k->kind = LOCAL_KIND_SEMAPHORE;
		k->limit = 1;
		k->holders = 1;
		k->h_head = 0;
		key_unlock(k);
		CHECK_OK(keytab_find(&seg, name, strlen(name), false, &again));
		CHECK(again == k);
		key_unlock(again);
	}
	CHECK_RC(keytab_find(&seg, "one-more", 8, true, &k), -LOCAL_EMAXKEYS);
	/* Make key/3 idle: a full table reclaims it for the new key. */
	CHECK_OK(keytab_find(&seg, "key/3", 5, false, &k));
	k->holders = 0;
	k->h_head = IDX_NONE;
	key_unlock(k);
	CHECK_OK(keytab_find(&seg, "one-more", 8, true, &k));
	key_unlock(k);
	CHECK_RC(keytab_find(&seg, "key/3", 5, false, &k), -ENOENT);
	CHECK_OK(keytab_find(&seg, "key/4", 5, false, &k));
	key_unlock(k);
}

/* @n names whose entries share one home (hash % max_keys). */
static void same_home(const struct segment *seg, char names[][16], int n)
{
	uint32_t home = key_hash("h/0", 3) % seg->caps.max_keys;
	int found = 0, i;

	for (i = 0; found < n && i < 100000; i++) {
		char name[16];

		snprintf(name, sizeof(name), "h/%d", i);
		if (key_hash(name, strlen(name)) % seg->caps.max_keys == home)
			strcpy(names[found++], name);
	}
	CHECK_EQ(found, n);
}

static struct seg_key *make_key(struct segment *seg, const char *name)
{
	struct seg_key *k;

	CHECK_OK(keytab_find(seg, name, strlen(name), true, &k));
	key_unlock(k);
	return k;
}

/*
 * Entries are placed by hash, so the entries alone say whether a key exists:
 * a key the index hides is found past a freed entry of its cluster, never
 * made twice; and freeing the end of a cluster cleans its tombstones.
 */
TEST(unit, entries_find_a_key_the_index_hides, 10)
{
	size_t size = seg_size_for(&small_caps);
	void *mem = map_anon(size);
	char names[3][16];
	struct seg_key *a, *b, *c, *k;
	struct segment seg;
	uint32_t i, ci;

	CHECK_OK(seg_format(mem, size, &small_caps));
	CHECK_OK(seg_bind(&seg, mem, size));
	same_home(&seg, names, 3);
	a = make_key(&seg, names[0]);
	b = make_key(&seg, names[1]);
	c = make_key(&seg, names[2]);
	ci = seg_key_index(&seg, c);
	CHECK_EQ(seg_key_index(&seg, b), (seg_key_index(&seg, a) + 1) % small_caps.max_keys);
	CHECK_EQ(ci, (seg_key_index(&seg, b) + 1) % small_caps.max_keys);
	CHECK_OK(lw_lock(&seg.hdr->table_lock, seg.lock_self, 0, &lw_pid_judge));
	key_entry_free_locked(&seg, seg_key_index(&seg, b)); /* a tombstone before c */
	lw_unlock(&seg.hdr->table_lock);
	CHECK_EQ(atomic_load(&b->state), KEY_FREED);
	for (i = 0; i < seg.index_size; i++) /* one write hides c */
		if (atomic_load(&seg.index[i]) == ci + 1)
			atomic_store(&seg.index[i], 0);
	CHECK_OK(keytab_find(&seg, names[2], strlen(names[2]), true, &k));
	CHECK(k == c);
	key_unlock(k);
	/* Freeing the cluster's end cleans back to the live entry before it. */
	CHECK_OK(lw_lock(&seg.hdr->table_lock, seg.lock_self, 0, &lw_pid_judge));
	key_entry_free_locked(&seg, ci);
	lw_unlock(&seg.hdr->table_lock);
	CHECK_EQ(atomic_load(&c->state), KEY_FREE);
	CHECK_EQ(atomic_load(&b->state), KEY_FREE);
	CHECK_EQ(atomic_load(&a->state), KEY_USED);
}

static size_t put_hdr(void *buf, uint32_t magic, uint16_t version, uint16_t type, uint32_t len)
{
	struct proto_hdr h = { magic, version, type, len, 0 };

	memcpy(buf, &h, sizeof(h));
	return sizeof(h);
}

TEST(unit, protocol_decoder_rejects_malformed, 10)
{
	union proto_request req;
	struct proto_open open;
	char buf[PROTO_MAX_MSG + 8];

	memset(buf, 0, sizeof(buf));
	CHECK_RC(proto_decode_request(buf, 0, &req), -LOCAL_EPROTO);
	CHECK_RC(proto_decode_request(buf, 3, &req), -LOCAL_EPROTO);
	put_hdr(buf, 0xdeadbeef, PROTO_VERSION, MSG_OPEN, sizeof(open));
	CHECK_RC(proto_decode_request(buf, sizeof(open), &req), -LOCAL_EPROTO);
	put_hdr(buf, PROTO_MAGIC, PROTO_VERSION + 1, MSG_OPEN, sizeof(open));
	CHECK_RC(proto_decode_request(buf, sizeof(open), &req), -LOCAL_EVERSION);
	put_hdr(buf, PROTO_MAGIC, PROTO_VERSION, 77, sizeof(struct proto_hdr));
	CHECK_RC(proto_decode_request(buf, sizeof(struct proto_hdr), &req), -LOCAL_EPROTO);
	/* Length field disagreeing with the datagram. */
	put_hdr(buf, PROTO_MAGIC, PROTO_VERSION, MSG_OPEN, sizeof(open) + 1);
	CHECK_RC(proto_decode_request(buf, sizeof(open), &req), -LOCAL_EPROTO);
	/* An OPEN with an unterminated name or bad options. */
	memset(&open, 'x', sizeof(open));
	proto_init_hdr(&open.hdr, MSG_OPEN, sizeof(open));
	open.lock_delay_ms = 0;
	open.behavior = 0;
	open.flags = 0;
	CHECK_RC(proto_decode_request(&open, sizeof(open), &req), -LOCAL_EPROTO);
	open.name[5] = '\0';
	CHECK_EQ(proto_decode_request(&open, sizeof(open), &req), MSG_OPEN);
	open.lock_delay_ms = LOCAL_LOCK_DELAY_MAX_MS + 1;
	CHECK_RC(proto_decode_request(&open, sizeof(open), &req), -LOCAL_EPROTO);
	open.lock_delay_ms = 0;
	open.behavior = 7;
	CHECK_RC(proto_decode_request(&open, sizeof(open), &req), -LOCAL_EPROTO);
	open.behavior = 0;
	open.flags = 0x80;
	CHECK_RC(proto_decode_request(&open, sizeof(open), &req), -LOCAL_EPROTO);
}

TEST(unit, every_error_has_distinct_text, 10)
{
	int i, j;

	for (i = LOCAL_EBASE; i < LOCAL_ELAST; i++) {
		const char *t = local_strerror(-i);

		CHECK(t && *t && strcmp(t, "unknown error"));
		for (j = LOCAL_EBASE; j < i; j++)
			CHECK(strcmp(t, local_strerror(-j)));
	}
	CHECK(!strcmp(local_strerror(0), "success"));
	CHECK(strstr(local_strerror(-ETIMEDOUT), "timed out") != NULL);
	CHECK(local_strerror(-987654) != NULL);
}

TEST(unit, hex_round_trip, 10)
{
	uint8_t in[16], out[16];
	char hex[33];
	int i;

	for (i = 0; i < 16; i++)
		in[i] = (uint8_t)(i * 17 + 3);
	hex_encode(in, 16, hex);
	CHECK_EQ(strlen(hex), 32);
	CHECK_OK(hex_decode(hex, out, 16));
	CHECK(!memcmp(in, out, 16));
	CHECK_RC(hex_decode("zz", out, 1), -EINVAL);
	CHECK_RC(hex_decode("abc", out, 1), -EINVAL);
}
