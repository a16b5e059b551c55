// SPDX-License-Identifier: MIT
/*
 * The commands of dflockd's TCP protocol over the segment's locks.
 *
 * Each connection acts through one session the broker opens for it in its
 * own name, as for an HTTP session, on the connection's first acquire: TCP
 * holders and waiters sit in the same per-key FIFO as liblocal's, the CLI's
 * and HTTP's. Closing the connection ends the session, which releases its
 * holds and cancels its waits. A wait is a local_enqueue() whose waiter is
 * armed to ring the segment's doorbell (api_pending_arm()): the connection
 * is suspended and the doorbell, a deadline or a hang-up ends the wait.
 *
 * A token is 32 hex digits: the grant's fencing token (16, big-endian),
 * then 16 of random salt kept with the hold, so that tokens, which are
 * bearer capabilities in dflockd (any connection may release or renew
 * with one), cannot be guessed from the fencing tokens, which are counters.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <syslog.h>
#include <unistd.h>

#include <jansson.h>

#include "clock.h"
#include "procinfo.h"
#include "segment.h"
#include "core/signals.h"
#include "net/http_engine.h"
#include "tcp_int.h"

/* ---- the connection's records --------------------------------------------------- */

/* Keys reach here checked by liblocal (at most LOCAL_KEY_MAX bytes). */
static void copy_key(char dst[LOCAL_KEY_MAX + 1], const char *src)
{
	size_t n = strnlen(src, LOCAL_KEY_MAX);

	memcpy(dst, src, n);
	dst[n] = '\0';
}

static struct tcp_hold *find_hold(struct tconn *c, const char *key)
{
	uint32_t i;

	for (i = 0; i < c->nholds; i++)
		if (!strcmp(c->holds[i].key, key))
			return &c->holds[i];
	return NULL;
}

static void drop_hold(struct tconn *c, const char *key)
{
	struct tcp_hold *h = find_hold(c, key);

	if (h)
		*h = c->holds[--c->nholds];
}

/*
 * Salts from the kernel's CSPRNG, drawn SALT_POOL at a time: one
 * getrandom() per grant was a system call on every acquire. The pool is
 * process memory of the broker only, and each salt is used once.
 */
#define SALT_POOL 128

static uint64_t next_salt(void)
{
	static uint64_t pool[SALT_POOL];
	static unsigned left;
	uint64_t v;

	if (!left) {
		if (getrandom(pool, sizeof(pool), 0) == (ssize_t)sizeof(pool))
			left = SALT_POOL;
		else /* never: getrandom() of 1 KiB does not fail once seeded */
			return mono_ns() ^ ((uint64_t)rand() << 32);
	}
	v = pool[--left];
	pool[left] = 0; /* a used salt does not linger */
	return v;
}

/* Record the hold of @key with @fence; its salt (kept if the same grant). */
static int note_hold(struct tconn *c, const char *key, uint64_t fence, uint64_t *salt)
{
	struct tcp_hold *h = find_hold(c, key);

	if (h && h->fence == fence) {
		*salt = h->salt;
		return 0;
	}
	if (!h) {
		if (c->nholds == c->cap_holds) {
			uint32_t cap = c->cap_holds ? c->cap_holds * 2 : 4;
			struct tcp_hold *v = realloc(c->holds, cap * sizeof(*v));

			if (!v)
				return -ENOMEM;
			c->holds = v;
			c->cap_holds = cap;
		}
		h = &c->holds[c->nholds++];
		copy_key(h->key, key);
	}
	h->fence = fence;
	h->salt = next_salt();
	*salt = h->salt;
	return 0;
}

static struct tcp_enq *find_enq(struct tconn *c, const char *key)
{
	uint32_t i;

	for (i = 0; i < c->nenqs; i++)
		if (!strcmp(c->enqs[i].key, key))
			return &c->enqs[i];
	return NULL;
}

static void drop_enq(struct tconn *c, struct tcp_enq *e)
{
	*e = c->enqs[--c->nenqs];
}

static struct tcp_enq *new_enq(struct tconn *c, const char *key)
{
	struct tcp_enq *e;

	if (c->nenqs == c->cap_enqs) {
		uint32_t cap = c->cap_enqs ? c->cap_enqs * 2 : 4;
		struct tcp_enq *v = realloc(c->enqs, cap * sizeof(*v));

		if (!v)
			return NULL;
		c->enqs = v;
		c->cap_enqs = cap;
	}
	e = &c->enqs[c->nenqs++];
	memset(e, 0, sizeof(*e));
	copy_key(e->key, key);
	return e;
}

/* ---- the session ------------------------------------------------------------------ */

/* The network's share of the segment's session table, which liblocal
 * shares: TCP connections get what HTTP sessions leave of half of it. */
static uint32_t sessions_cap(const struct tcp *t)
{
	uint32_t half = t->b->seg.caps.max_sessions / 2;
	uint32_t http = t->b->http ? http_engine_sessions_count(t->b->http) : 0;

	if (!half)
		half = 1;
	return http < half ? half - http : 0;
}

static uint32_t nsessions;

static int conn_session(struct tcp *t, struct tconn *c)
{
	static uint64_t start_time;
	struct broker *b = t->b;
	struct proto_open req;
	struct proto_reply rep;
	int err;

	if (c->ls && session_is(&b->seg, (struct owner){ c->sslot, c->sgen }))
		return 0;
	if (c->ls) {
		/* Ended under us (an operator's destroy): its holds and queued
		 * requests are gone with it; start afresh. */
		if (c->waiting)
			return -LOCAL_ESESSION;
		session_inproc_free(c->ls);
		c->ls = NULL;
		c->nholds = c->nenqs = 0;
		nsessions--;
	}
	if (nsessions >= sessions_cap(t))
		return -LOCAL_EMAXSESSIONS;
	if (!start_time)
		proc_start_time(getpid(), &start_time);
	memset(&req, 0, sizeof(req));
	memset(&rep, 0, sizeof(rep));
	snprintf(req.name, sizeof(req.name), "tcp:%.40s#%" PRIu64, c->peer, c->id);
	req.flags = SESS_FLAG_TCP; /* a network session the broker acts for */
	req.start_time = start_time;
	err = session_open(b, &req, -1, getpid(), getuid(), start_time, &rep);
	if (err)
		return err;
	c->ls = session_inproc_new(&b->seg, (struct owner){ rep.slot, rep.gen }, rep.id);
	if (!c->ls) {
		session_end_slot(b, rep.slot, false, "closed (out of memory)");
		return -ENOMEM;
	}
	c->sslot = rep.slot;
	c->sgen = rep.gen;
	nsessions++;
	return 0;
}

void tcp_conn_release(struct tcp *t, struct tconn *c)
{
	if (!c->ls)
		return;
	if (session_is(&t->b->seg, (struct owner){ c->sslot, c->sgen })) {
		session_end_slot(t->b, c->sslot, false, "closed (TCP connection ended)");
		t->maybe_granted = true;
	}
	session_inproc_free(c->ls);
	c->ls = NULL;
	nsessions--;
}

/* ---- replies ------------------------------------------------------------------------ */

static uint32_t default_lease(const struct tcp *t)
{
	return t->b->opts.http.default_lease_s;
}

static void reply_error(struct tconn *c, const char *what, int err)
{
	switch (-err) {
	case LOCAL_EMAXKEYS:
		tcp_reply(c, "error_max_locks");
		return;
	case LOCAL_EMAXWAITERS:
		tcp_reply(c, "error_max_waiters");
		return;
	case LOCAL_ELIMIT:
	case LOCAL_EKIND:
		tcp_reply(c, "error_limit_mismatch");
		return;
	}
	blog(LOG_DEBUG, "TCP %s: %s: %s", c->peer, what, local_strerror(err));
	tcp_reply(c, "error");
}

/* "<word> <token> <lease>" without vsnprintf(): every acquire answers so. */
static void reply_word_token(struct tconn *c, const char *word, const char *token, uint32_t lease)
{
	char line[64], num[12];
	size_t wl = strlen(word), n = 0, k = sizeof(num);

	do
		num[--k] = (char)('0' + lease % 10);
	while ((lease /= 10));
	memcpy(line, word, wl);
	n = wl;
	line[n++] = ' ';
	memcpy(line + n, token, 32);
	n += 32;
	line[n++] = ' ';
	memcpy(line + n, num + k, sizeof(num) - k);
	n += sizeof(num) - k;
	tcp_reply_text(c, line, n);
}

static void reply_grant(struct tconn *c, const char *word, const char *key, uint64_t fence,
			uint32_t lease_s)
{
	char text[33];
	uint64_t salt;

	if (note_hold(c, key, fence, &salt)) {
		local_release(c->ls, key);
		tcp_reply(c, "error");
		return;
	}
	tcp_format_token(fence, salt, text);
	reply_word_token(c, word, text, lease_s);
}

/* The outcome of a wait: granted (@err 0, token @tok), timed out, failed. */
static void reply_waited(struct tcp *t, struct tconn *c, const char *key, int err, uint64_t tok,
			 uint32_t lease_s, bool two_phase)
{
	uint64_t now_tok = 0;

	if (err == -ETIMEDOUT) {
		tcp_reply(c, "timeout");
		return;
	}
	if (err) {
		reply_error(c, "wait", err);
		return;
	}
	if (local_held(c->ls, key, &now_tok) || now_tok != tok) {
		/* Granted, and its lease ran out before anyone looked. */
		tcp_reply(c, two_phase ? "error_lease_expired" : "timeout");
		return;
	}
	/* w: the lease is reset to now + L, as dflockd does. */
	if (two_phase)
		local_renew(c->ls, key, lease_s * 1000, NULL);
	(void)t;
	reply_grant(c, "ok", key, tok, lease_s);
}

/* ---- waits --------------------------------------------------------------------------- */

static uint32_t wgens;

/* Out of the queue of @key before the wait was recorded (no memory). */
static void tcp_wait_cancel_key(struct tcp *t, struct tconn *c, const char *key)
{
	uint64_t tok;

	if (api_pending_poll(c->ls, key, true, &tok) == 0) {
		local_release(c->ls, key);
		t->maybe_granted = true;
	}
}

static void wait_begin(struct tcp *t, struct tconn *c, const char *key, int64_t timeout_s,
		       uint32_t lease_s, bool two_phase)
{
	_Atomic uint64_t *word = NULL;
	uint64_t tok = 0, waiting = 0;
	int err = api_pending_arm_word(c->ls, key, &word, &waiting);

	if (err == 1 || (!err && timeout_s == 0)) {
		/* Granted already, or a wait of 0: answer now. */
		err = api_pending_poll(c->ls, key, true, &tok);
		reply_waited(t, c, key, err, tok, lease_s, two_phase);
		return;
	}
	if (err == -LOCAL_ENOTENQUEUED) {
		tcp_reply(c, "error_not_enqueued");
		return;
	}
	if (err) {
		reply_error(c, "wait", err);
		return;
	}
	if (tcp_wait_add(t, c)) {
		tcp_wait_cancel_key(t, c, key);
		tcp_reply(c, "error");
		return;
	}
	c->waiting = true;
	c->wgen = ++wgens;
	c->wtwo_phase = two_phase;
	c->wlease_s = lease_s;
	copy_key(c->wkey, key);
	c->wword = word;
	c->wwaiting = waiting;
	face_schedule(t->b, &tcp_face, mono_ns() + (uint64_t)timeout_s * 1000000000ull,
		      TIMER_TCP_WAIT, c->slot, c->wgen);
}

bool tcp_wait_poll(struct tcp *t, struct tconn *c, bool cancel)
{
	uint64_t tok = 0;
	int err = api_pending_poll(c->ls, c->wkey, cancel, &tok);

	if (err == -EAGAIN)
		return false;
	c->waiting = false;
	tcp_wait_del(t, c);
	reply_waited(t, c, c->wkey, err, tok, c->wlease_s, c->wtwo_phase);
	return true;
}

void tcp_wait_cancel(struct tcp *t, struct tconn *c)
{
	uint64_t tok;

	if (!c->waiting)
		return;
	/* -EAGAIN (a process stalled in the key's mutex) leaves it queued:
	 * ending the session (the connection's close) takes it out. */
	if (api_pending_poll(c->ls, c->wkey, true, &tok) == 0) {
		local_release(c->ls, c->wkey); /* granted meanwhile: the next one's */
		t->maybe_granted = true;
	}
	c->waiting = false;
	tcp_wait_del(t, c);
}

/* ---- the commands ------------------------------------------------------------------- */

static void acquire(struct tcp *t, struct tconn *c, const struct tcp_req *r, bool two_phase)
{
	uint32_t lease_s = r->lease_s ? (uint32_t)r->lease_s : default_lease(t);
	uint32_t limit = r->limit > 1 ? (uint32_t)r->limit : 0; /* a limit of 1 is a lock */
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 0, .lease_ms = lease_s * 1000);
	struct tcp_enq *e;
	uint64_t tok = 0;
	int granted = 0, err = conn_session(t, c);

	if (err) {
		reply_error(c, "session", err);
		return;
	}
	if (two_phase && (e = find_enq(c, r->key))) {
		if (e->acquired && (local_held(c->ls, r->key, &tok) || tok != e->fence)) {
			drop_enq(c, e); /* that grant is over: a new enqueue may start */
		} else {
			tcp_reply(c, "error_already_enqueued");
			return;
		}
	}
	if (!two_phase && r->timeout_s == 0) {
		/* Held before (a record of ours), the lease is set to L from now
		 * below; a new grant has it already (the acquire's lease_ms): no
		 * renew, a second pass over the key, on every acquire. */
		bool had = find_hold(c, r->key) != NULL;

		err = limit ? local_sem_acquire(c->ls, r->key, limit, &o, &tok)
			    : local_lock(c->ls, r->key, &o, &tok);
		if (!err) {
			if (had)
				local_renew(c->ls, r->key, lease_s * 1000, NULL); /* L now */
			reply_grant(c, "ok", r->key, tok, lease_s);
		} else if (err == -EBUSY || err == -ETIMEDOUT) {
			tcp_reply(c, "timeout");
		} else {
			reply_error(c, "acquire", err);
		}
		return;
	}
	err = local_enqueue(c->ls, r->key, limit, &o, &granted, &tok);
	if (err == -LOCAL_EENQUEUED && !two_phase && local_held(c->ls, r->key, &tok) == 0) {
		/* Holding it already: as liblocal, the same hold and token. */
		local_renew(c->ls, r->key, lease_s * 1000, NULL);
		reply_grant(c, "ok", r->key, tok, lease_s);
		return;
	}
	if (err == -LOCAL_EENQUEUED) {
		tcp_reply(c, "error_already_enqueued");
	} else if (err == -ETIMEDOUT && !two_phase) {
		tcp_reply(c, "timeout"); /* a process stalled in the key's mutex: not queued */
	} else if (err) {
		reply_error(c, "acquire", err);
	} else if (!two_phase && granted) {
		reply_grant(c, "ok", r->key, tok, lease_s);
	} else if (!two_phase) {
		wait_begin(t, c, r->key, r->timeout_s, lease_s, false);
	} else if (!(e = new_enq(c, r->key))) {
		if (granted || api_pending_poll(c->ls, r->key, true, &tok) == 0)
			local_release(c->ls, r->key);
		tcp_reply(c, "error");
	} else {
		e->lease_s = lease_s;
		e->acquired = granted;
		if (granted) {
			e->fence = tok;
			reply_grant(c, "acquired", r->key, tok, lease_s);
		} else {
			tcp_reply(c, "queued");
		}
	}
}

static void wait_cmd(struct tcp *t, struct tconn *c, const struct tcp_req *r)
{
	struct tcp_enq *e = c->ls ? find_enq(c, r->key) : NULL;
	struct tcp_enq rec;
	uint64_t tok = 0;

	if (!e) {
		tcp_reply(c, "error_not_enqueued");
		return;
	}
	rec = *e;
	drop_enq(c, e); /* consumed, whatever the outcome */
	if (!rec.acquired) {
		wait_begin(t, c, r->key, r->timeout_s, rec.lease_s, true);
		return;
	}
	if (local_held(c->ls, r->key, &tok) || tok != rec.fence) {
		drop_hold(c, r->key);
		tcp_reply(c, "error_lease_expired");
		return;
	}
	local_renew(c->ls, r->key, rec.lease_s * 1000, NULL);
	reply_grant(c, "ok", r->key, tok, rec.lease_s);
}

static bool has_token(struct tconn *c, const char *key, uint64_t fence, uint64_t salt)
{
	struct tcp_hold *h = c && c->ls ? find_hold(c, key) : NULL;

	return h && h->fence == fence && h->salt == salt;
}

/* The connection holding @key with the token @text (bearer: any may use it). */
static struct tconn *token_owner(struct tcp *t, struct tconn *self, const char *key,
				 const char *text)
{
	uint64_t fence, salt;
	uint32_t i;

	if (!tcp_parse_token(text, &fence, &salt))
		return NULL;
	if (has_token(self, key, fence, salt))
		return self;
	for (i = 0; i < t->nconns; i++)
		if (t->conns[i] != self && has_token(t->conns[i], key, fence, salt))
			return t->conns[i];
	return NULL;
}

static void release(struct tcp *t, struct tconn *c, const struct tcp_req *r)
{
	struct tconn *o = token_owner(t, c, r->key, r->arg);
	struct tcp_enq *e;
	int err;

	if (!o) {
		tcp_reply(c, "error");
		return;
	}
	err = local_release(o->ls, r->key);
	drop_hold(o, r->key);
	if ((e = find_enq(o, r->key)) && e->acquired)
		drop_enq(o, e);
	t->maybe_granted = true;
	if (err)
		reply_error(c, "release", err);
	else
		tcp_reply(c, "ok");
}

static void renew(struct tcp *t, struct tconn *c, const struct tcp_req *r)
{
	struct tconn *o = token_owner(t, c, r->key, r->arg);
	uint32_t lease_s = r->lease_s ? (uint32_t)r->lease_s : default_lease(t);
	int err;

	if (!o) {
		tcp_reply(c, "error");
		return;
	}
	err = local_renew(o->ls, r->key, lease_s * 1000, NULL);
	if (err) {
		drop_hold(o, r->key); /* expired: never resurrected */
		t->maybe_granted = true;
		reply_error(c, "renew", err);
		return;
	}
	tcp_reply(c, "ok %u", lease_s);
}

void tcp_serve(struct tcp *t, struct tconn *c, const struct tcp_req *r)
{
	switch (r->cmd) {
	case TC_L:
	case TC_SL:
		acquire(t, c, r, false);
		break;
	case TC_E:
	case TC_SE:
		acquire(t, c, r, true);
		break;
	case TC_W:
	case TC_SW:
		wait_cmd(t, c, r);
		break;
	case TC_R:
	case TC_SR:
		release(t, c, r);
		break;
	case TC_N:
	case TC_SN:
		renew(t, c, r);
		break;
	case TC_STATS:
		tcp_stats(t, c);
		break;
	case TC_PING:
		tcp_reply(c, "ok");
		break;
	case TC_LISTEN:
		tcp_sig_listen(t, c, r);
		break;
	case TC_UNLISTEN:
		tcp_sig_unlisten(t, c, r);
		break;
	case TC_SIGNAL:
		tcp_sig_publish(t, c, r);
		break;
	default: /* auth when none is configured, or again */
		tcp_reply(c, "error");
	}
}

/* ---- stats ------------------------------------------------------------------------- */

struct stats_walk {
	struct tcp *t;
	json_t *locks, *sems, *idle_locks, *idle_sems;
};

/* dflockd's connection id of the TCP connection with session @id; 0: none. */
static json_int_t conn_of(struct tcp *t, const char *id)
{
	uint32_t i;

	for (i = 0; i < t->nconns; i++)
		if (t->conns[i] && t->conns[i]->ls &&
		    !strcmp(local_session_id(t->conns[i]->ls), id))
			return (json_int_t)t->conns[i]->id;
	return 0;
}

static int stats_key(const char *key, const struct local_key_info *ki, void *arg)
{
	struct stats_walk *w = arg;
	json_t *j = json_string(key);

	if (!j) /* not UTF-8: JSON cannot carry it */
		return 0;
	if (ki->kind == LOCAL_KIND_LOCK && (ki->holders || ki->waiters)) {
		struct first_holder f = { "", 0 };

		if (ki->holders)
			stats_first_holder(w->t->observer, key, &f);
		json_array_append_new(w->locks,
				      json_pack("{s:o, s:I, s:f, s:i}", "key", j, "owner_conn_id",
						f.session[0] ? conn_of(w->t, f.session) : 0,
						"lease_expires_in_s", (double)f.lease_ms / 1000.0,
						"waiters", (json_int_t)ki->waiters));
	} else if (ki->kind == LOCAL_KIND_LOCK) {
		json_array_append_new(w->idle_locks,
				      json_pack("{s:o, s:f}", "key", j, "idle_s", 0.0));
	} else if (ki->kind == LOCAL_KIND_SEMAPHORE && (ki->holders || ki->waiters)) {
		json_array_append_new(w->sems, json_pack("{s:o, s:I, s:i, s:i}", "key", j, "limit",
							 (json_int_t)ki->limit, "holders",
							 (json_int_t)ki->holders, "waiters",
							 (json_int_t)ki->waiters));
	} else if (ki->kind == LOCAL_KIND_SEMAPHORE) {
		json_array_append_new(w->idle_sems,
				      json_pack("{s:o, s:f}", "key", j, "idle_s", 0.0));
	} else {
		json_decref(j);
	}
	return 0;
}

void tcp_stats(struct tcp *t, struct tconn *c)
{
	struct stats_walk w = { t, json_array(), json_array(), json_array(), json_array() };
	json_t *j;
	char *text;
	size_t n;

	local_keys(t->observer, "", stats_key, &w);
	j = json_pack("{s:i, s:o, s:o, s:o, s:o, s:o}", "connections", (json_int_t)t->live, "locks",
		      w.locks, "semaphores", w.sems, "idle_locks", w.idle_locks, "idle_semaphores",
		      w.idle_sems, "signal_channels", signals_stats(t->b));
	text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!text) {
		tcp_reply(c, "error");
		return;
	}
	n = strlen(text);
	{
		char *line = malloc(n + 4);

		if (!line) {
			free(text);
			tcp_reply(c, "error");
			return;
		}
		memcpy(line, "ok ", 3);
		memcpy(line + 3, text, n);
		tcp_reply_text(c, line, n + 3);
		free(line);
	}
	free(text);
}
