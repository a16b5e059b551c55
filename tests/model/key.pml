/*
 * SPDX-License-Identifier: MIT
 *
 * A Promela model of shmlock's per-key protocol on one lock key: the
 * lock-free fast path on the fast word (a hold it takes stays FCLAIMED while
 * the word names it, until a mutex holder adopts it as HOLDING; its thread
 * frees an unnamed claim with a plain store), the mutex path (enqueue, FIFO
 * handoff on release, timeout cancellation), client death between any two
 * steps that another process can observe (including with the key mutex
 * held after a handoff, which leaves it EOWNERDEAD), the broker's sweep of
 * a dead client's session, its repair of a dead mutex, and the lock-delay
 * timer. docs/reliability.md maps every step to libshm/ and broker/, and
 * says what is left out.
 *
 * Checked by tests/model/check.sh (make model): assertions for mutual
 * exclusion, FIFO order, no barging and a consistent fast word; that a
 * plain-store free only ever frees the freeing client's own unnamed claim;
 * that a commit names its own claim and no hold outlives a completed sweep;
 * a final monitor for "everything comes back"; spin's invalid-end-state
 * check for deadlock and lost wake-ups (a waiter without a deadline left
 * asleep is a terminal state with a process outside an end label); and
 * probes that every scenario above is reached.
 *
 * Options (spin -D...):
 *   EXPIRY          instead of a death, client 0's session TTL expires once
 *                   while it runs on (a sweep of a live process: the fast
 *                   path's FAST_CLAIMED rule); with three clients it
 *                   outgrows 8 GiB: check.sh runs it with KEEP (two)
 *   BUG_LOST_DELAY  the sweep visits a session's hold nodes before its
 *                   waiter node, as it did before its fix, and the model
 *                   checks the documented rule that a hold handed to a
 *                   waiter that died before taking it up is returned
 *                   without lock-delay (fails)
 *   BUG_SWEEP_NO_WAKE_GRANTED  the sweep frees a GRANTED node without waking
 *                   it (a live sleeper, its granter dead before its wake,
 *                   then sleeps for ever: with -DEXPIRY -DMAXDEATH=1)
 *   BUG_NO_WAKE_GRANTED  leaves out the broker's segment_wake_granted():
 *                   a releaser killed between its unlock and its wake-up
 *                   call then strands its waiter (fails: a lost wake-up)
 *   BUG_NODE_REUSE  lets a granted waiter re-claim its freed node (for
 *                   another key, as its hint makes likely) and checks that
 *                   the granter is done with it (fails: open product bug)
 *   KEEP            a key handle's node: client 0's lock-free release (or
 *                   lost commit) may keep the node in flight instead of
 *                   freeing it, and its next lock-free acquire takes it
 *                   back with no CAS and a session check that may read a
 *                   stale ACTIVE; when it keeps one, it acquires once more
 *   BUG_FREE_KEPT   (with KEEP and EXPIRY) the sweep frees the node a live
 *                   process keeps instead of waiting for it (fails: a
 *                   plain store frees a node the sweep freed)
 *
 * Sizes: N = 3 clients, ITER acquisitions each (1; client 0 one more when
 * it keeps a node), MAXDEATH deaths (1).
 * Memory is sequentially consistent here; see docs/reliability.md.
 */

#define N 3
/* clients that run: N, or with KEEP 2 (its search grows beyond 8 GiB with 3) */
#ifndef CLIENTS
#ifdef KEEP
#define CLIENTS 2
#else
#define CLIENTS N
#endif
#endif
#ifndef ITER
#define ITER 1
#endif
#ifdef EXPIRY
#ifndef MAXDEATH
#define MAXDEATH 0 /* the expiry instead of a death keeps the search small */
#endif
#endif
#ifndef MAXDEATH
#define MAXDEATH 1
#endif

#define NONE 255
#define BROKER N

/* With KEEP, client KEEPER locks through a key handle (the others by name,
 * which keep nothing), and the hold nodes are one more than the clients:
 * it may keep one while another holds the key. */
#define KEEPER 0
#ifdef KEEP
#define NH (N + 1)
#else
#define NH N
#endif

/* node states: NODE_* in libshm/segment.h; OTHER: re-claimed for another key */
#define FREE 0
#define CLAIMED 1
#define WAITING 2
#define GRANTED 3
#define HOLDING 4
#define FCLAIMED 6
#define OTHER 7

/* a waiter node's futex word: NODE_FUTEX_* */
#define IDLE 0
#define PARKED 1
#define WOKEN 2

/* session slot states: SESS_* */
#define S_FREE 0
#define S_ACTIVE 1
#define S_CLOSING 2

/* k->delay_until_ns: 0, a deadline still ahead, a deadline passed */
#define D_NONE 0
#define D_RUNNING 1
#define D_PASSED 2

/* acquire modes: timeout_ms 0, > 0, < 0 */
#define TRY 0
#define TIMED 1
#define FOREVER 2

/* results of a mutex-path step */
#define R_GRANTED 1
#define R_QUEUED 2
#define R_BUSY 3
#define R_TIMEDOUT 4
#define R_SESSION 5
#define R_NOTHELD 6

/* ---- shared state ------------------------------------------------------- */

byte mutex;   /* the key's lock word (lockword.h): 0 free, else owner + 1 */
bool fslow;   /* fast word: FAST_SLOW */
byte fholder; /* fast word: holder node + 1; 0 free */
/* The fast word's seq makes a CAS fail after any store since the read:
 * snap[p] says "no store to the fast word since p read it". */
bool snap[N];

/* Hold nodes [0, NH) (any owner), and one waiter node per client (the one
 * its hint gives back), placed after the hold nodes in the node table. */
byte hstate[NH], howner[NH];
byte wstate[N], wseq[N], whold[N], wnext[N], wprev[N], wfutex[N];

/* The key entry: lists and counters (a cache of the nodes). */
byte qhead = NONE, qtail = NONE, hhead = NONE;
byte holders, waiters, next_seq;
byte delay = D_NONE;
bool timer_armed;

byte sess[N];
bool lock_delay[N]; /* the session's lock_delay_ms > 0 */
bool dead[N], swept[N];
bool mdead[N + 2]; /* by mutex owner + 1: dead[] for clients, never the broker */
byte deaths;
bool expired, resweep;
#ifdef KEEP
/* h->kept: the node client p's key handle keeps in flight between holds,
 * from its keep until the commit that takes it back (NONE: none) */
byte kept[N];

/* A node a key handle keeps is its process's alone: nobody else frees or
 * claims it. BUG_FREE_KEPT does not assert it, to let the search go on to
 * what the C code then does. */
#ifdef BUG_FREE_KEPT
#define KEPT_UNTOUCHED(x) skip
#else
#define KEPT_UNTOUCHED(x) assert(hstate[x] == FCLAIMED && howner[x] == p)
#endif
#endif

/* ghosts: valid holders inside the critical section; clients done */
byte incs;
bool in_cs[N];
byte finished;

/* Reachability probes: every scenario the model claims to cover must
 * happen in it. tests/model/check.sh reads that off the exhaustive search
 * (pan's list of unreached statements must leave out a copy of each
 * REACH(n)); by hand, $PROBE=n makes the search fail at the first REACH(n),
 * with a trail that shows how the scenario comes about. 0: no probe. */
byte probe;
#define REACH(n) assert(probe != n)

/* A death costs one of MAXDEATH; the process just stops. */
#define DIE_POINT if :: atomic { deaths < MAXDEATH -> deaths++; goto die } :: true -> skip fi

/* ---- helpers ------------------------------------------------------------ */

inline invalidate()
{
	snap[0] = 0;
	snap[1] = 0;
	snap[2] = 0
}

/* Every store to the fast word bumps its seq. */
inline fast_store(s, h)
{
	fslow = s;
	fholder = h;
	invalidate()
}

/* Freeing a node also forgets its private fields, so that states that
 * differ only in dead data are one state. */
inline hfree(x)
{
	hstate[x] = FREE;
	howner[x] = NONE
}

inline wfree(x)
{
	wstate[x] = FREE;
	whold[x] = NONE;
	wseq[x] = 0
}

/* waiter_wake(): exchange(futex, WOKEN), FUTEX_WAKE if it was PARKED (the
 * sleeper's guard below sees the new value). */
inline waiter_wake(w)
{
	wfutex[w] = WOKEN
}

/* key_repair_locked() after EOWNERDEAD, for the one way the model leaves
 * a dead mutex (a releaser dead after its handoff, before its unlock): the
 * lists are whole, and repair wakes every GRANTED waiter, "the granter may
 * have died before its wake-up call". */
inline repair_body()
{
	REACH(12);
	if :: wstate[0] == GRANTED -> waiter_wake(0) :: else -> skip fi;
	if :: wstate[1] == GRANTED -> waiter_wake(1) :: else -> skip fi;
	if :: wstate[2] == GRANTED -> waiter_wake(2) :: else -> skip fi
}

/* lw_lock(): free, or its owner dead (LW_RECOVER: then repair) -- the guard of
 * an atomic block; then key_lock()'s enter_slow(), adopt_fast_hold_locked()
 * (the hold the word names, if still FCLAIMED, becomes HOLDING) and
 * sync_fast_holder_locked(). A fast word naming a node that is not a hold
 * would send C to repair: the protocol must never get there. */
#define MUTEX_FREE (mutex == 0 || mdead[mutex])
inline key_lock_body(me)
{
	if :: mutex != 0 -> repair_body() :: else -> skip fi;
	mutex = me + 1;
	fast_store(1, fholder);
	if
	:: fholder != 0 && hstate[fholder - 1] == FCLAIMED ->
		hstate[fholder - 1] = HOLDING;
		REACH(14)
	:: else -> skip
	fi;
	assert(fholder == 0 || hstate[fholder - 1] == HOLDING);
	if
	:: fholder == 0 -> hhead = NONE; holders = 0
	:: else -> hhead = fholder - 1; holders = 1
	fi
}

/* key_unlock(): back to the fast path when fast_eligible(). */
inline key_unlock_body()
{
	if
	:: qhead == NONE && delay == D_NONE && holders <= 1 -> fast_store(0, fholder)
	:: else -> skip
	fi;
	mutex = 0;
	ok = 0 /* a dead local: forget it */
}

/* delay_over_locked(): clears a passed deadline. */
inline delay_over(r)
{
	if
	:: delay == D_NONE -> r = 1
	:: delay == D_RUNNING -> r = 0
	:: delay == D_PASSED -> delay = D_NONE; r = 1
	fi
}

/* node_claim_as() on the hold table: the first free node. */
inline claim_hold(h, who, state)
{
	h = 0;
	do
	:: h < NH && hstate[h] != FREE -> h++
	:: h < NH && hstate[h] == FREE -> hstate[h] = state; howner[h] = who; break
	:: h == NH -> assert(false) /* NH hold nodes always suffice here */
	od
}

inline no_waiting_node()
{
	assert(wstate[0] != WAITING && wstate[1] != WAITING && wstate[2] != WAITING)
}

/* FIFO: the waiter granted is the earliest of those waiting. */
inline fifo_check(w)
{
	assert(wstate[0] != WAITING || 0 == w || wseq[w] < wseq[0]);
	assert(wstate[1] != WAITING || 1 == w || wseq[w] < wseq[1]);
	assert(wstate[2] != WAITING || 2 == w || wseq[w] < wseq[2])
}

inline queue_unlink(n)
{
	if
	:: wprev[n] != NONE -> wnext[wprev[n]] = wnext[n]
	:: else -> if :: qhead == n -> qhead = wnext[n] :: else -> skip fi
	fi;
	if
	:: wnext[n] != NONE -> wprev[wnext[n]] = wprev[n]
	:: else -> if :: qtail == n -> qtail = wprev[n] :: else -> skip fi
	fi;
	wnext[n] = NONE;
	wprev[n] = NONE
}

/* grant_waiter_locked(), first half: the hold moves in place, the waiter
 * is GRANTED (the waiter may see it at once; the granter holds the mutex). */
inline grant_waiter_1(w, h)
{
	fifo_check(w);
	whold[w] = h;
	hstate[h] = HOLDING;
	howner[h] = w;
	fast_store(1, h + 1);
	wstate[w] = GRANTED
}

/* ... second half: unlink the waiter and count. */
inline grant_waiter_2(w)
{
#ifdef BUG_NODE_REUSE
	/* The node must still be the granted one when it is unlinked. */
	assert(wstate[w] != OTHER);
#endif
	queue_unlink(w);
	waiters--
}

/* ---- a client ----------------------------------------------------------- */

proctype client(byte p)
{
	byte it, mode, h = NONE, w = NONE, r;
	bool ok, fc;

next:
	if
#ifdef KEEP
	/* a node kept: one more acquisition, to take it back */
	:: it >= ITER && (it > ITER || kept[p] == NONE) -> goto finish
#else
	:: it == ITER -> goto finish
#endif
	:: else -> it++
	fi;
	if
	:: mode = TRY
	:: mode = TIMED
	:: mode = FOREVER
	fi;

	/* ---- fast_acquire() (fastpath.c) ---- */
	atomic {
		if
		:: fslow -> goto slowpath /* FAST_MISS */
		:: !fslow && fholder != 0 && mode == TRY -> goto next /* -EBUSY */
		:: !fslow && fholder != 0 && mode != TRY -> goto slowpath /* FAST_MISS */
		:: !fslow && fholder == 0 -> snap[p] = 1
		fi
	}
#ifdef KEEP
	/* take_kept(): the node the handle keeps, if its word is still
	 * FAST_CLAIMED for our session and key (plain loads), taken back with
	 * plain stores: no CAS. Else node_claim_as(). */
	atomic {
		if
		:: kept[p] != NONE && hstate[kept[p]] == FCLAIMED && howner[kept[p]] == p -> h = kept[p]
		:: kept[p] != NONE && !(hstate[kept[p]] == FCLAIMED && howner[kept[p]] == p) ->
			KEPT_UNTOUCHED(kept[p]);
			kept[p] = NONE; /* kept_lost() */
			claim_hold(h, p, FCLAIMED)
		:: kept[p] == NONE -> claim_hold(h, p, FCLAIMED)
		fi
	}
#else
	atomic { claim_hold(h, p, FCLAIMED) }
#endif
	DIE_POINT; /* FAST_ACQ_CLAIMED, FAST_ACQ_TAKEN */
#ifdef EXPIRY
	/* session_is() after the claim; free_in_flight(): a plain store */
	if
	:: sess[p] != S_ACTIVE ->
		atomic {
			assert(hstate[h] == FCLAIMED && howner[h] == p);
			hfree(h);
#ifdef KEEP
			if :: kept[p] == h -> kept[p] = NONE :: else -> skip fi; /* kept_freed() */
#endif
			h = NONE
		};
		goto ended
	:: else -> skip
#ifdef KEEP
	/* After a take-back the check is a plain load with no barrier before
	 * it: it may read the session as it was before the take, ACTIVE. */
	:: kept[p] == h -> skip
#endif
	fi;
#endif
	/* The commit: the CAS of the fast word names the node, still FCLAIMED;
	 * never for a session whose sweep is complete */
	atomic {
		if
		:: snap[p] ->
			assert(hstate[h] == FCLAIMED && howner[h] == p && sess[p] != S_FREE);
#ifdef KEEP
			if
			:: kept[p] == h ->
				REACH(16); /* taken back */
				if :: sess[p] != S_ACTIVE -> REACH(17) :: else -> skip fi;
				kept[p] = NONE /* the hold now (h->kept_busy) */
			:: else -> skip
			fi;
#endif
			fast_store(0, h + 1);
			no_waiting_node(); /* no barging */
			goto incs_enter
		:: else -> skip
		fi
	}
	/* CAS lost: put_in_flight(): the handle keeps the node (always its own
	 * node; a new one if it can), else free_in_flight(), a plain store:
	 * the claim is ours alone */
	REACH(1);
	atomic {
#ifdef KEEP
		if
		:: kept[p] == h -> KEPT_UNTOUCHED(h) /* its own: kept, as is */
		:: kept[p] != h ->
			assert(hstate[h] == FCLAIMED && howner[h] == p);
			if :: p == KEEPER -> kept[p] = h :: hfree(h) fi
		fi;
#else
		assert(hstate[h] == FCLAIMED && howner[h] == p);
		hfree(h);
#endif
		h = NONE
	};

	/* ---- mutex path: key_acquire_locked() (keyops.c) ---- */
slowpath:
	atomic {
		MUTEX_FREE ->
		key_lock_body(p);
		if
		:: sess[p] != S_ACTIVE -> r = R_SESSION
		:: else ->
			delay_over(ok);
			if
			:: holders < 1 && qhead == NONE && ok ->
				/* grant_uncontended_locked() */
				claim_hold(h, p, CLAIMED);
				hstate[h] = HOLDING;
				hhead = h;
				fast_store(1, h + 1);
				holders++;
				no_waiting_node();
				r = R_GRANTED
			:: else ->
				if
				:: mode == TRY -> r = R_BUSY
				:: else ->
					/* enqueue_locked() */
					wseq[p] = next_seq;
					next_seq++;
					whold[p] = NONE;
					wfutex[p] = IDLE;
					wnext[p] = NONE;
					wprev[p] = qtail;
					wstate[p] = WAITING;
					if
					:: qtail != NONE -> wnext[qtail] = p
					:: else -> qhead = p
					fi;
					qtail = p;
					waiters++;
					r = R_QUEUED
				fi
			fi
		fi;
		key_unlock_body()
	}
	atomic {
		if
		:: r == R_GRANTED -> r = 0; goto incs_enter
		:: r == R_BUSY -> r = 0; goto next
		:: r == R_SESSION -> r = 0; goto ended
		:: else -> r = 0
		fi
	}

	/* ---- waiter_wait() ---- */
waitloop:
	DIE_POINT; /* ENQ_PARKED, or asleep */
	if
	:: wstate[p] != WAITING -> goto woke
	:: else -> skip
	fi;
	wfutex[p] = PARKED;
	if
	:: wstate[p] != WAITING -> goto waitloop
	:: else -> skip
	fi;
	/* FUTEX_WAIT while the word is PARKED; a deadline may end it */
	if
	:: wfutex[p] != PARKED -> goto waitloop
	:: mode == TIMED -> goto cancel
	fi;
woke:
	if
	:: wstate[p] == GRANTED && wfutex[p] == WOKEN -> REACH(8) /* parked, then handed over */
	:: wstate[p] == GRANTED && wfutex[p] != WOKEN -> skip
	:: else -> goto ended /* -LOCAL_ESESSION */
	fi;
	DIE_POINT; /* GRANTED_CONSUMED */
	/* consume_grant(): CAS GRANTED -> 0, else the session ended */
	atomic {
		h = whold[p];
		if
		:: wstate[p] == GRANTED -> wfree(p)
		:: else -> h = NONE; goto ended
		fi
	}
#ifdef BUG_NODE_REUSE
	/* The freed node is the one this session claims next (its hint), say
	 * for an enqueue on another key, which writes the node's links. */
	atomic { if :: wstate[p] == FREE -> wstate[p] = OTHER; wprev[p] = NONE; wnext[p] = NONE :: else -> skip fi }
#endif
	goto incs_enter;

	/* ---- cancel_wait() ---- */
cancel:
	atomic {
		MUTEX_FREE ->
		key_lock_body(p);
		if
		:: wstate[p] == GRANTED -> h = whold[p]; wfree(p); r = R_GRANTED
		:: wstate[p] == WAITING ->
			queue_unlink(p);
			wfree(p);
			waiters--;
			r = R_TIMEDOUT
		:: else -> r = R_SESSION
		fi;
		key_unlock_body()
	}
	atomic {
		if
		:: r == R_GRANTED -> REACH(4); r = 0; goto incs_enter
		:: r == R_TIMEDOUT -> REACH(7); r = 0; goto next
		:: else -> r = 0; goto ended
		fi
	}

	/* ---- the critical section ---- */
incs_enter:
	atomic {
		/* A session that ended holds nothing, whatever the call said
		 * (as after a lease expiry): only valid holders count. */
		if
		:: sess[p] == S_ACTIVE ->
			assert(h != NONE && fholder == h + 1 && howner[h] == p &&
			       (hstate[h] == HOLDING || hstate[h] == FCLAIMED));
			incs++;
			in_cs[p] = 1;
			assert(incs <= 1)
		:: else -> skip
		fi
	}
	DIE_POINT; /* a holder dies */

	/* ---- leave; fast_release(): find() and ours() ---- */
	atomic {
		if :: in_cs[p] -> incs--; in_cs[p] = 0 :: else -> skip fi;
		if
		:: h != NONE && !fslow && fholder == h + 1 && howner[h] == p &&
		   (hstate[h] == HOLDING || hstate[h] == FCLAIMED) ->
			snap[p] = 1;
			fc = hstate[h] == FCLAIMED
		:: else -> goto relslow
		fi
	}
	atomic {
		if
		:: snap[p] -> fast_store(0, 0)
		:: else -> REACH(10); fc = 0; goto relslow
		fi
	}
	DIE_POINT; /* FAST_REL_PUBLISHED */
	/* Still FCLAIMED, as ours() saw it: unnamed, ours alone, a plain
	 * store frees it (or the key handle keeps it in flight:
	 * put_in_flight()). Adopted (HOLDING) meanwhile: a CAS, against the
	 * sweep, which frees unnamed holds. */
	atomic {
		if
		:: fc ->
			assert(hstate[h] == FCLAIMED && howner[h] == p);
#ifdef KEEP
			assert(kept[p] == NONE);
			if :: p == KEEPER -> kept[p] = h :: hfree(h) fi
#else
			hfree(h)
#endif
		:: else ->
			REACH(15);
			if :: hstate[h] == HOLDING && howner[h] == p -> hfree(h) :: else -> skip fi
		fi;
		h = NONE;
		fc = 0
	};
#ifdef KEEP
	if :: kept[p] != NONE -> DIE_POINT :: else -> skip fi; /* killed while it keeps one */
#endif
	goto next;

	/* ---- release_slow(): key_release_hold_locked(), wake, unlock ---- */
relslow:
	atomic {
		MUTEX_FREE ->
		key_lock_body(p);
		if
		:: hhead != NONE && hstate[hhead] == HOLDING && howner[hhead] == p -> h = hhead; w = qhead;
			delay_over(ok);
			if
			:: w != NONE && ok && wstate[w] == WAITING -> grant_waiter_1(w, h); r = R_GRANTED
			:: else ->
				fast_store(1, 0);
				hhead = NONE;
				hfree(h);
				holders--;
				w = NONE;
				r = R_BUSY;
				key_unlock_body()
			fi
		:: else -> w = NONE; r = R_NOTHELD; key_unlock_body()
		fi;
		h = NONE
	}
	if
	:: r == R_GRANTED ->
		atomic { r = 0; grant_waiter_2(w) }
		DIE_POINT; /* handed over, mutex held, waiter not woken */
		atomic { key_unlock_body() }
		/* HANDOFF_UNLOCKED: the wake follows the unlock (issue 13); a
		 * death here leaves no dead mutex: the broker's
		 * segment_wake_granted() wakes the waiter (wake_granted). */
		DIE_POINT;
		atomic { waiter_wake(w); w = NONE }
	:: r == R_NOTHELD -> atomic { assert(sess[p] != S_ACTIVE); r = 0 } /* lost only with the session */
	:: r == R_BUSY -> r = 0
	fi;
	goto next;

ended:
	/* -LOCAL_ESESSION: only a session that ended says so */
	assert(sess[p] != S_ACTIVE);
finish:
	atomic {
		if :: in_cs[p] -> incs--; in_cs[p] = 0 :: else -> skip fi;
#ifdef KEEP
		/* local_key_close(): fast_key_unpark() frees the node kept, still
		 * in flight and ours: a plain store */
		if
		:: kept[p] != NONE ->
			KEPT_UNTOUCHED(kept[p]);
			if
			:: hstate[kept[p]] == FCLAIMED && howner[kept[p]] == p -> hfree(kept[p])
			:: else -> skip /* free_if_in_flight(): no longer ours */
			fi;
			kept[p] = NONE
		:: else -> skip
		fi;
#endif
		finished++;
		mode = 0;
		h = NONE
	}
	goto out;
die:
	/* SIGKILL: the kernel's robust list leaves a held mutex EOWNERDEAD */
	atomic {
		dead[p] = 1;
		mdead[p + 1] = 1;
		if :: in_cs[p] -> incs--; in_cs[p] = 0 :: else -> skip fi;
		finished++;
		mode = 0;
		r = 0;
		fc = 0
	}
out:
	skip
}

/* ---- the broker ------------------------------------------------------------ */

/* key_grant_pending_locked(): while the key has room and no lock-delay.
 * For a lock this grants at most one. */
inline grant_pending(w, h, ok)
{
	delay_over(ok);
	if
	:: holders < 1 && qhead != NONE && ok && wstate[qhead] == WAITING ->
		w = qhead;
		claim_hold(h, w, CLAIMED);
		hhead = h;
		holders++;
		grant_waiter_1(w, h)
	:: else -> w = NONE
	fi
}

/* key_release_hold_locked(h) by the broker: hand over, or free the key. */
inline broker_release(h, w, ok)
{
	w = qhead;
	delay_over(ok);
	if
	:: w != NONE && ok && wstate[w] == WAITING -> grant_waiter_1(w, h)
	:: else ->
		w = NONE;
		fast_store(1, 0);
		hhead = NONE;
		hfree(h);
		holders--
	fi
}

/* The rest of a sweep step after sweep_node_locked(): finish a handoff it
 * began, grant what can be granted, arm the lock-delay timer, wake, then
 * unlock (sessions.c: sweep()). */
inline sweep_tail(w, h, ok, wake)
{
	if
	:: w != NONE -> atomic { grant_waiter_2(w) }; wake = w
	:: else -> skip
	fi;
	atomic {
		grant_pending(w, h, ok);
		if :: w != NONE -> REACH(9) :: else -> skip fi;
		if :: delay == D_RUNNING -> timer_armed = 1 :: else -> skip fi
	}
	if
	:: w != NONE -> atomic { grant_waiter_2(w) }
	:: else -> skip
	fi;
	if :: wake != NONE -> waiter_wake(wake) :: else -> skip fi;
	if :: w != NONE -> waiter_wake(w) :: else -> skip fi;
	atomic { key_unlock_body() }
}

/* A FAST_CLAIMED node (unnamed: key_lock_body() adopted a named one) of
 * a live process is in flight: its thread's. BUG_FREE_KEPT: except the one
 * its key handle keeps. */
#ifdef BUG_FREE_KEPT
#define IN_FLIGHT(p, i) (hstate[i] == FCLAIMED && !dead[p] && kept[p] != i)
#else
#define IN_FLIGHT(p, i) (hstate[i] == FCLAIMED && !dead[p])
#endif

/* The sweep completes: no hold of the session is left, named by the fast
 * word or listed. */
inline swept_clean(p, i)
{
	assert(fholder == 0 || howner[fholder - 1] != p);
	i = 0;
	do
	:: i < NH -> assert(!(hstate[i] == HOLDING && howner[i] == p)); i++
	:: else -> break
	od;
	i = 0
}

/* The sweep's visit of @p's hold nodes, in index order. */
inline sweep_holds(p, lost, i, w, h, ok, wake, mine, busy)
{
	i = 0;
	do
	:: i < NH ->
		if
		:: hstate[i] != FREE && howner[i] == p ->
			atomic {
				MUTEX_FREE ->
				key_lock_body(BROKER);
				wake = NONE;
				w = NONE;
				mine = hstate[i] != FREE && howner[i] == p;
				if
				:: mine && hstate[i] == HOLDING && hhead == i ->
					/* REL_SESSION_END | REL_LOST */
					if
					:: lost && lock_delay[p] ->
#ifdef BUG_LOST_DELAY
						/* documented: no lock-delay for a hold handed to a
						 * waiter that never took it up */
						assert(!(wstate[p] == GRANTED && whold[p] == i));
#endif
						delay = D_RUNNING
					:: else -> skip
					fi;
					broker_release(i, w, ok);
					if :: w != NONE -> REACH(2) :: else -> skip fi
				:: mine && IN_FLIGHT(p, i) ->
					busy = 1; /* creator_alive(): its thread frees it */
#ifdef KEEP
					if :: kept[p] == i -> REACH(18) :: else -> skip fi
#else
					skip
#endif
				:: mine && !(hstate[i] == HOLDING && hhead == i) && !IN_FLIGHT(p, i) ->
					hfree(i); /* a dead claim, or a hold the fast word does not name */
					REACH(11);
#ifdef KEEP
					/* a dead process's kept node (its ghost forgotten) */
					if :: kept[p] == i && dead[p] -> REACH(19); kept[p] = NONE :: else -> skip fi
#else
					skip
#endif
				:: else -> skip
				fi
			}
			if
			:: mine -> sweep_tail(w, h, ok, wake)
			:: else -> atomic { key_unlock_body() }
			fi
		:: else -> skip
		fi;
		i++
	:: else -> break
	od
}

/* ... and of its waiter node. */
inline sweep_waiter(p, lost, i, w, h, ok, wake, mine, busy)
{
	if
	:: wstate[p] == WAITING || wstate[p] == GRANTED ->
		atomic {
			MUTEX_FREE ->
			key_lock_body(BROKER);
			wake = NONE;
			w = NONE;
			mine = wstate[p] == WAITING || wstate[p] == GRANTED;
			if
			:: wstate[p] == WAITING ->
				queue_unlink(p);
				wfree(p);
				waiters--;
				wake = p; /* a thread of a closing session may sleep there */
				REACH(5)
			:: wstate[p] == GRANTED ->
				/* handed a hold it never took up: back without lock-delay */
				REACH(6);
				h = whold[p];
				if
				:: hstate[h] == HOLDING && howner[h] == p -> broker_release(h, w, ok)
				:: else -> skip
				fi;
				wfree(p);
#ifndef BUG_SWEEP_NO_WAKE_GRANTED
				/* its thread may sleep there, its granter dead
				 * before the wake: the broker's wake of granted
				 * nodes finds this one freed */
				wake = p;
#endif
				skip
			:: else -> skip
			fi
		}
		if
		:: mine -> sweep_tail(w, h, ok, wake)
		:: else -> atomic { key_unlock_body() }
		fi
	:: else -> skip
	fi
}

/* The sweep of session @p (sessions.c: sweep()): CLOSING first, then each
 * node of the session, its waiter node first, then its hold nodes in index
 * order (BUG_LOST_DELAY: the other way round, as before the fix), each
 * read without the lock, then re-read and handled under the key mutex
 * (sweep_node_locked()); lock-delay applies when @lost. A FAST_CLAIMED
 * node of a live process is left to its thread and the sweep is retried
 * later, the session staying CLOSING. A node a key handle keeps is such a
 * node, from its first claim to its free. */
inline sweep(p, lost, i, w, h, ok, wake, mine, busy)
{
	sess[p] = S_CLOSING;
#ifdef BUG_LOST_DELAY
	sweep_holds(p, lost, i, w, h, ok, wake, mine, busy);
	sweep_waiter(p, lost, i, w, h, ok, wake, mine, busy);
#else
	sweep_waiter(p, lost, i, w, h, ok, wake, mine, busy);
	sweep_holds(p, lost, i, w, h, ok, wake, mine, busy);
#endif
	atomic {
		if
		:: busy -> resweep = 1 /* broker_schedule(TIMER_SWEEP) */
		:: else -> swept_clean(p, i); resweep = 0; sess[p] = S_FREE
		fi
	}
}

/* segment_wake_granted(), in repair_dead_mutexes(): wake every GRANTED
 * waiter still asleep (its releaser died between its unlock and its wake).
 * The state is read, then a CAS from PARKED: two steps, as in C. */
inline wake_granted_1(x)
{
	if
	:: wstate[x] == GRANTED -> atomic { if :: wfutex[x] == PARKED -> waiter_wake(x) :: else -> skip fi }
	:: else -> skip
	fi
}

inline wake_granted()
{
	wake_granted_1(0);
	wake_granted_1(1);
	wake_granted_1(2)
}

/* repair_dead_mutexes() after a death: lock a mutex whose owner died. */
inline repair_dead(w, h, ok)
{
	atomic {
		if
		:: mutex != 0 && mdead[mutex] ->
			key_lock_body(BROKER);
			grant_pending(w, h, ok)
		:: else -> w = NONE
		fi
	}
	if
	:: mutex == BROKER + 1 ->
		if :: w != NONE -> atomic { grant_waiter_2(w) }; waiter_wake(w) :: else -> skip fi;
		atomic { key_unlock_body() }
	:: else -> skip
	fi;
#ifndef BUG_NO_WAKE_GRANTED
	wake_granted()
#else
	skip
#endif
}

/* A live session's TTL runs out: CLOSING at once (its holds are lost from
 * here on), then the sweep. */
inline expire(q)
{
	expired = 1;
	p = q;
	lost = 1;
	sess[q] = S_CLOSING;
	if :: in_cs[q] -> incs--; in_cs[q] = 0 :: else -> skip fi
}

/* Dead locals are reset so that they do not split states. */
inline forget()
{
	p = 0;
	lost = 0;
	i = 0;
	w = NONE;
	h = NONE;
	wake = NONE;
	mine = 0;
	busy = 0
}

proctype broker()
{
	byte p, i, w = NONE, h = NONE, wake = NONE;
	bool ok, lost, mine, busy;

end_idle:
	do
	:: atomic { dead[0] && !swept[0] -> p = 0; lost = 1 } ->
		sweep(p, lost, i, w, h, ok, wake, mine, busy);
		repair_dead(w, h, ok);
		atomic { swept[p] = 1; forget() }
	:: atomic { dead[1] && !swept[1] -> p = 1; lost = 1 } ->
		sweep(p, lost, i, w, h, ok, wake, mine, busy);
		repair_dead(w, h, ok);
		atomic { swept[p] = 1; forget() }
	:: atomic { dead[2] && !swept[2] -> p = 2; lost = 1 } ->
		sweep(p, lost, i, w, h, ok, wake, mine, busy);
		repair_dead(w, h, ok);
		atomic { swept[p] = 1; forget() }
#ifdef EXPIRY
	/* client 0's session TTL runs out (once) while it runs on */
	:: atomic { !expired && sess[0] == S_ACTIVE -> expire(0) } ->
		sweep(p, lost, i, w, h, ok, wake, mine, busy);
		atomic { forget() }
	/* TIMER_SWEEP: retry a sweep a FAST_CLAIMED node held up */
	:: atomic { resweep -> p = 0; lost = 1 } ->
		REACH(13);
		sweep(p, lost, i, w, h, ok, wake, mine, busy);
		atomic { forget() }
#endif
	/* key_delay_due(): the lock-delay timer */
	:: atomic { timer_armed && delay != D_RUNNING && MUTEX_FREE ->
		timer_armed = 0;
		key_lock_body(BROKER);
		grant_pending(w, h, ok)
	   }
	   if
	   :: w != NONE -> atomic { grant_waiter_2(w) }; REACH(3); waiter_wake(w)
	   :: else -> skip
	   fi;
	   atomic { key_unlock_body(); forget() }
	od
}

/* The clock: a lock-delay deadline passes at some moment. */
proctype clock()
{
end_tick:
	do
	:: atomic { delay == D_RUNNING -> delay = D_PASSED }
	od
}

/* When every client is done and the broker has swept the dead: nothing
 * is left behind (capacity returns to its starting value). */
proctype monitor()
{
	atomic {
		finished == N && mutex == 0 && (!dead[0] || swept[0]) && (!dead[1] || swept[1]) &&
		(!dead[2] || swept[2]) && !resweep && !(timer_armed && delay != D_RUNNING) ->
		assert(incs == 0);
		assert(qhead == NONE && qtail == NONE && waiters == 0);
		assert(fholder == 0);
		assert(hstate[0] == FREE && hstate[1] == FREE && hstate[2] == FREE);
#ifdef KEEP
		assert(hstate[3] == FREE);
		assert(kept[0] == NONE && kept[1] == NONE && kept[2] == NONE);
#endif
		assert(wstate[0] != WAITING && wstate[1] != WAITING && wstate[2] != WAITING);
		assert(wstate[0] != GRANTED && wstate[1] != GRANTED && wstate[2] != GRANTED)
	}
}

init
{
	c_code { now.probe = getenv("PROBE") ? atoi(getenv("PROBE")) : 0; };
	atomic {
		sess[0] = S_ACTIVE;
		sess[1] = S_ACTIVE;
		sess[2] = S_ACTIVE;
		lock_delay[0] = 1; /* one session with a lock-delay, two without */
		wnext[0] = NONE; wnext[1] = NONE; wnext[2] = NONE;
		wprev[0] = NONE; wprev[1] = NONE; wprev[2] = NONE;
		whold[0] = NONE; whold[1] = NONE; whold[2] = NONE;
		howner[0] = NONE; howner[1] = NONE; howner[2] = NONE;
#ifdef KEEP
		howner[3] = NONE;
		kept[0] = NONE; kept[1] = NONE; kept[2] = NONE;
#endif
		run broker();
		run clock();
		run monitor();
		run client(0);
		run client(1);
		if
		:: CLIENTS > 2 -> run client(2)
		:: else -> finished++ /* done before it began */
		fi
	}
}
