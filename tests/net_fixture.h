/* SPDX-License-Identifier: MIT */
/*
 * Helpers the tests of the network listeners share (HTTP, Consul, TCP,
 * metrics, `shmlock status`): a free loopback port for a broker to listen
 * on, and formatted strings for URLs, bodies and flags.
 */
#ifndef SHMLOCK_TEST_NET_FIXTURE_H
#define SHMLOCK_TEST_NET_FIXTURE_H

/* A free loopback TCP port below the kernel's ephemeral range (so that no
 * outgoing connection takes it before the server binds it), a different one
 * at each call. Fails the test when none can be had. */
int free_port(void);

/* A formatted string on the heap (tests are short-lived children: callers
 * may leave it). Fails the test when out of memory. */
char *strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
