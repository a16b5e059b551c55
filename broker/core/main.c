// SPDX-License-Identifier: MIT
/* shmlockd: command line, start-up and shutdown. See shmlockd(8). */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "broker.h"
#include "net/net.h"
#include "conns.h"
#include "clock.h"
#include "faces/metrics/metrics.h"
#include "faces/ui/ui.h"
#include "paths.h"

#ifndef SHMLOCK_VERSION
#define SHMLOCK_VERSION "0.1.0"
#endif

static const char usage_text[] =
	"Usage: shmlockd [OPTION]...\n"
	"Run the shmlock broker: own the shared-memory segment, open and close\n"
	"sessions, release the holds of processes that die, run TTL and lock-delay\n"
	"timers.\n"
	"\n"
	"  --socket PATH           control socket (default: $SHMLOCK_SOCKET, else\n"
	"                          /run/shmlock/shmlockd.sock for root, else\n"
	"                          $XDG_RUNTIME_DIR/shmlock/shmlockd.sock, else\n"
	"                          /run/user/UID/shmlock/shmlockd.sock); missing\n"
	"                          directories are created only under the runtime\n"
	"                          directory ($XDG_RUNTIME_DIR, else /run for root)\n"
	"  --shm-name NAME         the segment's label (a sealed memfd, kept by a\n"
	"                          keeper at SOCKET.keep; default /shmlock for root,\n"
	"                          /shmlock-UID otherwise)\n"
	"  --max-keys N            key table size (default 4096)\n"
	"  --max-sessions N        session table size (default 1024)\n"
	"  --max-waiters N         queued requests at once (default 4096)\n"
	"  --max-holds N           holds at once (default 4096)\n"
	"  --max-value BYTES       largest value attached to a hold (default 1024,\n"
	"                          at most 65536)\n"
	"  --gc-idle SECONDS       reclaim keys idle this long (default 60; 0: only\n"
	"                          when the key table is full)\n"
	"  --socket-group GROUP    give the socket (0660) to GROUP (the segment is\n"
	"                          always 0600: clients get it over the socket)\n"
	"  --allow-uid UID[,UID]   only these users (and root and the broker's own)\n"
	"                          may open sessions and act as operators\n"
	"  --allow-gid GID[,GID]   ... or members of these groups\n"
	"  --log-level LEVEL       emerg..debug (default info)\n"
	"  --destroy-segment-on-exit  end the segment (and its keeper) when stopping\n"
	"  --replace-segment       replace a segment this broker will not use (other\n"
	"                          layout, rejected header) or that was lost once no\n"
	"                          process it sees maps it: your word for those it\n"
	"                          cannot inspect\n"
	"  --replace-wait SECONDS  wait this long for the processes that still map\n"
	"                          such a segment to exit (default 0)\n"
	"  --metrics-listen [HOST:]PORT  serve GET /metrics (Prometheus text) and\n"
	"                          nothing else on TCP (host default 127.0.0.1);\n"
	"                          or a socket-activated fd named \"metrics\"\n"
	"  --check                 validate the segment of the broker at --socket\n"
	"                          read-only, report what is wrong and exit\n"
	"                          (changes nothing)\n"
	"  -h, --help              show this help and exit\n"
	"  -V, --version           show the version and exit\n"
	"\n"
	"Exit status: 0 after a clean stop, 1 on a usage, start-up or fatal error,\n"
	"3 a segment that must be replaced, or was lost, is still mapped by live\n"
	"processes, 5 a socket path in a directory other users can change.\n"
	"With --check: 0 healthy, 1 the segment cannot be read, 2 problems found.\n";

enum {
	OPT_SOCKET = 256,
	OPT_SHM,
	OPT_KEYS,
	OPT_SESSIONS,
	OPT_WAITERS,
	OPT_HOLDS,
	OPT_VALUE,
	OPT_LOG,
	OPT_DESTROY,
	OPT_FALLBACK,
	OPT_GC,
	OPT_CHECK,
	OPT_GROUP,
	OPT_ALLOW_UID,
	OPT_ALLOW_GID,
	OPT_REPLACE,
	OPT_REPLACE_WAIT,
	OPT_METRICS_LISTEN
};

static const struct option base_opts[] = {
	{ "socket", required_argument, NULL, OPT_SOCKET },
	{ "shm-name", required_argument, NULL, OPT_SHM },
	{ "max-keys", required_argument, NULL, OPT_KEYS },
	{ "max-sessions", required_argument, NULL, OPT_SESSIONS },
	{ "max-waiters", required_argument, NULL, OPT_WAITERS },
	{ "max-holds", required_argument, NULL, OPT_HOLDS },
	{ "max-value", required_argument, NULL, OPT_VALUE },
	{ "log-level", required_argument, NULL, OPT_LOG },
	{ "gc-idle", required_argument, NULL, OPT_GC },
	{ "socket-group", required_argument, NULL, OPT_GROUP },
	{ "allow-uid", required_argument, NULL, OPT_ALLOW_UID },
	{ "allow-gid", required_argument, NULL, OPT_ALLOW_GID },
	{ "destroy-segment-on-exit", no_argument, NULL, OPT_DESTROY },
	{ "test-force-pidfd-fallback", no_argument, NULL, OPT_FALLBACK },
	{ "check", no_argument, NULL, OPT_CHECK },
	{ "replace-segment", no_argument, NULL, OPT_REPLACE },
	{ "replace-wait", required_argument, NULL, OPT_REPLACE_WAIT },
	{ "metrics-listen", required_argument, NULL, OPT_METRICS_LISTEN },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
};
#define NBASE (sizeof(base_opts) / sizeof(base_opts[0]))

/* base_opts, then the HTTP API's, the TCP protocol's, then the terminator. */
static struct option long_opts[NBASE + HTTP_NOPTS + TCP_NOPTS + CONSUL_NOPTS + CLUSTER_NOPTS + 1];

static void build_opts(void)
{
	memcpy(long_opts, base_opts, sizeof(base_opts));
	memcpy(long_opts + NBASE, http_long_opts, sizeof(http_long_opts));
	memcpy(long_opts + NBASE + HTTP_NOPTS, tcp_long_opts, sizeof(tcp_long_opts));
	memcpy(long_opts + NBASE + HTTP_NOPTS + TCP_NOPTS, consul_long_opts,
	       sizeof(consul_long_opts)); /* the Consul API (consul_opts.c) */
	memcpy(long_opts + NBASE + HTTP_NOPTS + TCP_NOPTS + CONSUL_NOPTS, cluster_long_opts,
	       sizeof(cluster_long_opts)); /* cluster keys on etcd (cluster_opts) */
}

static int parse_u32(const char *name, const char *s, uint32_t *out)
{
	unsigned long long v;
	char *end;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *s == '-' || !*s || *end || v > UINT32_MAX) {
		fprintf(stderr, "shmlockd: --%s: not a number in range: '%s'\n", name, s);
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

static int copy_opt(const char *name, const char *s, char *dst, size_t size)
{
	if (strlen(s) >= size) {
		fprintf(stderr, "shmlockd: --%s: too long\n", name);
		return -1;
	}
	strcpy(dst, s);
	return 0;
}

static int parse_args(int argc, char **argv, struct broker_opts *o)
{
	int c, lvl;

	o->caps = (struct seg_caps){ .max_keys = 4096,
				     .max_sessions = 1024,
				     .max_waiters = 4096,
				     .max_holds = 4096,
				     .max_value = 1024 };
	o->log_level = LOG_INFO;
	o->gc_idle_ms = 60000;
	http_opts_default(&o->http);
	tcp_opts_default(&o->tcp);
	consul_opts_default(&o->consul);
	cluster_opts_default(&o->cluster);
	build_opts();
	paths_socket(o->socket_path, sizeof(o->socket_path));
	paths_shm_name(o->shm_name, sizeof(o->shm_name));
	while ((c = getopt_long(argc, argv, "hV", long_opts, NULL)) != -1) {
		int err = 0;

		switch (c) {
		case OPT_SOCKET:
			err = copy_opt("socket", optarg, o->socket_path, sizeof(o->socket_path));
			break;
		case OPT_SHM:
			err = copy_opt("shm-name", optarg, o->shm_name, sizeof(o->shm_name));
			if (!err && (o->shm_name[0] != '/' || strchr(o->shm_name + 1, '/'))) {
				fprintf(stderr, "shmlockd: --shm-name: must be /NAME\n");
				err = -1;
			}
			break;
		case OPT_KEYS:
			err = parse_u32("max-keys", optarg, &o->caps.max_keys);
			break;
		case OPT_SESSIONS:
			err = parse_u32("max-sessions", optarg, &o->caps.max_sessions);
			break;
		case OPT_WAITERS:
			err = parse_u32("max-waiters", optarg, &o->caps.max_waiters);
			break;
		case OPT_HOLDS:
			err = parse_u32("max-holds", optarg, &o->caps.max_holds);
			break;
		case OPT_VALUE:
			err = parse_u32("max-value", optarg, &o->caps.max_value);
			break;
		case OPT_GROUP:
			err = access_parse_group(optarg, &o->group);
			o->have_group = !err;
			if (err)
				fprintf(stderr, "shmlockd: --socket-group: no such group '%s'\n",
					optarg);
			break;
		case OPT_ALLOW_UID:
			err = access_parse_ids(optarg, o->allow_uid, &o->nallow_uid);
			if (err)
				fprintf(stderr, "shmlockd: --allow-uid: bad list '%s'\n", optarg);
			break;
		case OPT_ALLOW_GID:
			err = access_parse_ids(optarg, o->allow_gid, &o->nallow_gid);
			if (err)
				fprintf(stderr, "shmlockd: --allow-gid: bad list '%s'\n", optarg);
			break;
		case OPT_GC:
			err = parse_u32("gc-idle", optarg, &o->gc_idle_ms);
			if (!err && o->gc_idle_ms > 86400) {
				fprintf(stderr, "shmlockd: --gc-idle: at most 86400 seconds\n");
				err = -1;
			}
			o->gc_idle_ms *= 1000;
			break;
		case OPT_LOG:
			lvl = blog_parse_level(optarg);
			if (lvl < 0) {
				fprintf(stderr, "shmlockd: --log-level: unknown level '%s'\n",
					optarg);
				err = -1;
			}
			o->log_level = lvl;
			break;
		case OPT_DESTROY:
			o->destroy_segment_on_exit = true;
			break;
		case OPT_FALLBACK:
			o->force_pidfd_fallback = true;
			break;
		case OPT_CHECK:
			o->check = true;
			break;
		case OPT_REPLACE:
			o->replace_segment = true;
			break;
		case OPT_METRICS_LISTEN:
			if (strlen(optarg) >= sizeof(o->metrics_listen) || !optarg[0]) {
				fprintf(stderr,
					"shmlockd: --metrics-listen: [HOST:]PORT expected\n");
				err = -1;
				break;
			}
			strcpy(o->metrics_listen, optarg);
			break;
		case OPT_REPLACE_WAIT:
			err = parse_u32("replace-wait", optarg, &o->replace_wait_ms);
			if (!err && o->replace_wait_ms > 86400) {
				fprintf(stderr,
					"shmlockd: --replace-wait: at most 86400 seconds\n");
				err = -1;
			}
			o->replace_wait_ms *= 1000;
			break;
		case 'h':
			fputs(usage_text, stdout);
			fputs("\n", stdout);
			fputs(http_usage_text, stdout);
			fputs("\n", stdout);
			fputs(tcp_usage_text, stdout);
			fputs("\n", stdout);
			fputs(consul_usage_text, stdout);
			fputs("\n", stdout);
			fputs(cluster_usage_text, stdout);
			exit(0);
		case 'V':
			printf("shmlockd %s (segment ABI %u, protocol %u)\n", SHMLOCK_VERSION,
			       SEG_ABI, PROTO_VERSION);
			exit(0);
		default:
			if (c >= OPT_HTTP_FIRST && c < OPT_HTTP_LAST)
				err = http_opt_parse(&o->http, c, optarg);
			else if (c >= OPT_TCP_FIRST && c < OPT_TCP_LAST)
				err = tcp_opt_parse(&o->tcp, c, optarg);
			else if (c >= OPT_CONSUL_FIRST && c < OPT_CONSUL_LAST)
				err = consul_opt_parse(&o->consul, c, optarg);
			else if (c >= OPT_CLUSTER_FIRST && c < OPT_CLUSTER_LAST)
				err = cluster_opt_parse(&o->cluster, c, optarg);
			else
				err = -1;
		}
		if (err)
			return -1;
	}
	if (optind < argc) {
		fprintf(stderr, "shmlockd: unexpected argument '%s'\n", argv[optind]);
		return -1;
	}
	if (cluster_opts_check(&o->cluster))
		return -1;
	if (seg_caps_valid(&o->caps)) {
		fprintf(stderr, "shmlockd: capacities out of range (see --help)\n");
		return -1;
	}
	return 0;
}

/*
 * --http-insecure-no-auth and --tcp-insecure-no-auth say "every local user
 * may take any lock". On an address other than loopback that is every host
 * that can reach it too: say so at start, where an operator looks.
 */
static void warn_exposed(const struct broker_opts *o)
{
	if (o->http.listen[0] && !o->http.auth_token[0] && o->http.insecure_no_auth &&
	    !listen_spec_loopback(o->http.listen))
		blog(LOG_WARNING,
		     "--http-listen %s is not a loopback address and "
		     "--http-insecure-no-auth is set: every host that reaches it may take, "
		     "release and read any lock; set --auth-token-file",
		     o->http.listen);
	if (o->tcp.listen[0] && !o->http.auth_token[0] && o->tcp.insecure_no_auth &&
	    !listen_spec_loopback(o->tcp.listen))
		blog(LOG_WARNING,
		     "--tcp-listen %s is not a loopback address and "
		     "--tcp-insecure-no-auth is set: every host that reaches it may take and "
		     "release any lock; set --auth-token-file",
		     o->tcp.listen);
}

int main(int argc, char **argv)
{
	struct broker b;
	sigset_t sigs;
	int err;

	memset(&b, 0, sizeof(b));
	b.lease_efd = -1;
	b.shm_fd = b.keep_fd = b.lock_fd = b.listen_fd = b.epfd = b.timerfd = b.sigfd = -1;
	if (parse_args(argc, argv, &b.opts)) {
		fputs("Try 'shmlockd --help'.\n", stderr);
		return 1;
	}
	blog_set_level(b.opts.log_level);
	if (b.opts.check)
		return check_segment(&b.opts);
	warn_exposed(&b.opts);
	/* Before any thread exists (liburcu starts one in sessions_init()):
	 * a thread created with these unblocked could take a SIGTERM sent
	 * right after READY=1 and die of it instead of the loop reading it. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	sigprocmask(SIG_BLOCK, &sigs, NULL);
	/* The faces, in the order they start (and stop in reverse). */
	face_register(&b, &http_face); /* first: it starts the HTTP engine */
	face_register(&b, &consul_face);
	face_register(&b, &ui_face);
	face_register(&b, &tcp_face);
	face_register(&b, &metrics_face);
	urcu_memb_register_thread();
	b.started_ns = mono_ns();
	delay_notes_init();
	/* The keeper lives beside the socket served: a broker started by
	 * socket activation must not use the default path's (every such
	 * broker would share it, and attach each other's segments). */
	listen_use_activated_path(&b);
	err = shm_setup(&b);
	/* Work done through liblocal (the HTTP API) must not wait for ever on
	 * a key mutex either: a client may be stopped inside one. */
	b.seg.lock_timeout_ms = BROKER_LOCK_MS;
	if (!err)
		err = sessions_init(&b);
	if (!err)
		err = listen_setup(&b);
	if (!err)
		err = cluster_start(&b); /* before serving: keys must start gated */
	if (!err) {
		atomic_store(&b.seg.hdr->broker_pid, (uint32_t)getpid());
		atomic_store(&b.seg.hdr->broker_started_ns, b.started_ns);
		err = loop_run(&b);
	}
	/* loop_run() stops the faces and the lease thread on a clean stop; a
	 * start-up step of it that failed (an HTTP socket refused) leaves the
	 * lease thread running, which must not outlive the segment's mapping.
	 * Both calls are idempotent. */
	faces_stop(&b);
	cluster_stop(&b);
	leases_stop(&b);
	conns_fini(&b); /* idempotent too */
	loop_watches_free(&b);
	listen_teardown(&b);
	if (b.by_id)
		sessions_fini(&b);
	timer_free(&b.timers);
	shm_teardown(&b);
	urcu_memb_unregister_thread();
	if (err) {
		blog(LOG_ERR, "exiting: %s", local_strerror(err));
		return b.exit_code ? b.exit_code : 1;
	}
	return 0;
}
