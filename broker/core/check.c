// SPDX-License-Identifier: MIT
/*
 * shmlockd --check: validate a segment without changing it.
 *
 * The segment is opened O_RDONLY and mapped PROT_READ, so nothing here can
 * write to it even by mistake; no mutex is taken and no flock either (a
 * broker starting meanwhile must not find the segment "in use").
 *
 * Findings come in two grades:
 *   problem: an invariant the lock algorithms rely on is broken (an index
 *            out of range, a list that does not match the node table, a
 *            count that lies, a token above the counter, a lock word naming
 *            a process that has nothing to do with the segment). Exit
 *            status 2.
 *   note:    work a broker does routinely and has not done yet (sessions
 *            whose process died while no broker ran, a sweep cut short, a
 *            mutex whose owner died, a node an interrupted operation left
 *            claimed). The segment is healthy.
 *
 * While a broker runs, clients change the segment under our feet; a problem
 * seen then may be a change in progress, so the scan is repeated (up to three
 * times) and only a scan that still finds problems is reported.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker.h"
#include "lockword.h"
#include "procinfo.h"
#include "seg_check.h"

struct report {
	FILE *out;
	unsigned problems, notes;
};

static void __attribute__((format(printf, 3, 4)))
say(struct report *r, bool problem, const char *fmt, ...)
{
	va_list ap;

	if (problem)
		r->problems++;
	else
		r->notes++;
	fputs(problem ? "problem: " : "note: ", r->out);
	va_start(ap, fmt);
	vfprintf(r->out, fmt, ap);
	va_end(ap);
	fputc('\n', r->out);
}

#define PROBLEM(r, ...) say(r, true, __VA_ARGS__)
#define NOTE(r, ...) say(r, false, __VA_ARGS__)

/* A key's name for a report: printable, even when the entry is damaged. */
static const char *key_name(const struct seg_key *k, char *buf, size_t size)
{
	uint32_t len = k->key_len <= LOCAL_KEY_MAX ? k->key_len : 0, i;
	size_t n = 0;

	for (i = 0; i < len && n + 1 < size; i++)
		buf[n++] = isprint((unsigned char)k->key[i]) ? k->key[i] : '?';
	buf[n] = '\0';
	return buf;
}

/* A lock word's state: free, held, left by a dead owner, or naming a live
 * process that does not map the segment (a forged owner). */
enum mutex_state { MUTEX_FREE, MUTEX_HELD, MUTEX_OWNER_DIED, MUTEX_FORGED };

/* The segment's line in /proc/PID/maps ("/memfd:LABEL (deleted)"). */
static char seg_label[300];

/*
 * Does process @pid map the segment? 1 yes, 0 no, -1 cannot tell (its maps
 * are not ours to read). Only a process that maps it can be inside a lock
 * word: any other owner was written there by a client.
 */
static int maps_segment(uint32_t pid)
{
	char path[64], line[512];
	int found = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%u/maps", pid);
	f = fopen(path, "re");
	if (!f)
		return errno == ENOENT ? 0 : -1;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, seg_label) != NULL;
	/* An empty read of a live process's maps: not allowed to look. */
	if (!found && ferror(f))
		found = -1;
	fclose(f);
	return found;
}

/*
 * Where /proc/PID/maps is not ours to read: is @pid the broker or the
 * process of a session the segment records? Those records are the clients'
 * to write, so this only makes a report: a "no" is a strong sign of a
 * forged owner, a "yes" proves nothing (the broker judges by its own table).
 */
static bool recorded_in(const struct segment *seg, uint32_t pid)
{
	uint32_t i;

	if (pid == atomic_load(&seg->hdr->broker_pid))
		return true;
	for (i = 0; i < seg->caps.max_sessions; i++) {
		const struct seg_session *s = &seg->sessions[i];

		if (SESS_STATE(atomic_load(&s->state_gen)) != SESS_FREE &&
		    (uint32_t)s->creator_pid == pid)
			return true;
	}
	return false;
}

/* A lock word (lockword.h): free, held by a live process of the segment,
 * left by a dead one, or naming a process that has nothing to do with it. */
static enum mutex_state mutex_state(const struct segment *seg, const _Atomic uint32_t *w)
{
	uint32_t v = atomic_load_explicit(w, memory_order_relaxed);
	int maps;

	if (!v)
		return MUTEX_FREE;
	if ((v & LW_DIED) || lw_pid_gone(LW_OWNER(v)))
		return MUTEX_OWNER_DIED;
	maps = seg_label[0] ? maps_segment(LW_OWNER(v)) : -1;
	if (maps == 0 || (maps < 0 && !recorded_in(seg, LW_OWNER(v))))
		return MUTEX_FORGED;
	return MUTEX_HELD;
}

/* What the broker does with a forged owner, for the report. */
#define FORGED_FIX                                                             \
	"a running broker breaks it within a second, a starting one at once; " \
	"'shmlock reset KEY' breaks a key's now"

/* Per key, what the node table says (the truth the lists must match). */
struct key_tally {
	uint32_t holding, waiting;
};

static void check_sessions(const struct segment *seg, struct report *r)
{
	uint32_t i;

	for (i = 0; i < seg->caps.max_sessions; i++) {
		const struct seg_session *s = &seg->sessions[i];
		uint32_t st = SESS_STATE(atomic_load(&s->state_gen));
		const char *why;
		uint64_t start;

		if (st == SESS_FREE)
			continue;
		if (st != SESS_ACTIVE && st != SESS_CLOSING) {
			PROBLEM(r, "session slot %u: unknown state %u", i, st);
			continue;
		}
		why = seg_session_problem(s);
		if (why) {
			PROBLEM(r, "session slot %u: fields out of range (%s)", i, why);
			continue;
		}
		if (st == SESS_CLOSING) {
			NOTE(r,
			     "session slot %u (%s): its sweep was cut short; the next broker "
			     "finishes it",
			     i, s->name);
			continue;
		}
		if (s->pid &&
		    (proc_start_time(s->pid, &start) || (s->start_time && start != s->start_time)))
			NOTE(r,
			     "session slot %u (%s, pid %d): its process is gone; a broker "
			     "releases what it held",
			     i, s->name, s->pid);
	}
}

/* The nodes, one pass: their own sanity, and the tally per key. */
static void check_nodes(const struct segment *seg, struct report *r, struct key_tally *t)
{
	uint64_t tokens = atomic_load(&seg->hdr->token_counter);
	uint32_t i;

	for (i = 0; i < seg->nnodes; i++) {
		const struct seg_node *n = &seg->nodes[i];
		uint64_t w = atomic_load(&n->word), sg;
		uint32_t st = NODE_STATE(w), ki = NODE_KEY(w), si = NODE_SESSION(w), kst;
		bool hold_node = i < seg->caps.max_holds;

		if (!w)
			continue;
		if (st < NODE_CLAIMED || st > NODE_FAST_CLAIMED) {
			PROBLEM(r, "node %u: unknown state %u", i, st);
			continue;
		}
		if (ki >= seg->caps.max_keys || si >= seg->caps.max_sessions) {
			PROBLEM(r, "node %u: names key %u / session slot %u, out of range", i, ki,
				si);
			continue;
		}
		if ((st == NODE_HOLDING || st == NODE_FAST_CLAIMED) != hold_node &&
		    st != NODE_CLAIMED && st != NODE_WATCHING) {
			PROBLEM(r, "node %u: state %u in the %s table", i, st,
				hold_node ? "hold" : "waiter");
			continue;
		}
		if ((st == NODE_HOLDING || st == NODE_GRANTED) && n->token > tokens)
			PROBLEM(r,
				"node %u: token %llu above the counter %llu: it could be "
				"granted twice",
				i, (unsigned long long)n->token, (unsigned long long)tokens);
		sg = atomic_load(&seg->sessions[si].state_gen);
		/* A lock-free hold stays FAST_CLAIMED while its key's fast word
		 * names it; an unnamed one is an operation in flight. */
		if (st == NODE_CLAIMED ||
		    (st == NODE_FAST_CLAIMED && !seg_node_is_hold(seg, i, w))) {
			if (SESS_STATE(sg) == SESS_FREE)
				NOTE(r,
				     "node %u: left claimed by an operation that died; freed by "
				     "the next repair of its key",
				     i);
			continue;
		}
		if (SESS_STATE(sg) == SESS_FREE)
			PROBLEM(r,
				"node %u (state %u): belongs to session slot %u, which has "
				"ended",
				i, st, si);
		else if (SESS_STATE(sg) == SESS_ACTIVE && SESS_GEN(sg) != n->session_gen)
			PROBLEM(r, "node %u (state %u): left by an earlier session in slot %u", i,
				st, si);
		kst = atomic_load(&seg->keys[ki].state);
		if (key_state_free(kst))
			PROBLEM(r, "node %u (state %u): its key entry %u is free", i, st, ki);
		if (st == NODE_HOLDING || st == NODE_FAST_CLAIMED)
			t[ki].holding++;
		else if (st == NODE_WAITING)
			t[ki].waiting++;
		else if (st == NODE_GRANTED && !seg_node_at(seg, n->hold))
			PROBLEM(r, "node %u: granted hold %u is out of range", i, n->hold);
	}
}

/* Walk a list from @head through next links, at most nnodes steps. */
static void check_queue(const struct segment *seg, struct report *r, const struct seg_key *k,
			uint32_t ki, const char *name)
{
	uint32_t i = k->q_head, prev = IDX_NONE, n = 0;
	uint64_t last = 0;

	while (i != IDX_NONE) {
		const struct seg_node *nd = seg_node_at(seg, i);
		uint64_t w = nd ? atomic_load(&nd->word) : 0;

		if (!nd || NODE_STATE(w) != NODE_WAITING || NODE_KEY(w) != ki) {
			PROBLEM(r, "key '%s': its queue reaches node %u, not one of its waiters",
				name, i);
			return;
		}
		if (nd->prev != prev)
			PROBLEM(r, "key '%s': queue back link broken at node %u", name, i);
		if (n && nd->seq <= last)
			PROBLEM(r, "key '%s': queue out of arrival order at node %u", name, i);
		if (++n > k->waiters) {
			PROBLEM(r, "key '%s': queue longer than its count (%u), or a cycle", name,
				k->waiters);
			return;
		}
		last = nd->seq;
		prev = i;
		i = nd->next;
	}
	if (n != k->waiters)
		PROBLEM(r, "key '%s': queue has %u entries, count says %u", name, n, k->waiters);
	if (k->q_tail != prev)
		PROBLEM(r, "key '%s': queue tail is node %u, last entry %u", name, k->q_tail, prev);
}

static void check_holders(const struct segment *seg, struct report *r, const struct seg_key *k,
			  uint32_t ki, const char *name, const struct key_tally *t)
{
	uint32_t i = k->h_head, n = 0, fast = 0, s;

	if (k->kind == LOCAL_KIND_LOCK) {
		for (s = 1; s < SEG_KEY_SLOTS; s++)
			if (FAST_HOLDER(atomic_load(seg_key_slot_c(k, s))))
				PROBLEM(r, "key '%s': a lock's slot %u names a node", name, s);
		/* The fast word is the truth; the list is synced from it at the
		 * next key_lock(). Unpublished holds are fast-path acquires that
		 * died before their commit; the sweep of their session frees them. */
		uint32_t h = FAST_HOLDER(atomic_load(&k->fast));
		const struct seg_node *nd = h ? seg_node_at(seg, h - 1) : NULL;
		uint64_t w = nd ? atomic_load(&nd->word) : 0;

		/* FAST_CLAIMED: taken lock-free, not yet seen by a mutex holder. */
		if (h && (!nd || (w != NODE_PACK(NODE_HOLDING, NODE_SESSION(w), ki) &&
				  w != NODE_PACK(NODE_FAST_CLAIMED, NODE_SESSION(w), ki))))
			PROBLEM(r, "key '%s': its holder (node %u) is not a hold of this key", name,
				h - 1);
		if (t->holding > (h ? 1u : 0u))
			NOTE(r, "key '%s': %u unpublished hold node(s) of interrupted acquires",
			     name, t->holding - (h ? 1u : 0u));
		return;
	}
	/* A semaphore's slots name the holds taken lock-free (FAST_CLAIMED)
	 * or given back to them (HOLDING) while its holder list was empty;
	 * they join the list at the next key_lock(). */
	for (s = 0; s < SEG_KEY_SLOTS; s++) {
		uint32_t h = FAST_HOLDER(atomic_load(seg_key_slot_c(k, s)));
		const struct seg_node *nd = h ? seg_node_at(seg, h - 1) : NULL;
		uint64_t w = nd ? atomic_load(&nd->word) : 0;

		if (!h)
			continue;
		if (s >= seg_key_nslots(k) ||
		    (w != NODE_PACK(NODE_FAST_CLAIMED, NODE_SESSION(w), ki) &&
		     w != NODE_PACK(NODE_HOLDING, NODE_SESSION(w), ki)) ||
		    k->holders) {
			PROBLEM(r,
				"key '%s': its slot %u names node %u, not a hold of it beside an "
				"empty holder list",
				name, s, h - 1);
			return;
		}
		fast++;
	}
	while (i != IDX_NONE) {
		const struct seg_node *nd = seg_node_at(seg, i);
		uint64_t w = nd ? atomic_load(&nd->word) : 0;

		if (!nd || NODE_STATE(w) != NODE_HOLDING || NODE_KEY(w) != ki) {
			PROBLEM(r,
				"key '%s': its holder list reaches node %u, not one of its holds",
				name, i);
			return;
		}
		if (++n > t->holding) {
			PROBLEM(r, "key '%s': holder list longer than its holds, or a cycle", name);
			return;
		}
		i = nd->next;
	}
	if (n + fast != t->holding || k->holders + fast != t->holding)
		PROBLEM(r, "key '%s': %u holding nodes, list has %u, count says %u", name,
			t->holding, n + fast, k->holders + fast);
}

/* Is @ki reachable by a probe for its hash, and named once only? */
static void check_index_entry(const struct segment *seg, struct report *r, uint32_t ki,
			      const char *name)
{
	uint32_t mask = seg->index_size - 1, hash = atomic_load(&seg->keys[ki].hash);
	uint32_t i = hash & mask, n;

	for (n = 0; n < seg->index_size; n++, i = (i + 1) & mask) {
		uint32_t v = atomic_load(&seg->index[i]);

		if (v == ki + 1)
			return;
		if (v == 0)
			break;
	}
	PROBLEM(r, "key '%s': not reachable through the index", name);
}

static const struct segment *dup_seg; /* for by_name(): qsort has no context */

static int by_name(const void *a, const void *b)
{
	const struct seg_key *ka = &dup_seg->keys[*(const uint32_t *)a];
	const struct seg_key *kb = &dup_seg->keys[*(const uint32_t *)b];
	uint32_t la = ka->key_len, lb = kb->key_len;
	int c = memcmp(ka->key, kb->key, la < lb ? la : lb);

	return c ? c : (la > lb) - (la < lb);
}

/*
 * Two live entries with one name: a key split in two (each may have a
 * holder). Creation checks the entries, not only the index, so only a
 * write into the entries themselves can make this; name both.
 */
static void check_duplicates(const struct segment *seg, struct report *r)
{
	uint32_t *v = calloc(seg->caps.max_keys, sizeof(*v)), n = 0, i;
	char name[LOCAL_KEY_MAX + 1];

	if (!v) {
		PROBLEM(r, "out of memory");
		return;
	}
	for (i = 0; i < seg->caps.max_keys; i++)
		if (atomic_load(&seg->keys[i].state) == KEY_USED &&
		    seg->keys[i].key_len <= LOCAL_KEY_MAX)
			v[n++] = i;
	dup_seg = seg;
	qsort(v, n, sizeof(*v), by_name);
	for (i = 1; i < n; i++)
		if (!by_name(&v[i - 1], &v[i]))
			PROBLEM(r, "key '%s': two entries (%u and %u); each may have holders",
				key_name(&seg->keys[v[i]], name, sizeof(name)), v[i - 1], v[i]);
	free(v);
}

static void check_keys(const struct segment *seg, struct report *r, const struct key_tally *t,
		       bool table_dead)
{
	uint64_t tokens = atomic_load(&seg->hdr->token_counter);
	char name[LOCAL_KEY_MAX + 1];
	uint32_t i;

	for (i = 0; i < seg->caps.max_keys; i++) {
		const struct seg_key *k = &seg->keys[i];
		uint32_t st = atomic_load(&k->state);
		enum mutex_state ms;

		if (key_state_free(st) || st == KEY_RESERVED)
			continue;
		key_name(k, name, sizeof(name));
		if (st == KEY_QUARANTINED) {
			PROBLEM(r, "key entry %u ('%s'): quarantined as damaged earlier", i, name);
			continue;
		}
		if (!key_fields_sane(seg, k)) {
			PROBLEM(r,
				"key entry %u ('%s'): fields out of range (kind %u, limit %u, "
				"length %u); it would be quarantined",
				i, name, k->kind, k->limit, k->key_len);
			continue;
		}
		if (atomic_load(&k->hash) != key_hash(k->key, k->key_len))
			PROBLEM(r, "key '%s': stored hash does not match its name", name);
		else if (!table_dead)
			check_index_entry(seg, r, i, name);
		if (k->token > tokens)
			PROBLEM(r, "key '%s': last token %llu above the counter %llu", name,
				(unsigned long long)k->token, (unsigned long long)tokens);
		ms = mutex_state(seg, &k->lock);
		if (ms == MUTEX_FORGED) {
			PROBLEM(r,
				"key '%s': its lock word names pid %u, a process that does not "
				"map this segment: a forged owner, which stops every use of the "
				"key; " FORGED_FIX,
				name, LW_OWNER(atomic_load(&k->lock)));
			continue;
		}
		if (ms == MUTEX_OWNER_DIED) {
			NOTE(r,
			     "key '%s': its mutex owner died mid-operation; the next locker "
			     "rebuilds it from the node table",
			     name);
			continue; /* its lists may be half-changed, by design */
		}
		if (ms == MUTEX_HELD)
			continue; /* being changed right now */
		if (!key_links_sane(seg, k)) {
			PROBLEM(r,
				"key '%s': list heads or counts inconsistent (holders %u, "
				"waiters %u)",
				name, k->holders, k->waiters);
			continue;
		}
		if (t[i].waiting != k->waiters)
			PROBLEM(r, "key '%s': %u waiting nodes, count says %u", name, t[i].waiting,
				k->waiters);
		check_queue(seg, r, k, i, name);
		check_holders(seg, r, k, i, name, &t[i]);
		if (k->kind != LOCAL_KIND_NONE && t[i].holding > k->limit &&
		    k->kind != LOCAL_KIND_LOCK)
			PROBLEM(r, "key '%s': %u holds over its limit %u", name, t[i].holding,
				k->limit);
	}
}

/* Index entries that point nowhere sensible. */
static void check_index(const struct segment *seg, struct report *r)
{
	uint32_t i;

	for (i = 0; i < seg->index_size; i++) {
		uint32_t v = atomic_load(&seg->index[i]), st;

		if (v == 0 || v == INDEX_TOMB)
			continue;
		if (v - 1 >= seg->caps.max_keys) {
			PROBLEM(r, "index slot %u: key entry %u out of range", i, v - 1);
			continue;
		}
		st = atomic_load(&seg->keys[v - 1].state);
		if (key_state_free(st))
			PROBLEM(r, "index slot %u: names key entry %u, which is free", i, v - 1);
	}
}

static void scan(const struct segment *seg, struct report *r)
{
	struct key_tally *t = calloc(seg->caps.max_keys, sizeof(*t));
	enum mutex_state table = mutex_state(seg, &seg->hdr->table_lock);
	bool table_dead = table == MUTEX_OWNER_DIED;

	if (!t) {
		PROBLEM(r, "out of memory");
		return;
	}
	if (atomic_load(&seg->hdr->token_counter) < seg->hdr->created_realtime_ns)
		PROBLEM(r, "token counter below its seed: tokens could repeat");
	if (table == MUTEX_FORGED)
		PROBLEM(r,
			"the key table's lock word names pid %u, a process that does not map "
			"this segment: a forged owner, which stops the creation of keys; a "
			"running broker breaks it within a second, a starting one at once",
			LW_OWNER(atomic_load(&seg->hdr->table_lock)));
	if (table_dead)
		NOTE(r, "the key table's mutex owner died; the next locker rebuilds the index");
	else
		check_index(seg, r);
	check_sessions(seg, r);
	check_nodes(seg, r, t);
	check_keys(seg, r, t, table_dead);
	check_duplicates(seg, r);
	free(t);
}

/* The broker recorded in the header, if that process still runs. */
static pid_t live_broker(const struct segment *seg)
{
	pid_t pid = (pid_t)atomic_load(&seg->hdr->broker_pid);
	char path[64], comm[32] = "";
	FILE *f;

	if (pid <= 0 || (kill(pid, 0) < 0 && errno != EPERM))
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	if (!fgets(comm, sizeof(comm), f))
		comm[0] = '\0';
	fclose(f);
	return strncmp(comm, "shmlockd", 8) ? 0 : pid;
}

/* Whether process @pid is a broker or a keeper (its comm). */
static bool is_shmlockd(const char *pid)
{
	char path[300], comm[32] = "";
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%s/comm", pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	if (!fgets(comm, sizeof(comm), f))
		comm[0] = '\0';
	fclose(f);
	return !strncmp(comm, "shmlockd", 8);
}

/*
 * Without --socket's keeper: the descriptor a broker or keeper of the label
 * holds, opened through /proc/PID/fd (allowed to root and to the broker's
 * user only, as for ptrace). The label alone names it, as the old name did.
 */
static int open_by_label(const struct broker_opts *o)
{
	char want[300], path[600], link[320];
	DIR *d = opendir("/proc"), *fds;
	struct dirent *e, *f;
	int fd = -1;
	ssize_t n;

	snprintf(want, sizeof(want), "/memfd:%s (deleted)", o->shm_name + 1);
	while (d && fd < 0 && (e = readdir(d))) {
		if (!isdigit((unsigned char)e->d_name[0]) || !is_shmlockd(e->d_name))
			continue;
		snprintf(path, sizeof(path), "/proc/%s/fd", e->d_name);
		fds = opendir(path);
		while (fds && fd < 0 && (f = readdir(fds))) {
			snprintf(path, sizeof(path), "/proc/%s/fd/%s", e->d_name, f->d_name);
			n = readlink(path, link, sizeof(link) - 1);
			if (n <= 0)
				continue;
			link[n] = '\0';
			if (!strcmp(link, want))
				fd = open(path, O_RDONLY | O_CLOEXEC);
		}
		if (fds)
			closedir(fds);
	}
	if (d)
		closedir(d);
	return fd;
}

/*
 * The segment has no name (a sealed memfd, shm.c): its keeper, beside the
 * control socket, hands it to the broker's user and root. A broker's own
 * keeper holds it as long as it runs, and after it stopped or crashed. Failing
 * that, a broker or keeper of the label is looked for in /proc.
 */
static int check_open(const struct broker_opts *o)
{
	char path[sizeof(o->socket_path) + 8];
	int fd = -1, err;

	err = keeper_path(o->socket_path, path, sizeof(path));
	if (!err)
		err = keeper_fetch(path, &fd);
	if (!err)
		return fd;
	fd = open_by_label(o);
	if (fd >= 0)
		return fd;
	printf("shmlockd --check: %s: no segment to check: its keeper at %s does not answer "
	       "(%s), and no broker or keeper of that label is seen in /proc; pass the "
	       "broker's --socket\n",
	       o->shm_name, path,
	       err == -ENOENT || err == -ECONNREFUSED ? "no broker ran there, or it was "
							"stopped with --destroy-segment-on-exit"
						      : strerror(-err));
	return -1;
}

int check_segment(const struct broker_opts *o)
{
	struct segment seg;
	struct report r;
	struct stat st;
	char *text = NULL;
	size_t len = 0;
	void *mem;
	int fd, err, attempt;
	pid_t broker;

	fd = check_open(o);
	if (fd < 0)
		return 1;
	if (fstat(fd, &st) < 0) {
		printf("shmlockd --check: %s: %s\n", o->shm_name, strerror(errno));
		close(fd);
		return 1;
	}
	mem = st.st_size > 0 ? mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0) : NULL;
	close(fd);
	if (!mem || mem == MAP_FAILED) {
		printf("shmlockd --check: %s: cannot map (%zu bytes)\n", o->shm_name,
		       (size_t)st.st_size);
		return 1;
	}
	err = seg_bind(&seg, mem, (size_t)st.st_size);
	if (err) {
		printf("shmlockd --check: %s: header invalid: %s; a broker refuses to replace it "
		       "while a process maps it (exit status 3, naming them): let them exit, "
		       "or start it with --replace-segment --replace-wait SECONDS "
		       "(shmlockd(8), UPGRADES)\n",
		       o->shm_name,
		       err == -LOCAL_EVERSION ? "another layout version"
					      : "magic, sizes or offsets do not add up");
		munmap(mem, (size_t)st.st_size);
		return err == -LOCAL_EVERSION ? 1 : 2;
	}
	broker = live_broker(&seg);
	snprintf(seg_label, sizeof(seg_label), "/memfd:%s (deleted)", o->shm_name + 1);
	printf("shmlockd --check: %s: %zu bytes; keys %u, sessions %u, holds %u, waiters %u, "
	       "value %u; %s\n",
	       o->shm_name, seg.size, seg.caps.max_keys, seg.caps.max_sessions, seg.caps.max_holds,
	       seg.caps.max_waiters, seg.caps.max_value,
	       broker ? "a broker is running" : "no broker running");
	for (attempt = 0; attempt < (broker ? 3 : 1); attempt++) {
		free(text);
		memset(&r, 0, sizeof(r));
		r.out = open_memstream(&text, &len);
		if (!r.out) {
			printf("shmlockd --check: out of memory\n");
			munmap(mem, (size_t)st.st_size);
			return 1;
		}
		scan(&seg, &r);
		fclose(r.out);
		if (!r.problems)
			break;
	}
	fputs(text, stdout);
	free(text);
	printf("shmlockd --check: %s: %s (%u problem%s, %u note%s)\n", o->shm_name,
	       r.problems ? "DAMAGED" : "healthy", r.problems, r.problems == 1 ? "" : "s", r.notes,
	       r.notes == 1 ? "" : "s");
	munmap(mem, (size_t)st.st_size);
	return r.problems ? 2 : 0;
}
