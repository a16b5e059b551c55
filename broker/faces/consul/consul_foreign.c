// SPDX-License-Identifier: MIT
/*
 * Sessions from elsewhere (liblocal, the CLI, the HTTP and TCP faces) as
 * Consul sessions: Consul's leader discovery reads a lock key's Session and
 * then /v1/session/info/<Session>, so a key held by any of them must name a
 * session that info, list and node answer for.
 *
 * Such a session is named by its public id "s<slot>g<generation>" (as
 * /v1/stats shows holders), never by its segment id: that id is the
 * session's capability (it closes the session and releases its holds), and
 * only this API's own sessions hand theirs out, as Consul does. Which
 * session lives in a slot, and its generation, come from the broker's own
 * session table; the segment slot, which its process may scribble on, gives
 * only what the session asked for (name, TTL, lock-delay, behavior: the
 * values the broker itself applies), and its name is shown only as valid
 * UTF-8.
 *
 * Consul gives a session CreateIndex and ModifyIndex from its Raft index;
 * these sessions are opened without this API, so each gets one from
 * consul_bump() when this API first sees it in its slot.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "consul_int.h"
#include "keyops.h"

static bool live_foreign(struct consul *c, uint32_t slot, uint32_t *gen)
{
	const struct bsession *bs;

	if (slot >= c->b->seg.caps.max_sessions || slot == c->self_slot || c->by_slot[slot])
		return false;
	bs = c->b->by_slot[slot];
	if (!bs || !session_is(&c->b->seg, (struct owner){ slot, bs->gen }))
		return false;
	*gen = bs->gen;
	return true;
}

void consul_foreign_scan(struct consul *c)
{
	bool changed = false;
	uint32_t i, gen;

	for (i = 0; i < c->b->seg.caps.max_sessions; i++) {
		struct cforeign *f = &c->foreign[i];

		if (!live_foreign(c, i, &gen)) {
			changed |= f->index != 0;
			f->index = 0;
		} else if (!f->index || f->gen != gen) {
			f->gen = gen;
			f->index = consul_bump(c);
			changed = true;
		}
	}
	if (changed)
		c->sess_index = consul_bump(c);
}

bool consul_foreign_id(struct consul *c, uint32_t slot, char *out, size_t size)
{
	uint32_t gen;

	if (!live_foreign(c, slot, &gen))
		return false;
	session_public_id(slot, gen, out, size);
	return true;
}

/* The segment's name, cut at its size and shown only if it is UTF-8 (the
 * segment is untrusted: JSON cannot carry other bytes). */
static void name_of(const struct seg_session *s, char *out, size_t size)
{
	size_t n = strnlen(s->name, sizeof(s->name));
	json_t *probe;

	if (n >= size)
		n = size - 1;
	memcpy(out, s->name, n);
	out[n] = '\0';
	probe = json_stringn(out, n);
	if (!probe)
		out[0] = '\0';
	json_decref(probe);
}

json_t *consul_foreign_json(struct consul *c, uint32_t slot)
{
	const struct seg_session *s;
	char id[32], name[SEG_NAME_MAX + 1];
	json_t *checks, *j;
	uint32_t gen;

	if (!live_foreign(c, slot, &gen))
		return NULL;
	if (!c->foreign[slot].index || c->foreign[slot].gen != gen)
		consul_foreign_scan(c);
	s = &c->b->seg.sessions[slot];
	session_public_id(slot, gen, id, sizeof(id));
	name_of(s, name, sizeof(name));
	checks = json_array(); /* its check is its process, which Consul has no name for */
	{
		struct csession_view v = {
			.id = id,
			.name = name,
			.node_checks = checks,
			.service_checks = json_null(),
			.lock_delay_ns = (uint64_t)s->lock_delay_ms * 1000000ull,
			.ttl_ns = (uint64_t)s->ttl_ms * 1000000ull,
			.create_index = c->foreign[slot].index,
			.modify_index = c->foreign[slot].index,
			.behavior_delete = s->behavior == LOCAL_BEHAVIOR_DELETE,
		};

		j = consul_session_json(c, &v);
	}
	json_decref(checks);
	return j;
}

json_t *consul_foreign_find_json(struct consul *c, const char *id)
{
	unsigned slot, gen;
	uint32_t live_gen;
	char canon[32];

	/* Only the spelling this API gives out ("s3g7", not "s03g7"). */
	if (sscanf(id, "s%ug%u", &slot, &gen) != 2)
		return NULL;
	session_public_id(slot, gen, canon, sizeof(canon));
	if (strcmp(canon, id) || !live_foreign(c, slot, &live_gen) || live_gen != gen)
		return NULL;
	return consul_foreign_json(c, slot);
}
