// SPDX-License-Identifier: MIT
/*
 * The metrics-only listener: `--metrics-listen [HOST:]PORT`, or a stream
 * socket passed by the service manager with FileDescriptorName=metrics. It
 * answers GET /metrics (Prometheus text format, version 0.0.4) and nothing
 * else: no lock, session or key route, so it can be opened to a monitoring
 * network without handing out the lock API. libmicrohttpd runs on the
 * broker's event loop through its epoll fd, as the HTTP API does; caps per
 * peer and the deadline for a whole request head are broker/net/'s, as
 * for the HTTP API.
 */
#include <errno.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <syslog.h>
#include <unistd.h>

#include "core/broker.h"
#include "clock.h"
#include "faces/http/http.h"
#include "metrics.h"
#include "net/net.h"

#define METRICS_MAX_CONNECTIONS 64
#define METRICS_MAX_PER_PEER 32
#define METRICS_CONNECTION_TIMEOUT_S 10
#define METRICS_TICK_NS 1000000000ull
#define RUNS_PER_EVENT 32
#define TIMER_METRICS_TICK 1 /* periodic: run the listener's timeouts */

struct metrics {
	struct MHD_Daemon *d;
	int fd;
	struct net_pool pool;
};

/* A connection's record (MHD's socket context). */
struct mconn {
	struct net_conn nc;
};

static struct mconn *mconn_of(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return ci ? ci->socket_context : NULL;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_ctx,
			  enum MHD_ConnectionNotificationCode what)
{
	struct broker *b = cls;
	struct metrics *m = b->metrics;
	struct mconn *mc = *socket_ctx;

	if (what == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
		struct net_peer p;
		struct net_conn *out;

		mc = ci ? calloc(1, sizeof(*mc)) : NULL;
		*socket_ctx = mc;
		if (!mc)
			return;
		net_peer_of(b, ci->connect_fd, &p);
		mc->nc.fd = ci->connect_fd;
		mc->nc.owner = mc;
		memcpy(mc->nc.key, p.key, sizeof(mc->nc.key));
		out = net_pool_add(&m->pool, &mc->nc, mono_ns());
		if (out)
			net_conn_doom(&m->pool, out); /* the new one, or an unfinished head */
		return;
	}
	if (mc)
		net_pool_del(&m->pool, &mc->nc);
	free(mc);
	*socket_ctx = NULL;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode why)
{
	struct broker *b = cls;
	struct mconn *mc = mconn_of(c);

	(void)con_cls;
	if (mc && why == MHD_REQUEST_TERMINATED_COMPLETED_OK)
		net_pool_pending(&b->metrics->pool, &mc->nc, mono_ns());
}

static enum MHD_Result answer(struct MHD_Connection *c, unsigned status, const char *type,
			      const char *text, bool owned, const char *allow)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;

	resp = MHD_create_response_from_buffer(
		strlen(text), (void *)text, owned ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
	if (!resp) {
		if (owned)
			free((void *)text);
		return MHD_NO;
	}
	MHD_add_response_header(resp, "Content-Type", type);
	if (allow)
		MHD_add_response_header(resp, "Allow", allow);
	ret = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_size, void **con_cls)
{
	struct broker *b = cls;
	struct text t = { NULL, 0, 0 };

	(void)version;
	(void)upload_data;
	/* A body (of a request refused anyway) is read and dropped. */
	if (*upload_size) {
		*upload_size = 0;
		return MHD_YES;
	}
	if (!*con_cls) {
		struct mconn *mc = mconn_of(c);

		if (mc && b->metrics)
			net_pool_ready(&b->metrics->pool, &mc->nc);
		*con_cls = c; /* headers in: answer on the next call, body or not */
		return MHD_YES;
	}
	if (strcmp(url, "/metrics"))
		return answer(c, 404, "text/plain",
			      "not found: this listener serves /metrics only\n", false, NULL);
	if (strcmp(method, "GET") && strcmp(method, "HEAD"))
		return answer(c, 405, "text/plain", "method not allowed\n", false, "GET, HEAD");
	metrics_render_broker(b, &t);
	if (!t.p)
		return answer(c, 500, "text/plain", "out of memory\n", false, NULL);
	return answer(c, 200, "text/plain; version=0.0.4; charset=utf-8", t.p, true, NULL);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char buf[256];

	(void)cls;
	vsnprintf(buf, sizeof(buf), fmt, ap);
	buf[strcspn(buf, "\n")] = '\0';
	blog(LOG_DEBUG, "metrics: %s", buf);
}

static void metrics_ready(struct broker *b, int fd, uint32_t events, void *ctx);

static int metrics_start(struct broker *b)
{
	const char *spec = b->opts.metrics_listen;
	int act = activated_stream_fd("metrics"), fd;
	const union MHD_DaemonInfo *info;
	struct metrics *m;

	if (!spec[0] && act < 0)
		return 0;
	if (spec[0] && act >= 0) {
		blog(LOG_ERR,
		     "--metrics-listen and a socket-activated \"metrics\" socket: pick one");
		return -EINVAL;
	}
	fd = act >= 0 ? act : listen_tcp_spec(spec, "--metrics-listen", "metrics");
	if (fd < 0)
		return fd;
	m = calloc(1, sizeof(*m));
	if (!m) {
		close(fd);
		return -ENOMEM;
	}
	m->fd = fd;
	m->pool.max = METRICS_MAX_CONNECTIONS;
	m->pool.max_per_peer = METRICS_MAX_PER_PEER;
	m->pool.deadline_ns = METRICS_CONNECTION_TIMEOUT_S * 1000000000ull;
	b->metrics = m;
	m->d = MHD_start_daemon(
		MHD_USE_EPOLL | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request, b,
		MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, b,
		MHD_OPTION_NOTIFY_CONNECTION, on_connection, b, MHD_OPTION_NOTIFY_COMPLETED,
		on_completed, b, MHD_OPTION_CONNECTION_TIMEOUT,
		(unsigned)METRICS_CONNECTION_TIMEOUT_S, MHD_OPTION_CONNECTION_LIMIT,
		/* room for connections doomed, not yet closed */
		(unsigned)(METRICS_MAX_CONNECTIONS + METRICS_MAX_CONNECTIONS / 4), MHD_OPTION_END);
	if (!m->d)
		return -EINVAL;
	info = MHD_get_daemon_info(m->d, MHD_DAEMON_INFO_EPOLL_FD);
	if (!info || loop_watch(b, info->epoll_fd, EPOLLIN, metrics_ready, NULL))
		return -EINVAL;
	face_schedule(b, &metrics_face, mono_ns() + METRICS_TICK_NS, TIMER_METRICS_TICK, 0, 0);
	blog(LOG_INFO, "metrics on %s", act >= 0 ? "the socket-activated socket" : spec);
	return 0;
}

static void metrics_stop(struct broker *b)
{
	struct metrics *m = b->metrics;

	if (!m)
		return;
	if (m->d)
		MHD_stop_daemon(m->d);
	close(m->fd);
	free(m);
	b->metrics = NULL;
}

static void metrics_event(struct broker *b)
{
	struct metrics *m = b->metrics;
	MHD_UNSIGNED_LONG_LONG ms;
	int n;

	if (!m || !m->d)
		return;
	/* Edge-triggered (see http_server.c, run_daemon()): run until nothing
	 * is ready; what is left waits for the next tick. */
	for (n = 0; n < RUNS_PER_EVENT; n++) {
		MHD_run(m->d);
		if (MHD_get_timeout(m->d, &ms) != MHD_YES || ms)
			return;
	}
}

static void metrics_ready(struct broker *b, int fd, uint32_t events, void *ctx)
{
	(void)fd;
	(void)events;
	(void)ctx;
	metrics_event(b);
}

static void metrics_timer(struct broker *b, uint32_t kind, uint32_t a, uint32_t b2)
{
	struct net_conn *late;

	(void)kind;
	(void)a;
	(void)b2;
	if (!b->metrics)
		return;
	while ((late = net_pool_overdue(&b->metrics->pool, mono_ns())))
		net_conn_doom(&b->metrics->pool, late); /* no whole head in time */
	metrics_event(b);				/* connection timeouts */
	face_schedule(b, &metrics_face, mono_ns() + METRICS_TICK_NS, TIMER_METRICS_TICK, 0, 0);
}

const struct face metrics_face = {
	.name = "metrics",
	.start = metrics_start,
	.stop = metrics_stop,
	.timer = metrics_timer,
};
