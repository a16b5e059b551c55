// SPDX-License-Identifier: MIT
/* Writing into lock words from a test: see word_fixture.h. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "word_fixture.h"

struct seg_key *entry_of(local_session *s, const char *key)
{
	uint32_t i;

	for (i = 0; i < s->seg->caps.max_keys; i++) {
		struct seg_key *k = &s->seg->keys[i];

		if (atomic_load(&k->state) == KEY_USED && k->key_len == strlen(key) &&
		    !memcmp(k->key, key, k->key_len))
			return k;
	}
	FAIL_AT("key %s not found", key);
}

void make_key(local_session *s, const char *key)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 5000);

	CHECK_OK(local_lock(s, key, &o, NULL));
	CHECK_OK(local_release(s, key));
}

void stall_key(struct seg_key *k, uint32_t owner)
{
	atomic_store(&k->lock, owner);
	atomic_fetch_or(&k->fast, FAST_SLOW);
}

bool is_stopped(pid_t pid)
{
	char st[128] = "", path[64];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	if (!fgets(st, sizeof(st), f))
		st[0] = '\0';
	fclose(f);
	return strstr(st, ") T ") != NULL;
}

static void sitter(void *arg, int in, int out)
{
	local_session *s = open_session(arg, "sitter", 0, 0);

	(void)in;
	(void)s;
	say(out, "%d", (int)getpid());
	raise(SIGSTOP);
	for (;;)
		pause();
}

pid_t sitter_start(struct child *c, const struct broker_proc *b)
{
	char line[32];
	pid_t pid;

	child_spawn(c, sitter, (void *)b);
	CHECK_OK(child_read(c, line, sizeof(line), 10000));
	pid = (pid_t)atoi(line);
	CHECK(WAIT_FOR(is_stopped(pid), 10000));
	return pid;
}
