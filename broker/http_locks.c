// SPDX-License-Identifier: MIT
/*
 * Locks and semaphores over HTTP: acquire, release, renew, enqueue, wait.
 *
 * HTTP clients queue in the same per-key FIFO as liblocal's, through the
 * session the broker opened for them. A request that has to wait is a
 * two-phase request (local_enqueue()) whose connection is suspended: no
 * thread sleeps for it. Its waiter node is marked so that whoever grants it
 * (a liblocal releaser in another process, or the broker) rings the
 * segment's doorbell instead of a futex wake; the doorbell thread turns the
 * ring into an event for the loop, which polls the suspended waiters and
 * answers those granted. A deadline (a broker timer) ends the wait and
 * leaves the queue; a hang-up of the client's socket (EPOLLRDHUP, watched
 * while suspended, since libmicrohttpd does not poll suspended sockets)
 * does the same, and a grant that landed in that instant is released to the
 * next waiter rather than stranded until its lease ends.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/epoll.h>

#include "clock.h"
#include "http_int.h"

/* Timeouts and leases in seconds, as dflockd takes them; bounded so that
 * their milliseconds fit the library's types. */
#define TIMEOUT_MAX_S (INT32_MAX / 1000)
#define LEASE_MAX_S (UINT32_MAX / 1000)

struct op_args {
	json_int_t timeout_s, lease_s, limit;
	char token[32]; /* as sent; validated by parse_token() */
};

void http_format_token(uint64_t token, char out[21])
{
	/* Zero-padded: tokens compare as strings as they do as numbers. */
	snprintf(out, 21, "%020" PRIu64, token);
}

static bool parse_token(const char *s, uint64_t *out)
{
	size_t n = strlen(s), i;
	uint64_t v = 0;

	if (!n || n > 20)
		return false;
	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9' || v > (UINT64_MAX - (uint64_t)(s[i] - '0')) / 10)
			return false;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*out = v;
	return true;
}

static bool is_sem(enum http_route rt)
{
	return rt >= R_SEM && rt <= R_SEM_WAIT;
}

/* The route's body, strictly: unknown fields, wrong types and values out
 * of range are 400. */
static bool parse_args(struct hreq *r, struct op_args *a)
{
	json_error_t e;
	json_t *j = hreq_json(r);
	const char *token = "";
	int bad = 0;

	memset(a, 0, sizeof(*a));
	a->limit = 1;
	if (!j)
		return false;
	switch (r->rt.id) {
	case R_LOCK:
		bad = json_unpack_ex(j, &e, 0, "{s:I, s?I !}", "acquire_timeout_s", &a->timeout_s,
				     "lease_ttl_s", &a->lease_s);
		break;
	case R_SEM:
		bad = json_unpack_ex(j, &e, 0, "{s:I, s:I, s?I !}", "acquire_timeout_s",
				     &a->timeout_s, "limit", &a->limit, "lease_ttl_s", &a->lease_s);
		break;
	case R_LOCK_RELEASE:
	case R_SEM_RELEASE:
		bad = json_unpack_ex(j, &e, 0, "{s:s !}", "token", &token);
		break;
	case R_LOCK_RENEW:
	case R_SEM_RENEW:
		bad = json_unpack_ex(j, &e, 0, "{s:s, s?I !}", "token", &token, "lease_ttl_s",
				     &a->lease_s);
		break;
	case R_LOCK_ENQUEUE:
		bad = json_unpack_ex(j, &e, 0, "{s?I !}", "lease_ttl_s", &a->lease_s);
		break;
	case R_SEM_ENQUEUE:
		bad = json_unpack_ex(j, &e, 0, "{s:I, s?I !}", "limit", &a->limit, "lease_ttl_s",
				     &a->lease_s);
		break;
	case R_LOCK_WAIT:
	case R_SEM_WAIT:
		bad = json_unpack_ex(j, &e, 0, "{s:I !}", "timeout_s", &a->timeout_s);
		break;
	default:
		break;
	}
	if (bad) {
		hreq_error(r, 400, "bad_request", "%s", e.text);
	} else if (a->timeout_s < 0 || a->timeout_s > TIMEOUT_MAX_S) {
		hreq_error(r, 400, "bad_request", "timeout out of range 0..%d s", TIMEOUT_MAX_S);
		bad = 1;
	} else if (a->lease_s < 0 || a->lease_s > (json_int_t)LEASE_MAX_S) {
		hreq_error(r, 400, "bad_request", "lease_ttl_s out of range 0..%u s", LEASE_MAX_S);
		bad = 1;
	} else if (a->limit < 1 || a->limit > (json_int_t)UINT32_MAX) {
		hreq_error(r, 400, "bad_request", "limit out of range 1..%u", UINT32_MAX);
		bad = 1;
	}
	if (!bad && a->lease_s == 0)
		a->lease_s = r->h->b->opts.http.default_lease_s;
	snprintf(a->token, sizeof(a->token), "%s", token); /* @token lives in @j */
	json_decref(j);
	return !bad;
}

static void reply_granted(struct hreq *r, const char *status, uint64_t token, json_int_t lease_s)
{
	char text[21];

	http_format_token(token, text);
	r->h->c.grants++;
	hreq_reply_json(r, 200, json_pack("{s:s, s:s, s:I}", "status", status, "token", text,
					  "lease_ttl_s", lease_s));
}

static void reply_timeout(struct hreq *r)
{
	r->h->c.timeouts++;
	hreq_reply_json(r, 200, json_pack("{s:s}", "status", "timeout"));
}

/* Seconds left on @hs's lease of @key (rounded up), for a /wait answer. */
struct lease_probe {
	const char *id;
	uint64_t ms;
};

static int find_lease(const struct local_holder *hl, void *arg)
{
	struct lease_probe *p = arg;

	if (strcmp(hl->session, p->id))
		return 0;
	p->ms = hl->lease_remaining_ms;
	return 1;
}

static json_int_t lease_left_s(struct hsession *hs, const char *key)
{
	struct lease_probe p = { local_session_id(hs->ls), 0 };

	local_holders(hs->ls, key, find_lease, &p);
	return (json_int_t)((p.ms + 999) / 1000);
}

/* A queued request was granted: answer with its token, unless its lease
 * ran out before anyone looked (dflockd's 409 lease_expired). */
static void reply_promoted(struct hreq *r, struct hsession *hs, const char *key, uint64_t tok)
{
	uint64_t now_tok = 0;
	int err = local_held(hs->ls, key, &now_tok);

	if (!err && now_tok == tok) {
		r->grant_tok = tok; /* new: taken back if the answer is lost */
		reply_granted(r, "ok", tok, lease_left_s(hs, key));
	} else if (err == -LOCAL_ESESSION)
		hreq_local_error(r, err);
	else /* taking the grant forgot the expiry record: it can only be that */
		hreq_local_error(r, -LOCAL_EEXPIRED);
}

/* ---- waiters --------------------------------------------------------------- */

static int32_t waiter_slot(struct http *h)
{
	uint32_t i;

	for (i = 0; i < h->nwaiters; i++)
		if (!h->waiters[i].req)
			return (int32_t)i;
	if (h->nwaiters == h->cap_waiters) {
		uint32_t cap = h->cap_waiters ? h->cap_waiters * 2 : 64;
		struct hwaiter *w = realloc(h->waiters, cap * sizeof(*w));

		if (!w)
			return -1;
		memset(w + h->cap_waiters, 0, (cap - h->cap_waiters) * sizeof(*w));
		h->waiters = w;
		h->cap_waiters = cap;
	}
	return (int32_t)h->nwaiters++;
}

static void finish(struct http *h, uint32_t slot)
{
	struct hwaiter *w = &h->waiters[slot];
	struct hreq *r = w->req;

	if (w->fd >= 0)
		loop_unwatch_fd(h->b, w->fd);
	w->req = NULL;
	w->gen++;
	w->sess->waiting--;
	h->active_waiters--;
	r->waiter = -1;
	hreq_resume(r);
}

/* Has the client of waiter @w gone away (its hang-up not handled yet)? */
static bool hung_up(const struct hwaiter *w)
{
	struct pollfd p = { .fd = w->fd, .events = POLLRDHUP };

	return w->fd >= 0 && poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Take the outcome of waiter @slot if there is one; @cancel: it is due.
 * Returns false while it is still queued. */
static bool poll_one(struct http *h, uint32_t slot, bool cancel)
{
	struct hwaiter *w = &h->waiters[slot];
	uint64_t tok = 0;
	int err = api_pending_poll(w->sess->ls, w->key, cancel, &tok);

	if (err == -EAGAIN)
		return false;
	if (!err && hung_up(w)) {
		/* Granted as its client left (the doorbell came before the
		 * hang-up event): the next waiter's, not stranded. */
		local_release(w->sess->ls, w->key);
		h->maybe_granted = true;
		h->c.canceled++;
		hreq_error(w->req, 408, "client_canceled", "the client went away");
	} else if (!err)
		reply_promoted(w->req, w->sess, w->key, tok);
	else if (err == -ETIMEDOUT)
		reply_timeout(w->req);
	else
		hreq_local_error(w->req, err);
	finish(h, slot);
	return true;
}

/* Answer @r later: its queued request (already local_enqueue()d) is
 * granted, times out at @timeout_s, or its client goes away. */
static void wait_begin(struct hreq *r, struct hsession *hs, json_int_t timeout_s,
		       json_int_t lease_s)
{
	struct http *h = r->h;
	const union MHD_ConnectionInfo *ci;
	struct epoll_event ev = { .events = EPOLLRDHUP };
	struct hwaiter *w;
	uint64_t tok = 0;
	int32_t slot;
	int err = api_pending_arm(hs->ls, r->rt.param);

	if (err == 1 || (!err && timeout_s == 0)) {
		/* Granted already, or a wait of 0: answer now. */
		err = api_pending_poll(hs->ls, r->rt.param, true, &tok);
		if (!err)
			reply_promoted(r, hs, r->rt.param, tok);
		else if (err == -ETIMEDOUT)
			reply_timeout(r);
		else
			hreq_local_error(r, err);
		return;
	}
	if (err) {
		hreq_local_error(r, err);
		return;
	}
	slot = waiter_slot(h);
	if (slot < 0) {
		api_pending_poll(hs->ls, r->rt.param, true, &tok);
		hreq_local_error(r, -ENOMEM);
		return;
	}
	w = &h->waiters[slot];
	w->req = r;
	w->sess = hs;
	w->lease_s = (uint32_t)lease_s;
	w->deadline_ns = mono_ns() + (uint64_t)timeout_s * 1000000000ull;
	memcpy(w->key, r->rt.param, r->rt.param_len + 1);
	ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	w->fd = ci ? ci->connect_fd : -1;
	ev.data.u64 = TAG_HTTP_HUP | (uint64_t)slot;
	if (w->fd >= 0 && epoll_ctl(h->b->epfd, EPOLL_CTL_ADD, w->fd, &ev))
		w->fd = -1; /* no hang-up detection; the deadline still ends it */
	broker_schedule(h->b, w->deadline_ns, TIMER_HTTP_WAIT, (uint32_t)slot, w->gen);
	hs->waiting++;
	h->active_waiters++;
	r->waiter = slot;
	hreq_suspend(r);
}

void http_waiters_poll(struct http *h)
{
	uint32_t i;

	for (i = 0; i < h->nwaiters && h->active_waiters; i++)
		if (h->waiters[i].req)
			poll_one(h, i, false);
}

void http_waiter_due(struct http *h, uint32_t slot, uint32_t gen)
{
	if (slot < h->nwaiters && h->waiters[slot].req && h->waiters[slot].gen == gen &&
	    !poll_one(h, slot, true))
		/* Its key's mutex is held by a stalled process: try again. */
		broker_schedule(h->b, mono_ns() + 100000000ull, TIMER_HTTP_WAIT, slot, gen);
}

/* Leave the queue; a grant that landed meanwhile goes to the next waiter. */
static void cancel(struct http *h, uint32_t slot, int status, const char *code)
{
	struct hwaiter *w = &h->waiters[slot];
	uint64_t tok;

	/* -EAGAIN (a process stalled in the key's mutex) leaves the request
	 * queued: if granted later, nobody takes it up and its lease (HTTP
	 * holds always have one) or the session's reaping ends it. */
	if (api_pending_poll(w->sess->ls, w->key, true, &tok) == 0) {
		local_release(w->sess->ls, w->key);
		h->maybe_granted = true;
	}
	h->c.canceled++;
	hreq_error(w->req, status, code, "the wait ended before a grant");
	finish(h, slot);
}

void http_waiter_hangup(struct http *h, uint32_t slot)
{
	if (slot < h->nwaiters && h->waiters[slot].req)
		cancel(h, slot, 408, "client_canceled");
}

void http_waiters_end(struct http *h, struct hsession *sess, int status, const char *code)
{
	uint32_t i;

	for (i = 0; i < h->nwaiters; i++)
		if (h->waiters[i].req && (!sess || h->waiters[i].sess == sess))
			cancel(h, i, status, code);
}

void http_grant_undelivered(struct hreq *r)
{
	uint64_t tok = 0;

	/* Only that very hold: another token is a later grant. */
	if (!r->sess || local_held(r->sess->ls, r->rt.param, &tok) || tok != r->grant_tok)
		return;
	local_release(r->sess->ls, r->rt.param);
	r->h->maybe_granted = true;
	r->h->c.canceled++;
}

void http_waiter_drop(struct hreq *r)
{
	if (r->waiter >= 0 && (uint32_t)r->waiter < r->h->nwaiters)
		cancel(r->h, (uint32_t)r->waiter, 408, "client_canceled");
}

/* ---- the operations ---------------------------------------------------------- */

static bool waiting_on(struct http *h, struct hsession *hs, const char *key)
{
	uint32_t i;

	for (i = 0; hs->waiting && i < h->nwaiters; i++)
		if (h->waiters[i].req && h->waiters[i].sess == hs && !strcmp(h->waiters[i].key, key))
			return true;
	return false;
}

static void acquire(struct hreq *r, struct hsession *hs, const struct op_args *a, bool two_phase)
{
	const char *key = r->rt.param;
	uint32_t limit = is_sem(r->rt.id) ? (uint32_t)a->limit : 0;
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 0, .lease_ms = (uint32_t)a->lease_s * 1000);
	uint64_t tok = 0;
	int granted = 0, err;

	if (!two_phase && a->timeout_s == 0) {
		err = limit ? local_sem_acquire(hs->ls, key, limit, &o, &tok)
			    : local_lock(hs->ls, key, &o, &tok);
		if (!err) /* the hold's lease: a re-acquire keeps the old one */
			reply_granted(r, "ok", tok, lease_left_s(hs, key));
		else if (err == -EBUSY || err == -ETIMEDOUT) /* held, or its mutex stalled */
			reply_timeout(r);
		else
			hreq_local_error(r, err);
		return;
	}
	err = local_enqueue(hs->ls, key, limit, &o, &granted, &tok);
	if (err == -LOCAL_EENQUEUED && !two_phase && local_held(hs->ls, key, &tok) == 0) {
		/* Holding it already: as liblocal, the same hold and token. */
		reply_granted(r, "ok", tok, lease_left_s(hs, key));
		return;
	}
	if (err == -ETIMEDOUT && !two_phase) {
		reply_timeout(r); /* a process stalled in the key's mutex: not queued */
	} else if (err) {
		hreq_local_error(r, err);
	} else if (granted) {
		reply_granted(r, two_phase ? "acquired" : "ok", tok, a->lease_s);
	} else if (two_phase) {
		hreq_reply_json(r, 200, json_pack("{s:s}", "status", "queued"));
	} else {
		wait_begin(r, hs, a->timeout_s, a->lease_s);
	}
}

/* Our hold of the key with exactly this token, or the reason it is not.
 * The route's kind must be the key's, as for acquires. */
static int own_token(struct hsession *hs, const char *key, const char *text, bool sem)
{
	static LOCAL_OPTS(local_key_info, ki); /* large; the loop is one thread */
	uint64_t want, tok = 0;
	int err;

	if (!parse_token(text, &want))
		return -EINVAL;
	err = local_info(hs->ls, key, &ki);
	if (err)
		return err;
	if (ki.kind != LOCAL_KIND_NONE && ki.kind != (sem ? LOCAL_KIND_SEMAPHORE : LOCAL_KIND_LOCK))
		return -LOCAL_EKIND;
	err = local_held(hs->ls, key, &tok);
	if (err)
		return err;
	return tok == want ? 0 : -LOCAL_ENOTHELD;
}

void http_lock_op(struct hreq *r)
{
	struct hsession *hs;
	struct op_args a;
	uint64_t left_ms = 0;
	int err;

	if (!parse_args(r, &a))
		return;
	hs = http_session_of(r);
	if (!hs)
		return;
	if (r->h->draining && r->rt.id != R_LOCK_RELEASE && r->rt.id != R_SEM_RELEASE &&
	    r->rt.id != R_LOCK_RENEW && r->rt.id != R_SEM_RENEW) {
		/* Nothing new starts; holders may still let go. */
		hreq_error(r, 503, "draining", "the broker is shutting down");
		return;
	}
	switch (r->rt.id) {
	case R_LOCK:
	case R_SEM:
		acquire(r, hs, &a, false);
		return;
	case R_LOCK_ENQUEUE:
	case R_SEM_ENQUEUE:
		acquire(r, hs, &a, true);
		return;
	case R_LOCK_WAIT:
	case R_SEM_WAIT:
		if (waiting_on(r->h, hs, r->rt.param))
			hreq_local_error(r, -LOCAL_ENOTENQUEUED); /* another /wait has it */
		else
			wait_begin(r, hs, a.timeout_s, 0);
		return;
	case R_LOCK_RELEASE:
	case R_SEM_RELEASE:
		err = own_token(hs, r->rt.param, a.token, is_sem(r->rt.id));
		if (!err)
			err = local_release(hs->ls, r->rt.param);
		r->h->maybe_granted = true;
		if (err == -EINVAL)
			hreq_error(r, 400, "bad_request", "token must be a decimal string");
		else if (err)
			hreq_local_error(r, err);
		else
			hreq_reply_json(r, 204, NULL);
		return;
	case R_LOCK_RENEW:
	case R_SEM_RENEW:
		err = own_token(hs, r->rt.param, a.token, is_sem(r->rt.id));
		if (!err)
			err = local_renew(hs->ls, r->rt.param, (uint32_t)a.lease_s * 1000, &left_ms);
		if (err == -EINVAL)
			hreq_error(r, 400, "bad_request", "token must be a decimal string");
		else if (err)
			hreq_local_error(r, err);
		else
			hreq_reply_json(r, 200, json_pack("{s:I}", "remaining_s",
							  (json_int_t)((left_ms + 999) / 1000)));
		return;
	default:
		hreq_error(r, 404, "not_found", "no such route");
	}
}
