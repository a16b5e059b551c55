// SPDX-License-Identifier: MIT
/*
 * libFuzzer target: the HTTP lock routes' fast body parser
 * (broker/faces/http/http_body.c) against jansson, which reads every body the fast
 * parser does not take. Whatever body it takes, for the fields of any
 * route, jansson must read the same way: an object, without duplicate
 * members, with exactly the members taken and the same values. Otherwise
 * an answer would differ from what it was before the fast path.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "faces/http/http_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const routes[][3] = {
	{ "acquire_timeout_s", "lease_ttl_s", NULL },
	{ "acquire_timeout_s", "limit", "lease_ttl_s" },
	{ "token", "lease_ttl_s", NULL },
	{ "token", NULL, NULL },
	{ "timeout_s", NULL, NULL },
};

static void check(const char *body, size_t len, const char *const names[3])
{
	struct hbody_field f[3];
	unsigned n, i, seen = 0;
	json_error_t e;
	json_t *j, *jd;

	for (n = 0; n < 3 && names[n]; n++)
		f[n] = (struct hbody_field){ .name = names[n],
					     .string = !strcmp(names[n], "token") };
	if (!http_body_simple(body, len, f, n))
		return;
	j = json_loadb(body, len, 0, &e);
	jd = json_loadb(body, len, JSON_REJECT_DUPLICATES, &e);
	if (!j || !jd || !json_is_object(j) || json_object_size(j) != json_object_size(jd))
		abort();
	for (i = 0; i < n; i++) {
		json_t *v = json_object_get(j, f[i].name);

		if (!f[i].seen) {
			if (v)
				abort();
			continue;
		}
		seen++;
		if (f[i].string ? !json_is_string(v) || strcmp(json_string_value(v), f[i].str)
				: !json_is_integer(v) || json_integer_value(v) != f[i].num)
			abort();
	}
	if (json_object_size(j) != seen)
		abort();
	json_decref(j);
	json_decref(jd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t i;

	for (i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
		check((const char *)data, size, routes[i]);
	return 0;
}
