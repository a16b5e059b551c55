// SPDX-License-Identifier: MIT
/* The operator requests' strict decoding, both ways (libshm/proto.c). */
#include <string.h>

#include "harness.h"
#include "proto.h"

static struct proto_op op(uint16_t type, const char *key)
{
	struct proto_op r;

	memset(&r, 0, sizeof(r));
	proto_init_hdr(&r.hdr, type, sizeof(r));
	r.key_len = (uint32_t)strlen(key);
	memcpy(r.key, key, r.key_len);
	return r;
}

TEST(unit, operator_requests_are_decoded_strictly, 10)
{
	union proto_request out;
	struct proto_op r;

	r = op(MSG_OP_KEYS, "");
	CHECK_EQ(proto_decode_request(&r, sizeof(r), &out), MSG_OP_KEYS);
	r = op(MSG_OP_INFO, "a/b");
	CHECK_EQ(proto_decode_request(&r, sizeof(r), &out), MSG_OP_INFO);
	CHECK(!strcmp(out.op.key, "a/b"));
	CHECK_EQ(proto_decode_request(&r, sizeof(r) - 1, &out), -LOCAL_EPROTO);
	/* A key names one key: not empty, no NUL inside, at most 255 bytes. */
	r = op(MSG_OP_INFO, "");
	CHECK_EQ(proto_decode_request(&r, sizeof(r), &out), -LOCAL_EPROTO);
	r = op(MSG_OP_RESET, "");
	CHECK_EQ(proto_decode_request(&r, sizeof(r), &out), -LOCAL_EPROTO);
	r = op(MSG_OP_LOCK_DELAY, "");
	CHECK_EQ(proto_decode_request(&r, sizeof(r), &out), -LOCAL_EPROTO);
	r = op(MSG_OP_LOCK_DELAY, "a");
	CHECK_EQ(proto_decode_request(&r, sizeof(r), &out), MSG_OP_LOCK_DELAY);
	r = op(MSG_OP_BROKER, ""); /* about the broker: no key */
	CHECK_EQ(proto_decode_request(&r, sizeof(r), &out), MSG_OP_BROKER);
	r = op(MSG_OP_WAITERS, ""); /* the queue of one key */
	CHECK_EQ(proto_decode_request(&r, sizeof(r), &out), -LOCAL_EPROTO);
	r = op(MSG_OP_WAITERS, "q/k");
	CHECK_EQ(proto_decode_request(&r, sizeof(r), &out), MSG_OP_WAITERS);
	r = op(MSG_OP_HOLDERS, "ab");
	r.key[0] = '\0';
	CHECK_EQ(proto_decode_request(&r, sizeof(r), &out), -LOCAL_EPROTO);
	r = op(MSG_OP_KEYS, "");
	r.key_len = LOCAL_KEY_MAX + 1;
	CHECK_EQ(proto_decode_request(&r, sizeof(r), &out), -LOCAL_EPROTO);
	r = op(MSG_OP_KEYS, "");
	r.flags = 0x80;
	CHECK_EQ(proto_decode_request(&r, sizeof(r), &out), -LOCAL_EPROTO);
	r = op(MSG_OP_LAST + 1, "");
	CHECK_EQ(proto_decode_request(&r, sizeof(r), &out), -LOCAL_EPROTO);
}

TEST(unit, operator_replies_are_decoded_strictly, 10)
{
	char buf[sizeof(struct proto_op_reply) + 2 * sizeof(struct proto_op_holder)];
	struct proto_op_reply rep, out;
	uint32_t size = sizeof(struct proto_op_holder);

	memset(buf, 0, sizeof(buf));
	memset(&rep, 0, sizeof(rep));
	proto_init_hdr(&rep.hdr, MSG_OP_REPLY, sizeof(buf));
	rep.count = 2;
	memcpy(buf, &rep, sizeof(rep));
	memcpy(buf + sizeof(rep), &size, 4);
	memcpy(buf + sizeof(rep) + size, &size, 4);
	CHECK_OK(proto_decode_op_reply(buf, sizeof(buf), &out, size));
	CHECK_EQ(out.count, 2);
	/* Records must tile the message exactly, in 8-byte multiples, each at
	 * least the size asked. */
	CHECK_EQ(proto_decode_op_reply(buf, sizeof(buf), &out, size + 8), -LOCAL_EPROTO);
	size -= 4;
	memcpy(buf + sizeof(rep), &size, 4);
	CHECK_EQ(proto_decode_op_reply(buf, sizeof(buf), &out, 8), -LOCAL_EPROTO);
	size += 4 + 8;
	memcpy(buf + sizeof(rep), &size, 4);
	CHECK_EQ(proto_decode_op_reply(buf, sizeof(buf), &out, 8), -LOCAL_EPROTO);
	size = 0;
	memcpy(buf + sizeof(rep), &size, 4);
	CHECK_EQ(proto_decode_op_reply(buf, sizeof(buf), &out, 0), -LOCAL_EPROTO);
	/* An error carries no records. */
	size = sizeof(struct proto_op_holder);
	memcpy(buf + sizeof(rep), &size, 4);
	rep.status = -LOCAL_EDENIED;
	memcpy(buf, &rep, sizeof(rep));
	CHECK_EQ(proto_decode_op_reply(buf, sizeof(buf), &out, size), -LOCAL_EPROTO);
	rep.count = 0;
	proto_init_hdr(&rep.hdr, MSG_OP_REPLY, sizeof(rep));
	CHECK_OK(proto_decode_op_reply(&rep, sizeof(rep), &out, size));
	CHECK_EQ(out.status, -LOCAL_EDENIED);
	proto_init_hdr(&rep.hdr, MSG_REPLY, sizeof(rep));
	CHECK_EQ(proto_decode_op_reply(&rep, sizeof(rep), &out, size), -LOCAL_EPROTO);
}
