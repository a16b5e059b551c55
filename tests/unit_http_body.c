// SPDX-License-Identifier: MIT
/*
 * The HTTP lock routes' fast body parser (broker/faces/http/http_body.c, linked into
 * the tests) against jansson, which parses every body it does not take:
 * whatever body it takes, jansson must read it the same way (an object,
 * with duplicates refused or not, the same members, the same values), so
 * that the answer to every body is what it was before the fast path. The
 * bodies are the common ones, hand-picked odd ones, and many mutations of
 * them (a fixed seed: the same run every time).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "faces/http/http_int.h"
#include "harness.h"

static const char *const seeds[] = {
	"{\"acquire_timeout_s\":0}",
	"{\"acquire_timeout_s\":10,\"lease_ttl_s\":33}",
	" {\r\n\t\"lease_ttl_s\" : 5 ,\"acquire_timeout_s\": 123456789012345678 }\n",
	"{\"token\":\"0123456789abcdef0123456789abcdef\"}",
	"{\"token\":\"\"}",
	"{}",
	"{\"token\":\"a\",\"lease_ttl_s\":7}",
	"{\"acquire_timeout_s\":01}",
	"{\"acquire_timeout_s\":-1}",
	"{\"acquire_timeout_s\":1.5}",
	"{\"acquire_timeout_s\":1e3}",
	"{\"acquire_timeout_s\":null}",
	"{\"acquire_timeout_s\":\"1\"}",
	"{\"token\":1}",
	"{\"token\":\"a b\"}",
	"{\"token\":\"\\u0061\"}",
	"{\"\\u0074oken\":\"a\"}",
	"{\"acquire_timeout_s\":0,\"acquire_timeout_s\":1}",
	"{\"acquire_timeout_s\":0}x",
	"{\"acquire_timeout_s\":0}{}",
	"[]",
	"{\"acquire_timeout_s\":1234567890123456789}",
	"{\"acquire_timeout_s\":0,}",
	"{,\"acquire_timeout_s\":0}",
	"{\"limit\":3,\"unknown\":1}",
};

/* Bytes the mutations insert: JSON's own, and the fields' names. */
static const char alphabet[] = "{}[]\":,0123456789 \t\r\n-+.eE\\ntulaxyz\x01\x7f\xc3\xa9";
static const char *const words[] = { "\"token\"",
				     "\"acquire_timeout_s\"",
				     "\"lease_ttl_s\"",
				     "\"limit\"",
				     "\"timeout_s\"",
				     "null",
				     "\"abcdef\"",
				     "0",
				     "18446744073709551616",
				     "999999999999999999" };

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)rng;
}

static size_t mutate(char *buf, size_t len, size_t cap)
{
	int k, rounds = 1 + (int)(next() % 3);

	for (k = 0; k < rounds; k++) {
		size_t at = len ? next() % (len + 1) : 0;

		switch (next() % 4) {
		case 0: /* insert a byte */
			if (len + 1 < cap) {
				memmove(buf + at + 1, buf + at, len - at);
				buf[at] = alphabet[next() % (sizeof(alphabet) - 1)];
				len++;
			}
			break;
		case 1: /* delete a byte */
			if (at < len) {
				memmove(buf + at, buf + at + 1, len - at - 1);
				len--;
			}
			break;
		case 2: /* replace a byte */
			if (at < len)
				buf[at] = alphabet[next() % (sizeof(alphabet) - 1)];
			break;
		default: { /* insert a word */
			const char *w = words[next() % (sizeof(words) / sizeof(words[0]))];
			size_t wl = strlen(w);

			if (len + wl < cap) {
				memmove(buf + at + wl, buf + at, len - at);
				memcpy(buf + at, w, wl);
				len += wl;
			}
		}
		}
	}
	return len;
}

/* The fields of one route: numbers but @str, which is a string. */
static unsigned fields_of(int route, struct hbody_field *f)
{
	static const char *const names[][3] = {
		{ "acquire_timeout_s", "lease_ttl_s", NULL },
		{ "acquire_timeout_s", "limit", "lease_ttl_s" },
		{ "token", "lease_ttl_s", NULL },
		{ "timeout_s", NULL, NULL },
	};
	unsigned n;

	for (n = 0; n < 3 && names[route][n]; n++)
		f[n] = (struct hbody_field){ .name = names[route][n],
					     .string = !strcmp(names[route][n], "token") };
	return n;
}

/* If the fast parser takes @body, jansson reads it the same way. */
static void check_one(const char *body, size_t len, int route, unsigned *taken)
{
	struct hbody_field f[3];
	unsigned n = fields_of(route, f), i;
	json_error_t e;
	json_t *j, *jd;

	if (!http_body_simple(body, len, f, n))
		return;
	++*taken;
	j = json_loadb(body, len, 0, &e);
	jd = json_loadb(body, len, JSON_REJECT_DUPLICATES, &e);
	if (!j || !jd || !json_is_object(j))
		FAIL_AT("taken, but jansson refuses: %.*s", (int)len, body);
	if (json_object_size(j) != json_object_size(jd))
		FAIL_AT("taken with a duplicate: %.*s", (int)len, body);
	for (i = 0; i < n; i++) {
		json_t *v = json_object_get(j, f[i].name);

		if (!f[i].seen) {
			if (v)
				FAIL_AT("member %s missed: %.*s", f[i].name, (int)len, body);
			continue;
		}
		if (f[i].string ? !json_is_string(v) || strcmp(json_string_value(v), f[i].str)
				: !json_is_integer(v) || json_integer_value(v) != f[i].num)
			FAIL_AT("member %s read differently: %.*s", f[i].name, (int)len, body);
	}
	/* Nothing else: each member of the object is one of the fields. */
	{
		unsigned seen = 0;

		for (i = 0; i < n; i++)
			seen += f[i].seen;
		if (json_object_size(j) != seen)
			FAIL_AT("taken with another member: %.*s", (int)len, body);
	}
	json_decref(j);
	json_decref(jd);
}

TEST(http_body, the_fast_parser_reads_what_jansson_reads, 60)
{
	char buf[512];
	unsigned taken = 0, s, k;
	int route;

	for (s = 0; s < sizeof(seeds) / sizeof(seeds[0]); s++)
		for (route = 0; route < 4; route++)
			check_one(seeds[s], strlen(seeds[s]), route, &taken);
	CHECK(taken >= 8); /* the common bodies take the fast path */
	for (k = 0; k < 200000; k++) {
		const char *seed = seeds[next() % (sizeof(seeds) / sizeof(seeds[0]))];
		size_t len = strlen(seed);

		memcpy(buf, seed, len);
		len = mutate(buf, len, sizeof(buf));
		check_one(buf, len, (int)(next() % 4), &taken);
	}
}

TEST(http_body, the_common_bodies_take_the_fast_path, 10)
{
	struct hbody_field f[3];
	static const char tok[] = "{\"token\":\"0123456789abcdef0123456789abcdef\"}";

	CHECK_EQ(http_body_simple("{\"acquire_timeout_s\":0}", 23, f, fields_of(0, f)), 1);
	CHECK(f[0].seen && f[0].num == 0 && !f[1].seen);
	CHECK_EQ(http_body_simple(tok, sizeof(tok) - 1, f, fields_of(2, f)), 1);
	CHECK(f[0].seen && !strcmp(f[0].str, "0123456789abcdef0123456789abcdef"));
	/* Not of the simplest form: jansson's to read (and refuse). */
	CHECK_EQ(http_body_simple("{\"token\":\"a b\"}", 15, f, fields_of(2, f)), 0);
	CHECK_EQ(http_body_simple("{\"acquire_timeout_s\":01}", 24, f, fields_of(0, f)), 0);
	CHECK_EQ(http_body_simple("{\"limit\":1}", 11, f, fields_of(0, f)), 0);
}
