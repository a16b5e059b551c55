// SPDX-License-Identifier: MIT
/* Broker-wide inspection: status, keys, sessions. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "client.h"

#define STR_(x) #x
#define STR(x) STR_(x)
#define LIBLOCAL_VERSION local_version() /* the library run with, not built with */

static void row2(struct table *t, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void row2(struct table *t, const char *name, const char *fmt, ...)
{
	const char *cells[2] = { name, NULL };
	char buf[128];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	cells[1] = buf;
	table_add(t, cells);
}

/* ---- the quarantined keys, by name ---- */

struct names {
	char **v;
	size_t n;
};

static int collect_name(const char *key, const struct local_key_info *ki, unsigned kf, void *arg)
{
	struct names *l = arg;
	char **v = realloc(l->v, (l->n + 1) * sizeof(*v));

	(void)ki;
	(void)kf;
	if (!v)
		return -ENOMEM;
	l->v = v;
	v[l->n] = strdup(key);
	if (!v[l->n])
		return -ENOMEM;
	l->n++;
	return 0;
}

static void names_free(struct names *l)
{
	while (l->n)
		free(l->v[--l->n]);
	free(l->v);
}

/* "a, b" with every name escaped for one line of output. */
static char *names_text(const struct names *l)
{
	size_t i, len = 0, size = 1;
	char *out;

	for (i = 0; i < l->n; i++)
		size += 4 * strlen(l->v[i]) + 2;
	out = malloc(size);
	if (!out)
		return NULL;
	out[0] = '\0';
	for (i = 0; i < l->n; i++) {
		char *t = value_text(l->v[i], strlen(l->v[i]));

		if (t)
			len += (size_t)snprintf(out + len, size - len, "%s%s", i ? ", " : "", t);
		free(t);
	}
	return out;
}

static json_t *names_json(const struct names *l)
{
	json_t *a = json_array();
	size_t i;

	for (i = 0; a && i < l->n; i++)
		json_array_append_new(a, json_text(l->v[i], &(bool){ false }));
	return a;
}

/* The broker's own facts (NULL: an older broker that cannot tell). */
/* A listener that only serves HTTP over TCP: its address, or how it is off. */
static void listener_row(struct table *t, const char *what, const char *listen, bool activated)
{
	if (listen[0])
		row2(t, what, "http://%s", listen);
	else
		row2(t, what, "%s", activated ? "socket-activated" : "off");
}

static void print_broker(struct table *t, const struct proto_op_broker *bi, bool down)
{
	const char *act =
		bi && (bi->flags & PROTO_BROKER_CONTROL_ACTIVATED) ? " (socket-activated)" : "";

	if (!bi && down) {
		row2(t, "broker", "%s", "not running (a read-only view of its segment)");
		return;
	}
	if (!bi) {
		row2(t, "broker", "%s", "(an older broker: version and endpoints unknown)");
		return;
	}
	row2(t, "broker", "shmlockd %s", bi->version);
	table_add(t, (const char *const[]){ "socket", bi->socket_path });
	table_add(t, (const char *const[]){ "segment", bi->shm_name });
	if (*act)
		row2(t, "control socket", "%s", "socket-activated");
	row2(t, "segment ABI", "%u (protocol %u)", bi->seg_abi, bi->proto_version);
	if (bi->http_listen[0] || bi->http_socket[0] || (bi->flags & PROTO_BROKER_HTTP_ACTIVATED)) {
		char http[300];

		snprintf(http, sizeof(http), "%s%s%s%s%s%s", bi->http_listen[0] ? "http://" : "",
			 bi->http_listen, bi->http_listen[0] && bi->http_socket[0] ? ", " : "",
			 bi->http_socket[0] ? "unix:" : "", bi->http_socket,
			 bi->flags & PROTO_BROKER_HTTP_ACTIVATED ? "socket-activated" : "");
		table_add(t, (const char *const[]){ "http", http });
	} else {
		row2(t, "http", "%s", "off");
	}
	if (bi->tcp_listen[0] || (bi->flags & PROTO_BROKER_TCP_ACTIVATED))
		row2(t, "tcp", "%s%s", bi->tcp_listen[0] ? bi->tcp_listen : "socket-activated",
		     bi->flags & PROTO_BROKER_TCP_TLS ? " (TLS)" : "");
	else
		row2(t, "tcp", "%s", "off");
	listener_row(t, "metrics", bi->metrics_listen, bi->flags & PROTO_BROKER_METRICS_ACTIVATED);
	listener_row(t, "consul", bi->consul_listen, bi->flags & PROTO_BROKER_CONSUL_ACTIVATED);
	if (bi->http_listen[0] || bi->tcp_listen[0] || bi->consul_listen[0] ||
	    (bi->flags & (PROTO_BROKER_HTTP_ACTIVATED | PROTO_BROKER_TCP_ACTIVATED |
			  PROTO_BROKER_CONSUL_ACTIVATED)))
		row2(t, "auth token", "%s",
		     bi->flags & PROTO_BROKER_AUTH_TOKEN ? "required" : "none");
}

static json_t *broker_json(const struct proto_op_broker *bi)
{
	if (!bi)
		return json_null();
	return json_pack("{s:s, s:I, s:s, s:s, s:b, s:I, s:I, s:{s:s?, s:s?, s:b}, "
			 "s:{s:s?, s:b, s:b}, s:{s:s?, s:b}, s:{s:s?, s:b}, s:b}",
			 "version", bi->version, "pid", (json_int_t)bi->broker_pid, "socket",
			 bi->socket_path, "segment", bi->shm_name, "socket_activated",
			 (int)!!(bi->flags & PROTO_BROKER_CONTROL_ACTIVATED), "segment_abi",
			 (json_int_t)bi->seg_abi, "protocol", (json_int_t)bi->proto_version, "http",
			 "listen", bi->http_listen[0] ? bi->http_listen : NULL, "socket",
			 bi->http_socket[0] ? bi->http_socket : NULL, "socket_activated",
			 (int)!!(bi->flags & PROTO_BROKER_HTTP_ACTIVATED), "tcp", "listen",
			 bi->tcp_listen[0] ? bi->tcp_listen : NULL, "tls",
			 (int)!!(bi->flags & PROTO_BROKER_TCP_TLS), "socket_activated",
			 (int)!!(bi->flags & PROTO_BROKER_TCP_ACTIVATED), "metrics", "listen",
			 bi->metrics_listen[0] ? bi->metrics_listen : NULL, "socket_activated",
			 (int)!!(bi->flags & PROTO_BROKER_METRICS_ACTIVATED), "consul", "listen",
			 bi->consul_listen[0] ? bi->consul_listen : NULL, "socket_activated",
			 (int)!!(bi->flags & PROTO_BROKER_CONSUL_ACTIVATED), "auth_token",
			 (int)!!(bi->flags & PROTO_BROKER_AUTH_TOKEN));
}

static int print_status(const struct local_stats *st, const struct names *q,
			const struct proto_op_broker *bi)
{
	struct table *t = table_new(2, NULL);
	char up[32];

	if (!t)
		return EXIT_FAIL;
	duration_format(st->uptime_ms, up, sizeof(up));
	print_broker(t, bi, !st->broker_pid);
	row2(t, "client", "shmlock %s, liblocal %s", SHMLOCK_VERSION, LIBLOCAL_VERSION);
	row2(t, "broker pid", "%u", st->broker_pid);
	row2(t, "uptime", "%s", up);
	row2(t, "sessions", "%u / %u", st->sessions, st->max_sessions);
	row2(t, "keys", "%u / %u", st->keys, st->max_keys);
	row2(t, "holds", "%u / %u", st->holds, st->max_holds);
	row2(t, "waiters", "%u / %u", st->waiters, st->max_waiters);
	row2(t, "max value", "%u bytes", st->max_value);
	row2(t, "grants", "%llu", (unsigned long long)st->grants);
	row2(t, "handoffs", "%llu", (unsigned long long)st->handoffs);
	row2(t, "timeouts", "%llu", (unsigned long long)st->timeouts);
	row2(t, "lease expiries", "%llu", (unsigned long long)st->lease_expiries);
	row2(t, "ttl expiries", "%llu", (unsigned long long)st->ttl_expiries);
	row2(t, "crash cleanups", "%llu", (unsigned long long)st->crash_cleanups);
	row2(t, "repairs", "%llu", (unsigned long long)st->repairs);
	row2(t, "quarantined", "%llu", (unsigned long long)st->quarantined);
	if (q->n) {
		char *names = names_text(q);

		/* Not row2(): the names may be long. */
		table_add(t, (const char *const[]){ "quarantined keys", names ? names : "?" });
		free(names);
	}
	row2(t, "sessions opened", "%llu", (unsigned long long)st->sessions_opened);
	row2(t, "sessions closed", "%llu", (unsigned long long)st->sessions_closed);
	table_print(t, stdout);
	table_free(t);
	return EXIT_OK;
}

static json_t *status_json(const struct local_stats *st, const struct names *q,
			   const struct proto_op_broker *bi)
{
	json_t *j = json_pack(
		"{s:s, s:s, s:I, s:I, s:{s:I, s:I}, s:{s:I, s:I}, s:{s:I, s:I},"
		" s:{s:I, s:I}, s:I, s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I,"
		" s:I}}",
		"version", SHMLOCK_VERSION, "liblocal", LIBLOCAL_VERSION, "broker_pid",
		(json_int_t)st->broker_pid, "uptime_ms", (json_int_t)st->uptime_ms, "sessions",
		"used", (json_int_t)st->sessions, "max", (json_int_t)st->max_sessions, "keys",
		"used", (json_int_t)st->keys, "max", (json_int_t)st->max_keys, "holds", "used",
		(json_int_t)st->holds, "max", (json_int_t)st->max_holds, "waiters", "used",
		(json_int_t)st->waiters, "max", (json_int_t)st->max_waiters, "max_value",
		(json_int_t)st->max_value, "counters", "grants", (json_int_t)st->grants, "handoffs",
		(json_int_t)st->handoffs, "timeouts", (json_int_t)st->timeouts, "lease_expiries",
		(json_int_t)st->lease_expiries, "ttl_expiries", (json_int_t)st->ttl_expiries,
		"crash_cleanups", (json_int_t)st->crash_cleanups, "repairs",
		(json_int_t)st->repairs, "quarantined", (json_int_t)st->quarantined,
		"sessions_opened", (json_int_t)st->sessions_opened, "sessions_closed",
		(json_int_t)st->sessions_closed);

	if (j && (json_object_set_new(j, "quarantined_keys", names_json(q)) ||
		  json_object_set_new(j, "broker", broker_json(bi)))) {
		json_decref(j);
		return NULL;
	}
	return j;
}

int cmd_status(int argc, char **argv)
{
	struct cli_common c = { 0 };
	struct flag flags[] = { CLI_FLAG_JSON(&c), CLI_FLAG_SOCKET(&c), CLI_FLAGS_END };
	struct names q = { NULL, 0 };
	struct proto_op_broker bi;
	LOCAL_OPTS(local_stats, st);
	uint32_t nq = 0;
	int nargs, r, err, rc;
	bool have_bi;

	r = cli_parse("status", flags, argc, argv, &nargs);
	if (r)
		return CLI_PARSE_EXIT(r);
	if (nargs)
		return usage_error("status", "unexpected argument \"%s\"", argv[1]);
	/* Served by the broker without a session: works with every table full. */
	err = cli_admin_stats(c.socket, &st, &nq);
	if (!err && nq)
		err = cli_admin_keys(c.socket, NULL, LOCAL_KEYS_QUARANTINED, collect_name, NULL,
				     &q);
	if (err) {
		errorf("cannot read the broker's state: %s", cli_strerror(err));
		names_free(&q);
		return exit_for(err);
	}
	/* The broker's own version and endpoints (an older one cannot tell). */
	have_bi = st.broker_pid && !op_broker_info(c.socket, &bi);
	rc = c.json ? json_emit(status_json(&st, &q, have_bi ? &bi : NULL), false)
		    : print_status(&st, &q, have_bi ? &bi : NULL);
	names_free(&q);
	return rc;
}

/* ---- keys ---- */

struct key_row {
	char *name;
	struct local_key_info ki; /* callbacks get no value: its length only */
	unsigned flags;		  /* LOCAL_KEY_* */
	struct holders h;
};

struct key_list {
	struct key_row *v;
	size_t n, cap;
};

static int collect_key(const char *key, const struct local_key_info *ki, unsigned kf, void *arg)
{
	struct key_list *l = arg;
	struct key_row *r, *v = grow_array(l->v, l->n, &l->cap, sizeof(*v), 16);

	if (!v)
		return -ENOMEM;
	l->v = v;
	r = &l->v[l->n];
	memset(r, 0, sizeof(*r));
	r->name = strdup(key);
	if (!r->name)
		return -ENOMEM;
	/* What both our header and the library know; the rest stays zero. */
	memcpy(&r->ki, ki, ki->sz < sizeof(r->ki) ? ki->sz : sizeof(r->ki));
	r->flags = kf;
	l->n++;
	return 0;
}

/* A holder of the key collect_key() added last (they come right after it). */
static int collect_holder(const char *key, const struct local_holder *h, void *arg)
{
	struct key_list *l = arg;

	if (!l->n || strcmp(l->v[l->n - 1].name, key))
		return -EPROTO;
	return holders_add(h, &l->v[l->n - 1].h);
}

static int cmp_rows(const void *a, const void *b)
{
	return strcmp(((const struct key_row *)a)->name, ((const struct key_row *)b)->name);
}

static int print_keys(const struct key_list *l)
{
	static const char *const head[] = { "KEY",     "KIND",	     "LIMIT", "HOLDERS",
					    "WAITERS", "LOCK-DELAY", "TOKEN", "HELD BY" };
	struct table *t = table_new(8, head);
	size_t i;

	if (!t)
		return EXIT_FAIL;
	for (i = 0; i < l->n; i++) {
		const struct key_row *r = &l->v[i];
		char limit[16], holders[16], waiters[16], delay[32], token[24];
		char *by = holders_text(&r->h);
		const char *cells[8] = { r->name, key_kind_text(r->ki.kind, r->flags),
					 limit,	  holders,
					 waiters, delay,
					 token,	  by };

		snprintf(limit, sizeof(limit), "%u", r->ki.limit);
		snprintf(holders, sizeof(holders), "%u", r->ki.holders);
		snprintf(waiters, sizeof(waiters), "%u", r->ki.waiters);
		duration_format(r->ki.lock_delay_remaining_ms, delay, sizeof(delay));
		if (r->ki.token)
			snprintf(token, sizeof(token), "%llu", (unsigned long long)r->ki.token);
		else
			strcpy(token, "-");
		table_add(t, cells);
		free(by);
	}
	table_print(t, stdout);
	table_free(t);
	return EXIT_OK;
}

static json_t *keys_json(const struct key_list *l)
{
	json_t *a = json_array();
	size_t i;

	for (i = 0; a && i < l->n; i++) {
		json_t *k = key_info_json(l->v[i].name, &l->v[i].ki, false);

		if (!k || key_flags_json(k, l->v[i].flags) ||
		    json_object_set_new(k, "holders", holders_json(&l->v[i].h)) ||
		    json_array_append_new(a, k)) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

int cmd_keys(int argc, char **argv)
{
	struct cli_common c = { 0 };
	bool quarantined = false;
	struct flag flags[] = { CLI_FLAG_JSON(&c),
				CLI_FLAG_SOCKET(&c),
				{ "quarantined", FLAG_BOOL, &quarantined, false },
				CLI_FLAGS_END };
	struct key_list l = { 0 };
	int nargs, r, err, rc = EXIT_FAIL;
	size_t i;

	r = cli_parse("keys", flags, argc, argv, &nargs);
	if (r)
		return CLI_PARSE_EXIT(r);
	if (nargs > 1)
		return usage_error("keys", "unexpected argument \"%s\"", argv[2]);
	/* Served by the broker without a session: works with every table full.
	 * Each key's holders come with it, read under the same mutex. */
	err = cli_admin_keys(c.socket, nargs ? argv[1] : NULL,
			     quarantined ? LOCAL_KEYS_QUARANTINED : 0, collect_key, collect_holder,
			     &l);
	if (err) {
		errorf("cannot list the keys: %s", cli_strerror(err));
		rc = exit_for(err);
		goto out;
	}
	qsort(l.v, l.n, sizeof(*l.v), cmp_rows);
	rc = c.json ? json_emit(keys_json(&l), false) : print_keys(&l);
out:
	for (i = 0; i < l.n; i++) {
		free(l.v[i].name);
		holders_free(&l.v[i].h);
	}
	free(l.v);
	return rc;
}

/* ---- sessions ---- */

struct session_list {
	struct local_session_info *v;
	size_t n, cap;
};

static int collect_session(const struct local_session_info *si, void *arg)
{
	struct session_list *l = arg;
	struct local_session_info *v = grow_array(l->v, l->n, &l->cap, sizeof(*v), 16);

	if (!v)
		return -ENOMEM;
	l->v = v;
	l->v[l->n++] = *si;
	return 0;
}

static int print_sessions(const struct session_list *l)
{
	static const char *const head[] = { "ID",	"NAME",	 "PID",	     "UID",   "TTL",
					    "TTL-LEFT", "DELAY", "BEHAVIOR", "HOLDS", "WAITING" };
	struct table *t = table_new(10, head);
	size_t i;

	if (!t)
		return EXIT_FAIL;
	for (i = 0; i < l->n; i++) {
		const struct local_session_info *si = &l->v[i];
		char pid[16], uid[16], ttl[32], left[32], delay[32], holds[16], waiting[16];
		const char *cells[10] = { si->id, si->name, pid,   uid,
					  ttl,	  left,	    delay, behavior_name(si->behavior),
					  holds,  waiting };

		snprintf(pid, sizeof(pid), si->pid ? "%d" : "-", (int)si->pid);
		snprintf(uid, sizeof(uid), "%u", si->uid);
		if (si->ttl_ms) {
			duration_format(si->ttl_ms, ttl, sizeof(ttl));
			duration_format(si->ttl_remaining_ms, left, sizeof(left));
		} else {
			strcpy(ttl, "-");
			strcpy(left, "-");
		}
		duration_format(si->lock_delay_ms, delay, sizeof(delay));
		snprintf(holds, sizeof(holds), "%u", si->holds);
		snprintf(waiting, sizeof(waiting), "%u", si->waiting);
		table_add(t, cells);
	}
	table_print(t, stdout);
	table_free(t);
	return EXIT_OK;
}

static json_t *sessions_json(const struct session_list *l)
{
	json_t *a = json_array();
	size_t i;

	for (i = 0; a && i < l->n; i++) {
		const struct local_session_info *si = &l->v[i];
		json_t *o = json_pack(
			"{s:I, s:I, s:I, s:I, s:I, s:s, s:I, s:I}", "pid", (json_int_t)si->pid,
			"uid", (json_int_t)si->uid, "ttl_ms", (json_int_t)si->ttl_ms,
			"ttl_remaining_ms", (json_int_t)si->ttl_remaining_ms, "lock_delay_ms",
			(json_int_t)si->lock_delay_ms, "behavior", behavior_name(si->behavior),
			"holds", (json_int_t)si->holds, "waiting", (json_int_t)si->waiting);

		/* Names are any bytes their session chose: json_set_text(). */
		if (!o || json_set_text(o, "id", si->id) || json_set_text(o, "name", si->name) ||
		    json_array_append_new(a, o)) {
			json_decref(o);
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

int cmd_sessions(int argc, char **argv)
{
	struct cli_common c = { 0 };
	struct flag flags[] = { CLI_FLAG_JSON(&c), CLI_FLAG_SOCKET(&c), CLI_FLAGS_END };
	struct session_list l = { 0 };
	int nargs, r, err, rc = EXIT_FAIL;

	r = cli_parse("sessions", flags, argc, argv, &nargs);
	if (r)
		return CLI_PARSE_EXIT(r);
	if (nargs)
		return usage_error("sessions", "unexpected argument \"%s\"", argv[1]);
	/* Served by the broker without a session: works with every table full. */
	err = local_admin_sessions(c.socket, collect_session, &l);
	if (err) {
		errorf("cannot list the sessions: %s", cli_strerror(err));
		rc = exit_for(err);
	} else {
		rc = c.json ? json_emit(sessions_json(&l), false) : print_sessions(&l);
	}
	free(l.v);
	return rc;
}

/* ---- what keys and info share about the broker's view of a key ---- */

int holders_get_at(const char *socket, const char *key, struct holders *h)
{
	int err = cli_admin_holders(socket, key, holders_add, h);

	if (err)
		errorf("cannot list the holders of %s: %s", key, cli_strerror(err));
	return err;
}

const char *key_kind_text(int kind, unsigned key_flags)
{
	if (key_flags & LOCAL_KEY_QUARANTINED)
		return "QUARANTINED";
	if (!(key_flags & LOCAL_KEY_BUSY))
		return kind_name(kind);
	switch (kind) {
	case LOCAL_KIND_LOCK:
		return "lock (busy)";
	case LOCAL_KIND_SEMAPHORE:
		return "semaphore (busy)";
	default:
		return "none (busy)";
	}
}

int key_flags_json(json_t *j, unsigned key_flags)
{
	return json_object_set_new(j, "quarantined",
				   json_boolean(key_flags & LOCAL_KEY_QUARANTINED)) ||
	       json_object_set_new(j, "busy", json_boolean(key_flags & LOCAL_KEY_BUSY));
}
