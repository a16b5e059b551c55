/* SPDX-License-Identifier: MIT */
/*
 * Flag bits of the segment format (struct seg_session.flags): the one list of
 * them, so that the broker, liblocal and shmlockd --check agree on what a
 * healthy slot holds. To be folded into segment.h.
 *
 * Bits 0..15 are the public LOCAL_SESSION_* flags a client may ask for
 * (liblocal.h); bits 16..31 are the broker's own markers, which no client can
 * set (proto_decode_request() refuses them in OPEN).
 */
#ifndef SHMLOCK_SEG_FLAGS_H
#define SHMLOCK_SEG_FLAGS_H

#include "liblocal.h"

/* Client-requested: the session survives its creator (pid 0 in the slot). */
#define SESS_FLAG_NO_PROCESS_CHECK ((uint32_t)LOCAL_SESSION_NO_PROCESS_CHECK)
/* Broker-set: an HTTP session, opened by the broker in its own name (its pid
 * and start time, no pidfd). Only tells transports apart in stats. */
#define SESS_FLAG_HTTP (1u << 16)
/* Broker-set: a session of a connection of the TCP line protocol (the
 * connection is its owner), opened as an HTTP session is. */
#define SESS_FLAG_TCP (1u << 17)

/* What a client may put in MSG_OPEN. */
#define SESS_FLAGS_CLIENT SESS_FLAG_NO_PROCESS_CHECK
/* Every bit a healthy slot may carry. */
#define SESS_FLAGS_ALL (SESS_FLAGS_CLIENT | SESS_FLAG_HTTP | SESS_FLAG_TCP)

#endif
