/*
 * SPDX-License-Identifier: MIT
 *
 * A Promela model of fencing tokens drawn from per-key ranges (issue 13;
 * libshm/keyops.h key_token_for(), libshm/keyops.c key_next_token_locked(),
 * libshm/fastpath.c fast_token(); docs/architecture.md, "Fencing tokens").
 *
 * Two keys share the segment's counter. Clients grant either lock-free (one
 * atomic step: the C path reads a snapshot after the fast word and commits
 * with one CAS against it, which fails if a mutex holder came in between,
 * so the snapshot is consistent) or under the key's mutex, store by store,
 * and may die between any two stores; the next mutex holder repairs, and a
 * grant that its dead granter showed but did not count is counted by repair
 * or, if its waiter consumed it first, never. The collector reclaims an idle
 * key: the entry comes back as a new key (token 0, lock_index 0) with the
 * old range fields left in it, as create_locked() leaves them.
 *
 * Checked (make model): every token shown is strictly above every token
 * shown before on its key, in any incarnation; no token is shown twice, on
 * any key; the counter is at or above every token shown.
 *
 * Options (spin -D...), each expected to fail:
 *   BUG_NO_TOKLAST  no tok_last: a grant shown but never counted is given
 *                   again
 *   BUG_NO_VOID     the range stays valid whatever token says: a re-created
 *                   key hands out its old range again
 */

#define K 2		/* keys */
#define CLIENTS 2
#define ITER 3		/* grants per client */
#define MAXDEATH 1
#define MAXGC 1
#define SPAN_MIN 2
#define SPAN_MAX 3
#define SEED 10		/* the counter's seed: above any lock_index here */
#define TOKMAX 64	/* tokens stay below this in the bounded search */

/* The key entry (struct seg_key), and what the fold has not yet counted. */
byte L[K];		/* lock_index */
byte pend[K];		/* lock-free grants since fast_base (the fold adds them) */
short off[K];		/* tok_off */
short hi[K];		/* tok_hi */
short last[K];		/* tok_last */
short token[K];		/* token */
byte lockd[K];		/* mutex: 0 free, 1 held, 2 left by a dead owner */
short shown_t[K];	/* a grant shown but not counted by a dead granter: its token */
short counter;
byte deaths, gcs;

/* What the grants showed: the check. */
byte maxtok[K];
bit seen[TOKMAX];

inline show_grant(k, t)
{
	assert(t > maxtok[k]);
	assert(t < TOKMAX && !seen[t]);
	assert(t <= counter);
	seen[t] = 1;
	maxtok[k] = t
}

/* key_token_for(): the token of grant number g, valid when the range is
 * complete (off <= token), not spent (<= hi) and the token not drawn yet
 * (> tok_last). */
#define TOK(k, g) (off[k] + (g))
#ifdef BUG_NO_VOID
#define COMPLETE(k) true
#else
#define COMPLETE(k) (off[k] <= token[k])
#endif
#ifdef BUG_NO_TOKLAST
#define UNDRAWN(k, g) true
#else
#define UNDRAWN(k, g) (TOK(k, g) > last[k])
#endif
#define VALID(k, g) (COMPLETE(k) && TOK(k, g) <= hi[k] && UNDRAWN(k, g))

/* A client may die here (at most MAXDEATH times in all): the mutex stays
 * held by a dead owner, for the next holder to repair. */
inline maybe_die(k)
{
	if
	:: deaths < MAXDEATH -> deaths++; lockd[k] = 2; goto dead
	:: true
	fi
}

/* key_lock(): take the mutex, repair after a dead owner, fold. */
inline key_lock(k)
{
	atomic {
		lockd[k] != 1 ->
		if
		:: lockd[k] == 2 ->
			/* repair: a shown, uncounted grant is counted, unless its
			 * waiter consumed it before repair looked */
			if
			:: shown_t[k] && shown_t[k] > token[k] -> L[k]++; token[k] = shown_t[k]
			:: true
			fi;
			shown_t[k] = 0
		:: else
		fi;
		lockd[k] = 1;
		L[k] = L[k] + pend[k];
		pend[k] = 0
	}
}

proctype client()
{
	byte i, k, g, span;
	short t, g0;

	for (i : 1 .. ITER) {
		if
		:: k = 0
		:: k = 1
		fi;
		if
		:: atomic {
			/* lock-free: only while no mutex holder (SLOW clear) */
			(lockd[k] == 0 && VALID(k, L[k] + pend[k] + 1)) ->
			t = TOK(k, L[k] + pend[k] + 1);
			show_grant(k, t);
			pend[k]++
		   }
		:: true ->
			key_lock(k);
			/* key_next_token_locked() */
			g = L[k] + 1;
			if
			:: VALID(k, g) -> t = TOK(k, g)
			:: else ->
				if
				:: off[k] <= token[k] && last[k] >= off[k] + g && last[k] < hi[k] ->
					off[k] = last[k] + 1 - g;
					maybe_die(k);
					t = last[k] + 1
				:: else ->
					span = (g < SPAN_MIN -> SPAN_MIN : (g > SPAN_MAX -> SPAN_MAX : g));
					atomic { g0 = counter; counter = counter + span };
					maybe_die(k);	/* TOKEN_RESERVED */
					off[k] = g0 + 1 - g;
					maybe_die(k);
					hi[k] = g0 + span;
					maybe_die(k);	/* TOKEN_RANGE_SET */
					token[k] = g0;
					t = g0 + 1
				fi
			fi;
#ifndef BUG_NO_TOKLAST
			last[k] = t;
#endif
			maybe_die(k);
			/* the grant is shown (the node says HOLDING / GRANTED) */
			show_grant(k, t);
			shown_t[k] = t;
			maybe_die(k);
			/* counted */
			L[k]++;
			token[k] = t;
			shown_t[k] = 0;
			lockd[k] = 0
		fi
	}
dead:
	skip
}

/* The collector: an idle key is reclaimed and made again in its entry. */
proctype gc()
{
	byte k;

	do
	:: gcs < MAXGC ->
		if
		:: k = 0
		:: k = 1
		fi;
		key_lock(k);
		atomic {
			gcs++;
			/* create_locked(): lock_index 0, token 0; the range fields stay */
			L[k] = 0;
			token[k] = 0;
			lockd[k] = 0
		}
	:: else -> break
	od
}

init
{
	atomic {
		counter = SEED;
		run client();
		run client();
		run gc()
	}
}
