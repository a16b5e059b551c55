// SPDX-License-Identifier: MIT
/* Encoding and strict decoding of the broker protocol. */
#include <string.h>

#include "proto.h"
#include "segment.h"

void proto_init_hdr(struct proto_hdr *h, uint16_t type, uint32_t len)
{
	memset(h, 0, sizeof(*h));
	h->magic = PROTO_MAGIC;
	h->version = PROTO_VERSION;
	h->type = type;
	h->len = len;
}

static int check_hdr(const void *buf, size_t len)
{
	struct proto_hdr h;

	if (len < sizeof(h))
		return -LOCAL_EPROTO;
	memcpy(&h, buf, sizeof(h));
	if (h.magic != PROTO_MAGIC)
		return -LOCAL_EPROTO;
	if (h.version != PROTO_VERSION)
		return -LOCAL_EVERSION;
	if (h.len != len)
		return -LOCAL_EPROTO;
	return h.type;
}

int proto_decode_request(const void *buf, size_t len, union proto_request *out)
{
	int type = check_hdr(buf, len);

	if (type < 0)
		return type;
	switch (type) {
	case MSG_OPEN:
		if (len != sizeof(out->open))
			return -LOCAL_EPROTO;
		memcpy(&out->open, buf, len);
		if (memchr(out->open.name, '\0', sizeof(out->open.name)) == NULL)
			return -LOCAL_EPROTO;
		if (out->open.lock_delay_ms > LOCAL_LOCK_DELAY_MAX_MS ||
		    out->open.behavior > LOCAL_BEHAVIOR_DELETE ||
		    (out->open.flags & ~SESS_FLAGS_CLIENT))
			return -LOCAL_EPROTO;
		return type;
	case MSG_FORCE_RELEASE:
		if (len != sizeof(out->force))
			return -LOCAL_EPROTO;
		memcpy(&out->force, buf, len);
		if (out->force.key_len < 1 || out->force.key_len > LOCAL_KEY_MAX ||
		    memchr(out->force.key, '\0', out->force.key_len) || out->force.all > 1)
			return -LOCAL_EPROTO;
		return type;
	case MSG_OP_STATS:
	case MSG_OP_KEYS:
	case MSG_OP_INFO:
	case MSG_OP_HOLDERS:
	case MSG_OP_SESSIONS:
	case MSG_OP_RESET:
	case MSG_OP_BROKER:
	case MSG_OP_LOCK_DELAY:
	case MSG_OP_WAITERS:
		if (len != sizeof(out->op))
			return -LOCAL_EPROTO;
		memcpy(&out->op, buf, len);
		if (out->op.key_len > LOCAL_KEY_MAX || (out->op.flags & ~PROTO_OP_FLAGS) ||
		    memchr(out->op.key, '\0', out->op.key_len))
			return -LOCAL_EPROTO;
		out->op.key[out->op.key_len] = '\0';
		/* A key names one key. */
		if ((type == MSG_OP_INFO || type == MSG_OP_HOLDERS || type == MSG_OP_RESET ||
		     type == MSG_OP_LOCK_DELAY || type == MSG_OP_WAITERS) &&
		    !out->op.key_len)
			return -LOCAL_EPROTO;
		return type;
	case MSG_BIND:
		if (len != sizeof(out->bind))
			return -LOCAL_EPROTO;
		memcpy(&out->bind, buf, len);
		if (out->bind.pid <= 0 || out->bind.reserved)
			return -LOCAL_EPROTO;
		return type;
	case MSG_CLOSE:
	case MSG_DESTROY:
		if (len != sizeof(out->sid))
			return -LOCAL_EPROTO;
		memcpy(&out->sid, buf, len);
		return type;
	default:
		return -LOCAL_EPROTO;
	}
}

int proto_decode_reply(const void *buf, size_t len, struct proto_reply *out)
{
	int type = check_hdr(buf, len);

	if (type < 0)
		return type;
	if (type != MSG_REPLY || len != sizeof(*out))
		return -LOCAL_EPROTO;
	memcpy(out, buf, len);
	return 0;
}

int proto_decode_op_reply(const void *buf, size_t len, struct proto_op_reply *out, size_t min_rec)
{
	int type = check_hdr(buf, len);
	size_t off = sizeof(*out);
	uint32_t i, size;

	if (type < 0)
		return type;
	if (type != MSG_OP_REPLY || len < sizeof(*out))
		return -LOCAL_EPROTO;
	memcpy(out, buf, sizeof(*out));
	if (out->status && (out->count || len != sizeof(*out)))
		return -LOCAL_EPROTO;
	for (i = 0; i < out->count; i++) {
		if (len - off < sizeof(size))
			return -LOCAL_EPROTO;
		memcpy(&size, (const char *)buf + off, sizeof(size));
		if (size < min_rec || size < 8 || size % 8 || size > len - off)
			return -LOCAL_EPROTO;
		off += size;
	}
	return off == len ? 0 : -LOCAL_EPROTO;
}
