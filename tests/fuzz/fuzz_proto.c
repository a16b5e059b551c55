// SPDX-License-Identifier: MIT
/*
 * libFuzzer target: the broker's request decoder and the client's reply
 * decoder over arbitrary datagrams. Whatever they accept must be a message
 * the broker can act on safely: a terminated name, options in range, a key
 * without NUL and of a legal length.
 */
#include <stdlib.h>
#include <string.h>

#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	union proto_request req;
	struct proto_reply rep;
	int type = proto_decode_request(data, size, &req);

	switch (type) {
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
	case MSG_CLOSE:
	case MSG_DESTROY:
		break;
	default:
		if (type != -LOCAL_EPROTO && type != -LOCAL_EVERSION)
			abort();
	}
	(void)proto_decode_reply(data, size, &rep);
	return 0;
}
