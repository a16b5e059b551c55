// SPDX-License-Identifier: MIT
/* A key's holders and state, as text and as JSON, for keys, info and watch. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int holders_add(const struct local_holder *lh, void *arg)
{
	struct holders *h = arg;
	struct local_holder *v = grow_array(h->v, h->n, &h->cap, sizeof(*v), 4);

	if (!v)
		return -ENOMEM;
	h->v = v;
	h->v[h->n++] = *lh;
	return 0;
}

int holders_get(local_session *s, const char *key, struct holders *h)
{
	int err = local_holders(s, key, holders_add, h);

	if (err)
		errorf("cannot list the holders of %s: %s", key, cli_strerror(err));
	return err;
}

void holders_free(struct holders *h)
{
	free(h->v);
	memset(h, 0, sizeof(*h));
}

char *holders_text(const struct holders *h)
{
	size_t i, size = 2, len = 0;
	char *out;

	for (i = 0; i < h->n; i++)
		size += strlen(h->v[i].name) + LOCAL_SESSION_ID_LEN + 24;
	out = malloc(size);
	if (!out)
		return NULL;
	strcpy(out, h->n ? "" : "-");
	for (i = 0; i < h->n; i++) {
		const struct local_holder *v = &h->v[i];
		/* A nameless holder is shown by the start of its session id. */
		const char *name = v->name[0] ? v->name : v->session;
		int name_len = v->name[0] ? (int)strlen(name) : 8;

		len += (size_t)snprintf(out + len, size - len, "%s%.*s", i ? ", " : "", name_len,
					name);
		if (v->pid)
			len += (size_t)snprintf(out + len, size - len, "[%d]", (int)v->pid);
	}
	return out;
}

json_t *holders_json(const struct holders *h)
{
	json_t *a = json_array();
	size_t i;

	for (i = 0; a && i < h->n; i++) {
		const struct local_holder *v = &h->v[i];
		json_t *o = json_pack("{s:I, s:o, s:I}", "pid", (json_int_t)v->pid, "token",
				      json_token(v->token), "lease_remaining_ms",
				      (json_int_t)v->lease_remaining_ms);

		if (!o || json_set_text(o, "session", v->session) ||
		    json_set_text(o, "name", v->name) || json_array_append_new(a, o)) {
			json_decref(o);
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

size_t key_info_value_len(const struct local_key_info *ki)
{
	if (!ki->value_buf)
		return 0;
	return ki->value_len < ki->value_buf_size ? ki->value_len : ki->value_buf_size;
}

json_t *key_info_json(const char *key, const struct local_key_info *ki, bool with_value)
{
	json_t *j = json_pack("{s:s, s:I, s:I, s:I, s:o, s:I, s:I, s:I, s:I}", "kind",
			      kind_name(ki->kind), "limit", (json_int_t)ki->limit, "holder_count",
			      (json_int_t)ki->holders, "waiters", (json_int_t)ki->waiters, "token",
			      json_token(ki->token), "lock_index", (json_int_t)ki->lock_index,
			      "modify_index", (json_int_t)ki->modify_index,
			      "lock_delay_remaining_ms", (json_int_t)ki->lock_delay_remaining_ms,
			      "value_len", (json_int_t)ki->value_len);

	if (j &&
	    (json_set_text(j, "key", key) ||
	     (with_value && json_set_value(j, "value", ki->value_buf, key_info_value_len(ki))))) {
		json_decref(j);
		return NULL;
	}
	return j;
}
