// SPDX-License-Identifier: MIT
/*
 * Inspection while the broker is down: status, keys and info are
 * asked of the broker; when none answers but the segment lives on in its
 * keeper (SOCKET.keep, broker/core/keeper.c: it answers root and the broker's
 * user), they read the segment itself. The mapping is private
 * (copy-on-write): nothing this process does can change the shared
 * segment, holds in it go on working, and no key mutex is taken (fields are
 * read as they are: a snapshot that may be mid-change).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "abi.h" /* sized structs */
#include "cli.h"
#include "client.h"
#include "clock.h"
#include "keeper_proto.h"
#include "segment.h"

/* How long the offline view waits for a keeper's answer. */
#define KEEPER_WAIT_S 1

struct offline {
	struct segment seg;
	void *mem;
	size_t size;
	char keeper[PATHS_LEN + 8];
};

/* Map the segment kept beside the first of @socket's candidates that has a
 * keeper. Prints where it comes from. */
static int offline_open(const char *socket, struct offline *o)
{
	struct paths_list l;
	struct stat st;
	unsigned i;
	int fd = -1, err;

	memset(o, 0, sizeof(*o));
	err = paths_candidates(socket, &l);
	if (err)
		return err;
	for (i = 0; i < l.n && fd < 0; i++) {
		if (!l.given && paths_unsafe(l.path[i]))
			continue;
		if (keeper_path(l.path[i], o->keeper, sizeof(o->keeper)) ||
		    keeper_exchange(o->keeper, KEEPER_GET, KEEPER_WAIT_S, &fd))
			fd = -1;
	}
	if (fd < 0)
		return -ENOENT;
	if (fstat(fd, &st) < 0 || st.st_size <= 0) {
		close(fd);
		return -EIO;
	}
	o->size = (size_t)st.st_size;
	/* Private: whatever a read path might store stays in our copy. */
	o->mem = mmap(NULL, o->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	close(fd);
	if (o->mem == MAP_FAILED)
		return -ENOMEM;
	err = seg_bind(&o->seg, o->mem, o->size);
	if (err) {
		munmap(o->mem, o->size);
		return err;
	}
	static bool said;

	if (!said)
		fprintf(stderr,
			"shmlock: no broker answers; a read-only view of its segment, "
			"kept at %s\n",
			o->keeper);
	said = true;
	return 0;
}

static void offline_close(struct offline *o)
{
	munmap(o->mem, o->size);
}

static int offline_stats(const char *socket, struct local_stats *st, uint32_t *nq)
{
	struct offline o;
	struct segment *seg = &o.seg;
	const struct seg_stats *s;
	uint32_t i;
	int err = offline_open(socket, &o);

	if (err)
		return err;
	s = &seg->hdr->stats;
	memset(st, 0, sizeof(*st));
	st->sz = sizeof(*st); /* the CLI's own struct, of this header's size */
	*nq = 0;
	for (i = 0; i < seg->caps.max_sessions; i++)
		st->sessions += SESS_STATE(atomic_load(&seg->sessions[i].state_gen)) == SESS_ACTIVE;
	for (i = 0; i < seg->caps.max_keys; i++) {
		uint32_t state = atomic_load(&seg->keys[i].state);

		st->keys += state == KEY_USED;
		*nq += state == KEY_QUARANTINED;
		if (state == KEY_USED)
			st->grants += atomic_load(&seg->keys[i].lock_index);
	}
	for (i = 0; i < seg->nnodes; i++) {
		uint64_t w = atomic_load(&seg->nodes[i].word);

		st->holds += seg_node_is_hold(seg, i, w);
		st->waiters += NODE_STATE(w) == NODE_WAITING;
	}
	st->broker_pid = 0; /* none runs */
	st->max_sessions = seg->caps.max_sessions;
	st->max_keys = seg->caps.max_keys;
	st->max_holds = seg->caps.max_holds;
	st->max_waiters = seg->caps.max_waiters;
	st->max_value = seg->caps.max_value;
	st->timeouts = atomic_load(&s->timeouts);
	st->handoffs = atomic_load(&s->handoffs);
	st->lease_expiries = atomic_load(&s->lease_expiries);
	st->ttl_expiries = atomic_load(&s->ttl_expiries);
	st->crash_cleanups = atomic_load(&s->crash_cleanups);
	st->repairs = atomic_load(&s->repairs);
	st->quarantined = atomic_load(&s->quarantined);
	st->sessions_opened = atomic_load(&s->sessions_opened);
	st->sessions_closed = atomic_load(&s->sessions_closed);
	offline_close(&o);
	return 0;
}

/* The holders of @k, to @holder_cb (with the key's name) or @plain_cb. */
static int offline_holders(struct segment *seg, struct seg_key *k, const char *name,
			   int (*holder_cb)(const char *, const struct local_holder *, void *),
			   int (*plain_cb)(const struct local_holder *, void *), void *arg)
{
	uint32_t i, n = 0, steps = 0;
	int err = 0;

	for (i = k->h_head; !err && i < seg->nnodes && n < k->holders && steps++ < seg->nnodes;
	     i = seg->nodes[i].next) {
		uint64_t w = atomic_load(&seg->nodes[i].word);
		const struct seg_session *s = seg_session_at(seg, NODE_SESSION(w));
		struct local_holder h;

		if (!s || !seg_node_is_hold(seg, i, w))
			continue;
		memset(&h, 0, sizeof(h));
		h.sz = sizeof(h);
		hex_encode(s->id, sizeof(s->id), h.session);
		memcpy(h.name, s->name, sizeof(h.name));
		h.name[sizeof(h.name) - 1] = '\0';
		h.pid = s->pid;
		h.token = seg->nodes[i].token;
		err = holder_cb ? holder_cb(name, &h, arg) : plain_cb(&h, arg);
		n++;
	}
	return err;
}

static int offline_keys(const char *socket, const char *prefix, unsigned flags,
			int (*cb)(const char *, const struct local_key_info *, unsigned, void *),
			int (*holder_cb)(const char *, const struct local_holder *, void *),
			void *arg)
{
	struct local_key_info *ki = calloc(1, sizeof(*ki)); /* sized, no value */
	size_t plen = prefix ? strlen(prefix) : 0;
	struct offline o;
	uint32_t i;
	int err;

	if (!ki)
		return -ENOMEM;
	ki->sz = sizeof(*ki);
	err = offline_open(socket, &o);
	if (err) {
		free(ki);
		return err;
	}
	for (i = 0; !err && i < o.seg.caps.max_keys; i++) {
		struct seg_key *k = &o.seg.keys[i];
		uint32_t state = atomic_load(&k->state);
		char name[LOCAL_KEY_MAX + 1];

		if (state != KEY_USED && state != KEY_QUARANTINED)
			continue;
		if ((flags & LOCAL_KEYS_QUARANTINED) && state != KEY_QUARANTINED)
			continue;
		if (k->key_len > LOCAL_KEY_MAX || k->key_len < plen ||
		    memcmp(k->key, prefix ? prefix : "", plen))
			continue;
		memcpy(name, k->key, k->key_len);
		name[k->key_len] = '\0';
		api_fill_info_locked(&o.seg, k, ki);
		err = cb(name, ki, state == KEY_QUARANTINED ? LOCAL_KEY_QUARANTINED : 0, arg);
		if (!err && holder_cb && state == KEY_USED)
			err = offline_holders(&o.seg, k, name, holder_cb, NULL, arg);
	}
	offline_close(&o);
	free(ki);
	return err;
}

static int offline_info(const char *socket, const char *key, struct local_key_info *ki,
			unsigned *kf)
{
	size_t len = strlen(key);
	struct local_key_info full; /* the caller's size and value buffer */
	struct offline o;
	uint32_t i;
	int err = abi_key_info_in(ki, &full);

	if (err)
		return err;
	err = offline_open(socket, &o);
	if (err)
		return err;
	*kf = 0;
	for (i = 0; i < o.seg.caps.max_keys; i++) {
		struct seg_key *k = &o.seg.keys[i];
		uint32_t state = atomic_load(&k->state);

		if ((state != KEY_USED && state != KEY_QUARANTINED) || k->key_len != len ||
		    memcmp(k->key, key, len))
			continue;
		if (state == KEY_QUARANTINED)
			*kf |= LOCAL_KEY_QUARANTINED;
		else
			api_fill_info_locked(&o.seg, k, &full);
		break;
	}
	offline_close(&o);
	abi_key_info_out(ki, &full);
	return 0;
}

int cli_admin_stats(const char *socket, struct local_stats *st, uint32_t *nq)
{
	int err = local_admin_stats(socket, st, nq);

	if (broker_missing(err) && !offline_stats(socket, st, nq))
		return 0;
	return err;
}

int cli_admin_keys(const char *socket, const char *prefix, unsigned flags,
		   int (*cb)(const char *, const struct local_key_info *, unsigned, void *),
		   int (*holder_cb)(const char *, const struct local_holder *, void *), void *arg)
{
	int err = local_admin_keys(socket, prefix, flags, cb, holder_cb, arg);

	if (broker_missing(err) && !offline_keys(socket, prefix, flags, cb, holder_cb, arg))
		return 0;
	return err;
}

int cli_admin_info(const char *socket, const char *key, struct local_key_info *ki, unsigned *kf)
{
	int err = local_admin_info(socket, key, ki, kf);

	if (broker_missing(err) && !offline_info(socket, key, ki, kf))
		return 0;
	return err;
}

int cli_admin_holders(const char *socket, const char *key,
		      int (*cb)(const struct local_holder *, void *), void *arg)
{
	size_t len = strlen(key);
	struct offline o;
	uint32_t i;
	int err = local_admin_holders(socket, key, cb, arg);

	if (!broker_missing(err) || offline_open(socket, &o))
		return err;
	err = 0;
	for (i = 0; i < o.seg.caps.max_keys; i++) {
		struct seg_key *k = &o.seg.keys[i];

		if (atomic_load(&k->state) == KEY_USED && k->key_len == len &&
		    !memcmp(k->key, key, len)) {
			err = offline_holders(&o.seg, k, key, NULL, cb, arg);
			break;
		}
	}
	offline_close(&o);
	return err;
}
