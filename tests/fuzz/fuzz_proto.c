// SPDX-License-Identifier: MIT
/*
 * libFuzzer target: the broker's request decoder and the client's reply
 * decoders (plain and operator) over arbitrary datagrams. Whatever they accept must be a message
 * the broker can act on safely: a terminated name, options in range, a key
 * without NUL and of a legal length.
 */
#include <stdlib.h>
#include <string.h>

#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every message type must have its case below: a type added to proto.h
 * without one (MSG_BIND was, for two sessions) made the harness abort on a
 * valid request, which fuzzing found only at random. With this, such a type
 * fails the build instead (make check builds this target). */
#pragma GCC diagnostic error "-Wswitch-enum"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	union proto_request req;
	struct proto_op_reply op;
	struct proto_reply rep;
	int type = proto_decode_request(data, size, &req);

	switch ((enum proto_type)type) {
	case MSG_OPEN:
		if (!memchr(req.open.name, '\0', sizeof(req.open.name)) ||
		    req.open.lock_delay_ms > LOCAL_LOCK_DELAY_MAX_MS ||
		    req.open.behavior > LOCAL_BEHAVIOR_DELETE)
			abort();
		break;
	case MSG_FORCE_RELEASE:
		if (req.force.key_len < 1 || req.force.key_len > LOCAL_KEY_MAX ||
		    memchr(req.force.key, '\0', req.force.key_len))
			abort();
		break;
	case MSG_BIND: /* a pid the broker then checks is a child of the caller */
		if (req.bind.pid <= 0 || req.bind.reserved)
			abort();
		break;
	case MSG_CLOSE:
	case MSG_DESTROY:
		break;
	case MSG_OP_STATS:
	case MSG_OP_KEYS:
	case MSG_OP_INFO:
	case MSG_OP_HOLDERS:
	case MSG_OP_SESSIONS:
	case MSG_OP_RESET:
	case MSG_OP_BROKER:
	case MSG_OP_LOCK_DELAY:
	case MSG_OP_WAITERS:
		/* A terminated key of a legal length without NUL, known flags;
		 * one key for the requests that name one. */
		if (req.op.key_len > LOCAL_KEY_MAX || req.op.key[req.op.key_len] ||
		    memchr(req.op.key, '\0', req.op.key_len) || (req.op.flags & ~PROTO_OP_FLAGS) ||
		    (type != MSG_OP_STATS && type != MSG_OP_KEYS && type != MSG_OP_SESSIONS &&
		     type != MSG_OP_BROKER && !req.op.key_len))
			abort();
		break;
	case MSG_REPLY: /* replies are never accepted as requests */
	case MSG_OP_REPLY:
		abort();
	default:
		if (type != -LOCAL_EPROTO && type != -LOCAL_EVERSION)
			abort();
	}
	(void)proto_decode_reply(data, size, &rep);
	/* An operator reply: its records tile it exactly. */
	if (proto_decode_op_reply(data, size, &op, 8) == 0) {
		size_t off = sizeof(op);
		uint32_t i, rs;

		if (op.status && (op.count || size != sizeof(op)))
			abort();
		for (i = 0; i < op.count; i++) {
			memcpy(&rs, data + off, sizeof(rs));
			if (rs < 8 || rs % 8 || rs > size - off)
				abort();
			off += rs;
		}
		if (off != size)
			abort();
	}
	return 0;
}
