// SPDX-License-Identifier: MIT
/* Output: aligned tables for people, JSON (jansson) for programs. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

struct table {
	size_t ncols, nrows, cap;
	char **cells; /* nrows * ncols, row by row */
};

struct table *table_new(size_t ncols, const char *const *headers)
{
	struct table *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->ncols = ncols;
	if (headers && table_add(t, headers)) {
		free(t);
		return NULL;
	}
	return t;
}

static int add_row(struct table *t, const char *const *cells, bool escape)
{
	size_t i;

	{
		/* A row is ncols cells: the array grows a row at a time. */
		char **c = grow_array(t->cells, t->nrows, &t->cap, t->ncols * sizeof(*c), 16);

		if (!c)
			return -ENOMEM;
		t->cells = c;
	}
	for (i = 0; i < t->ncols; i++) {
		const char *v = cells[i] ? cells[i] : "-";
		char *c = escape ? text_escape(v, strlen(v), 0) : strdup(v);

		if (!c) {
			while (i--)
				free(t->cells[t->nrows * t->ncols + i]);
			return -ENOMEM;
		}
		t->cells[t->nrows * t->ncols + i] = c;
	}
	t->nrows++;
	return 0;
}

int table_add(struct table *t, const char *const *cells)
{
	return add_row(t, cells, true);
}

int table_add_escaped(struct table *t, const char *const *cells)
{
	return add_row(t, cells, false);
}

/* Display width: count UTF-8 lead bytes, so a name with é does not shift
 * the columns after it. */
static size_t width(const char *s)
{
	size_t n = 0;

	for (; *s; s++)
		n += ((unsigned char)*s & 0xc0) != 0x80;
	return n;
}

void table_print(struct table *t, FILE *out)
{
	size_t *w = calloc(t->ncols, sizeof(*w)), r, c;

	if (!w)
		return;
	for (r = 0; r < t->nrows; r++)
		for (c = 0; c < t->ncols; c++) {
			size_t n = width(t->cells[r * t->ncols + c]);

			if (n > w[c])
				w[c] = n;
		}
	for (r = 0; r < t->nrows; r++) {
		for (c = 0; c < t->ncols; c++) {
			const char *cell = t->cells[r * t->ncols + c];

			if (c + 1 == t->ncols) {
				fprintf(out, "%s\n", cell);
				break;
			}
			fprintf(out, "%s%*s", cell, (int)(w[c] - width(cell) + 2), "");
		}
	}
	free(w);
}

void table_free(struct table *t)
{
	size_t i;

	if (!t)
		return;
	for (i = 0; i < t->nrows * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	free(t);
}

const char *kind_name(int kind)
{
	switch (kind) {
	case LOCAL_KIND_LOCK:
		return "lock";
	case LOCAL_KIND_SEMAPHORE:
		return "semaphore";
	default:
		return "none";
	}
}

const char *behavior_name(int behavior)
{
	return behavior == LOCAL_BEHAVIOR_DELETE ? "delete" : "release";
}

json_t *json_token(uint64_t token)
{
	char buf[24];

	snprintf(buf, sizeof(buf), "%llu", (unsigned long long)token);
	return json_string(buf);
}

static int set_encoded(json_t *obj, const char *field, json_t *j, bool encoded)
{
	char name[64];

	if (!j || json_object_set_new(obj, field, j))
		return -ENOMEM;
	if (!encoded)
		return 0;
	snprintf(name, sizeof(name), "%s_encoding", field);
	return json_object_set_new(obj, name, json_string("percent")) ? -ENOMEM : 0;
}

int json_set_value(json_t *obj, const char *field, const char *v, size_t len)
{
	json_t *j = json_stringn(v, len);
	char *pct;

	if (j)
		return set_encoded(obj, field, j, false);
	pct = percent_encoden(v, len);
	j = pct ? json_string(pct) : NULL;
	free(pct);
	return set_encoded(obj, field, j, true);
}

json_t *json_text(const char *s, bool *encoded)
{
	json_t *j = json_string(s);
	char *pct;

	*encoded = !j;
	if (j)
		return j;
	pct = percent_encode(s);
	j = pct ? json_string(pct) : NULL;
	free(pct);
	return j;
}

int json_set_text(json_t *obj, const char *field, const char *s)
{
	bool encoded;
	json_t *j = json_text(s, &encoded);

	return set_encoded(obj, field, j, encoded);
}

int json_emit(json_t *j, bool one_line)
{
	int r;

	if (!j) {
		errorf("out of memory");
		return EXIT_FAIL;
	}
	r = json_dumpf(j, stdout, one_line ? JSON_COMPACT : JSON_INDENT(2));
	json_decref(j);
	if (r || fputc('\n', stdout) == EOF || fflush(stdout)) {
		errorf("cannot write the output");
		return EXIT_FAIL;
	}
	return EXIT_OK;
}
