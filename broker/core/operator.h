/* SPDX-License-Identifier: MIT */
/*
 * Operator requests served without a session (operator.c): inspection,
 * force release, session destroy and the reset of a quarantined key keep
 * working with every table full. See docs/architecture.md, "The operator".
 */
#ifndef SHMLOCKD_OPERATOR_H
#define SHMLOCKD_OPERATOR_H

#include <stddef.h>
#include <stdint.h>

#include "broker.h"

/*
 * Serve one MSG_OP_* request @req read from connection @conn (checking the
 * peer against the allow lists) and send the reply. Never waits long for a
 * key mutex: a page of a listing ends early rather than stall the loop.
 */
void operator_serve(struct broker *b, int conn, int type, const struct proto_op *req);

/* "'NAME' (entry N)" for logs (blog() escapes it: a damaged or hostile name
 * cannot forge log lines). */
const char *operator_key_label(const struct segment *seg, uint32_t idx, char *buf, size_t size);

/*
 * Call @cb for each key entry quarantined now, with its (raw) name; stops
 * early when @cb returns non-zero. Returns how many there are.
 */
uint32_t operator_quarantined(const struct segment *seg,
			      int (*cb)(uint32_t idx, const char *name, size_t len, void *arg),
			      void *arg);

/* Holds ([slot][0]) and waiting requests ([slot][1]) of every session slot,
 * counted from the node table (no mutex); calloc'ed, NULL without memory. */
uint32_t (*operator_session_counts(const struct segment *seg))[2];

/* What MSG_OP_STATS answers (local_admin_stats()), into @r (zeroed). */
void operator_stats(const struct broker *b, struct proto_op_stats *r);

#endif
