/* SPDX-License-Identifier: MIT */
/*
 * A minimal client of dflockd's TCP line protocol for the tests (tcp_fixture.c).
 */
#ifndef SHMLOCK_TEST_TCP_FIXTURE_H
#define SHMLOCK_TEST_TCP_FIXTURE_H

#include <string.h>

/* A connected socket to 127.0.0.1:@port, or -1. */
int try_connect(int port);
/* Send one request: @cmd, @key, @arg, each ended by '\n'; fails the test if
 * it cannot. */
void tsend(int fd, const char *cmd, const char *key, const char *arg);
/* One reply line (without '\n'; static), or "<EOF>"; fails after @timeout_ms
 * (tline: 10 s). */
char *tline_within(int fd, int timeout_ms);
char *tline(int fd);
/* tsend() and tline(). */
char *treq(int fd, const char *cmd, const char *key, const char *arg);

#define CHECK_STR(a, b)                                                           \
	do {                                                                      \
		const char *sa_ = (a), *sb_ = (b);                                \
		if (strcmp(sa_, sb_))                                             \
			FAIL_AT("%s == \"%s\" failed: got \"%s\"", #a, sb_, sa_); \
	} while (0)

#define CHECK_PREFIX(a, p)                                                                 \
	do {                                                                               \
		const char *sa_ = (a), *sp_ = (p);                                         \
		if (strncmp(sa_, sp_, strlen(sp_)))                                        \
			FAIL_AT("%s starts with \"%s\" failed: got \"%s\"", #a, sp_, sa_); \
	} while (0)

#endif
