/* SPDX-License-Identifier: MIT */
/*
 * A real 3-member etcd cluster for a test (cluster keys, docs/cluster.md):
 * etcd-server members on free loopback ports, their data in a temporary
 * directory, and the few v3 API calls the tests use to look at it.
 *
 * etcd dies with the test: the members are in the test's process group,
 * which the runner kills whatever happens, and have PR_SET_PDEATHSIG; their
 * directory is named as the runner's sweep of leftovers expects.
 */
#ifndef SHMLOCK_TEST_ETCD_FIXTURE_H
#define SHMLOCK_TEST_ETCD_FIXTURE_H

#include <stdbool.h>
#include <sys/types.h>

#define ETCD_OUT 4096 /* the size of an answer buffer */

struct etcd3 {
	char dir[96];
	pid_t pid[3]; /* 0: not running */
	int cport[3], pport[3];
	char eps[160]; /* etcd://127.0.0.1:P,... for --cluster */
};

/* Start the three members (fresh directory and ports); fails the test
 * unless each answers healthy within 15 s. */
void etcd3_start(struct etcd3 *e);
/* Start member @i again (a restart: its names, ports and data kept);
 * etcd3_wait_healthy() waits for all three. */
void etcd3_spawn(struct etcd3 *e, int i);
void etcd3_wait_healthy(struct etcd3 *e);
/* SIGKILL member @i and reap it. */
void etcd3_kill(struct etcd3 *e, int i);
/* Send @sig to every running member (SIGSTOP, SIGCONT). */
void etcd3_signal(struct etcd3 *e, int sig);
/* Kill every member and remove the directory. */
void etcd3_stop(struct etcd3 *e);

/* POST @body (NULL: GET) to member @port's @path; the answer in @out
 * (ETCD_OUT bytes, cut there). 0 on HTTP 200, else -1. */
int etcd_req(int port, const char *path, const char *body, char *out);
/* Is member @i the raft leader? -1: no answer. */
int etcd_is_leader(const struct etcd3 *e, int i);

/* The range of keys under @prefix hex(@key) @suffix (@suffix ends in '/'),
 * asked of the first member that answers: the answer in @out (ETCD_OUT
 * bytes); -1: no answer from any member. */
int etcd_range_under(const struct etcd3 *e, const char *prefix, const char *key, const char *suffix,
		     bool count_only, char *out);
/* How many keys lie under it (-1: no answer from any member). */
int etcd_count_under(const struct etcd3 *e, const char *prefix, const char *key,
		     const char *suffix);
/* The lease of the first key under it (0: none, or no answer). */
long long etcd_lease_under(const struct etcd3 *e, const char *prefix, const char *key,
			   const char *suffix);
/* @in in base64 (how the v3 JSON API spells keys and values) into @out
 * (4 * ceil(strlen(@in) / 3) + 1 bytes). */
void etcd_b64(const char *in, char *out);
/* Revoke lease @lease (a host's: as if it expired); fails the test when no
 * member does. */
void etcd_revoke(const struct etcd3 *e, long long lease);

#endif
