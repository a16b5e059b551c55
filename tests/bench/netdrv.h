/* SPDX-License-Identifier: MIT */
/*
 * The client driver shared by the network sections (8: HTTP, 11: dflockd's
 * TCP protocol): N client threads, each with one connection, warmed up,
 * released together through a barrier, timed for a fixed run; latency per
 * op, ops/s, and the CPU the broker process (and the clients) used per op.
 *
 * A section describes its protocol with a struct net_proto: the size of
 * its per-client state (which begins with a struct net_client), how a
 * client opens (connect, session), does one op (acquire+release) and
 * closes. Everything else (threads, barrier, timing, percentiles, CPU
 * accounting, the table) is here, once.
 */
#ifndef SHMLOCK_BENCH_NETDRV_H
#define SHMLOCK_BENCH_NETDRV_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define NET_IO_TIMEOUT_S 5 /* a request that takes longer is an error */
/* A wait on the shared key: long enough never to time out in a run. */
#define NET_SHARED_WAIT_S 10

/* The client counts of every network section. */
extern const int net_clients[];
extern const int net_nclients;

struct net_client {
	pthread_t thread;
	int idx;       /* 0..n-1 */
	bool shared;   /* every client on one key (waits), else a key each */
	int fd;	       /* the connection (-1: none) */
	char in[4096]; /* the last answer */
	size_t in_len;
	double *lat; /* us per op, timed ops only */
	size_t nlat, cap;
	uint64_t last_end;
	char err[200];
};

struct net_proto {
	const char *name;   /* in error messages */
	size_t client_size; /* >= sizeof(struct net_client), which comes first */
	int warm_ops;	    /* per client, before the barrier (shared key: a tenth) */
	/* Each returns 0, or -1 with c->err set (net_fail()). */
	int (*open)(struct net_client *c);
	int (*op)(struct net_client *c);
	void (*close)(struct net_client *c); /* after the run; frees its own state */
};

struct net_run {
	int n;
	bool shared;
	uint64_t ns, ops;
	double ops_s, p50, p99, max;
	double broker_us, broker_pct, client_us; /* per op; busy: % of one CPU */
	double broker_csw; /* context switches of the broker's loop thread per op */
};

int __attribute__((format(printf, 2, 3))) net_fail(struct net_client *c, const char *fmt, ...);

/* A free TCP port on 127.0.0.1 (bound and closed). */
int net_free_port(void);
/* Connect c->fd to 127.0.0.1:@port: TCP_NODELAY, NET_IO_TIMEOUT_S each way. */
int net_connect(struct net_client *c, int port);
/* Send all of @buf (EINTR retried). */
int net_send_all(struct net_client *c, const char *buf, size_t len);
/* The key of @c: "<prefix>-<idx>", or "<prefix>-shared". */
void net_key(const struct net_client *c, const char *prefix, char *out, size_t size);

struct broker;

/*
 * Until @up() says the broker @b answers on @port (a TCP service it starts
 * after its socket); fatal (with its log) if it exits or takes longer than
 * STEP_TIMEOUT_MS. @up() may leave a reason in @err.
 */
void net_wait_up(struct broker *b, const char *what, int port,
		 bool (*up)(int port, char *err, size_t size));

/*
 * Run @n clients of @p against the broker @broker_pid for @run_ns: open
 * each, warm up, barrier, time, close. A client error is fatal (the broker
 * is stopped with its log by @on_fatal first, if given).
 */
void net_run_config(const struct net_proto *p, pid_t broker_pid, int n, bool shared,
		    uint64_t run_ns, void (*on_fatal)(void), struct net_run *r);

/*
 * Is this configuration run? $SHMLOCK_BENCH_NET_CLIENTS (a list of client
 * counts, "1,200") and $SHMLOCK_BENCH_NET_KEYS ("own" or "shared") narrow
 * the runs, for profiling one of them; unset, all run.
 */
bool net_wanted(int n, bool shared);

/* The table: the header, then one row a run. @with_client: a cli CPU column. */
void net_print_header(bool with_client);
void net_print_row(const char *label, const struct net_run *r, bool with_client);

/*
 * The broker's own share: for each run of @runs with a floor run of the
 * same client count and key mode in @floor, broker CPU per op minus the
 * floor's (a server that does nothing on the same system calls).
 */
void net_print_above_floor(const char *what, const struct net_run *runs, int nruns,
			   const struct net_run *floor, int nfloor);

/* One target a key mode: the most broker CPU per op of @runs <= @max_us. */
void net_cpu_targets(const char *what, const struct net_run *runs, int nruns, double max_us);

#endif
