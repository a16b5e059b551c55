// SPDX-License-Identifier: MIT
#include <stdio.h>

#include "invariants.h"

unsigned live_sessions(local_session *s)
{
	unsigned i, n = 0;

	for (i = 0; i < s->seg->caps.max_sessions; i++)
		if (SESS_STATE(atomic_load(&s->seg->sessions[i].state_gen)) != SESS_FREE)
			n++;
	return n;
}

unsigned used_nodes(local_session *s)
{
	unsigned i, n = 0;

	for (i = 0; i < s->seg->nnodes; i++)
		if (atomic_load(&s->seg->nodes[i].word))
			n++;
	return n;
}

#define VIOLATION(...)                                          \
	do {                                                    \
		fprintf(stderr, "    invariant: " __VA_ARGS__); \
		fputc('\n', stderr);                            \
		bad++;                                          \
	} while (0)

static int check_key(struct segment *seg, uint32_t ki)
{
	struct seg_key *k = &seg->keys[ki];
	uint32_t holding = 0, waiting = 0, watching = 0, i, n, prev;
	uint64_t last_seq = 0, counter;
	int bad = 0, err;

	err = key_lock(seg, k);
	if (err) {
		VIOLATION("key %u: cannot lock: %s", ki, local_strerror(err));
		return bad;
	}
	for (i = 0; i < seg->nnodes; i++) {
		uint64_t w = atomic_load(&seg->nodes[i].word);
		const struct seg_session *ss;

		if (!w || NODE_KEY(w) != ki)
			continue;
		switch (NODE_STATE(w)) {
		case NODE_HOLDING:
			holding++;
			break;
		case NODE_WAITING:
			waiting++;
			break;
		case NODE_GRANTED:
			break;
		case NODE_WATCHING:
			watching++;
			break;
		case NODE_FAST_CLAIMED:
			/* Under the mutex (key_lock() adopted the named ones), an
			 * operation in flight, or a key handle's kept node: only
			 * while its session's process may still free it. */
			ss = seg_session_at(seg, NODE_SESSION(w));
			if (!ss || (atomic_load(&ss->state_gen) !=
					    SESS_PACK(SESS_ACTIVE, seg->nodes[i].session_gen) &&
				    atomic_load(&ss->state_gen) !=
					    SESS_PACK(SESS_CLOSING, seg->nodes[i].session_gen)))
				VIOLATION("key %s: node %u in flight for a session that has ended",
					  k->key, i);
			continue;
		default:
			VIOLATION("key %s: node %u in state %u under the key mutex", k->key, i,
				  NODE_STATE(w));
			continue;
		}
		ss = seg_session_at(seg, NODE_SESSION(w));
		if (!ss || atomic_load(&ss->state_gen) !=
				   SESS_PACK(SESS_ACTIVE, seg->nodes[i].session_gen))
			VIOLATION("key %s: node %u (state %u) belongs to a session that is not "
				  "active",
				  k->key, i, NODE_STATE(w));
	}
	if (holding != k->holders)
		VIOLATION("key %s: %u holding nodes, count says %u", k->key, holding, k->holders);
	if (watching != atomic_load(&k->watchers))
		VIOLATION("key %s: %u watch nodes, count says %u", k->key, watching,
			  atomic_load(&k->watchers));
	if (waiting != k->waiters)
		VIOLATION("key %s: %u waiting nodes, count says %u", k->key, waiting, k->waiters);
	if (k->kind != LOCAL_KIND_NONE && holding > k->limit)
		VIOLATION("key %s: %u holders over limit %u", k->key, holding, k->limit);
	/* A session holds a key once (two threads committing to two slots at
	 * once settle to one before either returns). */
	for (i = 0; i < seg->nnodes; i++) {
		uint64_t w = atomic_load(&seg->nodes[i].word);
		uint32_t j;

		if (NODE_STATE(w) != NODE_HOLDING || NODE_KEY(w) != ki)
			continue;
		for (j = i + 1; j < seg->nnodes; j++) {
			uint64_t x = atomic_load(&seg->nodes[j].word);

			if (x == w && seg->nodes[j].session_gen == seg->nodes[i].session_gen)
				VIOLATION("key %s: session slot %u holds it twice (nodes %u, %u)",
					  k->key, NODE_SESSION(w), i, j);
		}
	}
	/* Under the mutex every slot is frozen and names nobody: key_lock()
	 * listed what they named. */
	for (i = 0; i < SEG_KEY_SLOTS; i++) {
		uint64_t f = seg_key_slot_load(k, i);

		if (!(f & FAST_SLOW) || (k->kind != LOCAL_KIND_LOCK && FAST_HOLDER(f)) ||
		    (i && FAST_HOLDER(f)))
			VIOLATION("key %s: slot %u is %s under the mutex", k->key, i,
				  f & FAST_SLOW ? "naming a node" : "open");
	}
	for (n = 0, i = k->h_head; i != IDX_NONE && n <= seg->nnodes; i = seg->nodes[i].next, n++)
		if (i >= seg->nnodes ||
		    NODE_STATE(atomic_load(&seg->nodes[i].word)) != NODE_HOLDING) {
			VIOLATION("key %s: holder list reaches a non-holding node", k->key);
			break;
		}
	if (n != holding)
		VIOLATION("key %s: holder list has %u entries, %u holding", k->key, n, holding);
	prev = IDX_NONE;
	for (n = 0, i = k->q_head; i != IDX_NONE && n <= seg->nnodes; i = seg->nodes[i].next, n++) {
		if (i >= seg->nnodes ||
		    NODE_STATE(atomic_load(&seg->nodes[i].word)) != NODE_WAITING) {
			VIOLATION("key %s: queue reaches a non-waiting node", k->key);
			break;
		}
		if (seg->nodes[i].prev != prev)
			VIOLATION("key %s: queue back link broken at node %u", k->key, i);
		if (n && seg->nodes[i].seq <= last_seq)
			VIOLATION("key %s: queue out of arrival order at node %u", k->key, i);
		last_seq = seg->nodes[i].seq;
		prev = i;
	}
	if (n != waiting)
		VIOLATION("key %s: queue has %u entries, %u waiting", k->key, n, waiting);
	if (k->q_tail != prev)
		VIOLATION("key %s: queue tail is %u, last entry %u", k->key, k->q_tail, prev);
	/* Tokens: the counter is at or above every token a key could give
	 * (else a later range could give one again); a holder's token is at
	 * most the key's last one drawn (else the next grant could repeat it).
	 * A cluster key's tokens come from the range its broker set from an
	 * etcd revision, above every host-local token: bounded by that range's
	 * end instead (docs/cluster.md, "Tokens"). */
	counter = atomic_load(&seg->hdr->token_counter);
	if (atomic_load(&k->cluster) & CL_KEY)
		counter = k->tok_hi;
	if (k->token > counter || k->tok_last > counter ||
	    (k->tok_off <= k->token && k->tok_hi > counter))
		VIOLATION("key %s: token %llu / last %llu / range end %llu above the counter "
			  "%llu",
			  k->key, (unsigned long long)k->token, (unsigned long long)k->tok_last,
			  (unsigned long long)k->tok_hi, (unsigned long long)counter);
	for (i = k->h_head, n = 0; i != IDX_NONE && i < seg->nnodes && n <= seg->nnodes;
	     i = seg->nodes[i].next, n++) {
		uint64_t next = key_token_for(k, atomic_load(&k->lock_index) + 1);

		if (seg->nodes[i].token > counter || (next && seg->nodes[i].token >= next))
			VIOLATION("key %s: holder node %u has token %llu, at or above the "
				  "key's next %llu (counter %llu)",
				  k->key, i, (unsigned long long)seg->nodes[i].token,
				  (unsigned long long)next, (unsigned long long)counter);
	}
	key_unlock(k);
	return bad;
}

int segment_violations(local_session *s)
{
	struct segment *seg = s->seg;
	uint32_t i;
	int bad = 0;

	for (i = 0; i < seg->caps.max_keys; i++)
		if (atomic_load(&seg->keys[i].state) == KEY_USED)
			bad += check_key(seg, i);
	for (i = 0; i < seg->nnodes; i++) {
		uint64_t w = atomic_load(&seg->nodes[i].word);
		struct seg_key *k;

		if (!w)
			continue;
		k = seg_key_at(seg, NODE_KEY(w));
		if (!k || atomic_load(&k->state) != KEY_USED)
			VIOLATION("node %u (state %u) belongs to no live key", i, NODE_STATE(w));
	}
	return bad;
}
