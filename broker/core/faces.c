// SPDX-License-Identifier: MIT
/*
 * The table of registered faces (face.h) and the core's calls into them:
 * every hook is offered to every face that has it, in registration order,
 * so the core names no face and no face hears of another.
 */
#include <errno.h>
#include <syslog.h>

#include "broker.h"

int face_register(struct broker *b, const struct face *f)
{
	if (b->nfaces == FACES_MAX)
		return -ENOSPC;
	b->faces[b->nfaces++] = f;
	return 0;
}

int faces_start(struct broker *b)
{
	unsigned i;
	int err;

	for (i = 0; i < b->nfaces; i++) {
		err = b->faces[i]->start(b);
		if (err)
			return err;
	}
	return 0;
}

void faces_stop(struct broker *b)
{
	unsigned i;

	for (i = b->nfaces; i--;)
		b->faces[i]->stop(b);
}

void faces_timer(struct broker *b, const struct face *owner, uint32_t kind, uint32_t a, uint32_t b2)
{
	if (owner->timer)
		owner->timer(b, kind, a, b2);
}

void faces_session_ended(struct broker *b, uint32_t slot)
{
	unsigned i;

	for (i = 0; i < b->nfaces; i++)
		if (b->faces[i]->session_ended)
			b->faces[i]->session_ended(b, slot);
}

void faces_doorbell(struct broker *b)
{
	unsigned i;

	for (i = 0; i < b->nfaces; i++)
		if (b->faces[i]->doorbell)
			b->faces[i]->doorbell(b);
}

bool faces_deferred(struct broker *b, bool run)
{
	bool any = false;
	unsigned i;

	for (i = 0; i < b->nfaces; i++)
		if (b->faces[i]->deferred && b->faces[i]->deferred(b, run))
			any = true;
	return any;
}

bool faces_drained(struct broker *b)
{
	bool all = true;
	unsigned i;

	/* Every face is asked, drained or not: the first call starts its drain. */
	for (i = 0; i < b->nfaces; i++)
		if (b->faces[i]->drained && !b->faces[i]->drained(b))
			all = false;
	return all;
}
