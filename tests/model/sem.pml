/*
 * SPDX-License-Identifier: MIT
 *
 * A Promela model of a DESIGN, not of code yet: lock-free semaphore holders
 * beyond the first (issue 13, M1; docs/architecture.md, "Lock-free semaphore
 * holders beyond the first (design, M1)").
 *
 * The semaphore's fast word becomes {SLOW, op, pending node + 1, count, seq}.
 * count is the number of lock-free holds; holds taken under the key mutex
 * are listed (NODE_HOLDING), and SLOW stays set while any is listed, so
 * lock-free operations see count as the whole number of holders.
 *
 *   acquire: claim a node in flight (NODE_FAST_CLAIMED, tagged with the seq
 *     its commit will make), CAS the word {0, -, 0, c, s} -> {0, ACQ, n, c+1,
 *     s+1} (the commit: a node named as pending is a hold), mark the node
 *     NODE_SEM_HELD (a CAS expecting the tag), clear pending (a CAS
 *     expecting the committed word; seq+1);
 *   release: tag the held node with the seq the release commit will make,
 *     CAS {0, -, 0, c, s} -> {0, REL, n, c-1, s+1} (the commit), free the
 *     node (a CAS expecting HELD and the tag), clear pending;
 *   anyone who reads a word with pending != 0 may finish that step (mark or
 *     free the named node with the tag = the word's seq, then clear) and
 *     need never wait for its owner; key_lock() finishes it under the
 *     frozen word (SLOW), where no tag is needed: the named node cannot
 *     change while the word names it.
 *   key_lock() then folds: every finished lock-free step moved seq by 2, and
 *     acquisitions minus releases is count - base count, so the grants since
 *     fast_base are ((seq - bseq) / 2 + count - bcount) / 2, and a lock-free
 *     acquire's grant number (its fencing token's index) is lock_index plus
 *     that, plus one, computed from the word it commits against.
 *   the broker's sweep of a dead session (under the mutex, after
 *     key_lock()): its NODE_SEM_HELD nodes are released (count - 1 each),
 *     its listed holds unlinked, its unnamed in-flight nodes freed.
 *
 * Each client may be killed between any two of its lock-free steps (at most
 * MAXDEATH kills in all); a client that is merely slow (SIGSTOP) is any
 * interleaving. Mutex sections are atomic here: their crash consistency is
 * key.pml's subject.
 *
 * Checked (make model): the limit is never exceeded; count always equals
 * the holds the node table shows (NODE_SEM_HELD nodes, plus a pending
 * acquire not yet marked, minus a pending release not yet freed); holds
 * listed equal NODE_HOLDING nodes; every grant's number is exactly the
 * number of grants so far (no token repeated or skipped, lock_index exact
 * after every fold); at the end nothing is held, pending or leaked; nobody
 * blocks (no invalid end state: a killed client stops nobody).
 * Not modelled: seq wrap-around (except BUG_SEQ_WRAP), session destroy
 * while its process lives, lease expiry, waiters and handoff.
 *
 * Options (spin -D...), each expected to fail:
 *   BUG_NO_TAG      helpers mark or free the named node without checking
 *                   its tag (the ABA the tag exists for)
 *   BUG_NO_FINISH   key_lock() does not finish a pending step
 *   BUG_SEQ_WRAP    seq has 3 bits (the fold still comes in time): a
 *                   client stopped between reading the word and its commit
 *                   commits on a wrapped, identical word with a stale
 *                   grant number (why the design wants a 64-bit seq)
 */

#ifndef P
#define P 3		/* clients; client i uses node i (a session's own node) */
#endif
#ifndef LIM
#define LIM 2		/* the semaphore's limit */
#endif
#ifndef ITER
#define ITER 2		/* acquire+release pairs per client */
#endif
#define MAXDEATH 1
/* seq counts modulo SEQMOD; a lock-free acquire or release FOLD_AT steps
 * past the base takes the mutex path instead (FAST_FOLD_EVERY; releases too,
 * since with several holders they need not alternate with acquisitions), so
 * the fold never meets a wrapped seq. The default never wraps within the bounded search. */
#ifdef BUG_SEQ_WRAP
#define SEQMOD 8
#define FOLD_AT 4
#else
#define SEQMOD 256
#define FOLD_AT 200
#endif
#define INC(x) x = (x + 1) % SEQMOD
#define NEXT(q) ((q + 1) % SEQMOD)
#define DIFF(a, b) ((a - b + SEQMOD) % SEQMOD)

#define FREE 0
#define CLAIMED 1	/* NODE_FAST_CLAIMED: in flight, or the named pending acquire */
#define HELD 2		/* NODE_SEM_HELD: a committed lock-free hold, counted in count */
#define HOLDING 3	/* a hold taken under the mutex, listed */

#define ACQ 0
#define REL 1

/* The fast word. */
bit slow;
bit op;
byte pend;	/* node + 1; 0: none */
byte cnt;
byte seq;
/* fast_base: seq and count when the key last left the mutex. */
byte bseq;
byte bcnt;
/* Under the mutex. */
byte listed;
byte lidx;	/* lock_index */
byte mtx;	/* 0: free; else the holder's pid + 1 */

byte nst[P];
byte ntag[P];
byte deaths;

/* Ghosts: units held, grants made. */
byte inside;
byte grants;

#if P == 3
#define NHELD ((nst[0] == HELD) + (nst[1] == HELD) + (nst[2] == HELD))
#define NHOLDING ((nst[0] == HOLDING) + (nst[1] == HOLDING) + (nst[2] == HOLDING))
#define ALLFREE (nst[0] == FREE && nst[1] == FREE && nst[2] == FREE)
#else
#define NHELD ((nst[0] == HELD) + (nst[1] == HELD))
#define NHOLDING ((nst[0] == HOLDING) + (nst[1] == HOLDING))
#define ALLFREE (nst[0] == FREE && nst[1] == FREE)
#endif
#define PEND_ACQ (pend != 0 && op == ACQ && nst[pend - 1] == CLAIMED)
#define PEND_REL (pend != 0 && op == REL && nst[pend - 1] == HELD)
#define CONSISTENT (cnt == NHELD + PEND_ACQ - PEND_REL && listed == NHOLDING && \
		    cnt + listed == inside && inside <= LIM)

#define SAME(fs, fo, fp, fc, fq) \
	(slow == fs && op == fo && pend == fp && cnt == fc && seq == fq)

/* Finish the step the word names, under the mutex (the word is frozen). */
inline finish_locked()
{
#ifndef BUG_NO_FINISH
	if
	:: pend != 0 ->
		if
		:: op == ACQ && nst[pend - 1] == CLAIMED -> nst[pend - 1] = HELD
		:: op == REL && nst[pend - 1] == HELD -> nst[pend - 1] = FREE
		:: else -> skip
		fi;
		pend = 0;
		INC(seq)
	:: else
	fi
#else
	skip
#endif
}

/* key_lock(): the mutex, SLOW, finish, fold. Atomic (see above). */
inline key_lock(me)
{
	atomic {
		mtx == 0 -> mtx = me + 1;
		slow = 1;
		finish_locked();
		assert(pend == 0 && DIFF(seq, bseq) % 2 == 0);
		lidx = lidx + (DIFF(seq, bseq) / 2 + cnt - bcnt) / 2;
		assert(lidx == grants);
		bseq = seq;
		bcnt = cnt
	}
}

/* key_unlock(): back to the lock-free path when no hold is listed (a
 * queue, lock-delay and watchers are not modelled); the base first. */
inline key_unlock()
{
	atomic {
		if
		:: listed == 0 -> INC(seq); bseq = seq; bcnt = cnt; slow = 0
		:: else
		fi;
		mtx = 0
	}
}

/* A lock-free caller that read a word naming a pending step finishes it:
 * mark or free the named node if it still carries that step's tag, then
 * clear pending if the word is still the one read. */
inline help(fo, fp, fq)
{
	atomic {
		if
#ifdef BUG_NO_TAG
		:: fo == ACQ && nst[fp - 1] == CLAIMED -> nst[fp - 1] = HELD
		:: fo == REL && nst[fp - 1] == HELD -> nst[fp - 1] = FREE
#else
		:: fo == ACQ && nst[fp - 1] == CLAIMED && ntag[fp - 1] == fq -> nst[fp - 1] = HELD
		:: fo == REL && nst[fp - 1] == HELD && ntag[fp - 1] == fq -> nst[fp - 1] = FREE
#endif
		:: else -> skip
		fi
	};
	atomic {
		if
		:: SAME(0, fo, fp, cnt, fq) -> pend = 0; INC(seq)
		:: else
		fi
	}
}

inline maybe_die()
{
	if
	:: deaths < MAXDEATH -> deaths++; goto dead
	:: true
	fi
}

proctype client(byte me)
{
	byte i, fc, fq, fp, g, l0, b0, c0, tries;
	bit fs, fo, ok, lf;

	for (i : 1 .. ITER) {
		/* ---- acquire ---- */
		ok = 0;
		lf = 0;
		tries = 0;
		do
		:: tries < 2 ->
			tries++;
			atomic { fs = slow; fo = op; fp = pend; fc = cnt; fq = seq }
			if
			:: fs -> break /* the mutex path */
			:: !fs && fp != 0 -> help(fo, fp, fq) /* then try again */
			:: !fs && fp == 0 && fc >= LIM -> break /* full: the mutex path says */
			:: !fs && fp == 0 && fc < LIM && DIFF(fq, bseq) >= FOLD_AT -> break
				/* count before seq could wrap: the mutex path folds */
			:: !fs && fp == 0 && fc < LIM && DIFF(fq, bseq) < FOLD_AT ->
				/* the token's inputs, read after the word */
				l0 = lidx; b0 = bseq; c0 = bcnt;
				g = l0 + (DIFF(fq, b0) / 2 + fc - c0) / 2 + 1;
				/* claim in flight, tagged with the commit's seq */
				atomic { assert(nst[me] == FREE); nst[me] = CLAIMED; ntag[me] = NEXT(fq) }
				maybe_die();
				atomic {
					if
					:: SAME(0, fo, 0, fc, fq) ->
						op = ACQ; pend = me + 1; cnt++; INC(seq);
						inside++; grants++;
						assert(inside <= LIM);
						assert(g == grants);
						ok = 1; lf = 1
					:: else
					fi
				}
				if
				:: !ok -> nst[me] = FREE /* lost: ours alone, a plain store */
				:: ok -> break
				fi
			fi
		:: else -> break
		od;
		if
		:: ok ->
			maybe_die();
			atomic { if :: nst[me] == CLAIMED && ntag[me] == NEXT(fq) -> nst[me] = HELD
				 :: else fi }
			maybe_die();
			atomic { if :: SAME(0, ACQ, me + 1, fc + 1, NEXT(fq)) -> pend = 0; INC(seq)
				 :: else fi }
		:: !ok ->
			/* the mutex path: a try, not a wait */
			key_lock(me);
			atomic {
				if
				:: listed + cnt < LIM ->
					nst[me] = HOLDING; listed++; lidx++; grants++; inside++;
					assert(inside <= LIM);
					ok = 1
				:: else
				fi
			}
			key_unlock()
		fi;
		if
		:: !ok -> goto next
		:: else
		fi;
		/* ---- release ---- */
		ok = 0;
		if
		:: lf ->
			tries = 0;
			do
			:: tries < 2 ->
				tries++;
				atomic { fs = slow; fo = op; fp = pend; fc = cnt; fq = seq }
				if
				:: fs -> break
				:: !fs && fp != 0 -> help(fo, fp, fq)
				:: !fs && fp == 0 && DIFF(fq, bseq) >= FOLD_AT -> break
				:: !fs && fp == 0 && DIFF(fq, bseq) < FOLD_AT ->
					/* the owner tags its own held node (one 16-byte
					 * CAS in C); it is still HELD unless key_lock()
					 * finished our acquire into it, which it did */
					atomic { assert(nst[me] == HELD); ntag[me] = NEXT(fq) }
					atomic {
						if
						:: SAME(0, fo, 0, fc, fq) ->
							op = REL; pend = me + 1; cnt--; INC(seq);
							inside--; ok = 1
						:: else
						fi
					}
					if
					:: ok -> break
					:: else
					fi
				fi
			:: else -> break
			od
		:: else
		fi;
		if
		:: ok ->
			maybe_die();
			atomic { if :: nst[me] == HELD && ntag[me] == NEXT(fq) -> nst[me] = FREE
				 :: else fi }
			maybe_die();
			atomic { if :: SAME(0, REL, me + 1, fc - 1, NEXT(fq)) -> pend = 0; INC(seq)
				 :: else fi }
		:: !ok ->
			key_lock(me);
			atomic {
				if
				:: nst[me] == HELD -> nst[me] = FREE; cnt--; inside--
				:: nst[me] == HOLDING -> nst[me] = FREE; listed--; inside--
				fi
			}
			key_unlock()
		fi;
next:
		skip
	}
	goto done;
dead:
	/* The broker's sweep of the dead session, whenever it gets to it. */
	key_lock(me);
	atomic {
		if
		:: nst[me] == HELD -> nst[me] = FREE; cnt--; inside--
		:: nst[me] == HOLDING -> nst[me] = FREE; listed--; inside--
		:: nst[me] == CLAIMED -> nst[me] = FREE /* in flight: never counted */
		:: nst[me] == FREE
		fi
	}
	key_unlock();
done:
	skip
}

/* The invariants, in every state. */
active proctype monitor()
{
end:
	do
	:: atomic { !CONSISTENT -> assert(CONSISTENT) }
	od
}

init
{
	byte i;

	atomic {
		for (i : 0 .. P - 1) {
			run client(i)
		}
	}
	_nr_pr == 2; /* the clients are done (monitor and init remain) */
	assert(pend == 0 && cnt == 0 && listed == 0 && inside == 0 && mtx == 0);
	assert(ALLFREE);
	assert(lidx + (DIFF(seq, bseq) / 2 + cnt - bcnt) / 2 == grants)
}
