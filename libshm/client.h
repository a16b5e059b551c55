/* SPDX-License-Identifier: MIT */
/* liblocal's process-side state: sessions, mapped segments, broker calls. */
#ifndef SHMLOCK_CLIENT_H
#define SHMLOCK_CLIENT_H

#include <stdatomic.h>
#include <sys/types.h>

#include "keyops.h"
#include "proto.h"

/* One mapping per segment per process, shared by its sessions; unmapped only
 * when the last of them closes (glibc bug 14485: never unmap a robust mutex
 * another thread of ours might still list). */
struct mapping {
	struct mapping *next;
	dev_t dev;
	ino_t ino;
	unsigned refs;
	struct segment seg;
};

struct local_session {
	struct mapping *map;
	struct segment *seg;
	struct owner who;
	uint8_t raw_id[16];
	char id[LOCAL_SESSION_ID_LEN + 1];
	char socket_path[108];
	uint64_t fork_gen;
	struct node_hints hints;
};

/* 0 when @s may be used by this process: -EINVAL, -LOCAL_EFORKED otherwise. */
int session_usable(const local_session *s);

/*
 * One request/reply exchange with the broker at @path. With @fd non-NULL, a
 * descriptor passed with the reply is returned there (else -1).
 * Returns 0 (then rep->status holds the broker's verdict) or -LOCAL_EBROKER,
 * -LOCAL_EDENIED, -LOCAL_EVERSION, -LOCAL_EPROTO.
 */
int broker_call(const char *path, const void *req, size_t len, struct proto_reply *rep, int *fd);

void hex_encode(const uint8_t *in, size_t n, char *out);
int hex_decode(const char *in, uint8_t *out, size_t n);

#endif
