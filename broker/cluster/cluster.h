/* SPDX-License-Identifier: MIT */
/*
 * Cluster keys on etcd (docs/cluster.md): the broker's interface.
 * Keys under --cluster-prefix are granted on this host only while it holds
 * the key's cluster lock in etcd (the gate: cluster_gated() in keyops.h).
 */
#ifndef SHMLOCKD_CLUSTER_H
#define SHMLOCKD_CLUSTER_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

#include "segment.h"

#define CLUSTER_EP_MAX 8

struct cluster_opts {
	char endpoints[CLUSTER_EP_MAX][128]; /* http[s]://HOST:PORT */
	uint32_t nendpoints;		     /* 0: off */
	char prefixes[SEG_CLUSTER_PREFIXES][SEG_CLUSTER_PREFIX_MAX];
	uint32_t nprefixes;
	char ns[128];	  /* etcd key namespace of the lock recipe */
	char cacert[256]; /* as etcdctl's --cacert, --cert, --key */
	char cert[256];
	char key[256];
	bool insecure_skip_verify;
	char user[128]; /* as etcdctl's --user NAME[:PASSWORD], --password */
	char password[128];
	uint32_t lease_ttl_s; /* the host's etcd lease */
	uint32_t margin_ms;   /* holds end this long before the lease could expire */
	uint32_t batch;	      /* grants per acquisition while other hosts wait */
	uint32_t batch_ms;    /* ... and time */
	uint32_t linger_ms;   /* ... an idle key's, while another host waits for it */
	uint32_t idle_ms;     /* an idle key's cluster lock (or slots) kept while nobody waits */
};

enum {
	OPT_CLUSTER_FIRST = 1024,
	OPT_CLUSTER = OPT_CLUSTER_FIRST,
	OPT_CLUSTER_PREFIX,
	OPT_CLUSTER_NS,
	OPT_CLUSTER_CACERT,
	OPT_CLUSTER_CERT,
	OPT_CLUSTER_KEY,
	OPT_CLUSTER_INSECURE,
	OPT_CLUSTER_USER,
	OPT_CLUSTER_PASSWORD,
	OPT_CLUSTER_TTL,
	OPT_CLUSTER_MARGIN,
	OPT_CLUSTER_BATCH,
	OPT_CLUSTER_BATCH_MS,
	OPT_CLUSTER_LINGER,
	OPT_CLUSTER_IDLE,
	OPT_CLUSTER_LAST,
};
#define CLUSTER_NOPTS (OPT_CLUSTER_LAST - OPT_CLUSTER_FIRST)
extern const struct option cluster_long_opts[CLUSTER_NOPTS];
extern const char cluster_usage_text[];

void cluster_opts_default(struct cluster_opts *o);
/* Parse one option; 0 or -1 (message printed). */
int cluster_opt_parse(struct cluster_opts *o, int opt, const char *arg);
/* After all options: 0 or -1 (message printed). */
int cluster_opts_check(const struct cluster_opts *o);

struct broker;
/* Publish the prefixes in the segment and start the cluster threads (when
 * --cluster is given). 0 or negative error. */
int cluster_start(struct broker *b);
/* Stop them, giving up every cluster lock (idempotent). */
void cluster_stop(struct broker *b);
struct proto_op_key;
/* The broker's info of cluster key @name with no local holder: the holder
 * another host published, if any (cluster_values.c). */
void cluster_remote_fill(const char *name, size_t len, struct proto_op_key *r);

#endif
