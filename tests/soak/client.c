// SPDX-License-Identifier: MIT
/*
 * A soak client: random locks, semaphore slots, two-phase acquires, leases,
 * renews, watches and session churn, until the parent says stop or kills it.
 *
 * Every grant is checked twice: its token must exceed every token any client
 * had seen granted on that key before the request began (tokens rise per key),
 * and inside the critical section no more than the key's limit of live
 * clients may be marked in the shared occupancy table. Holds are taken only
 * in increasing key order, so waits without a deadline cannot deadlock.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "soak.h"

#define LEASE_MS 5000u	 /* far longer than any critical section */
#define TTL_MS 5000u	 /* renewed before every operation */
#define MAX_TIMED_MS 50u /* the longest timed acquire, wait or watch */

enum mode { TRY, TIMED, FOREVER };

struct cl {
	struct soak_shared *sh;
	const struct soak_config *cfg;
	struct soak_slot *slot;
	unsigned idx;
	uint32_t inc;
	uint64_t rng;
	local_session *s;
	/* Key handles of this session, opened on first use: half the plain
	 * acquires and releases go through them (the node a handle keeps
	 * between holds, and its take-back, under kills and expiries). */
	local_key *h[SOAK_KEYS];
	uint32_t ttl_ms;
	uint64_t renewed_ns;
	uint64_t held[SOAK_KEYS]; /* our token per key; 0: not held */
	bool leased[SOAK_KEYS];
	uint64_t lease_from[SOAK_KEYS]; /* when the call that (re)started the lease began */
};

static LOCAL_OPTS(local_key_info, info_before);
static LOCAL_OPTS(local_key_info, info_after);

static void pause_us(unsigned us)
{
	struct timespec ts = { .tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000 };

	nanosleep(&ts, NULL);
}

static void op_begin(struct cl *c, enum soak_op op, unsigned key, int64_t timeout_ms)
{
	atomic_store(&c->slot->op, op);
	atomic_store(&c->slot->op_key, key);
	atomic_store(&c->slot->op_timeout_ms, timeout_ms);
	atomic_store(&c->slot->op_start_ns, soak_now_ns());
	atomic_fetch_add_explicit(&c->sh->ops[op], 1, memory_order_relaxed);
}

static void op_end(struct cl *c)
{
	atomic_store(&c->slot->op_start_ns, 0);
	atomic_fetch_add_explicit(&c->slot->ops, 1, memory_order_relaxed);
}

static void outcome(struct cl *c, enum soak_outcome o)
{
	atomic_fetch_add_explicit(&c->sh->outcomes[o], 1, memory_order_relaxed);
}

#define VIOLATION(c, fmt, ...)                                                        \
	soak_violation((c)->sh, "client %u (pid %d, incarnation %u): " fmt, (c)->idx, \
		       (int)getpid(), (c)->inc, __VA_ARGS__)

/* A mark changed: after every store to occ[key][*] (see occupancy()). */
static void occ_changed(struct cl *c, unsigned key)
{
	atomic_fetch_add(&c->sh->occ_changes[key], 1);
}

static void forget_holds(struct cl *c)
{
	unsigned k;

	for (k = 0; k < SOAK_KEYS; k++) {
		atomic_store(&c->sh->occ[k][c->idx], 0);
		occ_changed(c, k);
		c->held[k] = 0;
	}
}

/* The handle of @key for this session, or NULL (then by name): half the
 * time, at random. */
static local_key *maybe_handle(struct cl *c, unsigned key)
{
	if (rng_below(&c->rng, 2))
		return NULL;
	if (!c->h[key] && local_key_open(c->s, soak_key_name[key], &c->h[key]))
		c->h[key] = NULL;
	return c->h[key];
}

static bool open_session(struct cl *c)
{
	struct local_session_opts o;
	unsigned backoff_ms = 2;
	int rc;

	local_session_opts_init(&o);
	o.socket_path = c->cfg->sock;
	o.name = "soak";
	/* Mostly no lock-delay, so that kills hand over at once; some 50 ms. */
	o.lock_delay_ms = rng_below(&c->rng, 4) ? 0 : 50;
	o.ttl_ms = rng_below(&c->rng, 4) ? 0 : TTL_MS;
	for (;;) {
		if (atomic_load(&c->sh->stop))
			return false;
		op_begin(c, OP_OPEN, SOAK_KEYS, -1);
		c->renewed_ns = soak_now_ns(); /* before: the TTL starts inside */
		rc = local_session_open(&o, &c->s);
		op_end(c);
		if (rc == 0)
			break;
		if (rc != -LOCAL_EBROKER && rc != -LOCAL_ENOSOCKET && rc != -LOCAL_EREFUSED)
			VIOLATION(c, "session open: %s", local_strerror(rc));
		/* The broker is down or restarting: lock operations of other
		 * sessions go on without it; a new session must wait. */
		outcome(c, OUT_OPEN_RETRY);
		pause_us((backoff_ms + rng_below(&c->rng, backoff_ms)) * 1000);
		if (backoff_ms < 50)
			backoff_ms *= 2;
	}
	c->ttl_ms = o.ttl_ms;
	return true;
}

/* End the session (voluntarily). With holds and no broker to release them,
 * the holds would stay until this process exits: so exit, and let the
 * broker clean up after the death like after any kill. */
static void close_session(struct cl *c)
{
	bool holding = false;
	unsigned k;
	int rc;

	for (k = 0; k < SOAK_KEYS; k++)
		holding |= c->held[k] != 0;
	forget_holds(c);
	/* Handles first, as liblocal(3) asks (they give their nodes back). */
	for (k = 0; k < SOAK_KEYS; k++) {
		if (c->h[k])
			local_key_close(c->h[k]);
		c->h[k] = NULL;
	}
	op_begin(c, OP_CLOSE, SOAK_KEYS, -1);
	rc = local_session_close(c->s);
	op_end(c);
	c->s = NULL;
	if (rc == -LOCAL_EBROKER) {
		outcome(c, OUT_CLOSE_ORPHAN);
		if (holding)
			_exit(3);
	} else if (rc && rc != -LOCAL_ESESSION) {
		VIOLATION(c, "session close: %s", local_strerror(rc));
	}
}

/*
 * An error no operation should return here. LOCAL_ESESSION is legal only for
 * a TTL session not renewed within its TTL; a session bound to a live
 * process never ends by itself. The session is replaced either way.
 */
static void unexpected(struct cl *c, const char *what, unsigned key, int rc)
{
	uint64_t since_ms = (soak_now_ns() - c->renewed_ns) / 1000000;

	if (rc == -LOCAL_ESESSION && c->ttl_ms && since_ms + 1000 >= c->ttl_ms) {
		outcome(c, OUT_SESSION_LOST);
	} else if (rc == -LOCAL_ESESSION) {
		VIOLATION(c,
			  "%s %s: session ended under a live process (ttl %u ms, renewed %llu "
			  "ms ago)",
			  what, key < SOAK_KEYS ? soak_key_name[key] : "-", c->ttl_ms,
			  (unsigned long long)since_ms);
	} else {
		VIOLATION(c, "%s %s: %s (%d)", what, key < SOAK_KEYS ? soak_key_name[key] : "-",
			  local_strerror(rc), rc);
	}
	close_session(c);
	if (!open_session(c))
		_exit(0);
}

static void raise_max_token(struct soak_shared *sh, unsigned key, uint64_t t)
{
	uint64_t m = atomic_load(&sh->max_token[key]);

	while (t > m && !atomic_compare_exchange_weak(&sh->max_token[key], &m, t))
		;
}

/* A new grant: its token must exceed every token of the key seen before the
 * request. */
static void check_grant(struct cl *c, unsigned key, uint64_t before, uint64_t token,
			const char *how)
{
	if (token <= before)
		VIOLATION(c, "%s %s granted token %llu, not above %llu granted earlier", how,
			  soak_key_name[key], (unsigned long long)token,
			  (unsigned long long)before);
	raise_max_token(c->sh, key, token);
	outcome(c, OUT_GRANTED);
}

/* The end of our mark's validity on @key: the earlier of its lease's and
 * our TTL session's earliest possible end; 0: neither. */
static uint64_t hold_until(const struct cl *c, unsigned key)
{
	uint64_t until = 0;

	if (c->leased[key])
		until = c->lease_from[key] + LEASE_MS * 1000000ull;
	if (c->ttl_ms) {
		uint64_t t = c->renewed_ns + c->ttl_ms * 1000000ull;

		if (!until || t < until)
			until = t;
	}
	return until;
}

/* One client's mark as a scan read it. */
struct occ_seen {
	uint64_t mark, until, token;
	uint32_t inc;
};

/*
 * How many live clients are inside key @key, counted from a snapshot of
 * the marks that is consistent: the marks are read until no change was
 * counted during a read. A plain pass over them is not: a scan stopped
 * (preempted) between two entries could see a releaser's mark from before
 * it cleared it and, further on, the mark of the process its release let
 * in: two clients that were never inside together. With the count
 * unchanged from before the pass to after it, every mark seen set belongs
 * to a hold granted before the second read and released after it (a
 * release follows its mark's clearing and that change's count): all held
 * together then. Marks of killed clients are stale; *expired (if non-NULL)
 * gets those left out only because their lease or TTL may have run out.
 * The counted marks are listed in @who.
 */
static unsigned occupancy(struct cl *c, unsigned key, char *who, size_t len, unsigned *expired)
{
	struct occ_seen seen[SOAK_MAX_CLIENTS];
	unsigned i, n = 0, tries;
	uint64_t now, before;
	size_t off = 0;

	for (tries = 0;; tries++) {
		before = atomic_load(&c->sh->occ_changes[key]);
		for (i = 0; i < c->cfg->clients; i++) {
			seen[i].mark = atomic_load(&c->sh->occ[key][i]);
			seen[i].until = atomic_load(&c->sh->occ_until[key][i]);
			seen[i].token = atomic_load(&c->sh->occ_token[key][i]);
			seen[i].inc = atomic_load(&c->sh->slot[i].inc);
		}
		if (atomic_load(&c->sh->occ_changes[key]) == before)
			break;
		if (tries == 1000) {
			outcome(c, OUT_OCC_UNSETTLED);
			return 0; /* never still: no verdict this time */
		}
	}
	now = soak_now_ns();
	for (i = 0; i < c->cfg->clients; i++) {
		const struct occ_seen *o = &seen[i];

		if (!(o->mark & 1) || (uint32_t)(o->mark >> 1) != o->inc)
			continue;
		if (o->until && now >= o->until) {
			if (expired)
				(*expired)++;
			continue;
		}
		n++;
		if (who && off < len)
			off += (size_t)snprintf(
				who + off, len - off, " %u:%llu(%s%llu ms)", i,
				(unsigned long long)o->token, o->until ? "valid " : "no end, ",
				o->until ? (unsigned long long)(o->until - now) / 1000000 : 0);
	}
	return n;
}

static void check_occupancy(struct cl *c, unsigned key, const char *when)
{
	char who[256] = "";
	unsigned expired = 0, n = occupancy(c, key, who, sizeof(who), &expired);

	if (n <= soak_limit(key)) {
		if (n + expired > soak_limit(key))
			outcome(c, OUT_OVER_EXPIRED);
		return;
	}
	VIOLATION(c, "%u clients inside %s (limit %u) %s; client:token%s", n, soak_key_name[key],
		  soak_limit(key), when, who);
}

static void release(struct cl *c, unsigned key)
{
	local_key *h = maybe_handle(c, key);
	int rc;

	atomic_store(&c->sh->occ[key][c->idx], 0);
	occ_changed(c, key);
	op_begin(c, OP_RELEASE, key, 0);
	rc = h ? local_key_release(h) : local_release(c->s, soak_key_name[key]);
	op_end(c);
	c->held[key] = 0;
	if (rc == -LOCAL_EEXPIRED && c->leased[key])
		outcome(c, OUT_LEASE_LOST);
	else if (rc)
		unexpected(c, "release", key, rc);
}

static bool acquire(struct cl *c, unsigned key, enum mode mode);

/* Inside the critical section of @key (held with c->held[key]). */
static void critical(struct cl *c, unsigned key)
{
	const char *name = soak_key_name[key];
	uint64_t tok = c->held[key], t = 0, from;
	int rc;

	atomic_store(&c->sh->occ_token[key][c->idx], tok);
	atomic_store(&c->sh->occ_until[key][c->idx], hold_until(c, key));
	atomic_store(&c->sh->occ[key][c->idx], (uint64_t)c->inc << 1 | 1);
	occ_changed(c, key);
	check_occupancy(c, key, "on entry");
	switch (rng_below(&c->rng, 6)) {
	case 0:
		op_begin(c, OP_HELD, key, 0);
		rc = local_held(c->s, name, &t);
		if (!rc)
			rc = local_check_token(c->s, name, tok);
		op_end(c);
		if (rc == -LOCAL_EEXPIRED && c->leased[key])
			outcome(c, OUT_LEASE_LOST);
		else if (rc)
			unexpected(c, "held/check_token", key, rc);
		else if (t != tok)
			VIOLATION(c, "held %s says token %llu, granted %llu", name,
				  (unsigned long long)t, (unsigned long long)tok);
		break;
	case 1:
		if (!c->leased[key])
			break;
		op_begin(c, OP_RENEW, key, 0);
		from = soak_now_ns();
		rc = local_renew(c->s, name, rng_below(&c->rng, 2) ? 0 : LEASE_MS, NULL);
		op_end(c);
		if (!rc) {
			c->lease_from[key] = from;
			atomic_store(&c->sh->occ_until[key][c->idx], hold_until(c, key));
		}
		if (rc == -LOCAL_EEXPIRED)
			outcome(c, OUT_LEASE_LOST);
		else if (rc)
			unexpected(c, "renew", key, rc);
		break;
	case 2: {
		/* Asking again for what we hold returns our token at once. */
		LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 0);

		op_begin(c, key < SOAK_LOCKS ? OP_LOCK_TRY : OP_SEM_TRY, key, 0);
		rc = key < SOAK_LOCKS ? local_lock(c->s, name, &o, &t)
				      : local_sem_acquire(c->s, name, SOAK_SEM_LIMIT, &o, &t);
		op_end(c);
		if (rc)
			unexpected(c, "re-acquire", key, rc);
		else if (t != tok)
			VIOLATION(c, "re-acquiring %s returned token %llu, held %llu", name,
				  (unsigned long long)t, (unsigned long long)tok);
		break;
	}
	case 3:
		/* Nest: only keys after this one, so nothing waits in a cycle. */
		if (key + 1 < SOAK_KEYS && c->s) {
			unsigned k2 = key + 1 + rng_below(&c->rng, SOAK_KEYS - key - 1);

			if (acquire(c, k2, (enum mode)rng_below(&c->rng, 3)))
				critical(c, k2);
		}
		break;
	default:
		break;
	}
	if (!c->s || !c->held[key])
		return; /* the session was replaced: the hold went with it */
	if (rng_below(&c->rng, 3) == 0)
		pause_us(rng_below(&c->rng, 2000));
	check_occupancy(c, key, "before exit");
	if (rng_below(&c->rng, 400) == 0) {
		/* Leave by ending the session: the broker releases the hold. */
		close_session(c);
		if (!open_session(c))
			_exit(0);
		return;
	}
	release(c, key);
}

static int64_t timeout_for(struct cl *c, enum mode mode)
{
	if (mode == TRY)
		return 0;
	return mode == TIMED ? (int64_t)(1 + rng_below(&c->rng, MAX_TIMED_MS)) : -1;
}

/* One acquire of @key in @mode, one- or two-phase. True when granted. */
static bool acquire(struct cl *c, unsigned key, enum mode mode)
{
	static const enum soak_op lock_op[] = { OP_LOCK_TRY, OP_LOCK_TIMED, OP_LOCK_FOREVER };
	static const enum soak_op sem_op[] = { OP_SEM_TRY, OP_SEM_TIMED, OP_SEM_FOREVER };
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = timeout_for(c, mode));
	uint32_t limit = key < SOAK_LOCKS ? 0 : SOAK_SEM_LIMIT;
	const char *name = soak_key_name[key];
	uint64_t before = atomic_load(&c->sh->max_token[key]), tok = 0, t0 = soak_now_ns();
	char value[16];
	int rc, granted = 0;

	o.lease_ms = rng_below(&c->rng, 4) ? 0 : LEASE_MS;
	if (rng_below(&c->rng, 8) == 0) { /* a value takes the mutex path */
		o.value_len = (size_t)snprintf(value, sizeof(value), "c%u.%u", c->idx, c->inc);
		o.value = value;
	}
	if (rng_below(&c->rng, 4) == 0) {
		op_begin(c, OP_ENQUEUE, key, 0);
		rc = local_enqueue(c->s, name, limit, &o, &granted, &tok);
		op_end(c);
		if (rc) {
			unexpected(c, "enqueue", key, rc);
			return false;
		}
		if (!granted) {
			/* A wait of 0 ms is a cancellation unless the grant landed. */
			int64_t t = mode == TRY ? 0 : o.timeout_ms;

			op_begin(c, OP_WAIT, key, t);
			rc = local_wait(c->s, name, t, &tok);
			op_end(c);
			if (rc == -ETIMEDOUT) {
				outcome(c, OUT_TIMEDOUT);
				return false;
			}
			if (rc) {
				unexpected(c, "wait", key, rc);
				return false;
			}
		}
		check_grant(c, key, before, tok, granted ? "enqueue" : "wait");
	} else {
		local_key *h = maybe_handle(c, key);

		op_begin(c, limit ? sem_op[mode] : lock_op[mode], key, o.timeout_ms);
		if (h)
			rc = limit ? local_key_sem_acquire(h, limit, &o, &tok)
				   : local_key_lock(h, &o, &tok);
		else
			rc = limit ? local_sem_acquire(c->s, name, limit, &o, &tok)
				   : local_lock(c->s, name, &o, &tok);
		op_end(c);
		if (rc == -EBUSY && mode == TRY) {
			outcome(c, OUT_BUSY);
			return false;
		}
		if (rc == -ETIMEDOUT && mode == TIMED) {
			outcome(c, OUT_TIMEDOUT);
			return false;
		}
		if (rc) {
			unexpected(c, limit ? "sem_acquire" : "lock", key, rc);
			return false;
		}
		check_grant(c, key, before, tok, limit ? "sem_acquire" : "lock");
	}
	c->held[key] = tok;
	c->leased[key] = o.lease_ms != 0;
	c->lease_from[key] = t0; /* the lease starts at the grant, after this */
	return true;
}

/* Watch a key for a change, or read it, or check we do not hold it. */
static void observe(struct cl *c, unsigned key)
{
	const char *name = soak_key_name[key];
	int64_t t = 1 + rng_below(&c->rng, MAX_TIMED_MS);
	int rc;

	op_begin(c, OP_INFO, key, 0);
	rc = local_info(c->s, name, &info_before);
	op_end(c);
	if (rc) {
		unexpected(c, "info", key, rc);
		return;
	}
	if (info_before.holders > soak_limit(key))
		VIOLATION(c, "info %s: %u holders, limit %u", name, info_before.holders,
			  soak_limit(key));
	switch (rng_below(&c->rng, 3)) {
	case 0:
		op_begin(c, OP_WATCH, key, t);
		rc = local_watch(c->s, name, info_before.modify_index, t, &info_after);
		op_end(c);
		if (rc == -ETIMEDOUT) {
			outcome(c, OUT_TIMEDOUT);
		} else if (rc) {
			unexpected(c, "watch", key, rc);
		} else {
			outcome(c, OUT_WATCH_FIRED);
			if (info_after.modify_index <= info_before.modify_index)
				VIOLATION(c, "watch %s returned at index %llu, not past %llu", name,
					  (unsigned long long)info_after.modify_index,
					  (unsigned long long)info_before.modify_index);
		}
		break;
	case 1:
		/* Not held by us: held must say so, release must refuse. */
		op_begin(c, OP_HELD, key, 0);
		rc = local_held(c->s, name, NULL);
		op_end(c);
		if (rc == 0)
			VIOLATION(c, "held %s: says we hold it, but we released it", name);
		else if (rc == -LOCAL_EEXPIRED)
			outcome(c, OUT_LEASE_LOST); /* the record of an earlier expiry */
		else if (rc != -LOCAL_ENOTHELD)
			unexpected(c, "held", key, rc);
		break;
	default:
		break;
	}
}

void soak_client(struct soak_shared *sh, const struct soak_config *cfg, unsigned idx, uint32_t inc,
		 uint64_t seed)
{
	struct cl c = { .sh = sh,
			.cfg = cfg,
			.slot = &sh->slot[idx],
			.idx = idx,
			.inc = inc,
			.rng = seed | 1 };
	int rc;

	if (!open_session(&c))
		_exit(0);
	while (!atomic_load(&sh->stop)) {
		unsigned key = rng_below(&c.rng, SOAK_KEYS), r = rng_below(&c.rng, 100);

		if (c.ttl_ms) {
			uint64_t t = soak_now_ns();

			rc = local_session_renew(c.s);
			if (rc)
				unexpected(&c, "session renew", SOAK_KEYS, rc);
			else
				c.renewed_ns = t;
		}
		if (r < 70) {
			if (acquire(&c, key, (enum mode)rng_below(&c.rng, 3)))
				critical(&c, key);
		} else if (r < 98) {
			observe(&c, key);
		} else {
			close_session(&c);
			if (!open_session(&c))
				break;
		}
	}
	if (c.s)
		close_session(&c);
	_exit(0);
}
