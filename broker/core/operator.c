// SPDX-License-Identifier: MIT
/*
 * Operator requests without a session (MSG_OP_*): the broker reads the
 * segment and acts on it itself, so that `shmlock keys`, `info`, `status`,
 * `sessions` and `reset` work when the session table is full (leaked
 * sessions without a process check, say) and need no slot, pidfd or mapping
 * of their own.
 *
 * Nothing here may stall the event loop: a key mutex is waited for at most
 * OP_LOCK_MS, and a key still held after that (a process stopped inside its
 * critical section) is described from its fields read without the mutex and
 * flagged busy. A page of a listing also ends once OP_PAGE_MS have gone by,
 * and the client asks for the next one on a new connection. Holders and
 * session counts come from the node table, which needs no mutex at all.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <syslog.h>
#include <unistd.h>

#include "clock.h"
#include "keyreset.h"
#include "net/net.h"
#include "operator.h"
#include "seg_check.h"

#define OP_LOCK_MS 10  /* patience with one key's mutex */
#define OP_PAGE_MS 100 /* a page ends early past this (at least one record) */
#define OP_RESET_MS BROKER_LOCK_MS

struct page {
	char *buf;
	size_t len; /* bytes used, reply head included */
	uint32_t count;
};

/* Room for a record of @size bytes (rounded up to 8) in the page, zeroed;
 * NULL when it would pass @limit. */
static void *rec_add(struct page *p, size_t size, size_t limit)
{
	size_t sz = (size + 7) & ~(size_t)7;
	char *r;

	if (p->len + sz > limit)
		return NULL;
	r = p->buf + p->len;
	memset(r, 0, sz);
	memcpy(r, &(uint32_t){ (uint32_t)sz }, sizeof(uint32_t));
	p->len += sz;
	p->count++;
	return r;
}

const char *operator_key_label(const struct segment *seg, uint32_t idx, char *buf, size_t size)
{
	const struct seg_key *k = seg_key_at(seg, idx);
	size_t len = 0;
	const char *name = k ? key_entry_name(k, &len) : "";

	/* Raw: blog() escapes every line it writes (log.c). A NUL inside a
	 * damaged name ends it here. */
	snprintf(buf, size, "'%.*s' (entry %u)", (int)len, name, idx);
	return buf;
}

uint32_t operator_quarantined(const struct segment *seg,
			      int (*cb)(uint32_t idx, const char *name, size_t len, void *arg),
			      void *arg)
{
	uint32_t i, n = 0;
	bool more = cb != NULL;

	for (i = 0; i < seg->caps.max_keys; i++) {
		const struct seg_key *k = &seg->keys[i];
		const char *name;
		size_t len;

		if (atomic_load(&k->state) != KEY_QUARANTINED)
			continue;
		n++;
		name = key_entry_name(k, &len);
		if (more && cb(i, name, len, arg))
			more = false;
	}
	return n;
}

/* ---- describing a key ---------------------------------------------------------- */

/* The node holding lock or first semaphore slot of entry @idx, or IDX_NONE.
 * Read without the mutex: everything is bounds-checked. */
static uint32_t first_holder(const struct segment *seg, const struct seg_key *k, uint32_t idx)
{
	uint32_t h = seg_key_first_named(k);
	uint32_t i = h ? h - 1 : k->h_head;
	uint64_t w;

	if (i >= seg->nnodes)
		return IDX_NONE;
	w = atomic_load(&seg->nodes[i].word);
	return NODE_KEY(w) == idx && seg_node_is_hold(seg, i, w) ? i : IDX_NONE;
}

/* Holds and queued requests of entry @idx, from the node table. */
static void count_nodes(const struct segment *seg, uint32_t idx, uint32_t *holds, uint32_t *waiting)
{
	uint32_t i;

	*holds = *waiting = 0;
	for (i = 0; i < seg->nnodes; i++) {
		uint64_t w = atomic_load(&seg->nodes[i].word);

		if (!w || NODE_KEY(w) != idx)
			continue;
		if (seg_node_is_hold(seg, i, w))
			(*holds)++;
		else if (NODE_STATE(w) == NODE_WAITING)
			(*waiting)++;
	}
}

static uint64_t ms_left(uint64_t until, uint64_t now)
{
	return until > now ? (until - now + 999999) / 1000000 : 0;
}

/* Who node @n belongs to, into a record's session, name and pid (left zero
 * when its session is gone). */
static void node_owner(const struct segment *seg, const struct seg_node *n, uint8_t session[16],
		       char name[SEG_NAME_MAX], int32_t *pid)
{
	const struct seg_session *s = seg_session_at(seg, NODE_SESSION(atomic_load(&n->word)));

	if (!s)
		return;
	memcpy(session, s->id, sizeof(s->id));
	memcpy(name, s->name, sizeof(s->name));
	name[SEG_NAME_MAX - 1] = '\0';
	*pid = s->pid;
}

/* A holder record for hold node @i; -ENOSPC when the page is full. */
static int add_holder(const struct segment *seg, uint32_t i, uint64_t now, struct page *p)
{
	const struct seg_node *n = &seg->nodes[i];
	struct proto_op_holder *r = rec_add(p, sizeof(*r), PROTO_OP_PAGE);

	if (!r)
		return -ENOSPC;
	node_owner(seg, n, r->session, r->name, &r->pid);
	r->token = n->token;
	r->lease_remaining_ms = n->lease_until_ns ? ms_left(n->lease_until_ns, now) : 0;
	return 0;
}

/* A queued request (`shmlock info`): read without the key's mutex, as
 * a snapshot; the client puts them in arrival order. */
static int add_waiter(const struct segment *seg, uint32_t i, uint32_t now_ms, struct page *p)
{
	const struct seg_node *n = &seg->nodes[i];
	struct proto_op_waiter *r = rec_add(p, sizeof(*r), PROTO_OP_PAGE);

	if (!r)
		return -ENOSPC;
	node_owner(seg, n, r->session, r->name, &r->pid);
	r->seq = n->seq;
	r->waiting_ms = (uint32_t)(now_ms - n->queued_ms); /* wraps every 49 days: fine */
	return 0;
}

static uint32_t find_entry(const struct segment *seg, const char *key, size_t len);

static int op_waiters(struct broker *b, const struct proto_op *req, struct page *p, uint32_t *next)
{
	struct segment *seg = &b->seg;
	uint32_t idx = find_entry(seg, req->key, req->key_len), i;
	uint32_t now_ms = (uint32_t)(mono_ns() / 1000000);

	*next = PROTO_OP_END;
	if (idx == IDX_NONE)
		return 0;
	for (i = req->cursor; i < seg->nnodes; i++) {
		uint64_t w = atomic_load(&seg->nodes[i].word);

		if (NODE_STATE(w) != NODE_WAITING || NODE_KEY(w) != idx)
			continue;
		if (add_waiter(seg, i, now_ms, p)) {
			*next = i;
			break;
		}
	}
	return 0;
}

/* What a key record carries besides the key's state. */
#define WANT_VALUE 1u
#define WANT_HOLDERS 2u
/* Holders sent along with a key in a listing; a key with more has its own
 * MSG_OP_HOLDERS request. */
#define INLINE_HOLDERS 32

/*
 * The holds of entry @idx into @out (at most @max): from its holder list
 * when the caller holds the key's mutex (@flags 0), else from the node
 * table. Returns how many, or UINT32_MAX when there are more than @max.
 */
static uint32_t collect_holders(const struct segment *seg, const struct seg_key *k, uint32_t idx,
				uint32_t flags, uint32_t *out, uint32_t max)
{
	uint32_t i, n = 0;

	if (!flags) {
		if (k->holders > max)
			return UINT32_MAX;
		for (i = k->h_head; i < seg->nnodes && n < k->holders; i = seg->nodes[i].next)
			out[n++] = i;
		return n;
	}
	for (i = 0; i < seg->nnodes; i++) {
		uint64_t w = atomic_load(&seg->nodes[i].word);

		if (!w || NODE_KEY(w) != idx || !seg_node_is_hold(seg, i, w))
			continue;
		if (n == max)
			return UINT32_MAX;
		out[n++] = i;
	}
	return n;
}

/*
 * Add a record for entry @idx. @flags: PROTO_KEY_*; without either, the
 * caller holds the key's mutex and every field is as good as local_info()'s.
 * Returns 0, or -ENOSPC when the page is full.
 */
static int describe_key(const struct segment *seg, uint32_t idx, uint32_t flags, unsigned want,
			struct page *p, size_t limit)
{
	const struct seg_key *k = &seg->keys[idx];
	uint64_t vw = atomic_load(&k->value_word), now = mono_ns(), delay = k->delay_until_ns;
	uint32_t vlen = VALUE_LEN(vw) <= seg->caps.max_value ? VALUE_LEN(vw) : 0;
	uint32_t send = (want & WANT_VALUE) && !(flags & PROTO_KEY_QUARANTINED) ? vlen : 0, h;
	uint32_t held[INLINE_HOLDERS], nheld = 0, j;
	size_t len, need, used = p->len;
	unsigned count = p->count;
	struct proto_op_key *r;
	const char *name;

	name = key_entry_name(k, &len);
	need = ((sizeof(*r) + len + send + 7) & ~(size_t)7);
	if (want & WANT_HOLDERS) {
		nheld = collect_holders(seg, k, idx, flags, held, INLINE_HOLDERS);
		if (nheld != UINT32_MAX)
			need += nheld * sizeof(struct proto_op_holder);
	}
	/* Whole or not at all, unless alone in its page (then its holders
	 * are left to MSG_OP_HOLDERS). */
	if (p->len + need > limit && count)
		return -ENOSPC;
	r = rec_add(p, sizeof(*r) + len + send, limit);
	if (!r)
		return -ENOSPC;
	r->flags = flags;
	r->entry = idx;
	r->kind = k->kind <= LOCAL_KIND_SEMAPHORE ? (int32_t)k->kind : LOCAL_KIND_NONE;
	r->limit = k->limit;
	if (flags & PROTO_KEY_QUARANTINED) {
		/* Its counts are what repair distrusted: the node table says. */
		count_nodes(seg, idx, &r->holders, &r->waiters);
	} else {
		r->holders = k->holders;
		r->waiters = k->waiters;
	}
	key_counts_peek(k, &r->lock_index, &r->modify_index);
	if (delay > now)
		r->lock_delay_remaining_ms = (delay - now + 999999) / 1000000;
	h = first_holder(seg, k, idx);
	if (h != IDX_NONE) {
		const struct seg_session *s =
			seg_session_at(seg, NODE_SESSION(atomic_load(&seg->nodes[h].word)));

		r->token = seg->nodes[h].token;
		if (s) {
			memcpy(r->holder_id, s->id, sizeof(r->holder_id));
			memcpy(r->holder_name, s->name, sizeof(r->holder_name));
			r->holder_name[sizeof(r->holder_name) - 1] = '\0';
			r->holder_pid = s->pid;
		}
	}
	if (h == IDX_NONE) /* a cluster key held on another host (cluster_values.c) */
		cluster_remote_fill(name, len, r);
	r->key_len = (uint32_t)len;
	r->value_total = (flags & PROTO_KEY_QUARANTINED) ? 0 : vlen;
	r->value_len = send;
	memcpy((char *)(r + 1), name, len);
	if (send)
		memcpy((char *)(r + 1) + len, seg_value_buf(seg, idx, VALUE_SEL(vw)), send);
	if (!(want & WANT_HOLDERS))
		return 0;
	if (nheld == UINT32_MAX) {
		r->flags |= PROTO_KEY_MORE_HOLDERS;
		return 0;
	}
	for (j = 0; j < nheld; j++) {
		if (add_holder(seg, held[j], now, p)) {
			/* Only when the record stands alone in its page. */
			p->len = used + ((sizeof(*r) + len + send + 7) & ~(size_t)7);
			p->count = count + 1;
			r->flags |= PROTO_KEY_MORE_HOLDERS;
			return 0;
		}
	}
	r->nholders = nheld;
	return 0;
}

static bool name_is(const struct seg_key *k, const char *key, size_t len, bool prefix)
{
	size_t n;
	const char *name = key_entry_name(k, &n);

	return prefix ? n >= len && !memcmp(name, key, len) : n == len && !memcmp(name, key, len);
}

/* Describe live entry @idx, named @key (or starting with it, @prefix),
 * under its mutex if it comes within OP_LOCK_MS. */
static int describe_live(struct segment *seg, uint32_t idx, const char *key, size_t len,
			 bool prefix, unsigned want, struct page *p, size_t limit)
{
	struct seg_key *k = &seg->keys[idx];
	int err = key_lock_timed(seg, k, OP_LOCK_MS);

	if (err == -LOCAL_ECORRUPT) /* found damaged just now */
		return describe_key(seg, idx, PROTO_KEY_QUARANTINED, want & ~WANT_VALUE, p, limit);
	if (err) /* -ETIMEDOUT: a process sits in its critical section */
		return describe_key(seg, idx, PROTO_KEY_BUSY, want, p, limit);
	/* Reclaimed and perhaps reused since the unlocked look: skip it. */
	err = atomic_load(&k->state) == KEY_USED && name_is(k, key, len, prefix)
		      ? describe_key(seg, idx, 0, want, p, limit)
		      : 0;
	key_unlock(k);
	return err;
}

/* The entry named @key, a live one rather than a quarantined one; read
 * without locks (a hint: the caller locks and re-checks). */
static uint32_t find_entry(const struct segment *seg, const char *key, size_t len)
{
	uint32_t i, found = IDX_NONE;

	for (i = 0; i < seg->caps.max_keys; i++) {
		uint32_t st = atomic_load(&seg->keys[i].state);

		if ((st != KEY_USED && st != KEY_QUARANTINED) ||
		    !name_is(&seg->keys[i], key, len, false))
			continue;
		if (st == KEY_USED)
			return i;
		found = i;
	}
	return found;
}

/* ---- the requests ---------------------------------------------------------------- */

static int op_keys(struct broker *b, const struct proto_op *req, struct page *p, uint32_t *next)
{
	struct segment *seg = &b->seg;
	uint64_t end = mono_ns() + OP_PAGE_MS * 1000000ull;
	uint32_t i;

	for (i = req->cursor; i < seg->caps.max_keys; i++) {
		uint32_t st = atomic_load(&seg->keys[i].state);
		unsigned want;
		int err;

		if (st != KEY_USED && st != KEY_QUARANTINED)
			continue;
		if ((req->flags & PROTO_OP_QUARANTINED) && st != KEY_QUARANTINED)
			continue;
		if (!name_is(&seg->keys[i], req->key, req->key_len, true))
			continue;
		if (p->count && mono_ns() >= end)
			break;
		want = req->flags & PROTO_OP_HOLDERS ? WANT_HOLDERS : 0;
		err = st == KEY_USED
			      ? describe_live(seg, i, req->key, req->key_len, true, want, p,
					      PROTO_OP_PAGE)
			      : describe_key(seg, i, PROTO_KEY_QUARANTINED, want, p, PROTO_OP_PAGE);
		if (err == -ENOSPC)
			break;
	}
	*next = i < seg->caps.max_keys ? i : PROTO_OP_END;
	return 0;
}

static int op_info(struct broker *b, const struct proto_op *req, struct page *p)
{
	struct segment *seg = &b->seg;
	struct proto_op_key *r;
	struct seg_key *k;
	uint32_t idx;
	int err;

	/* Through the index, under the key's mutex: the usual case. */
	err = keytab_find_timed(seg, req->key, req->key_len, false, &k, OP_LOCK_MS);
	if (!err) {
		err = describe_key(seg, seg_key_index(seg, k), 0, WANT_VALUE, p,
				   PROTO_OP_MAX_REPLY);
		key_unlock(k);
		return err ? -ENOMEM : 0;
	}
	/* Quarantined, busy, or not there: look at the entries themselves. */
	idx = find_entry(seg, req->key, req->key_len);
	if (idx != IDX_NONE) {
		err = atomic_load(&seg->keys[idx].state) == KEY_USED
			      ? describe_live(seg, idx, req->key, req->key_len, false, WANT_VALUE,
					      p, PROTO_OP_MAX_REPLY)
			      : describe_key(seg, idx, PROTO_KEY_QUARANTINED, 0, p,
					     PROTO_OP_MAX_REPLY);
		if (err || p->count)
			return err ? -ENOMEM : 0;
	}
	/* No such key (local_info()'s kind none). */
	r = rec_add(p, sizeof(*r) + req->key_len, PROTO_OP_MAX_REPLY);
	if (!r)
		return -ENOMEM;
	r->kind = LOCAL_KIND_NONE;
	r->entry = IDX_NONE;
	r->key_len = req->key_len;
	memcpy(r + 1, req->key, req->key_len);
	cluster_remote_fill(req->key, req->key_len, r); /* held on another host? */
	return 0;
}

/*
 * The holders of @key. Found through the index, with the key's mutex if it
 * comes within OP_LOCK_MS, a first page is its holder list (a lock has one:
 * cheap for `shmlock keys` over many held locks). Otherwise (a list longer
 * than a page, a later page, a busy or quarantined key) they come from the
 * node table, which needs no mutex.
 */
static int op_holders(struct broker *b, const struct proto_op *req, struct page *p, uint32_t *next)
{
	struct segment *seg = &b->seg;
	uint32_t idx = IDX_NONE, i, n = 0;
	uint64_t now = mono_ns();
	struct seg_key *k;

	*next = PROTO_OP_END;
	if (!keytab_find_timed(seg, req->key, req->key_len, false, &k, OP_LOCK_MS)) {
		idx = seg_key_index(seg, k);
		if (!req->cursor &&
		    (size_t)k->holders * sizeof(struct proto_op_holder) <= PROTO_OP_PAGE / 2) {
			for (i = k->h_head; i < seg->nnodes && n < k->holders;
			     i = seg->nodes[i].next, n++)
				add_holder(seg, i, now, p);
			key_unlock(k);
			return 0;
		}
		key_unlock(k);
	}
	if (idx == IDX_NONE)
		idx = find_entry(seg, req->key, req->key_len);
	if (idx == IDX_NONE)
		return 0;
	for (i = req->cursor; i < seg->nnodes; i++) {
		uint64_t w = atomic_load(&seg->nodes[i].word);

		if (!w || NODE_KEY(w) != idx || !seg_node_is_hold(seg, i, w))
			continue;
		if (add_holder(seg, i, now, p)) {
			*next = i;
			break;
		}
	}
	return 0;
}

uint32_t (*operator_session_counts(const struct segment *seg))[2]
{
	uint32_t(*counts)[2] = calloc(seg->caps.max_sessions, sizeof(*counts)), i;

	if (!counts)
		return NULL;
	for (i = 0; i < seg->nnodes; i++) {
		uint64_t w = atomic_load(&seg->nodes[i].word);
		uint32_t slot = NODE_SESSION(w);

		if (!w || slot >= seg->caps.max_sessions)
			continue;
		if (seg_node_is_hold(seg, i, w))
			counts[slot][0]++;
		else if (NODE_STATE(w) == NODE_WAITING)
			counts[slot][1]++;
	}
	return counts;
}

static int op_sessions(struct broker *b, const struct proto_op *req, struct page *p, uint32_t *next)
{
	struct segment *seg = &b->seg;
	uint32_t(*counts)[2] = operator_session_counts(seg), i;
	uint64_t now = mono_ns();

	if (!counts)
		return -ENOMEM;
	*next = PROTO_OP_END;
	for (i = req->cursor; i < seg->caps.max_sessions; i++) {
		const struct seg_session *s = &seg->sessions[i];
		struct proto_op_session *r;

		if (SESS_STATE(atomic_load(&s->state_gen)) != SESS_ACTIVE)
			continue;
		r = rec_add(p, sizeof(*r), PROTO_OP_PAGE);
		if (!r) {
			*next = i;
			break;
		}
		memcpy(r->id, s->id, sizeof(r->id));
		/* A slot that fails the format's check is shown, not trusted. */
		if (seg_session_sane(s))
			memcpy(r->name, s->name, sizeof(r->name));
		else
			snprintf(r->name, sizeof(r->name), "(damaged: %s)", seg_session_problem(s));
		r->name[sizeof(r->name) - 1] = '\0';
		r->pid = s->pid;
		r->uid = s->uid;
		r->ttl_ms = s->ttl_ms;
		if (s->ttl_ms)
			r->ttl_remaining_ms = ms_left(atomic_load(&s->renewed_ns) +
							      (uint64_t)s->ttl_ms * 1000000ull,
						      now);
		r->lock_delay_ms = s->lock_delay_ms;
		r->behavior = s->behavior;
		r->flags = s->flags;
		r->state = SESS_ACTIVE;
		r->holds = counts[i][0];
		r->waiting = counts[i][1];
	}
	free(counts);
	return 0;
}

/* MSG_OP_LOCK_DELAY: who put the key in lock-delay; no record when none. */
static int op_delay_note(const struct proto_op *req, struct page *p)
{
	struct proto_op_delay d, *r;

	memset(&d, 0, sizeof(d));
	if (delay_note_get(req->key, req->key_len, &d))
		return 0;
	r = rec_add(p, sizeof(*r), PROTO_OP_PAGE);
	if (!r)
		return -ENOMEM;
	d.size = r->size;
	memcpy(r, &d, sizeof(d));
	return 0;
}

/* MSG_OP_BROKER: the broker's own facts, for `shmlock status`. */
static int op_broker(struct broker *b, struct page *p)
{
	struct proto_op_broker *r = rec_add(p, sizeof(*r), PROTO_OP_PAGE);

	if (!r)
		return -ENOMEM;
	r->seg_abi = SEG_ABI;
	r->proto_version = PROTO_VERSION;
	r->broker_pid = (uint32_t)getpid();
	r->uptime_ms = (mono_ns() - b->started_ns) / 1000000;
	snprintf(r->version, sizeof(r->version), "%s", SHMLOCK_VERSION);
	snprintf(r->socket_path, sizeof(r->socket_path), "%s", b->opts.socket_path);
	snprintf(r->shm_name, sizeof(r->shm_name), "%s", b->opts.shm_name);
	snprintf(r->http_listen, sizeof(r->http_listen), "%s", b->http ? b->opts.http.listen : "");
	snprintf(r->http_socket, sizeof(r->http_socket), "%s",
		 b->http ? b->opts.http.unix_path : "");
	snprintf(r->tcp_listen, sizeof(r->tcp_listen), "%s", b->tcp ? b->opts.tcp.listen : "");
	if (b->tcp && b->opts.tcp.tls_cert[0])
		r->flags |= PROTO_BROKER_TCP_TLS;
	if (b->opts.http.auth_token[0])
		r->flags |= PROTO_BROKER_AUTH_TOKEN;
	if (b->http && !b->opts.http.listen[0] && !b->opts.http.unix_path[0])
		r->flags |= PROTO_BROKER_HTTP_ACTIVATED;
	if (b->tcp && !b->opts.tcp.listen[0])
		r->flags |= PROTO_BROKER_TCP_ACTIVATED;
	if (!b->listen_owned)
		r->flags |= PROTO_BROKER_CONTROL_ACTIVATED;
	snprintf(r->metrics_listen, sizeof(r->metrics_listen), "%s",
		 b->metrics ? b->opts.metrics_listen : "");
	if (b->metrics && !b->opts.metrics_listen[0])
		r->flags |= PROTO_BROKER_METRICS_ACTIVATED;
	/* The Consul API is a listener of the HTTP engine (b->http), which
	 * the HTTP face starts for it; on when configured or passed by systemd. */
	snprintf(r->consul_listen, sizeof(r->consul_listen), "%s",
		 b->http ? b->opts.consul.listen : "");
	if (b->http && !b->opts.consul.listen[0] && activated_stream_fd("consul") >= 0)
		r->flags |= PROTO_BROKER_CONSUL_ACTIVATED;
	return 0;
}

static int op_stats(struct broker *b, struct page *p)
{
	struct proto_op_stats *r = rec_add(p, sizeof(*r), PROTO_OP_PAGE);

	if (!r)
		return -ENOMEM;
	operator_stats(b, r);
	return 0;
}

/* Split out of op_stats() for /metrics (broker/faces/metrics/metrics_render.c). */
void operator_stats(const struct broker *b, struct proto_op_stats *r)
{
	api_seg_stats(&b->seg, r);
}

/*
 * No quarantined entry of that name: the key may be stuck on its lock word
 * instead (a forged owner the periodic scan has not broken yet). Break and
 * repair it now if its owner is gone; name a live owner otherwise.
 */
static int reset_word(struct broker *b, const struct proto_op *req, const struct ucred *who)
{
	uint32_t owner;
	int err = owners_reset_word(b, req->key, req->key_len, &owner);

	if (!err)
		blog(LOG_WARNING,
		     "operator (uid %u, pid %d) reset %.*s: its lock word named pid "
		     "%u, no live process of a session; broken, and the key repaired",
		     (unsigned)who->uid, (int)who->pid, (int)req->key_len, req->key, owner);
	else if (err == -EBUSY)
		blog(LOG_WARNING,
		     "operator reset of %.*s: its lock word is held by pid %u, a live "
		     "process of a session; it lets go when that process exits or its session "
		     "is destroyed",
		     (int)req->key_len, req->key, owner);
	return err == -EBUSY ? -ETIMEDOUT : err;
}

/* Reset every quarantined entry named @req->key; -ENOENT if there is none. */
static int op_reset(struct broker *b, const struct proto_op *req, const struct ucred *who)
{
	struct segment *seg = &b->seg;
	uint32_t i, done = 0, j;
	int err = -ENOENT;

	for (i = 0; i < seg->caps.max_keys; i++) {
		struct key_reset_result res;
		char label[3 * 4 * 64], ids[8 * 34] = "";
		size_t o = 0;
		int r;

		if (atomic_load(&seg->keys[i].state) != KEY_QUARANTINED ||
		    !name_is(&seg->keys[i], req->key, req->key_len, false))
			continue;
		operator_key_label(seg, i, label, sizeof(label));
		r = key_reset_quarantined(seg, i, OP_RESET_MS, &res);
		if (r) {
			if (r != -ENOENT)
				err = r;
			blog(LOG_WARNING, "operator reset of quarantined key %s failed: %s", label,
			     local_strerror(r));
			continue;
		}
		for (j = 0; j < res.nsessions; j++) {
			const struct seg_session *s = seg_session_at(seg, res.sessions[j]);
			char id[33];

			if (!s)
				continue;
			/* Public names: an id is the session's capability. */
			session_public_id(res.sessions[j], SESS_GEN(atomic_load(&s->state_gen)), id,
					  sizeof(id));
			o += (size_t)snprintf(ids + o, sizeof(ids) - o, "%s%s", o ? ", " : "", id);
		}
		blog_audit(LOG_WARNING,
			   "operator (uid %u, pid %d) reset quarantined key %s: dropped %u "
			   "hold(s), %u queued request(s), %u watch(es)%s%s",
			   (unsigned)who->uid, (int)who->pid, label, res.holds, res.waiters,
			   res.watchers, o ? " of session(s) " : "", ids);
		done++;
	}
	if (!done && err == -ENOENT)
		err = reset_word(b, req, who);
	return done ? 0 : err;
}

void operator_serve(struct broker *b, int conn, int type, const struct proto_op *req)
{
	struct page p = { malloc(PROTO_OP_MAX_REPLY), sizeof(struct proto_op_reply), 0 };
	struct proto_op_reply rep;
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	int err, sndbuf = (int)PROTO_OP_MAX_REPLY * 2;

	memset(&rep, 0, sizeof(rep));
	rep.next = PROTO_OP_END;
	if (!p.buf)
		err = -ENOMEM;
	else if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0)
		err = -LOCAL_EDENIED;
	else
		err = access_check(b, conn, &cred);
	if (!err) {
		switch (type) {
		case MSG_OP_STATS:
			err = op_stats(b, &p);
			break;
		case MSG_OP_KEYS:
			err = op_keys(b, req, &p, &rep.next);
			break;
		case MSG_OP_INFO:
			err = op_info(b, req, &p);
			break;
		case MSG_OP_HOLDERS:
			err = op_holders(b, req, &p, &rep.next);
			break;
		case MSG_OP_SESSIONS:
			err = op_sessions(b, req, &p, &rep.next);
			break;
		case MSG_OP_WAITERS: /* the queue of one key */
			err = op_waiters(b, req, &p, &rep.next);
			break;
		case MSG_OP_RESET:
			err = op_reset(b, req, &cred);
			break;
		case MSG_OP_BROKER:
			err = op_broker(b, &p);
			break;
		case MSG_OP_LOCK_DELAY:
			err = op_delay_note(req, &p);
			break;
		default:
			err = -LOCAL_EPROTO;
		}
	}
	if (err || !p.buf) {
		p.len = sizeof(rep);
		p.count = 0;
		rep.next = PROTO_OP_END;
	}
	proto_init_hdr(&rep.hdr, MSG_OP_REPLY, (uint32_t)p.len);
	rep.status = err;
	rep.count = p.count;
	/* A reply is one datagram: make room for the largest (a page and a
	 * value); the kernel caps it at net.core.wmem_max. */
	setsockopt(conn, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	if (p.buf) {
		memcpy(p.buf, &rep, sizeof(rep));
		send(conn, p.buf, p.len, MSG_NOSIGNAL | MSG_DONTWAIT);
	} else {
		send(conn, &rep, sizeof(rep), MSG_NOSIGNAL | MSG_DONTWAIT);
	}
	free(p.buf);
}
