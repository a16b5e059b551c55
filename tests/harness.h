/* SPDX-License-Identifier: MIT */
/*
 * Test harness: CUnit reports, every test body runs in a forked child (its
 * own process group) with a deadline, so a hang or a crash fails one test
 * instead of the suite. Inside a body, use the CHECK macros: they print the
 * failure and end the child with status 1.
 */
#ifndef SHMLOCK_TEST_HARNESS_H
#define SHMLOCK_TEST_HARNESS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "liblocal.h"

struct test_case {
	const char *suite;
	const char *name;
	void (*fn)(void);
	int timeout_s;
	unsigned flags; /* TEST_ALONE, TEST_HOST */
};

/* The test runs while no other test does: it measures, or it changes what
 * every test shares (the machine's load, a unit systemd knows). */
#define TEST_ALONE 1u
/* The test sees the host's /run, /dev/shm and network, not a private copy
 * (isolate.h); it still gets its own HOME and XDG_RUNTIME_DIR. */
#define TEST_HOST 2u

/* Adds @tc to the run. Registration is unbounded: a test that cannot be
 * added (out of memory) ends the program with a message, never silently. */
void test_register(const struct test_case *tc);

/* A test: the body runs in a forked child with its own environment, under
 * a deadline of @timeout_s_ seconds. */
#define TEST(suite_, name_, timeout_s_) TEST_FLAGS(suite_, name_, timeout_s_, 0)

#define TEST_FLAGS(suite_, name_, timeout_s_, flags_)                         \
	static void test_##name_(void);                                       \
	static const struct test_case tc_##name_ = { .suite = #suite_,        \
						     .name = #name_,          \
						     .fn = test_##name_,      \
						     .timeout_s = timeout_s_, \
						     .flags = flags_ };       \
	__attribute__((constructor)) static void reg_##name_(void)            \
	{                                                                     \
		test_register(&tc_##name_);                                   \
	}                                                                     \
	static void test_##name_(void)

#define FAIL_AT(...)                                                \
	do {                                                        \
		fprintf(stderr, "    %s:%d: ", __FILE__, __LINE__); \
		fprintf(stderr, __VA_ARGS__);                       \
		fputc('\n', stderr);                                \
		_exit(1);                                           \
	} while (0)

#define CHECK(cond)                                         \
	do {                                                \
		if (!(cond))                                \
			FAIL_AT("CHECK(%s) failed", #cond); \
	} while (0)

#define CHECK_EQ(a, b)                                                            \
	do {                                                                      \
		long long a_ = (long long)(a), b_ = (long long)(b);               \
		if (a_ != b_)                                                     \
			FAIL_AT("%s == %s failed: %lld != %lld", #a, #b, a_, b_); \
	} while (0)

/* Expect a liblocal return code, printing both as text on failure. */
#define CHECK_RC(expr, want)                                                        \
	do {                                                                        \
		int r_ = (expr), w_ = (want);                                       \
		if (r_ != w_)                                                       \
			FAIL_AT("%s returned %d (%s), expected %d (%s)", #expr, r_, \
				local_strerror(r_), w_, local_strerror(w_));        \
	} while (0)

#define CHECK_OK(expr) CHECK_RC(expr, 0)

/* Milliseconds on CLOCK_MONOTONIC. */
uint64_t now_ms(void);

/*
 * Poll @cond every millisecond until it holds or @timeout_ms passes.
 * Returns whether it held. For conditions no event announces (another
 * process's state), never as a substitute for a wake-up we can wait on.
 */
#define WAIT_FOR(cond, timeout_ms)                       \
	({                                               \
		uint64_t end_ = now_ms() + (timeout_ms); \
		int ok_ = 0;                             \
		for (;;) {                               \
			if (cond) {                      \
				ok_ = 1;                 \
				break;                   \
			}                                \
			if (now_ms() >= end_)            \
				break;                   \
			usleep(1000);                    \
		}                                        \
		ok_;                                     \
	})

/*
 * "Returns at once, not after its own timeout", without a timing assertion:
 * give the call a timeout no run reaches (NEVER_MS, beyond every test's
 * deadline) and require it back within AT_ONCE_MS, far more than a loaded
 * machine or a TSan build takes for one call. A call that waited for its
 * timeout fails either way; a slow one does not.
 */
#define NEVER_MS 60000
#define AT_ONCE_MS 10000
#define CHECK_AT_ONCE(t0)                                                                          \
	do {                                                                                       \
		uint64_t took_ = now_ms() - (t0);                                                  \
		if (took_ >= AT_ONCE_MS)                                                           \
			FAIL_AT("answered after %llu ms, not at once", (unsigned long long)took_); \
	} while (0)

/* ---- child processes with a message pipe -------------------------------- */

struct child {
	pid_t pid;
	int rd; /* parent reads what the child reports */
	int wr; /* parent writes commands to the child */
};

/* Fork @fn(arg, in, out) in a child; it reports on @out and reads commands on @in. */
void child_spawn(struct child *c, void (*fn)(void *arg, int in, int out), void *arg);
/* Read one line from the child (without the newline) within @timeout_ms. */
int child_read(struct child *c, char *buf, size_t size, int timeout_ms);
/* Read a line and require it to equal @want. */
void child_expect(struct child *c, const char *want, int timeout_ms);
void child_send(struct child *c, const char *line);
/* Wait for the child to exit within @timeout_ms; returns the raw wait status. */
int child_wait(struct child *c, int timeout_ms);
/* Wait for @pid, a child of ours, to exit within @timeout_ms (else SIGKILL it
 * and fail the test); returns the raw wait status. */
int pid_wait(pid_t pid, int timeout_ms);
void child_kill(struct child *c);

/* For use inside a child: write a line / read a line (blocking). */
void say(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int hear(int fd, char *buf, size_t size);

#endif
