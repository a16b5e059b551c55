// SPDX-License-Identifier: MIT
/* One key: info, leader, watch. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* A key's info with room for the largest value: 64 KiB, never on the stack. */
struct info_buf {
	struct local_key_info ki; /* first: freed through its address */
	char value[LOCAL_VALUE_MAX];
};

static struct local_key_info *info_alloc(void)
{
	struct info_buf *b = malloc(sizeof(*b));

	if (!b) {
		errorf("out of memory");
		return NULL;
	}
	memset(&b->ki, 0, sizeof(b->ki));
	b->ki.sz = sizeof(b->ki);
	b->ki.value_buf = b->value;
	b->ki.value_buf_size = sizeof(b->value);
	return &b->ki;
}

static int one_key_args(const char *cmd, struct flag *flags, int argc, char **argv)
{
	int nargs, r = cli_parse(cmd, flags, argc, argv, &nargs);

	if (r)
		return r;
	if (nargs != 1) {
		if (nargs)
			usage_error(cmd, "unexpected argument \"%s\"", argv[2]);
		else
			usage_error(cmd, "missing KEY");
		return -EINVAL;
	}
	return key_usage_error(cmd, argv[1]) ? -EINVAL : 0;
}

/* ---- info ---- */

static void row(struct table *t, const char *name, const char *value)
{
	const char *cells[2] = { name, value };

	table_add(t, cells);
}

/* A value, escaped already: it may hold NUL bytes. */
static void row_escaped(struct table *t, const char *name, const char *value)
{
	const char *cells[2] = { name, value };

	table_add_escaped(t, cells);
}

static void rowu(struct table *t, const char *name, unsigned long long v)
{
	char buf[24];

	snprintf(buf, sizeof(buf), "%llu", v);
	row(t, name, buf);
}

/* ---- the queue: who waits, and for how long ---- */

struct queue {
	struct local_waiter *v;
	size_t n, cap;
};

static int add_waiter(const struct local_waiter *w, void *arg)
{
	struct queue *q = arg;
	struct local_waiter *v = grow_array(q->v, q->n, &q->cap, sizeof(*v), 4);

	if (!v)
		return -ENOMEM;
	q->v = v;
	q->v[q->n] = (struct local_waiter){ .sz = sizeof(struct local_waiter) };
	/* What both our header and the library know. */
	memcpy(&q->v[q->n], w, w->sz < sizeof(*w) ? w->sz : sizeof(*w));
	q->n++;
	return 0;
}

static json_t *queue_json(const struct queue *q)
{
	json_t *a = json_array();
	size_t i;

	for (i = 0; a && i < q->n; i++) {
		const struct local_waiter *v = &q->v[i];
		json_t *o = json_pack("{s:I, s:I, s:I}", "position", (json_int_t)v->position, "pid",
				      (json_int_t)v->pid, "waiting_ms", (json_int_t)v->waiting_ms);

		if (!o || json_set_text(o, "session", v->session) ||
		    json_set_text(o, "name", v->name) || json_array_append_new(a, o)) {
			json_decref(o);
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

static int print_queue(const struct queue *q)
{
	static const char *const head[] = { "QUEUED", "SESSION", "NAME", "PID", "WAITING" };
	struct table *t;
	size_t i;

	if (!q->n)
		return EXIT_OK;
	t = table_new(5, head);
	if (!t)
		return EXIT_FAIL;
	for (i = 0; i < q->n; i++) {
		const struct local_waiter *v = &q->v[i];
		char pos[16], pid[16], waited[32];
		const char *cells[5] = { pos, v->session, v->name, pid, waited };

		snprintf(pos, sizeof(pos), "%u", v->position);
		snprintf(pid, sizeof(pid), v->pid ? "%d" : "-", (int)v->pid);
		duration_format(v->waiting_ms, waited, sizeof(waited));
		table_add(t, cells);
	}
	fputc('\n', stdout);
	table_print(t, stdout);
	table_free(t);
	return EXIT_OK;
}

static int print_info(const char *key, const struct local_key_info *ki, unsigned kf,
		      const struct holders *h)
{
	static const char *const head[] = { "SESSION", "NAME", "PID", "TOKEN", "LEASE-LEFT" };
	struct table *t = table_new(2, NULL);
	char delay[32], *value = value_text(ki->value_buf, key_info_value_len(ki));
	size_t i;

	if (!t || !value) {
		table_free(t);
		free(value);
		return EXIT_FAIL;
	}
	duration_format(ki->lock_delay_remaining_ms, delay, sizeof(delay));
	row(t, "key", key);
	row(t, "kind", key_kind_text(ki->kind, kf));
	if (kf & LOCAL_KEY_QUARANTINED)
		row(t, "state", "quarantined as damaged: 'shmlock reset KEY' brings it back");
	else if (kf & LOCAL_KEY_BUSY)
		row(t, "state", "busy: its mutex stayed held; fields read without it");
	rowu(t, "limit", ki->limit);
	rowu(t, "holders", ki->holders);
	rowu(t, "waiters", ki->waiters);
	rowu(t, "token", ki->token);
	rowu(t, "lock index", ki->lock_index);
	rowu(t, "modify index", ki->modify_index);
	row(t, "lock delay", delay);
	row_escaped(t, "value", ki->value_len ? value : "-");
	table_print(t, stdout);
	table_free(t);
	free(value);
	if (!h->n)
		return EXIT_OK;
	t = table_new(5, head);
	if (!t)
		return EXIT_FAIL;
	for (i = 0; i < h->n; i++) {
		const struct local_holder *v = &h->v[i];
		char pid[16], token[24], lease[32];
		const char *cells[5] = { v->session, v->name, pid, token, lease };

		snprintf(pid, sizeof(pid), v->pid ? "%d" : "-", (int)v->pid);
		snprintf(token, sizeof(token), "%llu", (unsigned long long)v->token);
		if (v->lease_remaining_ms)
			duration_format(v->lease_remaining_ms, lease, sizeof(lease));
		else
			strcpy(lease, "-");
		table_add(t, cells);
	}
	fputc('\n', stdout);
	table_print(t, stdout);
	table_free(t);
	return EXIT_OK;
}

int cmd_info(int argc, char **argv)
{
	struct cli_common c = { 0 };
	struct flag flags[] = { CLI_FLAG_JSON(&c), CLI_FLAG_SOCKET(&c), CLI_FLAGS_END };
	struct holders h = { 0 };
	struct queue q = { 0 };
	struct local_key_info *ki;
	int r, err, rc = EXIT_FAIL;
	unsigned kf = 0;
	json_t *j;

	r = one_key_args("info", flags, argc, argv);
	if (r)
		return CLI_PARSE_EXIT(r);
	ki = info_alloc();
	if (!ki)
		return EXIT_FAIL;
	/* Served by the broker without a session: works with every table
	 * full, and shows a quarantined key as such. */
	err = cli_admin_info(c.socket, argv[1], ki, &kf);
	if (err) {
		errorf("cannot describe %s: %s", argv[1], cli_strerror(err));
		rc = exit_for(err);
		goto out;
	}
	if (ki->holders && holders_get_at(c.socket, argv[1], &h))
		goto out;
	/* Who waits, in queue order, and for how long. */
	if (ki->waiters) {
		err = local_admin_waiters(c.socket, argv[1], add_waiter, &q);
		if (err) {
			errorf("cannot list the requests queued on %s: %s", argv[1],
			       local_strerror(err));
			rc = exit_for(err);
			goto out;
		}
	}
	if (c.json) {
		j = key_info_json(argv[1], ki, true);
		if (j &&
		    (key_flags_json(j, kf) || json_object_set_new(j, "holders", holders_json(&h)) ||
		     json_object_set_new(j, "queue", queue_json(&q)))) {
			json_decref(j);
			j = NULL;
		}
		rc = json_emit(j, false);
	} else {
		rc = print_info(argv[1], ki, kf, &h);
		if (rc == EXIT_OK)
			rc = print_queue(&q);
	}
out:
	free(q.v);
	holders_free(&h);
	free(ki);
	return rc;
}

/* ---- leader ---- */

int cmd_leader(int argc, char **argv)
{
	struct cli_common c = { 0 };
	struct flag flags[] = { CLI_FLAG_JSON(&c), CLI_FLAG_SOCKET(&c), CLI_FLAGS_END };
	struct local_key_info *ki;
	const char *key;
	int r, err, rc = EXIT_FAIL;
	unsigned kf = 0;
	bool led;

	r = one_key_args("leader", flags, argc, argv);
	if (r)
		return CLI_PARSE_EXIT(r);
	key = argv[1];
	ki = info_alloc();
	if (!ki)
		return EXIT_FAIL;
	err = cli_admin_info(c.socket, key, ki, &kf);
	if (!err && (kf & LOCAL_KEY_QUARANTINED))
		err = -LOCAL_ECORRUPT;
	if (err) {
		errorf("cannot describe %s: %s", key, cli_strerror(err));
		rc = exit_for(err);
		goto out_free;
	}
	if (ki->kind == LOCAL_KIND_SEMAPHORE) {
		errorf("%s is a semaphore (limit %u): it has holders, not a leader; see "
		       "'shmlock info %s'",
		       key, ki->limit, key);
		goto out_free;
	}
	/* A cluster key held on another host: its holder, no local one. */
	led = ki->kind == LOCAL_KIND_LOCK && (ki->holders || ki->holder_session[0]);
	if (c.json) {
		json_t *l = led ? json_pack("{s:I, s:o}", "pid", (json_int_t)ki->holder_pid,
					    "token", json_token(ki->token))
				: json_null();
		json_t *j = json_pack("{s:o}", "leader", l);

		if (j && (json_set_text(j, "key", key) ||
			  (led &&
			   (json_set_text(l, "session", ki->holder_session) ||
			    json_set_text(l, "name", ki->holder_name) ||
			    json_set_value(j, "value", ki->value_buf, key_info_value_len(ki)))))) {
			json_decref(j);
			j = NULL;
		}
		rc = json_emit(j, false);
		if (!led)
			rc = EXIT_FAIL;
	} else if (!led) {
		errorf("%s has no leader", key);
	} else {
		/* Escaped as everywhere: -json gives the value as it is. */
		char *v = value_text(ki->value_buf, key_info_value_len(ki));

		if (v)
			printf("%s\n", v);
		rc = !v || fflush(stdout) ? EXIT_FAIL : EXIT_OK;
		free(v);
	}
out_free:
	free(ki);
	return rc;
}

/* ---- watch ---- */

static int print_change(const char *key, const struct local_key_info *ki, bool json)
{
	char *value, *session, *name;
	int r;

	if (json) {
		json_t *j = key_info_json(key, ki, true);
		json_t *h = ki->holder_session[0]
				    ? json_pack("{s:I}", "pid", (json_int_t)ki->holder_pid)
				    : json_null();

		if (j && ki->holder_session[0] &&
		    (!h || json_set_text(h, "session", ki->holder_session) ||
		     json_set_text(h, "name", ki->holder_name))) {
			json_decref(h);
			h = NULL;
		}
		if (!j)
			json_decref(h);
		else if (!h || json_object_set_new(j, "holder", h)) {
			json_decref(j);
			j = NULL;
		}
		return json_emit(j, true);
	}
	/* Quotes escaped too: a name must not close its field and forge the
	 * next one. */
	value = text_escape(ki->value_buf, key_info_value_len(ki), ESC_QUOTE);
	session = text_escape(ki->holder_session, strlen(ki->holder_session), ESC_QUOTE);
	name = text_escape(ki->holder_name, strlen(ki->holder_name), ESC_QUOTE);
	if (!value || !session || !name) {
		free(value);
		free(session);
		free(name);
		return EXIT_FAIL;
	}
	printf("index=%llu kind=%s holders=%u waiters=%u token=%llu",
	       (unsigned long long)ki->modify_index, kind_name(ki->kind), ki->holders, ki->waiters,
	       (unsigned long long)ki->token);
	if (ki->holder_session[0])
		printf(" session=%s name=\"%s\" pid=%d", session, name, (int)ki->holder_pid);
	printf(" value=\"%s\"\n", value);
	free(value);
	free(session);
	free(name);
	r = fflush(stdout);
	return r ? EXIT_FAIL : EXIT_OK;
}

int cmd_watch(int argc, char **argv)
{
	struct cli_common c = { 0 };
	int64_t timeout_ns = 0;
	struct flag flags[] = { CLI_FLAG_JSON(&c),
				CLI_FLAG_SOCKET(&c),
				{ "timeout", FLAG_DURATION, &timeout_ns, false },
				CLI_FLAGS_END };
	int64_t timeout_ms, left = -1;
	struct local_key_info *ki;
	uint64_t end = 0, idx;
	local_session *s;
	int r, err, rc = EXIT_FAIL;

	r = one_key_args("watch", flags, argc, argv);
	if (r)
		return CLI_PARSE_EXIT(r);
	timeout_ms = duration_ms(timeout_ns);
	ki = info_alloc();
	if (!ki)
		return EXIT_FAIL;
	err = cli_open(&c, "shmlock watch", &s);
	if (err) {
		rc = exit_for(err);
		goto out_free;
	}
	if (timeout_ms)
		end = mono_ms() + (uint64_t)timeout_ms;
	err = local_info(s, argv[1], ki);
	if (err) {
		errorf("cannot describe %s: %s", argv[1], cli_strerror(err));
		rc = exit_for(err);
		goto out;
	}
	if (print_change(argv[1], ki, c.json))
		goto out;
	idx = ki->modify_index;
	for (;;) {
		if (end) {
			uint64_t now = mono_ms();

			if (now >= end)
				break;
			left = (int64_t)(end - now);
		}
		err = local_watch(s, argv[1], idx, left, ki);
		if (err == -ETIMEDOUT)
			break;
		if (err) {
			errorf("cannot watch %s: %s", argv[1], cli_strerror(err));
			goto out;
		}
		/* One line per change seen: changes that land while we print
		 * are folded into the next line, as the index shows. */
		if (print_change(argv[1], ki, c.json))
			goto out;
		idx = ki->modify_index;
	}
	rc = EXIT_OK;
out:
	local_session_close(s);
out_free:
	free(ki);
	return rc;
}
