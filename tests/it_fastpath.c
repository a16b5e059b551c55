// SPDX-License-Identifier: MIT
/*
 * The lock-free path (libshm/fastpath.c) against a real broker: what it
 * leaves for the next mutex holder to count (lock_index, modify_index), a
 * semaphore's first holder, the per-session key hints, and holds taken
 * lock-free as seen by the calls that read the segment without a mutex.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "broker_fixture.h"
#include "harness.h"
#include "invariants.h"

static const LOCAL_OPTS(local_acquire_opts, try_once, .timeout_ms = 0);

/* The fast word of @key's entry (0 when there is no such entry). */
static uint64_t slot_word(local_session *s, const char *key, uint32_t slot)
{
	uint32_t i;

	for (i = 0; i < s->seg->caps.max_keys; i++)
		if (atomic_load(&s->seg->keys[i].state) == KEY_USED &&
		    s->seg->keys[i].key_len == strlen(key) &&
		    !memcmp(s->seg->keys[i].key, key, strlen(key)))
			return seg_key_slot_load(&s->seg->keys[i], slot);
	return 0;
}

/* @key's fast word (its slot 0). */
static uint64_t fast_word(local_session *s, const char *key)
{
	return slot_word(s, key, 0);
}

/* @key's watcher count (0 when there is no such entry). */
static uint32_t watchers_of(local_session *s, const char *key)
{
	uint32_t i;

	for (i = 0; i < s->seg->caps.max_keys; i++)
		if (atomic_load(&s->seg->keys[i].state) == KEY_USED &&
		    s->seg->keys[i].key_len == strlen(key) &&
		    !memcmp(s->seg->keys[i].key, key, strlen(key)))
			return atomic_load(&s->seg->keys[i].watchers);
	return 0;
}

/* The state of the node @key's fast word names (0: it names none). */
static uint32_t named_state(local_session *s, const char *key)
{
	uint32_t h = FAST_HOLDER(fast_word(s, key));

	return h ? NODE_STATE(atomic_load(&s->seg->nodes[h - 1].word)) : 0;
}

static struct local_key_info *info_of(local_session *s, const char *key)
{
	static LOCAL_OPTS(local_key_info, info);

	CHECK_OK(local_info(s, key, &info));
	return &info;
}

/*
 * The lock-free path leaves lock_index and modify_index alone; the next
 * mutex holder adds its operations in. Counted exactly, from a free key and
 * from a held one, and seen without the mutex by local_stats().
 */
TEST(fastpath, counters_count_lock_free_operations, 20)
{
	LOCAL_OPTS(local_stats, st0);
	LOCAL_OPTS(local_stats, st1);
	struct broker_proc b;
	uint64_t li, mi;
	local_session *a;
	int i;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	CHECK_OK(local_lock(a, "fp/count", &try_once, NULL)); /* makes the key */
	CHECK_OK(local_release(a, "fp/count"));
	li = info_of(a, "fp/count")->lock_index;
	mi = info_of(a, "fp/count")->modify_index;
	CHECK_EQ(li, 1);
	CHECK_OK(local_stats(a, &st0));
	for (i = 0; i < 1000; i++) {
		CHECK_OK(local_lock(a, "fp/count", &try_once, NULL));
		CHECK_OK(local_release(a, "fp/count"));
	}
	CHECK(!(fast_word(a, "fp/count") & FAST_SLOW)); /* all of it lock-free */
	CHECK_OK(local_stats(a, &st1));			/* before any mutex holder counts */
	CHECK_EQ(st1.grants - st0.grants, 1000);
	CHECK_EQ(info_of(a, "fp/count")->lock_index, li + 1000);
	CHECK_EQ(info_of(a, "fp/count")->modify_index, mi + 2000);
	/* From a held key: release, lock, release is one acquisition. */
	CHECK_OK(local_lock(a, "fp/count", &try_once, NULL));
	mi = info_of(a, "fp/count")->modify_index; /* counts that lock; key held */
	CHECK_EQ(info_of(a, "fp/count")->lock_index, li + 1001);
	CHECK_OK(local_release(a, "fp/count"));
	CHECK_OK(local_lock(a, "fp/count", &try_once, NULL));
	CHECK_OK(local_release(a, "fp/count"));
	CHECK_EQ(info_of(a, "fp/count")->lock_index, li + 1002);
	CHECK_EQ(info_of(a, "fp/count")->modify_index, mi + 3);
	CHECK_EQ(segment_violations(a), 0);
	broker_stop(&b);
}

/*
 * A hold taken lock-free is a hold for everyone who looks without the key
 * mutex (stats, sessions) and with it (info, held, check_token), before and
 * after a mutex holder has adopted it.
 */
static int count_holds(const struct local_session_info *si, void *arg)
{
	*(uint32_t *)arg += si->holds;
	return 0;
}

TEST(fastpath, lock_free_holds_are_holds, 20)
{
	LOCAL_OPTS(local_stats, st);
	struct broker_proc b;
	local_session *a;
	uint32_t holds = 0;
	uint64_t tok = 0;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	CHECK_OK(local_lock(a, "fp/hold", &try_once, NULL));
	CHECK_OK(local_release(a, "fp/hold"));
	CHECK_OK(local_lock(a, "fp/hold", &try_once, &tok));
	CHECK_EQ(named_state(a, "fp/hold"), NODE_FAST_CLAIMED);
	CHECK_OK(local_stats(a, &st));
	CHECK_EQ(st.holds, 1);
	CHECK_OK(local_sessions(a, count_holds, &holds));
	CHECK_EQ(holds, 1);
	CHECK_OK(local_held(a, "fp/hold", NULL)); /* takes the mutex: adopts it */
	CHECK_EQ(named_state(a, "fp/hold"), NODE_HOLDING);
	CHECK_OK(local_check_token(a, "fp/hold", tok));
	CHECK_EQ(info_of(a, "fp/hold")->token, tok);
	CHECK_OK(local_release(a, "fp/hold")); /* lock-free, of an adopted hold */
	CHECK_EQ(used_nodes(a), 0);
	CHECK_OK(local_stats(a, &st));
	CHECK_EQ(st.holds, 0);
	CHECK_EQ(segment_violations(a), 0);
	broker_stop(&b);
}

/*
 * A semaphore's holders take and give back their slots lock-free: the first
 * slot 0, the second slot 1 (limit 2: K = 2 slots). A mutex holder (here
 * local_info()) moves them into the holder list; the next semaphore
 * operation under the mutex gives them back to the slots.
 */
TEST(fastpath, semaphore_first_holder_is_lock_free, 20)
{
	struct broker_proc b;
	local_session *a, *c, *d;
	uint64_t t1 = 0, t2 = 0, t3 = 0;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	c = open_session(&b, "c", 0, 0);
	d = open_session(&b, "d", 0, 0);
	CHECK_OK(local_sem_acquire(a, "fp/sem", 2, &try_once, NULL)); /* makes it */
	CHECK_OK(local_release(a, "fp/sem"));
	CHECK(!(fast_word(a, "fp/sem") & FAST_SLOW));
	CHECK(!(slot_word(a, "fp/sem", 1) & FAST_SLOW));
	CHECK(slot_word(a, "fp/sem", 2) & FAST_SLOW); /* past K */
	CHECK_OK(local_sem_acquire(a, "fp/sem", 2, &try_once, &t1));
	CHECK_EQ(named_state(a, "fp/sem"), NODE_FAST_CLAIMED);
	/* Re-acquiring keeps the token; a wrong limit or kind is refused. */
	CHECK_OK(local_sem_acquire(a, "fp/sem", 2, &try_once, &t2));
	CHECK_EQ(t2, t1);
	CHECK_RC(local_sem_acquire(c, "fp/sem", 3, &try_once, NULL), -LOCAL_ELIMIT);
	CHECK_RC(local_lock(c, "fp/sem", &try_once, NULL), -LOCAL_EKIND);
	/* The second holder: lock-free too, in slot 1. */
	CHECK_OK(local_sem_acquire(c, "fp/sem", 2, &try_once, &t3));
	CHECK(t3 > t1);
	CHECK(!(fast_word(a, "fp/sem") & FAST_SLOW));
	CHECK(FAST_HOLDER(slot_word(a, "fp/sem", 1)) != 0);
	CHECK_OK(local_sem_acquire(c, "fp/sem", 2, &try_once, &t2));
	CHECK_EQ(t2, t3);
	/* Full: a try fails at once, lock-free. */
	CHECK_RC(local_sem_acquire(d, "fp/sem", 2, &try_once, NULL), -EBUSY);
	CHECK(!(fast_word(a, "fp/sem") & FAST_SLOW));
	/* The mutex lists both; the next semaphore operation under it gives
	 * them back to the slots. */
	CHECK_EQ(info_of(a, "fp/sem")->holders, 2);
	CHECK(fast_word(a, "fp/sem") & FAST_SLOW);
	CHECK_EQ(FAST_HOLDER(fast_word(a, "fp/sem")), 0);
	CHECK_RC(local_sem_acquire(d, "fp/sem", 2, &try_once, NULL), -EBUSY);
	CHECK(!(fast_word(a, "fp/sem") & FAST_SLOW));
	CHECK(FAST_HOLDER(fast_word(a, "fp/sem")) && FAST_HOLDER(slot_word(a, "fp/sem", 1)));
	CHECK_EQ(named_state(a, "fp/sem"), NODE_HOLDING);
	CHECK_OK(local_held(a, "fp/sem", &t2));
	CHECK_EQ(t2, t1);
	CHECK_EQ(segment_violations(a), 0);
	CHECK_OK(local_release(a, "fp/sem"));
	CHECK_OK(local_sem_acquire(d, "fp/sem", 2, &try_once, NULL));
	CHECK_OK(local_release(c, "fp/sem"));
	CHECK_OK(local_release(d, "fp/sem"));
	CHECK_EQ(info_of(a, "fp/sem")->holders, 0);
	CHECK_EQ(info_of(a, "fp/sem")->lock_index, 4);
	CHECK_OK(local_sem_acquire(a, "fp/sem", 2, &try_once, NULL));
	CHECK_OK(local_release(a, "fp/sem"));
	CHECK(!(fast_word(a, "fp/sem") & FAST_SLOW));
	/* A limit of 1 held lock-free: a try fails at once. */
	CHECK_OK(local_sem_acquire(a, "fp/one", 1, &try_once, NULL));
	CHECK_OK(local_release(a, "fp/one"));
	CHECK_OK(local_sem_acquire(a, "fp/one", 1, &try_once, NULL));
	CHECK_RC(local_sem_acquire(c, "fp/one", 1, &try_once, NULL), -EBUSY);
	CHECK_OK(local_release(a, "fp/one"));
	CHECK_EQ(used_nodes(a), 0);
	CHECK_EQ(segment_violations(a), 0);
	broker_stop(&b);
}

/*
 * The key hints go by the string's address, but the string decides: the
 * same buffer holding another key, a shorter one, an empty one or one too
 * long is looked up (or refused) as such.
 */
TEST(fastpath, key_hints_follow_the_string_not_its_address, 20)
{
	char buf[LOCAL_KEY_MAX + 2];
	struct broker_proc b;
	local_session *a;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	strcpy(buf, "fp/hint-a");
	CHECK_OK(local_lock(a, buf, &try_once, NULL));
	CHECK_OK(local_release(a, buf));
	CHECK_OK(local_lock(a, buf, &try_once, NULL)); /* the hint, lock-free */
	strcpy(buf, "fp/hint-b");
	CHECK_OK(local_lock(a, buf, &try_once, NULL));
	CHECK_EQ(info_of(a, "fp/hint-a")->holders, 1);
	CHECK_EQ(info_of(a, "fp/hint-b")->holders, 1);
	CHECK_OK(local_release(a, buf));
	CHECK_EQ(info_of(a, "fp/hint-b")->holders, 0);
	CHECK_EQ(info_of(a, "fp/hint-a")->holders, 1);
	strcpy(buf, "fp/hint");
	CHECK_RC(local_release(a, buf), -LOCAL_ENOTHELD);
	CHECK_OK(local_lock(a, buf, &try_once, NULL));
	CHECK_EQ(info_of(a, "fp/hint")->holders, 1);
	CHECK_OK(local_release(a, buf));
	buf[0] = '\0';
	CHECK_RC(local_lock(a, buf, &try_once, NULL), -EINVAL);
	CHECK_RC(local_release(a, buf), -EINVAL);
	memset(buf, 'x', sizeof(buf) - 1);
	buf[sizeof(buf) - 1] = '\0';
	CHECK_RC(local_lock(a, buf, &try_once, NULL), -ENAMETOOLONG);
	strcpy(buf, "fp/hint-a");
	CHECK_OK(local_release(a, buf));
	CHECK_EQ(used_nodes(a), 0);
	CHECK_EQ(segment_violations(a), 0);
	broker_stop(&b);
}

struct watch_arg {
	local_session *s;
	uint64_t after;
	int rc;
	struct local_key_info out; /* .sz set by the caller */
};

static void *watch_thread(void *p)
{
	struct watch_arg *w = p;

	w->rc = local_watch(w->s, "fp/watched", w->after, 5000, &w->out);
	return NULL;
}

/*
 * A watched key stays off the lock-free path (watchers sleep on
 * modify_index, which that path leaves alone): a lock taken while someone
 * watches wakes the watch; once the watch is over, the path is back.
 */
TEST(fastpath, watched_key_takes_the_mutex_path, 20)
{
	struct broker_proc b;
	struct watch_arg w = { .out = { .sz = sizeof(w.out) } };
	local_session *a;
	pthread_t t;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	w.s = open_session(&b, "w", 0, 0);
	CHECK_OK(local_lock(a, "fp/watched", &try_once, NULL));
	CHECK_OK(local_release(a, "fp/watched"));
	CHECK_OK(local_lock(a, "fp/watched", &try_once, NULL));
	CHECK_OK(local_release(a, "fp/watched"));
	w.after = info_of(a, "fp/watched")->modify_index;
	CHECK_EQ(pthread_create(&t, NULL, watch_thread, &w), 0);
	CHECK(WAIT_FOR(watchers_of(a, "fp/watched") == 1, 5000));
	CHECK(fast_word(a, "fp/watched") & FAST_SLOW);
	CHECK_OK(local_lock(a, "fp/watched", &try_once, NULL));
	CHECK_EQ(pthread_join(t, NULL), 0);
	CHECK_OK(w.rc);
	CHECK(w.out.modify_index > w.after);
	CHECK_EQ(w.out.holders, 1);
	CHECK_OK(local_release(a, "fp/watched"));
	CHECK_OK(local_lock(a, "fp/watched", &try_once, NULL));
	CHECK_EQ(named_state(a, "fp/watched"), NODE_FAST_CLAIMED);
	CHECK_OK(local_release(a, "fp/watched"));
	CHECK_EQ(segment_violations(a), 0);
	broker_stop(&b);
}

/*
 * A key handle's lock-free acquire tries the cached entry first without a
 * call (fastpath.c, FAST_AGAIN), and leaves a second try with everything
 * the claim that must search and the grant that has an expiry note to
 * drop: both answer as the first try does.
 */
TEST(fastpath, a_handle_s_second_try_answers_as_the_first, 20)
{
	LOCAL_OPTS(local_acquire_opts, leased, .timeout_ms = 0, .lease_ms = 100);
	struct broker_proc b;
	local_session *a;
	local_key *h1 = NULL, *h2 = NULL;
	uint64_t t1 = 0, t2 = 0, t3 = 0, held = 0;

	broker_start(&b, NULL);
	a = open_session(&b, "a", 0, 0);
	CHECK_OK(local_key_open(a, "fp2/one", &h1));
	CHECK_OK(local_key_open(a, "fp2/two", &h2));
	/* Made by name, so that both are in fast mode. */
	CHECK_OK(local_lock(a, "fp2/one", NULL, NULL));
	CHECK_OK(local_release(a, "fp2/one"));
	CHECK_OK(local_lock(a, "fp2/two", NULL, NULL));
	CHECK_OK(local_release(a, "fp2/two"));
	/* Two holds at once: the second cannot have the node the session
	 * freed last (the first holds it), so its claim searches. */
	CHECK_OK(local_key_lock(h1, NULL, &t1));
	CHECK_OK(local_key_lock(h2, &try_once, &t2));
	CHECK(t1 != 0 && t2 != 0 && t1 != t2);
	CHECK_EQ(named_state(a, "fp2/one"), NODE_FAST_CLAIMED);
	CHECK_EQ(named_state(a, "fp2/two"), NODE_FAST_CLAIMED);
	CHECK_OK(local_key_release(h2));
	CHECK_OK(local_key_release(h1));
	CHECK_RC(local_key_release(h1), -LOCAL_ENOTHELD);
	CHECK_RC(local_held(a, "fp2/two", &held), -LOCAL_ENOTHELD);
	/* A lease the broker ends leaves an expiry note; the next grant of
	 * the key, lock-free by handle, drops it. */
	CHECK_OK(local_key_lock(h1, &leased, &t1));
	CHECK(WAIT_FOR(local_held(a, "fp2/one", NULL) == -LOCAL_EEXPIRED, 5000));
	CHECK_OK(local_key_lock(h1, NULL, &t3));
	CHECK(t3 > t1);
	CHECK_EQ(named_state(a, "fp2/one"), NODE_FAST_CLAIMED);
	CHECK_OK(local_held(a, "fp2/one", &held));
	CHECK_EQ(held, t3);
	CHECK_OK(local_key_release(h1));
	CHECK_RC(local_key_release(h1), -LOCAL_ENOTHELD);
	CHECK_OK(local_key_close(h1));
	CHECK_OK(local_key_close(h2));
	CHECK_EQ(segment_violations(a), 0);
	broker_stop(&b);
}
