// SPDX-License-Identifier: MIT
/*
 * Who may talk to the broker. The socket's mode (0660) and group decide who
 * can connect at all; --allow-uid / --allow-gid narrow who may open sessions
 * and act as an operator, checked against the peer's credentials as the
 * kernel reports them (SO_PEERCRED, SO_PEERGROUPS), never against anything
 * the client says. Root and the broker's own user are always allowed.
 */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "broker.h"

/* Parse "N[,N...]" into @ids (up to ACCESS_MAX entries). 0 or -EINVAL. */
int access_parse_ids(const char *s, uint32_t *ids, uint32_t *n)
{
	char *end;

	while (*s) {
		unsigned long v;

		errno = 0;
		v = strtoul(s, &end, 10);
		if (errno || end == s || v > UINT32_MAX || *n >= ACCESS_MAX ||
		    (*end && *end != ','))
			return -EINVAL;
		ids[(*n)++] = (uint32_t)v;
		s = *end ? end + 1 : end;
	}
	return 0;
}

/* A group by name or number. 0 or -EINVAL. */
int access_parse_group(const char *s, gid_t *out)
{
	struct group *g;
	char *end;
	unsigned long v = strtoul(s, &end, 10);

	if (*s && !*end && v <= UINT32_MAX) {
		*out = (gid_t)v;
		return 0;
	}
	g = getgrnam(s);
	if (!g)
		return -EINVAL;
	*out = g->gr_gid;
	return 0;
}

static bool listed(const uint32_t *ids, uint32_t n, uint32_t id)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

int access_check_ids(const struct broker *b, uint32_t uid, uint32_t gid, const uint32_t *groups,
		     uint32_t ngroups)
{
	const struct broker_opts *o = &b->opts;
	uint32_t i;

	if (!o->nallow_uid && !o->nallow_gid)
		return 0;
	if (uid == 0 || uid == geteuid() || listed(o->allow_uid, o->nallow_uid, uid))
		return 0;
	if (listed(o->allow_gid, o->nallow_gid, gid))
		return 0;
	for (i = 0; i < ngroups; i++)
		if (listed(o->allow_gid, o->nallow_gid, groups[i]))
			return 0;
	return -LOCAL_EDENIED;
}

int access_check(const struct broker *b, int conn, const struct ucred *cred)
{
	gid_t groups[64];
	socklen_t len = sizeof(groups);

	if (!b->opts.nallow_uid && !b->opts.nallow_gid)
		return 0;
	if (getsockopt(conn, SOL_SOCKET, SO_PEERGROUPS, groups, &len))
		len = 0;
	return access_check_ids(b, cred->uid, cred->gid, groups, len / sizeof(gid_t));
}
