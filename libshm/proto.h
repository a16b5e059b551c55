/* SPDX-License-Identifier: MIT */
/*
 * The broker's wire protocol, over a SOCK_SEQPACKET Unix socket: one request
 * datagram, one reply datagram (the reply to OPEN carries the segment's fd by
 * SCM_RIGHTS). Both sides check magic and version on every message, so a
 * client and broker of different versions fail with LOCAL_EVERSION instead of
 * misreading each other. Internal: never part of include/.
 */
#ifndef SHMLOCK_PROTO_H
#define SHMLOCK_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "segment.h"

#define PROTO_MAGIC 0x4c4d4853u /* "SHML" */
#define PROTO_VERSION 1u

enum proto_type {
	MSG_OPEN = 1,	 /* open a session; reply carries the segment fd */
	MSG_CLOSE = 2,	 /* close a session by id (the id is the secret) */
	MSG_DESTROY = 3, /* operator: invalidate any session by id */
	MSG_FORCE_RELEASE = 4, /* operator: release a key from a holder, or all */
	MSG_REPLY = 100,
};

struct proto_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t len; /* whole message, header included */
	uint32_t reserved;
};

struct proto_open {
	struct proto_hdr hdr;
	uint32_t ttl_ms;
	uint32_t lock_delay_ms;
	uint32_t behavior;
	uint32_t flags;
	uint64_t start_time; /* the client's /proc/self/stat start time */
	char name[SEG_NAME_MAX];
};

struct proto_session_id {
	struct proto_hdr hdr;
	uint8_t id[16];
};

struct proto_reply {
	struct proto_hdr hdr;
	int32_t status; /* 0 or a negative liblocal code */
	uint32_t slot;
	uint32_t gen;
	uint32_t seg_abi;
	uint8_t id[16];
};

struct proto_force_release {
	struct proto_hdr hdr;
	uint8_t holder[16]; /* the holder's session id */
	uint32_t all;	    /* 1: every holder (holder ignored) */
	uint32_t key_len;
	char key[LOCAL_KEY_MAX + 1];
};

union proto_request {
	struct proto_hdr hdr;
	struct proto_open open;
	struct proto_session_id sid;
	struct proto_force_release force;
};

#define PROTO_MAX_MSG sizeof(union proto_request)

void proto_init_hdr(struct proto_hdr *h, uint16_t type, uint32_t len);

/*
 * Decode a request of @len bytes from an untrusted peer into @out.
 * Returns its type, -LOCAL_EVERSION (another protocol version) or -LOCAL_EPROTO
 * (anything malformed: size, magic, type, unterminated name, bad options).
 */
int proto_decode_request(const void *buf, size_t len, union proto_request *out);

/* Decode the broker's reply: 0, -LOCAL_EVERSION or -LOCAL_EPROTO. */
int proto_decode_reply(const void *buf, size_t len, struct proto_reply *out);

#endif
