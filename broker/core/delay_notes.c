// SPDX-License-Identifier: MIT
/*
 * Who put a key in lock-delay. The segment records only until when a key
 * waits (seg_key.delay_until_ns); a waiter that sits there for 15 s deserves
 * to know why: "in lock-delay for 12 s after holder pid 4242 (backup) died".
 * The broker is the one that ends lost holds (dead processes, TTL, leases,
 * operators), so it notes each here through key_delay_hook, and answers
 * MSG_OP_LOCK_DELAY from it. A small table of the most recent: keys in
 * lock-delay at once are few, and a note past its end is dropped.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "broker.h"
#include "clock.h"
#include "procinfo.h"

#define DELAY_NOTES 256

struct delay_note {
	uint64_t until_ns;
	int32_t pid;
	uint32_t how;
	uint32_t key_len;
	char key[LOCAL_KEY_MAX];
	char name[SEG_NAME_MAX];
};

static struct delay_note notes[DELAY_NOTES];
/* The event loop and the lease thread both end holds. */
static pthread_mutex_t notes_lock = PTHREAD_MUTEX_INITIALIZER;

/* Is the process that opened @s gone: no such process, a zombie not yet
 * reaped, or its pid reused by another? */
static bool died(const struct seg_session *s)
{
	char path[64], buf[512], *rp;
	uint64_t start = 0;
	FILE *f;
	size_t n;

	if (s->creator_pid <= 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)s->creator_pid);
	f = fopen(path, "re");
	if (!f)
		return true;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	rp = strrchr(buf, ')');
	if (!rp || rp[1] != ' ' || rp[2] == 'Z' || rp[2] == 'X')
		return true;
	return s->start_time && !proc_start_time(s->creator_pid, &start) && start != s->start_time;
}

static void note(const struct seg_key *k, const struct seg_session *s, unsigned how,
		 uint64_t until_ns)
{
	uint64_t now = mono_ns();
	struct delay_note *n = NULL, *oldest = &notes[0];
	unsigned i;

	if (k->key_len > LOCAL_KEY_MAX)
		return;
	pthread_mutex_lock(&notes_lock);
	for (i = 0; i < DELAY_NOTES && !n; i++) {
		struct delay_note *c = &notes[i];

		if (c->until_ns > now && c->key_len == k->key_len &&
		    !memcmp(c->key, k->key, k->key_len))
			n = c; /* the same key again: the latest loss wins */
		else if (c->until_ns < oldest->until_ns)
			oldest = c;
	}
	if (!n)
		n = oldest;
	n->until_ns = until_ns;
	n->pid = s->creator_pid;
	n->how = how;
	/* A dead process, as opposed to a TTL run out or an operator. */
	if ((how & REL_SESSION_END) && died(s))
		n->how |= PROTO_DELAY_DIED;
	n->key_len = k->key_len;
	memcpy(n->key, k->key, k->key_len);
	memcpy(n->name, s->name, sizeof(n->name));
	n->name[sizeof(n->name) - 1] = '\0';
	pthread_mutex_unlock(&notes_lock);
}

void delay_notes_init(void)
{
	key_delay_hook = note;
}

int delay_note_get(const char *key, size_t len, struct proto_op_delay *out)
{
	uint64_t now = mono_ns();
	int err = -ENOENT;
	unsigned i;

	pthread_mutex_lock(&notes_lock);
	for (i = 0; i < DELAY_NOTES; i++) {
		const struct delay_note *n = &notes[i];

		if (n->until_ns <= now || n->key_len != len || memcmp(n->key, key, len))
			continue;
		out->pid = n->pid;
		out->how = n->how;
		out->remaining_ms = (n->until_ns - now + 999999) / 1000000;
		memcpy(out->name, n->name, sizeof(out->name));
		err = 0;
		break;
	}
	pthread_mutex_unlock(&notes_lock);
	return err;
}
