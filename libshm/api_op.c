// SPDX-License-Identifier: MIT
/*
 * Operator calls without a session (local_admin_*): each is a MSG_OP_*
 * request on a connection of its own, answered by the broker from the
 * segment (broker/core/operator.c). Listings come in pages; the reply says where
 * the next one starts. Replies are checked as strictly as the broker checks
 * requests: every record must fit its page and every length its field.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "abi.h"
#include "client.h"
#include "clock.h"
#include "paths.h"

#define OP_REPLY_TIMEOUT_S 10

struct op_conn {
	char path[PATHS_LEN]; /* given, or found by the first call */
	bool found;
	char *buf; /* PROTO_OP_MAX_REPLY */
};

static int op_open(struct op_conn *c, const char *socket_path)
{
	c->found = false;
	c->path[0] = '\0';
	if (socket_path) {
		if (strlen(socket_path) >= sizeof(c->path))
			return -ENAMETOOLONG;
		strcpy(c->path, socket_path);
	}
	c->buf = malloc(PROTO_OP_MAX_REPLY);
	return c->buf ? 0 : -ENOMEM;
}

static void op_close(struct op_conn *c)
{
	free(c->buf);
}

/* Connect; while nothing listens (a broker restarting) retry for a while:
 * nothing has been sent, so that is safe. The first call of a listing finds
 * the broker; the pages after it go to the same one. */
static int op_connect(struct op_conn *c)
{
	int wait_ms = broker_wait_default_ms();
	int sock = broker_find(c->found || c->path[0] ? c->path : NULL, c->path,
			       wait_ms ? mono_ns() + (uint64_t)wait_ms * 1000000ull : 0);

	if (sock >= 0)
		c->found = true;
	return sock;
}

/*
 * One request of @type; the reply head in *rep, its records in c->buf after
 * it. Returns 0 (then rep->status is the broker's verdict) or an error.
 */
static int op_call(struct op_conn *c, int type, const char *key, size_t key_len, uint32_t cursor,
		   uint32_t flags, size_t min_rec, struct proto_op_reply *rep)
{
	struct timeval tv = { .tv_sec = OP_REPLY_TIMEOUT_S };
	struct proto_op req;
	ssize_t n;
	int sock, err;

	memset(&req, 0, sizeof(req));
	proto_init_hdr(&req.hdr, (uint16_t)type, sizeof(req));
	req.cursor = cursor;
	req.flags = flags;
	req.key_len = (uint32_t)key_len;
	memcpy(req.key, key, key_len);
	sock = op_connect(c);
	if (sock < 0)
		return sock;
	setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (send(sock, &req, sizeof(req), MSG_NOSIGNAL) != (ssize_t)sizeof(req)) {
		close(sock);
		return -LOCAL_EBROKER;
	}
	do
		n = recv(sock, c->buf, PROTO_OP_MAX_REPLY, MSG_TRUNC);
	while (n < 0 && errno == EINTR);
	close(sock);
	if (n <= 0)
		return -LOCAL_EBROKER;
	if ((size_t)n > PROTO_OP_MAX_REPLY)
		return -LOCAL_EPROTO;
	err = proto_decode_op_reply(c->buf, (size_t)n, rep, min_rec);
	if (err == -LOCAL_EPROTO && (size_t)n >= sizeof(struct proto_hdr)) {
		/* A broker without operator requests answers with a plain
		 * reply (LOCAL_EPROTO): say so rather than "malformed". */
		struct proto_reply old;

		if (!proto_decode_reply(c->buf, (size_t)n, &old) && old.status)
			return old.status;
	}
	return err;
}

/* Check a key argument: 0, -EINVAL or -ENAMETOOLONG; its length in *len. */
static int key_arg(const char *key, size_t *len, bool empty_ok)
{
	if (!key) {
		*len = 0;
		return empty_ok ? 0 : -EINVAL;
	}
	*len = strnlen(key, LOCAL_KEY_MAX + 1);
	if (*len == 0 && empty_ok)
		return 0;
	return key_check(key, *len);
}

/* The records of a reply, one after the other. */
static const char *rec_next(const struct op_conn *c, size_t *off)
{
	const char *r = c->buf + *off;
	uint32_t size;

	memcpy(&size, r, sizeof(size));
	*off += size;
	return r;
}

/* A key record as local_info() would fill @ki; its name in @name. */
static int key_from(const char *raw, struct local_key_info *ki, char *name, unsigned *flags,
		    uint32_t *nholders, bool with_value)
{
	struct proto_op_key r;

	memcpy(&r.size, raw, sizeof(r.size));
	if (r.size < sizeof(r))
		return -LOCAL_EPROTO; /* a holder record where a key's was due */
	memcpy(&r, raw, sizeof(r));
	if (r.key_len > LOCAL_KEY_MAX || r.value_len > LOCAL_VALUE_MAX ||
	    r.value_total > LOCAL_VALUE_MAX || r.value_len > r.value_total ||
	    sizeof(r) + r.key_len + r.value_len > r.size || r.kind < LOCAL_KIND_NONE ||
	    r.kind > LOCAL_KIND_SEMAPHORE ||
	    (r.flags & ~(PROTO_KEY_QUARANTINED | PROTO_KEY_BUSY | PROTO_KEY_MORE_HOLDERS)))
		return -LOCAL_EPROTO;
	api_info_clear(ki);
	ki->kind = r.kind;
	ki->limit = r.limit;
	ki->holders = r.holders;
	ki->waiters = r.waiters;
	ki->token = r.token;
	ki->lock_index = r.lock_index;
	ki->modify_index = r.modify_index;
	ki->lock_delay_remaining_ms = r.lock_delay_remaining_ms;
	if (memcmp(r.holder_id, (uint8_t[16]){ 0 }, sizeof(r.holder_id))) {
		hex_encode(r.holder_id, sizeof(r.holder_id), ki->holder_session);
		memcpy(ki->holder_name, r.holder_name, sizeof(ki->holder_name));
		ki->holder_name[sizeof(ki->holder_name) - 1] = '\0';
		ki->holder_pid = r.holder_pid;
	}
	ki->value_len = r.value_total;
	if (with_value && ki->value_buf)
		memcpy(ki->value_buf, raw + sizeof(r) + r.key_len,
		       r.value_len < ki->value_buf_size ? r.value_len : ki->value_buf_size);
	memcpy(name, raw + sizeof(r), r.key_len);
	name[r.key_len] = '\0';
	*flags = r.flags; /* PROTO_KEY_* are LOCAL_KEY_*, and MORE_HOLDERS */
	*nholders = r.nholders;
	return 0;
}

static void holder_from(const char *raw, struct local_holder *h)
{
	struct proto_op_holder r;

	memcpy(&r, raw, sizeof(r));
	memset(h, 0, sizeof(*h));
	h->sz = sizeof(*h);
	hex_encode(r.session, sizeof(r.session), h->session);
	memcpy(h->name, r.name, sizeof(h->name));
	h->name[sizeof(h->name) - 1] = '\0';
	h->pid = r.pid;
	h->token = r.token;
	h->lease_remaining_ms = r.lease_remaining_ms;
}

struct relay {
	const char *key;
	int (*cb)(const char *key, const struct local_holder *h, void *arg);
	void *arg;
};

static int relay_holder(const struct local_holder *h, void *arg)
{
	const struct relay *r = arg;

	return r->cb(r->key, h, r->arg);
}

/*
 * A reply that must hold exactly one record: 0 with it at c->buf +
 * sizeof(struct proto_op_reply), or the broker's verdict, or an error
 * (@none when the broker sent no record at all).
 */
static int op_single(struct op_conn *c, int type, const char *key, size_t key_len, size_t min_rec,
		     int none)
{
	struct proto_op_reply rep;
	int err = op_call(c, type, key, key_len, 0, 0, min_rec, &rep);

	if (!err)
		err = rep.status;
	if (!err && rep.count != 1)
		err = rep.count ? -LOCAL_EPROTO : none;
	return err;
}

/*
 * Every page of a listing: @page is given each reply (its records at
 * c->buf + sizeof(*rep)) and stops the walk with a non-zero return. The
 * cursor must move on from page to page, or the broker is looping.
 */
static int op_pages(struct op_conn *c, int type, const char *key, size_t key_len, uint32_t flags,
		    size_t min_rec,
		    int (*page)(struct op_conn *c, const struct proto_op_reply *rep, void *arg),
		    void *arg)
{
	struct proto_op_reply rep;
	uint32_t cursor = 0;
	int err = 0;

	while (!err) {
		err = op_call(c, type, key, key_len, cursor, flags, min_rec, &rep);
		if (!err)
			err = rep.status;
		if (!err)
			err = page(c, &rep, arg);
		if (err || rep.next == PROTO_OP_END)
			break;
		if (rep.next <= cursor && cursor) {
			err = -LOCAL_EPROTO; /* no progress */
			break;
		}
		cursor = rep.next;
	}
	return err;
}

_Static_assert(PROTO_KEY_QUARANTINED == LOCAL_KEY_QUARANTINED && PROTO_KEY_BUSY == LOCAL_KEY_BUSY,
	       "key flags travel as they are");

int local_admin_stats(const char *socket_path, struct local_stats *out_caller,
		      uint32_t *quarantined_keys)
{
	struct proto_op_stats r;
	struct local_stats full;
	struct op_conn c;
	size_t n;
	int err;

	if (!out_caller)
		return -EINVAL;
	err = abi_size(out_caller, sizeof(full), &n);
	if (err)
		return err;
	err = op_open(&c, socket_path);
	if (err)
		return err;
	err = op_single(&c, MSG_OP_STATS, "", 0, sizeof(r), -LOCAL_EPROTO);
	if (!err) {
		memcpy(&r, c.buf + sizeof(struct proto_op_reply), sizeof(r));
		api_stats_from_op(&r, &full);
		if (quarantined_keys)
			*quarantined_keys = r.quarantined_keys;
		full.sz = n;
		memcpy(out_caller, &full, n);
	}
	op_close(&c);
	return err;
}

int op_lock_delay(const char *socket_path, const char *key, struct proto_op_delay *out)
{
	struct op_conn c;
	size_t len;
	int err = key_arg(key, &len, false);

	if (err)
		return err;
	err = op_open(&c, socket_path);
	if (err)
		return err;
	err = op_single(&c, MSG_OP_LOCK_DELAY, key, len, sizeof(*out), -ENOENT);
	if (!err) {
		memcpy(out, c.buf + sizeof(struct proto_op_reply), sizeof(*out));
		out->name[sizeof(out->name) - 1] = '\0';
	}
	op_close(&c);
	return err;
}

int op_broker_info(const char *socket_path, struct proto_op_broker *out)
{
	struct op_conn c;
	int err;

	err = op_open(&c, socket_path);
	if (err)
		return err;
	err = op_single(&c, MSG_OP_BROKER, "", 0, offsetof(struct proto_op_broker, metrics_listen),
			-LOCAL_EPROTO);
	if (!err) {
		memcpy(out, c.buf + sizeof(struct proto_op_reply), sizeof(*out));
		if (out->size < sizeof(*out)) /* an older broker's record */
			memset((char *)out + out->size, 0, sizeof(*out) - out->size);
		/* Terminated, whatever the broker sent. */
		out->version[sizeof(out->version) - 1] = '\0';
		out->socket_path[sizeof(out->socket_path) - 1] = '\0';
		out->shm_name[sizeof(out->shm_name) - 1] = '\0';
		out->http_listen[sizeof(out->http_listen) - 1] = '\0';
		out->http_socket[sizeof(out->http_socket) - 1] = '\0';
		out->tcp_listen[sizeof(out->tcp_listen) - 1] = '\0';
		out->metrics_listen[sizeof(out->metrics_listen) - 1] = '\0';
		out->consul_listen[sizeof(out->consul_listen) - 1] = '\0';
	}
	op_close(&c);
	return err;
}

struct keys_walk {
	const char *socket_path;
	int (*cb)(const char *key, const struct local_key_info *ki, unsigned key_flags, void *arg);
	int (*holder_cb)(const char *key, const struct local_holder *h, void *arg);
	void *arg;
	struct local_key_info ki;
	char name[LOCAL_KEY_MAX + 1];
};

/* A page of keys, each followed by the holders that came along with it. */
static int keys_page(struct op_conn *c, const struct proto_op_reply *rep, void *arg)
{
	struct keys_walk *w = arg;
	size_t off = sizeof(*rep);
	uint32_t i;
	int err = 0;

	for (i = 0; !err && i < rep->count; i++) {
		struct local_holder h;
		uint32_t nh, j;
		unsigned kf;

		err = key_from(rec_next(c, &off), &w->ki, w->name, &kf, &nh, false);
		if (!err && (nh > rep->count - i - 1 || (nh && !w->holder_cb)))
			err = -LOCAL_EPROTO;
		if (!err)
			err = w->cb(w->name, &w->ki, kf & ~PROTO_KEY_MORE_HOLDERS, w->arg);
		for (j = 0; !err && j < nh; j++, i++) {
			const char *raw = rec_next(c, &off);
			uint32_t size;

			memcpy(&size, raw, sizeof(size));
			if (size != sizeof(struct proto_op_holder)) {
				err = -LOCAL_EPROTO;
				break;
			}
			holder_from(raw, &h);
			err = w->holder_cb(w->name, &h, w->arg);
		}
		if (!err && w->holder_cb && (kf & PROTO_KEY_MORE_HOLDERS)) {
			/* Too many to come along: a request of their own. */
			struct relay r = { w->name, w->holder_cb, w->arg };

			err = local_admin_holders(w->socket_path, w->name, relay_holder, &r);
		}
	}
	return err;
}

int local_admin_keys(const char *socket_path, const char *prefix, unsigned flags,
		     int (*cb)(const char *key, const struct local_key_info *ki, unsigned key_flags,
			       void *arg),
		     int (*holder_cb)(const char *key, const struct local_holder *h, void *arg),
		     void *arg)
{
	struct keys_walk w = { socket_path, cb, holder_cb, arg, { .sz = sizeof(w.ki) }, "" };
	struct op_conn c;
	size_t plen;
	int err;

	if (!cb || (flags & ~(unsigned)LOCAL_KEYS_QUARANTINED))
		return -EINVAL;
	err = key_arg(prefix, &plen, true);
	if (err)
		return err;
	err = op_open(&c, socket_path);
	if (err)
		return err;
	err = op_pages(&c, MSG_OP_KEYS, prefix ? prefix : "", plen,
		       ((flags & LOCAL_KEYS_QUARANTINED) ? PROTO_OP_QUARANTINED : 0) |
			       (holder_cb ? PROTO_OP_HOLDERS : 0),
		       sizeof(struct proto_op_holder), keys_page, &w);
	op_close(&c);
	return err;
}

int local_admin_info(const char *socket_path, const char *key, struct local_key_info *out,
		     unsigned *key_flags)
{
	char name[LOCAL_KEY_MAX + 1];
	struct local_key_info full;
	struct op_conn c;
	unsigned kf = 0;
	uint32_t nh = 0;
	size_t len;
	int err;

	if (!out)
		return -EINVAL;
	err = abi_key_info_in(out, &full);
	if (err)
		return err;
	err = key_arg(key, &len, false);
	if (err)
		return err;
	err = op_open(&c, socket_path);
	if (err)
		return err;
	err = op_single(&c, MSG_OP_INFO, key, len, sizeof(struct proto_op_key), -LOCAL_EPROTO);
	if (!err)
		err = key_from(c.buf + sizeof(struct proto_op_reply), &full, name, &kf, &nh, true);
	if (!err && nh)
		err = -LOCAL_EPROTO;
	if (!err)
		abi_key_info_out(out, &full);
	if (!err && key_flags)
		*key_flags = kf;
	op_close(&c);
	return err;
}

struct holders_walk {
	int (*cb)(const struct local_holder *h, void *arg);
	void *arg;
};

static int holders_page(struct op_conn *c, const struct proto_op_reply *rep, void *arg)
{
	const struct holders_walk *w = arg;
	size_t off = sizeof(*rep);
	uint32_t i;
	int err = 0;

	for (i = 0; !err && i < rep->count; i++) {
		struct local_holder h;

		holder_from(rec_next(c, &off), &h);
		err = w->cb(&h, w->arg);
	}
	return err;
}

int local_admin_holders(const char *socket_path, const char *key,
			int (*cb)(const struct local_holder *h, void *arg), void *arg)
{
	struct holders_walk w = { cb, arg };
	struct op_conn c;
	size_t len;
	int err;

	if (!cb)
		return -EINVAL;
	err = key_arg(key, &len, false);
	if (err)
		return err;
	err = op_open(&c, socket_path);
	if (err)
		return err;
	err = op_pages(&c, MSG_OP_HOLDERS, key, len, 0, sizeof(struct proto_op_holder),
		       holders_page, &w);
	op_close(&c);
	return err;
}

static int by_position(const void *a, const void *b)
{
	uint64_t x = ((const struct proto_op_waiter *)a)->seq;
	uint64_t y = ((const struct proto_op_waiter *)b)->seq;

	return x < y ? -1 : x > y;
}

struct waiters_got {
	struct proto_op_waiter *v;
	size_t n, cap;
};

static int waiters_page(struct op_conn *c, const struct proto_op_reply *rep, void *arg)
{
	struct waiters_got *g = arg;
	struct proto_op_waiter *grown;
	size_t off = sizeof(*rep);
	uint32_t j;

	for (j = 0; j < rep->count; j++) {
		const char *raw = rec_next(c, &off);
		uint32_t size;

		memcpy(&size, raw, sizeof(size));
		if (size != sizeof(*g->v))
			return -LOCAL_EPROTO;
		if (g->n == g->cap) {
			size_t cap = g->cap ? 2 * g->cap : 16;

			grown = realloc(g->v, cap * sizeof(*g->v));
			if (!grown)
				return -ENOMEM;
			g->v = grown;
			g->cap = cap;
		}
		memcpy(&g->v[g->n++], raw, sizeof(*g->v));
	}
	return 0;
}

int local_admin_waiters(const char *socket_path, const char *key,
			int (*cb)(const struct local_waiter *w, void *arg), void *arg)
{
	struct waiters_got g = { NULL, 0, 0 };
	struct proto_op_waiter *v;
	struct op_conn c;
	size_t len, i;
	int err;

	if (!cb)
		return -EINVAL;
	err = key_arg(key, &len, false);
	if (err)
		return err;
	err = op_open(&c, socket_path);
	if (err)
		return err;
	/* All pages first: the broker lists them in node order, the caller
	 * wants them in queue order. */
	err = op_pages(&c, MSG_OP_WAITERS, key, len, 0, sizeof(struct proto_op_waiter),
		       waiters_page, &g);
	op_close(&c);
	v = g.v;
	if (!err && g.n)
		qsort(v, g.n, sizeof(*v), by_position);
	for (i = 0; !err && i < g.n; i++) {
		struct local_waiter w;

		memset(&w, 0, sizeof(w));
		w.sz = sizeof(w);
		if (memcmp(v[i].session, (uint8_t[16]){ 0 }, sizeof(v[i].session)))
			hex_encode(v[i].session, sizeof(v[i].session), w.session);
		memcpy(w.name, v[i].name, sizeof(w.name));
		w.name[sizeof(w.name) - 1] = '\0';
		w.pid = v[i].pid;
		w.position = (uint32_t)i + 1;
		w.waiting_ms = v[i].waiting_ms;
		err = cb(&w, arg);
	}
	free(v);
	return err;
}

struct sessions_walk {
	int (*cb)(const struct local_session_info *si, void *arg);
	void *arg;
};

static int sessions_page(struct op_conn *c, const struct proto_op_reply *rep, void *arg)
{
	const struct sessions_walk *w = arg;
	size_t off = sizeof(*rep);
	uint32_t i;
	int err = 0;

	for (i = 0; !err && i < rep->count; i++) {
		struct proto_op_session r;
		struct local_session_info si;

		memcpy(&r, rec_next(c, &off), sizeof(r));
		memset(&si, 0, sizeof(si));
		si.sz = sizeof(si);
		hex_encode(r.id, sizeof(r.id), si.id);
		memcpy(si.name, r.name, sizeof(si.name));
		si.name[sizeof(si.name) - 1] = '\0';
		si.pid = r.pid;
		si.uid = r.uid;
		si.ttl_ms = r.ttl_ms;
		si.ttl_remaining_ms = r.ttl_remaining_ms;
		si.lock_delay_ms = r.lock_delay_ms;
		si.behavior = (int)r.behavior;
		si.holds = r.holds;
		si.waiting = r.waiting;
		err = w->cb(&si, w->arg);
	}
	return err;
}

int local_admin_sessions(const char *socket_path,
			 int (*cb)(const struct local_session_info *si, void *arg), void *arg)
{
	struct sessions_walk w = { cb, arg };
	struct op_conn c;
	int err;

	if (!cb)
		return -EINVAL;
	err = op_open(&c, socket_path);
	if (err)
		return err;
	err = op_pages(&c, MSG_OP_SESSIONS, "", 0, 0, sizeof(struct proto_op_session),
		       sessions_page, &w);
	op_close(&c);
	return err;
}

int local_admin_reset(const char *socket_path, const char *key)
{
	struct proto_op_reply rep;
	struct op_conn c;
	size_t len;
	int err;

	err = key_arg(key, &len, false);
	if (err)
		return err;
	err = op_open(&c, socket_path);
	if (err)
		return err;
	err = op_call(&c, MSG_OP_RESET, key, len, 0, 0, sizeof(struct proto_op_key), &rep);
	op_close(&c);
	return err ? err : rep.status;
}

/* MSG_DESTROY and MSG_FORCE_RELEASE never needed a session on the wire. */
static int plain_call(const char *socket_path, const void *req, size_t len)
{
	int wait_ms = broker_wait_default_ms();
	struct proto_reply rep;
	int err;

	err = broker_call_find(socket_path, NULL, req, len, &rep, NULL,
			       wait_ms ? mono_ns() + (uint64_t)wait_ms * 1000000ull : 0);
	return err ? err : rep.status;
}

int local_admin_force_release(const char *socket_path, const char *key, const char *holder_id)
{
	struct proto_force_release req;
	size_t len;
	int err = key_arg(key, &len, false);

	if (!err)
		err = api_force_release_req(&req, key, len, holder_id);
	return err ? err : plain_call(socket_path, &req, sizeof(req));
}

int local_admin_session_destroy(const char *socket_path, const char *session_id)
{
	struct proto_session_id req;
	int err = api_destroy_req(&req, session_id);

	return err ? err : plain_call(socket_path, &req, sizeof(req));
}
