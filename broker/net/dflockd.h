/* SPDX-License-Identifier: MIT */
/*
 * What dflockd's two protocols, the HTTP API (faces/http/) and the TCP
 * protocol (faces/tcp/), share: one format, one implementation (dflockd.c).
 * The token functions keep the names the TCP protocol gave them.
 */
#ifndef SHMLOCKD_DFLOCKD_H
#define SHMLOCKD_DFLOCKD_H

#include <stdbool.h>
#include <stdint.h>

#include "liblocal.h"

/* A lock token as dflockd writes it: 32 hex digits, 16 of fencing token,
 * big-endian, then 16 of salt. */
void tcp_format_token(uint64_t fence, uint64_t salt, char out[33]);
/* 32 hex digits (either case) into @fence and @salt: true, else false. */
bool tcp_parse_token(const char *s, uint64_t *fence, uint64_t *salt);

/* The first holder of @key as @observer sees it, for stats (HTTP's and the
 * TCP protocol's): its session id and lease left; "" and 0 when none. */
struct first_holder {
	char session[LOCAL_SESSION_ID_LEN + 1];
	uint64_t lease_ms;
};
void stats_first_holder(local_session *observer, const char *key, struct first_holder *f);

#endif
