// SPDX-License-Identifier: MIT
/*
 * The lock routes' request bodies without jansson, when they are of the
 * simplest form: what every client sends ({"acquire_timeout_s":0},
 * {"token":"..."}). Parsing them with json_loadb() and json_unpack() was
 * about a quarter of the broker's instructions per acquire+release.
 *
 * Only a body that this narrow grammar takes, and whose meaning is then
 * beyond doubt, is read here:
 *
 *   ws { ws [ member ( ws , ws member )* ] ws } ws        (ws: space, \t, \n, \r)
 *   member: "name" ws : ws value, name one of the route's fields, each once
 *   value:  an integer field: 0 or [1-9] and up to 17 more digits;
 *           a string field: "..." of 0 to 63 bytes 0x21-0x7e but " and \
 *
 * Anything else (escapes, blanks or other bytes in a string, a longer
 * string, signs, fractions, exponents, null, duplicates, unknown names, a
 * value of the other type, trailing bytes) is not an error here: the caller
 * parses the body with jansson as before, which answers it exactly as it
 * always did. So for every body the outcome is the same; the fast path only
 * decides how soon. tests/unit_http_body.c checks the two against each
 * other.
 */
#include <string.h>

#include "http_int.h"

static const char *skip_ws(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	return p;
}

/* A string's bytes that need no second look: printable, no blank, no
 * quote or backslash (so no escape), and valid UTF-8 since ASCII. */
static bool plain_byte(char c)
{
	return c > 0x20 && c < 0x7f && c != '"' && c != '\\';
}

/* "..." at @p of plain bytes: its text in [*s, *s + *n), the byte after it. */
static const char *plain_string(const char *p, const char *end, const char **s, size_t *n)
{
	const char *q;

	if (p >= end || *p != '"')
		return NULL;
	for (q = ++p; q < end && plain_byte(*q); q++)
		;
	if (q >= end || *q != '"')
		return NULL;
	*s = p;
	*n = (size_t)(q - p);
	return q + 1;
}

int http_body_simple(const char *body, size_t len, struct hbody_field *f, unsigned nf)
{
	const char *p = body, *end = body + len;
	unsigned i;

	for (i = 0; i < nf; i++)
		f[i].seen = false;
	p = skip_ws(p, end);
	if (p >= end || *p++ != '{')
		return 0;
	p = skip_ws(p, end);
	if (p < end && *p == '}') {
		p++;
		goto tail;
	}
	for (;;) {
		const char *name, *s;
		size_t n, sn;

		p = plain_string(p, end, &name, &n);
		if (!p)
			return 0;
		for (i = 0; i < nf; i++)
			if (strlen(f[i].name) == n && !memcmp(f[i].name, name, n))
				break;
		if (i == nf || f[i].seen)
			return 0; /* unknown, or a duplicate: jansson's to answer */
		p = skip_ws(p, end);
		if (p >= end || *p++ != ':')
			return 0;
		p = skip_ws(p, end);
		if (f[i].string) {
			p = plain_string(p, end, &s, &sn);
			if (!p || sn >= sizeof(f[i].str))
				return 0;
			memcpy(f[i].str, s, sn);
			f[i].str[sn] = '\0';
		} else {
			long long v = 0;
			unsigned digits = 0;

			if (p >= end || *p < '0' || *p > '9')
				return 0;
			if (*p == '0') {
				if (++p < end && *p >= '0' && *p <= '9')
					return 0; /* a leading zero */
			} else {
				for (; p < end && *p >= '0' && *p <= '9'; p++) {
					if (++digits > 18)
						return 0; /* may not fit: jansson's */
					v = v * 10 + (*p - '0');
				}
			}
			f[i].num = v;
		}
		f[i].seen = true;
		p = skip_ws(p, end);
		if (p < end && *p == ',') {
			p = skip_ws(p + 1, end);
			continue;
		}
		if (p < end && *p == '}') {
			p++;
			break;
		}
		return 0;
	}
tail:
	return skip_ws(p, end) == end;
}
