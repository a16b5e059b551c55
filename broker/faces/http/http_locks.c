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
#include <sys/random.h>
#include <unistd.h>

#include "client.h" /* hex_decode() */
#include "clock.h"
#include "http_int.h"
#include "net/http_engine.h"

/* Durations in seconds, as dflockd takes them: 0 up to the largest Go
 * time.Duration in seconds. Waits that long are broker timers (a u64 of
 * nanoseconds holds them); a lease is cut to what liblocal keeps (u32 ms). */
#define DURATION_MAX_S (INT64_MAX / 1000000000)
#define LEASE_MAX_S (UINT32_MAX / 1000)

struct op_args {
	json_int_t timeout_s, lease_s, limit;
	char token[64]; /* as sent (longer ones are cut: no token of ours) */
};

/* ---- tokens ------------------------------------------------------------------ */

/*
 * dflockd's token is 32 hex digits, and its client reads the first 16 as a
 * big-endian fencing number: ours is the hold's fencing token, then 16 hex
 * of salt so that tokens cannot be guessed from the (public, increasing)
 * fence. The salt is not stored: it is SipHash-2-4, under a key drawn at
 * start, of the fence and the holder session's slot and generation, so a
 * token names one grant to one session. The encoding is the TCP protocol's
 * (tcp_format_token()).
 */
#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                          \
	do {                                                              \
		v0 += v1, v1 = ROTL(v1, 13), v1 ^= v0, v0 = ROTL(v0, 32); \
		v2 += v3, v3 = ROTL(v3, 16), v3 ^= v2;                    \
		v0 += v3, v3 = ROTL(v3, 21), v3 ^= v0;                    \
		v2 += v1, v1 = ROTL(v1, 17), v1 ^= v2, v2 = ROTL(v2, 32); \
	} while (0)

static uint64_t siphash2(const uint64_t k[2], uint64_t m0, uint64_t m1)
{
	uint64_t v0 = k[0] ^ 0x736f6d6570736575ull, v1 = k[1] ^ 0x646f72616e646f6dull;
	uint64_t v2 = k[0] ^ 0x6c7967656e657261ull, v3 = k[1] ^ 0x7465646279746573ull;
	uint64_t m[3] = { m0, m1, (uint64_t)16 << 56 };
	int i;

	for (i = 0; i < 3; i++) {
		v3 ^= m[i];
		SIPROUND;
		SIPROUND;
		v0 ^= m[i];
	}
	v2 ^= 0xff;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}

void http_token_key_init(struct http *h)
{
	if (getrandom(h->token_key, sizeof(h->token_key), 0) != sizeof(h->token_key)) {
		/* never for 16 bytes; still, not a fixed key */
		h->token_key[0] = mono_ns() ^ (uint64_t)getpid() << 32;
		h->token_key[1] = h->token_key[0] * 0x9e3779b97f4a7c15ull;
	}
}

static uint64_t salt_of(const struct http *h, const struct hsession *hs, uint64_t fence)
{
	return siphash2(h->token_key, fence, (uint64_t)hs->slot << 32 | hs->gen);
}

void http_format_token(const struct http *h, const struct hsession *hs, uint64_t fence,
		       char out[33])
{
	tcp_format_token(fence, salt_of(h, hs, fence), out);
}

/* dflockd refuses only an empty token or one with a blank (400); any other
 * that is not the holder's is 404 not_held. */
static bool token_acceptable(const char *s)
{
	return *s && !strpbrk(s, " \t\r\n");
}

static bool is_sem(enum http_route rt)
{
	return rt >= R_SEM && rt <= R_SEM_WAIT;
}

/*
 * The body's fields without jansson, when it is of the simplest form
 * (http_body.c): the fields and required ones are those of the route's
 * json_unpack() format in parse_args(). false: not of that form, or a
 * required field is missing: jansson reads it, and answers what is wrong.
 */
struct fast_spec {
	struct hbody_field f[3];
	json_int_t *dst[3]; /* NULL: the token (a string) */
	unsigned n, need;
};

static void want(struct fast_spec *s, const char *name, json_int_t *dst, bool required)
{
	s->f[s->n] = (struct hbody_field){ .name = name, .string = !dst };
	s->dst[s->n] = dst;
	s->need |= required ? 1u << s->n : 0;
	s->n++;
}

static bool fast_args(struct hreq *r, bool strict, struct op_args *a)
{
	struct fast_spec s = { .n = 0 };
	unsigned i;

	if (r->body_too_large || !r->body_len)
		return false;
	switch (r->rt.id) {
	case R_LOCK:
		want(&s, "acquire_timeout_s", &a->timeout_s, strict);
		want(&s, "lease_ttl_s", &a->lease_s, false);
		break;
	case R_SEM:
		want(&s, "acquire_timeout_s", &a->timeout_s, strict);
		want(&s, "limit", &a->limit, strict);
		want(&s, "lease_ttl_s", &a->lease_s, false);
		break;
	case R_LOCK_RELEASE:
	case R_SEM_RELEASE:
		want(&s, "token", NULL, true);
		break;
	case R_LOCK_RENEW:
	case R_SEM_RENEW:
		want(&s, "token", NULL, true);
		want(&s, "lease_ttl_s", &a->lease_s, false);
		break;
	case R_LOCK_ENQUEUE:
		want(&s, "lease_ttl_s", &a->lease_s, false);
		break;
	case R_SEM_ENQUEUE:
		want(&s, "limit", &a->limit, strict);
		want(&s, "lease_ttl_s", &a->lease_s, false);
		break;
	case R_LOCK_WAIT:
	case R_SEM_WAIT:
		want(&s, "timeout_s", &a->timeout_s, strict);
		break;
	default:
		return false;
	}
	if (!http_body_simple(r->body, r->body_len, s.f, s.n))
		return false;
	for (i = 0; i < s.n; i++)
		if ((s.need & 1u << i) && !s.f[i].seen)
			return false;
	for (i = 0; i < s.n; i++) {
		if (!s.f[i].seen)
			continue;
		if (s.dst[i])
			*s.dst[i] = (json_int_t)s.f[i].num;
		else
			memcpy(a->token, s.f[i].str, sizeof(a->token)); /* both 64 */
	}
	return true;
}

/* The route's body, strictly: unknown fields, wrong types and values out
 * of range are 400. */
static bool parse_args(struct hreq *r, struct op_args *a)
{
	json_error_t e;
	json_t *j = NULL;
	const char *token = "";
	bool strict = r->h->b->opts.http.extensions;
	int bad = 0;

	memset(a, 0, sizeof(*a));
	/* dflockd (Go's decoder) reads a missing number as 0 (a limit of 0 is
	 * then refused); with --http-extensions a missing one is 400. */
	a->limit = r->rt.id == R_SEM || r->rt.id == R_SEM_ENQUEUE ? 0 : 1;
	if (fast_args(r, strict, a)) {
		token = a->token;
		goto check;
	}
	j = hreq_json(r);
	if (!j)
		return false;
	switch (r->rt.id) {
	case R_LOCK:
		bad = json_unpack_ex(j, &e, 0, strict ? "{s:I, s?I !}" : "{s?I, s?I !}",
				     "acquire_timeout_s", &a->timeout_s, "lease_ttl_s",
				     &a->lease_s);
		break;
	case R_SEM:
		bad = json_unpack_ex(j, &e, 0, strict ? "{s:I, s:I, s?I !}" : "{s?I, s?I, s?I !}",
				     "acquire_timeout_s", &a->timeout_s, "limit", &a->limit,
				     "lease_ttl_s", &a->lease_s);
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
		bad = json_unpack_ex(j, &e, 0, strict ? "{s:I, s?I !}" : "{s?I, s?I !}", "limit",
				     &a->limit, "lease_ttl_s", &a->lease_s);
		break;
	case R_LOCK_WAIT:
	case R_SEM_WAIT:
		bad = json_unpack_ex(j, &e, 0, strict ? "{s:I !}" : "{s?I !}", "timeout_s",
				     &a->timeout_s);
		break;
	default:
		break;
	}
	if (bad)
		hreq_error(r, 400, "bad_request", "%s", e.text);
check:
	if (bad) {
		/* answered above */
	} else if ((r->rt.id == R_LOCK_RELEASE || r->rt.id == R_SEM_RELEASE ||
		    r->rt.id == R_LOCK_RENEW || r->rt.id == R_SEM_RENEW) &&
		   !token_acceptable(token)) {
		hreq_error(r, 400, "bad_request", "token required, without blanks");
		bad = 1;
	} else if (a->timeout_s < 0 || a->timeout_s > (json_int_t)DURATION_MAX_S) {
		hreq_error(r, 400, "bad_request", "timeout out of range 0..%lld s",
			   (long long)DURATION_MAX_S);
		bad = 1;
	} else if (a->lease_s < 0 || a->lease_s > (json_int_t)DURATION_MAX_S) {
		hreq_error(r, 400, "bad_request", "lease_ttl_s out of range 0..%lld s",
			   (long long)DURATION_MAX_S);
		bad = 1;
	} else if (a->limit < 1 || a->limit > (json_int_t)UINT32_MAX) {
		hreq_error(r, 400, "bad_request", "limit must be 1..%u", UINT32_MAX);
		bad = 1;
	}
	if (!bad && a->lease_s == 0)
		a->lease_s = r->h->b->opts.http.default_lease_s;
	if (a->lease_s > (json_int_t)LEASE_MAX_S)
		a->lease_s = LEASE_MAX_S; /* 49 days: what a hold's lease can be */
	if (j) {
		snprintf(a->token, sizeof(a->token), "%s", token); /* @token lives in @j */
		json_decref(j);
	}
	return !bad;
}

/* Decimal digits of @v into the end of @buf; their start. */
static char *put_u64(char *end, uint64_t v)
{
	do
		*--end = (char)('0' + v % 10);
	while ((v /= 10));
	return end;
}

/*
 * {"status":STATUS,"token":TOKEN,"lease_ttl_s":N}, byte for byte what
 * json_pack() and json_dumps(JSON_COMPACT) made of it (members in that
 * order; the status is a constant word, the token 32 hex digits, N an
 * integer), without building and printing a JSON object on every grant.
 */
static void reply_granted(struct hreq *r, struct hsession *hs, const char *status, uint64_t token,
			  json_int_t lease_s)
{
	char text[160], num[24], *d;
	size_t n = 0, sl = strlen(status);

	r->h->c.grants++;
	if (lease_s < 0 || sl > 16) { /* never: leases are not negative */
		http_format_token(r->h, hs, token, text);
		hreq_reply_json(r, 200,
				json_pack("{s:s, s:s, s:I}", "status", status, "token", text,
					  "lease_ttl_s", lease_s));
		return;
	}
	memcpy(text, "{\"status\":\"", 11);
	n = 11;
	memcpy(text + n, status, sl);
	n += sl;
	memcpy(text + n, "\",\"token\":\"", 11);
	n += 11;
	http_format_token(r->h, hs, token, text + n);
	n += 32;
	memcpy(text + n, "\",\"lease_ttl_s\":", 16);
	n += 16;
	d = put_u64(num + sizeof(num), (uint64_t)lease_s);
	memcpy(text + n, d, (size_t)(num + sizeof(num) - d));
	n += (size_t)(num + sizeof(num) - d);
	text[n++] = '}';
	hreq_reply_text(r, 200, text, n);
}

static void reply_timeout(struct hreq *r)
{
	static const char text[] = "{\"status\":\"timeout\"}"; /* as json_pack("{s:s}") */

	r->h->c.timeouts++;
	hreq_reply_text(r, 200, text, sizeof(text) - 1);
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
 * ran out before anyone looked (dflockd's 409 lease_expired). As dflockd,
 * the answer names the lease asked for, which ran from the grant; a /wait
 * (@two_phase) starts it again at the answer. */
static void reply_promoted(struct hreq *r, struct hsession *hs, const char *key, uint64_t tok,
			   uint32_t lease_s, bool two_phase)
{
	uint64_t now_tok = 0, left_ms;
	int err = local_held(hs->ls, key, &now_tok);

	if (!err && now_tok == tok && two_phase)
		err = local_renew(hs->ls, key, lease_s * 1000, &left_ms);
	if (!err && now_tok == tok) {
		r->grant_tok = tok; /* new: taken back if the answer is lost */
		reply_granted(r, hs, "ok", tok, lease_s);
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
		loop_unwatch(h->b, w->fd);
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
	int err;

	if (!cancel && w->word && atomic_load(w->word) == w->waiting)
		return false; /* still queued, seen without a poll */
	err = api_pending_poll(w->sess->ls, w->key, cancel, &tok);
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
		reply_promoted(w->req, w->sess, w->key, tok, w->lease_s, w->two_phase);
	else if (err == -ETIMEDOUT)
		reply_timeout(w->req);
	else
		hreq_local_error(w->req, err);
	finish(h, slot);
	return true;
}

/* The client of a waiting request hung up. */
static void hangup_ready(struct broker *b, int fd, uint32_t events, void *slot)
{
	struct http *h = b->http;

	(void)fd;
	(void)events;
	if (!h)
		return;
	http_waiter_hangup(h, (uint32_t)(uintptr_t)slot);
	if (h->maybe_granted) { /* its grant, if it had one, went to the next */
		h->maybe_granted = false;
		http_waiters_poll(h);
	}
}

/* Answer @r later: its queued request (already local_enqueue()d) is
 * granted, times out at @timeout_s, or its client goes away. */
static void wait_begin(struct hreq *r, struct hsession *hs, json_int_t timeout_s,
		       json_int_t lease_s, bool two_phase)
{
	struct http *h = r->h;
	struct hwaiter *w;
	uint64_t tok = 0;
	int32_t slot;
	_Atomic uint64_t *word = NULL;
	uint64_t waiting = 0;
	int err = api_pending_arm_word(hs->ls, r->rt.param, &word, &waiting);

	if (err == 1 || (!err && timeout_s == 0)) {
		/* Granted already, or a wait of 0: answer now. */
		err = api_pending_poll(hs->ls, r->rt.param, true, &tok);
		if (!err)
			reply_promoted(r, hs, r->rt.param, tok, (uint32_t)lease_s, two_phase);
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
	w->word = word;
	w->waiting = waiting;
	w->lease_s = (uint32_t)lease_s;
	w->two_phase = two_phase;
	w->deadline_ns = mono_ns() + (uint64_t)timeout_s * 1000000000ull;
	memcpy(w->key, r->rt.param, r->rt.param_len + 1);
	/* No hang-up detection (-1): the deadline still ends it. */
	w->fd = http_engine_watch_hangup(r, hangup_ready, (void *)(uintptr_t)slot);
	face_schedule(h->b, &http_face, w->deadline_ns, TIMER_HTTP_WAIT, (uint32_t)slot, w->gen);
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
		face_schedule(h->b, &http_face, mono_ns() + 100000000ull, TIMER_HTTP_WAIT, slot,
			      gen);
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

/* ---- dflockd's two-phase record: what /enqueue said, for /wait --------------- */

static struct henq *enq_find(struct hsession *hs, const char *key)
{
	uint32_t i;

	for (i = 0; i < hs->nenqs; i++)
		if (!strcmp(hs->enqs[i].key, key))
			return &hs->enqs[i];
	return NULL;
}

static void enq_drop(struct hsession *hs, const char *key)
{
	struct henq *e = enq_find(hs, key);

	if (e)
		*e = hs->enqs[--hs->nenqs];
}

/* Remember an /enqueue; out of memory, /wait falls back to the default
 * lease (and, after "acquired", to 409 not_enqueued). */
static void enq_note(struct hsession *hs, const char *key, uint32_t lease_s, uint64_t tok)
{
	struct henq *e = enq_find(hs, key);

	if (!e) {
		struct henq *n = realloc(hs->enqs, (hs->nenqs + 1) * sizeof(*n));

		if (!n)
			return;
		hs->enqs = n;
		e = &n[hs->nenqs++];
		snprintf(e->key, sizeof(e->key), "%s", key);
	}
	e->lease_s = lease_s;
	e->tok = tok;
}

/* /wait after /enqueue answered "acquired": dflockd's "ok" with the same
 * token, its lease started again; 409 lease_expired if it ran out. */
static void wait_acquired(struct hreq *r, struct hsession *hs, const struct henq *e)
{
	uint64_t now_tok = 0, left_ms;
	int err = local_held(hs->ls, r->rt.param, &now_tok);

	if (!err && now_tok != e->tok)
		err = -LOCAL_EEXPIRED; /* another grant since: this one is gone */
	if (!err)
		err = local_renew(hs->ls, r->rt.param, e->lease_s * 1000, &left_ms);
	if (!err)
		reply_granted(r, hs, "ok", e->tok, e->lease_s);
	else if (err == -LOCAL_ENOTHELD)
		hreq_local_error(r, -LOCAL_EEXPIRED);
	else
		hreq_local_error(r, err);
}

static bool waiting_on(struct http *h, struct hsession *hs, const char *key)
{
	uint32_t i;

	for (i = 0; hs->waiting && i < h->nwaiters; i++)
		if (h->waiters[i].req && h->waiters[i].sess == hs &&
		    !strcmp(h->waiters[i].key, key))
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
			reply_granted(r, hs, "ok", tok, lease_left_s(hs, key));
		else if (err == -EBUSY || err == -ETIMEDOUT) /* held, or its mutex stalled */
			reply_timeout(r);
		else
			hreq_local_error(r, err);
		return;
	}
	err = local_enqueue(hs->ls, key, limit, &o, &granted, &tok);
	if (err == -LOCAL_EENQUEUED && !two_phase && local_held(hs->ls, key, &tok) == 0) {
		/* Holding it already: as liblocal, the same hold and token. */
		reply_granted(r, hs, "ok", tok, lease_left_s(hs, key));
		return;
	}
	if (err == -ETIMEDOUT && !two_phase) {
		reply_timeout(r); /* a process stalled in the key's mutex: not queued */
	} else if (err) {
		hreq_local_error(r, err);
	} else if (granted) {
		if (two_phase)
			enq_note(hs, key, (uint32_t)a->lease_s, tok);
		reply_granted(r, hs, two_phase ? "acquired" : "ok", tok, a->lease_s);
	} else if (two_phase) {
		enq_note(hs, key, (uint32_t)a->lease_s, 0);
		hreq_reply_json(r, 200, json_pack("{s:s}", "status", "queued"));
	} else {
		wait_begin(r, hs, a->timeout_s, a->lease_s, false);
	}
}

/* The HTTP holder of @key whose token is (@fence, @salt), if any. */
struct token_probe {
	struct http *h;
	uint64_t fence, salt;
	struct hsession *found;
};

static int match_holder(const struct local_holder *hl, void *arg)
{
	struct token_probe *p = arg;
	struct broker *b = p->h->b;
	struct hsession *o;
	uint8_t id[16];
	uint32_t slot;

	if (hl->token != p->fence || strlen(hl->session) != LOCAL_SESSION_ID_LEN ||
	    hex_decode(hl->session, id, sizeof(id)))
		return 0;
	slot = session_slot_of(b, id);
	if (slot == IDX_NONE || slot >= b->seg.caps.max_sessions)
		return 0;
	o = p->h->by_slot[slot];
	if (!o || salt_of(p->h, o, p->fence) != p->salt)
		return 0;
	p->found = o;
	return 1;
}

/*
 * The hold of @key that this token names, into *@holder, or the reason
 * there is none. The route's kind must be the key's, as for acquires. As in
 * dflockd, a token is a bearer capability: the hold of another HTTP session
 * is released or renewed by it too (with --http-extensions, only the
 * requesting session's own).
 */
static int token_holder(struct http *h, struct hsession *hs, const char *key, const char *text,
			bool sem, struct hsession **holder)
{
	static LOCAL_OPTS(local_key_info, ki); /* large; the loop is one thread */
	struct token_probe p = { h, 0, 0, NULL };
	uint64_t tok = 0;
	int err;

	if (!tcp_parse_token(text, &p.fence, &p.salt))
		return -LOCAL_ENOTHELD; /* no token of ours: dflockd's "not held" */
	err = local_info(hs->ls, key, &ki);
	if (err)
		return err;
	if (ki.kind != LOCAL_KIND_NONE && ki.kind != (sem ? LOCAL_KIND_SEMAPHORE : LOCAL_KIND_LOCK))
		return -LOCAL_EKIND;
	err = local_held(hs->ls, key, &tok);
	if (!err && tok == p.fence && p.salt == salt_of(h, hs, p.fence)) {
		*holder = hs;
		return 0;
	}
	if (!h->b->opts.http.extensions && local_holders(hs->ls, key, match_holder, &p) == 1 &&
	    p.found) {
		*holder = p.found;
		return 0;
	}
	return err && err != -LOCAL_ENOTHELD ? err : -LOCAL_ENOTHELD;
}

/* dflockd answers a release or renew that finds no such hold 404 not_held,
 * whatever the reason; --http-extensions says which (409 lease_expired, also
 * for a cluster key's hold the host lost; 409 limit_mismatch). */
static int release_error(const struct http *h, int err)
{
	if (!h->b->opts.http.extensions &&
	    (err == -LOCAL_EEXPIRED || err == -LOCAL_ECLUSTER || err == -LOCAL_EKIND))
		return -LOCAL_ENOTHELD;
	return err;
}

void http_lock_op(struct hreq *r)
{
	struct hsession *hs, *holder = NULL;
	struct henq *e;
	struct op_args a;
	uint64_t left_ms = 0;
	int err;

	/* dflockd's order: the session, then the body. */
	hs = http_session_of(r);
	if (!hs || !parse_args(r, &a))
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
		e = enq_find(hs, r->rt.param);
		if (e) {
			struct henq rec = *e;

			enq_drop(hs, r->rt.param); /* a /wait consumes it, whatever comes */
			if (rec.tok)
				wait_acquired(r, hs, &rec);
			else
				wait_begin(r, hs, a.timeout_s, rec.lease_s, true);
		} else if (waiting_on(r->h, hs, r->rt.param)) {
			hreq_local_error(r, -LOCAL_ENOTENQUEUED); /* another /wait has it */
		} else {
			wait_begin(r, hs, a.timeout_s, a.lease_s, true);
		}
		return;
	case R_LOCK_RELEASE:
	case R_SEM_RELEASE:
		err = token_holder(r->h, hs, r->rt.param, a.token, is_sem(r->rt.id), &holder);
		if (!err)
			err = local_release(holder->ls, r->rt.param);
		if (!err)
			enq_drop(holder, r->rt.param);
		r->h->maybe_granted = true;
		if (err)
			hreq_local_error(r, release_error(r->h, err));
		else
			hreq_reply_json(r, 204, NULL);
		return;
	case R_LOCK_RENEW:
	case R_SEM_RENEW:
		err = token_holder(r->h, hs, r->rt.param, a.token, is_sem(r->rt.id), &holder);
		if (!err)
			err = local_renew(holder->ls, r->rt.param, (uint32_t)a.lease_s * 1000,
					  &left_ms);
		if (err)
			hreq_local_error(r, release_error(r->h, err));
		else
			hreq_reply_json(r, 200,
					json_pack("{s:I}", "remaining_s",
						  (json_int_t)((left_ms + 999) / 1000)));
		return;
	default:
		hreq_error(r, 404, "not_found", "no such route");
	}
}
