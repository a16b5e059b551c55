// SPDX-License-Identifier: MIT
/*
 * The growable ABI (liblocal.h, "Growable structs"): a caller built against
 * an older, smaller struct still works and is never written past its size;
 * one built against a newer header is refused when it sets a field this
 * library does not know; the value comes into a buffer of the caller's; the
 * library says its version at run time; and `shmlock keys` over 10 000 keys
 * stays small now that no key's info carries a 64 KiB value.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker_fixture.h"
#include "harness.h"

/* struct local_acquire_opts as a header without the value fields had it. */
struct old_acquire_opts {
	size_t sz;
	int64_t timeout_ms;
	uint32_t lease_ms;
};

/* struct local_session_opts as a header with only the first two options had it. */
struct old_session_opts {
	size_t sz;
	const char *socket_path;
	const char *name;
};

struct find_session {
	const char *id;
	uint32_t delay;
	int found;
};

static int find_session(const struct local_session_info *si, void *arg)
{
	struct find_session *p = arg;

	if (LOCAL_HAS(si, lock_delay_ms) && !strcmp(si->id, p->id)) {
		p->delay = si->lock_delay_ms;
		p->found = 1;
	}
	return 0;
}

static int lock_delay_of(local_session *obs, const char *id, uint32_t *delay)
{
	struct find_session f = { id, 0, 0 };
	int err = local_sessions(obs, find_session, &f);

	*delay = f.delay;
	return err ? err : f.found ? 0 : -ENOENT;
}

TEST(abi, older_smaller_structs_still_work, 20)
{
	/* The old structs sit at the front of buffers the size of today's,
	 * the rest filled with bytes the library must neither read nor write. */
	union {
		struct local_acquire_opts now;
		struct old_acquire_opts old;
		unsigned char raw[sizeof(struct local_acquire_opts)];
	} ao;
	union {
		struct local_session_opts now;
		struct old_session_opts old;
		unsigned char raw[sizeof(struct local_session_opts)];
	} so;
	union {
		struct local_key_info now;
		unsigned char raw[sizeof(struct local_key_info)];
	} ki;
	size_t cut = offsetof(struct local_key_info, token), i;
	struct broker_proc b;
	local_session *s, *obs;
	uint32_t delay = 0;
	uint64_t tok = 0;

	broker_start(&b, NULL);
	obs = open_session(&b, "obs", 0, 0);

	memset(&so, 0xff, sizeof(so));
	so.old.sz = sizeof(so.old);
	so.old.socket_path = b.sock;
	so.old.name = "old-caller";
	CHECK_OK(local_session_open(&so.now, &s));
	/* Fields past its size took their defaults: 15 s lock-delay, not
	 * the -1 in the bytes after it. */
	CHECK_OK(lock_delay_of(obs, local_session_id(s), &delay));
	CHECK_EQ(delay, LOCAL_LOCK_DELAY_DEFAULT_MS);

	memset(&ao, 0xff, sizeof(ao));
	ao.old.sz = sizeof(ao.old);
	ao.old.timeout_ms = 0;
	ao.old.lease_ms = 0;
	/* value and value_len lie past sz: 0xff..., never read. */
	CHECK_OK(local_lock(s, "abi/k", &ao.now, &tok));
	CHECK(tok > 0);

	/* An info cut before the token: nothing written past it, and sz
	 * says how much was filled. */
	memset(&ki, 0xab, sizeof(ki));
	ki.now.sz = cut;
	CHECK_OK(local_info(obs, "abi/k", &ki.now));
	CHECK_EQ(ki.now.sz, cut);
	CHECK_EQ(ki.now.kind, LOCAL_KIND_LOCK);
	CHECK_EQ(ki.now.holders, 1);
	for (i = cut; i < sizeof(ki); i++)
		if (ki.raw[i] != 0xab)
			FAIL_AT("local_info() wrote byte %zu of a %zu-byte struct", i, cut);
	memset(&ki, 0xab, sizeof(ki));
	ki.now.sz = cut;
	CHECK_OK(local_watch(obs, "abi/k", 0, 1000, &ki.now));
	for (i = cut; i < sizeof(ki); i++)
		if (ki.raw[i] != 0xab)
			FAIL_AT("local_watch() wrote byte %zu of a %zu-byte struct", i, cut);

	/* A full-size caller sees the value stayed empty (never read). */
	{
		LOCAL_OPTS(local_key_info, full);

		CHECK_OK(local_info(obs, "abi/k", &full));
		CHECK_EQ(full.sz, sizeof(full));
		CHECK_EQ(full.value_len, 0);
		CHECK_EQ(full.token, tok);
	}
	CHECK_OK(local_release(s, "abi/k"));
	CHECK_OK(local_session_close(s));
	CHECK_OK(local_session_close(obs));
	broker_stop(&b);
}

TEST(abi, unknown_nonzero_tail_is_refused, 20)
{
	struct {
		struct local_acquire_opts o;
		uint64_t future; /* a field of a later header */
	} big;
	struct {
		struct local_session_opts o;
		uint64_t future;
	} bigs;
	struct broker_proc b;
	local_session *s, *t;
	int granted;

	broker_start(&b, NULL);
	s = open_session(&b, "a", 0, 0);

	memset(&big, 0, sizeof(big));
	big.o.sz = sizeof(big);
	big.o.timeout_ms = 0;
	/* Zero past what the library knows: as if not there. */
	CHECK_OK(local_lock(s, "abi/t", &big.o, NULL));
	CHECK_OK(local_release(s, "abi/t"));
	big.future = 1;
	CHECK_RC(local_lock(s, "abi/t", &big.o, NULL), -E2BIG);
	CHECK_RC(local_sem_acquire(s, "abi/sem", 2, &big.o, NULL), -E2BIG);
	CHECK_RC(local_enqueue(s, "abi/t", 0, &big.o, &granted, NULL), -E2BIG);
	/* A size smaller than the size member itself: never set. */
	big.o.sz = 0;
	CHECK_RC(local_lock(s, "abi/t", &big.o, NULL), -EINVAL);
	CHECK_RC(local_info(s, "abi/t", &(struct local_key_info){ .sz = 0 }), -EINVAL);
	CHECK_RC(local_stats(s, &(struct local_stats){ .sz = 3 }), -EINVAL);
	/* Nothing was taken by the refused calls. */
	{
		LOCAL_OPTS(local_key_info, ki);

		CHECK_OK(local_info(s, "abi/t", &ki));
		CHECK_EQ(ki.holders, 0);
	}

	memset(&bigs, 0, sizeof(bigs));
	local_session_opts_init(&bigs.o);
	bigs.o.sz = sizeof(bigs);
	bigs.o.socket_path = b.sock;
	CHECK_OK(local_session_open(&bigs.o, &t));
	CHECK_OK(local_session_close(t));
	bigs.future = 7;
	CHECK_RC(local_session_open(&bigs.o, &t), -E2BIG);
	/* local_session_opts_init() clears a newer caller's tail too. */
	local_session_opts_init_sz(&bigs.o, sizeof(bigs));
	CHECK_EQ(bigs.future, 0);
	CHECK_EQ(bigs.o.sz, sizeof(bigs));
	CHECK(!strcmp(local_strerror(-E2BIG), strerror(E2BIG)));

	CHECK_OK(local_session_close(s));
	broker_stop(&b);
}

TEST(abi, value_goes_to_the_callers_buffer, 20)
{
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 0, .value = "0123456789", .value_len = 10);
	char small[4], big[32];
	LOCAL_OPTS(local_key_info, ki, .value_buf = small, .value_buf_size = sizeof(small));
	struct broker_proc b;
	local_session *s;

	broker_start(&b, NULL);
	s = open_session(&b, "a", 0, 0);
	CHECK_OK(local_lock(s, "abi/v", &o, NULL));
	memset(small, 'x', sizeof(small));
	CHECK_OK(local_info(s, "abi/v", &ki));
	/* Cut to the buffer, the full length in value_len (as snprintf). */
	CHECK_EQ(ki.value_len, 10);
	CHECK(!memcmp(small, "0123", 4));
	CHECK(ki.value_buf == small && ki.value_buf_size == sizeof(small));
	ki.value_buf = big;
	ki.value_buf_size = sizeof(big);
	memset(big, 0, sizeof(big));
	CHECK_OK(local_admin_info(b.sock, "abi/v", &ki, NULL));
	CHECK_EQ(ki.value_len, 10);
	CHECK(!strcmp(big, "0123456789"));
	/* No buffer: the length only. */
	ki.value_buf = NULL;
	CHECK_OK(local_info(s, "abi/v", &ki));
	CHECK_EQ(ki.value_len, 10);
	CHECK_OK(local_session_close(s));
	broker_stop(&b);
}

TEST(abi, version_at_run_time, 5)
{
	char want[32];

	snprintf(want, sizeof(want), "%d.%d.", LOCAL_VERSION_MAJOR, LOCAL_VERSION_MINOR);
	CHECK(local_version() != NULL);
	CHECK(!strcmp(local_version(), SHMLOCK_VERSION));
	CHECK(!strncmp(local_version(), want, strlen(want)));
}

#define MANY_KEYS 10000
/* What `shmlock keys` may take for 10 000 keys: the CLI's own few MiB,
 * the rows, the table. Before: 10 000 x 64 KiB of value buffers (650 MB). */
#define KEYS_RSS_LIMIT_KB (64 * 1024)

TEST(abi, keys_over_10000_keys_stays_small, 120)
{
	static const char *const flags[] = { "--max-keys", "16384", "--gc-idle", "0", NULL };
	const char *bin = getenv("SHMLOCK_CLI_BIN");
	LOCAL_OPTS(local_acquire_opts, o, .timeout_ms = 0);
	struct broker_proc b;
	struct rusage ru;
	char key[32], sockarg[160];
	local_session *s;
	int i, status;
	pid_t pid;

	if (!bin)
		FAIL_AT("SHMLOCK_CLI_BIN is not set (run through 'make test')");
	broker_start(&b, flags);
	s = open_session(&b, "many", 0, 0);
	/* Taken and released: idle keys, kept (--gc-idle 0). */
	for (i = 0; i < MANY_KEYS; i++) {
		snprintf(key, sizeof(key), "many/%05d", i);
		CHECK_OK(local_lock(s, key, &o, NULL));
		CHECK_OK(local_release(s, key));
	}
	snprintf(sockarg, sizeof(sockarg), "-socket=%s", b.sock);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		dup2(null, 1);
		execl(bin, bin, "keys", sockarg, "many/", (char *)NULL);
		_exit(127);
	}
	CHECK_EQ(wait4(pid, &status, 0, &ru), pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	printf("\n    shmlock keys over %d keys: max RSS %ld KiB\n", MANY_KEYS, ru.ru_maxrss);
	if (ru.ru_maxrss > KEYS_RSS_LIMIT_KB)
		FAIL_AT("shmlock keys took %ld KiB for %d keys (limit %d KiB)", ru.ru_maxrss,
			MANY_KEYS, KEYS_RSS_LIMIT_KB);
	CHECK_OK(local_session_close(s));
	broker_stop(&b);
}
