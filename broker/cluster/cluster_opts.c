// SPDX-License-Identifier: MIT
/* Cluster keys' command-line options (shmlockd(8), docs/cluster.md). */
#include <stdio.h>
#include <string.h>

#include "cluster.h"
#include "core/options.h"
#include "duration.h"

const struct option cluster_long_opts[CLUSTER_NOPTS] = {
	{ "cluster", required_argument, NULL, OPT_CLUSTER },
	{ "cluster-prefix", required_argument, NULL, OPT_CLUSTER_PREFIX },
	{ "cluster-namespace", required_argument, NULL, OPT_CLUSTER_NS },
	{ "cluster-cacert", required_argument, NULL, OPT_CLUSTER_CACERT },
	{ "cluster-cert", required_argument, NULL, OPT_CLUSTER_CERT },
	{ "cluster-key", required_argument, NULL, OPT_CLUSTER_KEY },
	{ "cluster-insecure-skip-tls-verify", no_argument, NULL, OPT_CLUSTER_INSECURE },
	{ "cluster-user", required_argument, NULL, OPT_CLUSTER_USER },
	{ "cluster-password", required_argument, NULL, OPT_CLUSTER_PASSWORD },
	{ "cluster-lease-ttl", required_argument, NULL, OPT_CLUSTER_TTL },
	{ "cluster-margin", required_argument, NULL, OPT_CLUSTER_MARGIN },
	{ "cluster-batch", required_argument, NULL, OPT_CLUSTER_BATCH },
	{ "cluster-batch-time", required_argument, NULL, OPT_CLUSTER_BATCH_MS },
	{ "cluster-linger", required_argument, NULL, OPT_CLUSTER_LINGER },
	{ "cluster-idle", required_argument, NULL, OPT_CLUSTER_IDLE },
};

const char cluster_usage_text[] =
	"Cluster keys on etcd (off unless --cluster is given; see docs/cluster.md):\n"
	"  --cluster etcd://HOST:PORT[,HOST:PORT...]  etcd v3 endpoints (JSON\n"
	"                          gateway); etcds:// for TLS\n"
	"  --cluster-prefix PREFIX keys starting with PREFIX are cluster keys\n"
	"                          (repeatable, at most 8, each up to 63 bytes)\n"
	"  --cluster-namespace PATH  etcd keys of the lock recipe live under PATH\n"
	"                          (default shmlock/lock/)\n"
	"  --cluster-cacert FILE   verify etcd's certificate with this CA bundle\n"
	"  --cluster-cert FILE     client certificate (PEM) for etcd\n"
	"  --cluster-key FILE      its private key (PEM)\n"
	"  --cluster-insecure-skip-tls-verify  do not verify etcd's certificate\n"
	"  --cluster-user NAME[:PASSWORD]  etcd authentication, as etcdctl --user\n"
	"  --cluster-password PASSWORD  the password, as etcdctl --password\n"
	"  --cluster-lease-ttl SECONDS  the host's etcd lease (default 10, 2..3600)\n"
	"  --cluster-margin MS     local holds of cluster keys end this long before\n"
	"                          the lease could expire at etcd when it cannot be\n"
	"                          renewed (default: a fifth of the TTL, at least\n"
	"                          1000; less than 2/3 of the TTL)\n"
	"  --cluster-batch N       while other hosts wait, hand a cluster key among\n"
	"                          local waiters at most N times (default 1000)\n"
	"  --cluster-batch-time MS ... or for at most MS milliseconds (default 100)\n"
	"  --cluster-linger MS     while another host waits for a cluster key, keep\n"
	"                          it this long after its local queue empties, in\n"
	"                          case a local process comes back within the batch\n"
	"                          (default 0: give it up at once)\n"
	"  --cluster-idle DURATION while no other host waits, keep a cluster key's\n"
	"                          lock (a semaphore's slots) until it has been idle\n"
	"                          this long (default 30s; \"500ms\", \"2m\", or seconds;\n"
	"                          0: give it up as soon as it is idle; at most 24h)\n";

void cluster_opts_default(struct cluster_opts *o)
{
	memset(o, 0, sizeof(*o));
	strcpy(o->ns, "shmlock/lock/");
	o->lease_ttl_s = 10;
	o->batch = 1000;
	o->batch_ms = 100;
	o->linger_ms = 0;
	o->idle_ms = 30000;
}

/* A duration option (libshm/duration.c: "30s", "500ms", or seconds), in ms. */
static int opt_duration_ms(const char *name, const char *arg, uint32_t max_ms, uint32_t *out)
{
	const char *why = NULL;
	int64_t ns;

	if (duration_parse_or_seconds(arg, &ns, &why)) {
		fprintf(stderr, "shmlockd: --%s: '%s': %s\n", name, arg, why);
		return -1;
	}
	if (ns < 0 || duration_ms(ns) > (int64_t)max_ms) {
		fprintf(stderr, "shmlockd: --%s: '%s': out of range (0 to %u ms)\n", name, arg,
			max_ms);
		return -1;
	}
	*out = (uint32_t)duration_ms(ns);
	return 0;
}

static int parse_endpoints(struct cluster_opts *o, const char *arg)
{
	const char *scheme = "http://", *p = arg, *end;

	if (!strncmp(arg, "etcd://", 7)) {
		p = arg + 7;
	} else if (!strncmp(arg, "etcds://", 8)) {
		p = arg + 8;
		scheme = "https://";
	} else {
		fprintf(stderr, "shmlockd: --cluster: expected etcd://HOST:PORT[,HOST:PORT...]\n");
		return -1;
	}
	o->nendpoints = 0;
	while (*p) {
		size_t n;

		end = strchr(p, ',');
		n = end ? (size_t)(end - p) : strlen(p);
		if (!n || n > 100 || o->nendpoints == CLUSTER_EP_MAX || !memchr(p, ':', n) ||
		    memchr(p, '/', n)) {
			fprintf(stderr,
				"shmlockd: --cluster: bad endpoint list '%s' (at most %d "
				"HOST:PORT)\n",
				arg, CLUSTER_EP_MAX);
			return -1;
		}
		snprintf(o->endpoints[o->nendpoints++], sizeof(o->endpoints[0]), "%s%.*s", scheme,
			 (int)n, p);
		p += n;
		if (*p == ',')
			p++;
	}
	if (!o->nendpoints) {
		fprintf(stderr, "shmlockd: --cluster: no endpoint\n");
		return -1;
	}
	return 0;
}

int cluster_opt_parse(struct cluster_opts *o, int opt, const char *arg)
{
	switch (opt) {
	case OPT_CLUSTER:
		return parse_endpoints(o, arg);
	case OPT_CLUSTER_PREFIX:
		if (o->nprefixes == SEG_CLUSTER_PREFIXES) {
			fprintf(stderr, "shmlockd: --cluster-prefix: at most %d\n",
				SEG_CLUSTER_PREFIXES);
			return -1;
		}
		return opt_string("cluster-prefix", arg, o->prefixes[o->nprefixes++],
				  SEG_CLUSTER_PREFIX_MAX);
	case OPT_CLUSTER_NS:
		return opt_string("cluster-namespace", arg, o->ns, sizeof(o->ns));
	case OPT_CLUSTER_CACERT:
		return opt_string("cluster-cacert", arg, o->cacert, sizeof(o->cacert));
	case OPT_CLUSTER_CERT:
		return opt_string("cluster-cert", arg, o->cert, sizeof(o->cert));
	case OPT_CLUSTER_KEY:
		return opt_string("cluster-key", arg, o->key, sizeof(o->key));
	case OPT_CLUSTER_INSECURE:
		o->insecure_skip_verify = true;
		return 0;
	case OPT_CLUSTER_USER: {
		const char *colon = strchr(arg, ':');

		if (opt_string("cluster-user", arg, o->user, sizeof(o->user)))
			return -1;
		if (colon) {
			o->user[colon - arg] = '\0';
			return opt_string("cluster-user", colon + 1, o->password,
					  sizeof(o->password));
		}
		return 0;
	}
	case OPT_CLUSTER_PASSWORD:
		return opt_string("cluster-password", arg, o->password, sizeof(o->password));
	case OPT_CLUSTER_TTL:
		return opt_number("cluster-lease-ttl", arg, 2, 3600, &o->lease_ttl_s);
	case OPT_CLUSTER_MARGIN:
		return opt_number("cluster-margin", arg, 1, 3600000, &o->margin_ms);
	case OPT_CLUSTER_BATCH:
		return opt_number("cluster-batch", arg, 1, 1u << 20, &o->batch);
	case OPT_CLUSTER_BATCH_MS:
		return opt_number("cluster-batch-time", arg, 1, 3600000, &o->batch_ms);
	case OPT_CLUSTER_LINGER:
		return opt_number("cluster-linger", arg, 0, 60000, &o->linger_ms);
	case OPT_CLUSTER_IDLE:
		return opt_duration_ms("cluster-idle", arg, 86400000u, &o->idle_ms);
	}
	return -1;
}

int cluster_opts_check(const struct cluster_opts *o)
{
	if (!o->nendpoints) {
		if (o->nprefixes) {
			fprintf(stderr, "shmlockd: --cluster-prefix needs --cluster\n");
			return -1;
		}
		return 0;
	}
	if (!o->nprefixes) {
		fprintf(stderr, "shmlockd: --cluster needs at least one --cluster-prefix\n");
		return -1;
	}
	/* The lease is renewed every TTL/3: a margin of 2/3 TTL or more puts
	 * the local deadline before the next renewal, and every host would
	 * give its holds up at every turn. */
	if (o->margin_ms && (uint64_t)o->margin_ms * 3 >= (uint64_t)o->lease_ttl_s * 2000u) {
		fprintf(stderr, "shmlockd: --cluster-margin must be less than two thirds of the "
				"lease TTL (the lease is renewed every third)\n");
		return -1;
	}
	if (o->password[0] && !o->user[0]) {
		fprintf(stderr, "shmlockd: --cluster-password needs --cluster-user\n");
		return -1;
	}
	return 0;
}
