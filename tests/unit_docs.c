// SPDX-License-Identifier: MIT
/*
 * The manual pages against the code they describe: liblocal(3)'s error
 * codes (the SYNOPSIS enum and the ERRORS list, with their values) against
 * include/liblocal.h's enum local_error; every public function of the
 * header in liblocal(3)'s SYNOPSIS and RETURN VALUE; the segment size that
 * shmlockd(8) states against seg_size_for() with the broker's default
 * capacities. A code, function or layout change without its documentation
 * fails here.
 *
 * Files are found as unit_openapi.c finds docs/openapi.json: under
 * $SHMLOCK_SRCDIR, else the current directory (make test runs at the root),
 * else above the test binary.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "liblocal.h"
#include "segment.h"

#define MAX_NAMES 128

struct names {
	char v[MAX_NAMES][48];
	long value[MAX_NAMES];
	int n;
};

static const char *src_path(const char *rel)
{
	static char path[4200];
	const char *src = getenv("SHMLOCK_SRCDIR");
	char bin[4096], *slash;
	ssize_t n;

	if (src && *src) {
		snprintf(path, sizeof(path), "%s/%s", src, rel);
		if (access(path, R_OK) == 0)
			return path;
		FAIL_AT("SHMLOCK_SRCDIR=%s but %s is not readable", src, path);
	}
	if (access(rel, R_OK) == 0)
		return rel;
	n = readlink("/proc/self/exe", bin, sizeof(bin) - 1);
	if (n > 0) {
		bin[n] = '\0';
		slash = strrchr(bin, '/');
		if (slash) {
			*slash = '\0';
			snprintf(path, sizeof(path), "%s/../../../%s", bin, rel);
			if (access(path, R_OK) == 0)
				return path;
			snprintf(path, sizeof(path), "%s/../../%s", bin, rel);
			if (access(path, R_OK) == 0)
				return path;
		}
	}
	FAIL_AT("cannot find %s (set SHMLOCK_SRCDIR to the source tree)", rel);
}

/* The whole file, NUL-terminated (malloc'ed). */
static char *slurp(const char *rel)
{
	const char *path = src_path(rel);
	FILE *f = fopen(path, "re");
	char *buf;
	long len;

	if (!f || fseek(f, 0, SEEK_END) || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET))
		FAIL_AT("cannot read %s", path);
	buf = malloc((size_t)len + 1);
	if (!buf || fread(buf, 1, (size_t)len, f) != (size_t)len)
		FAIL_AT("cannot read %s", path);
	buf[len] = '\0';
	fclose(f);
	return buf;
}

/* The text between @from (which must occur) and the next @to after it. */
static char *between(const char *text, const char *from, const char *to, const char *what)
{
	const char *a = strstr(text, from), *b;
	char *out;

	if (!a)
		FAIL_AT("%s: \"%s\" not found", what, from);
	a += strlen(from);
	b = strstr(a, to);
	if (!b)
		FAIL_AT("%s: no \"%s\" after \"%s\"", what, to, from);
	out = strndup(a, (size_t)(b - a));
	if (!out)
		FAIL_AT("out of memory");
	return out;
}

/* Every LOCAL_E... identifier of @text, in order, without repeats. */
static void error_names(const char *text, struct names *out)
{
	const char *p = text;

	out->n = 0;
	while ((p = strstr(p, "LOCAL_E"))) {
		size_t len = 0;
		int i;

		while (isalnum((unsigned char)p[len]) || p[len] == '_')
			len++;
		if (len >= sizeof(out->v[0]))
			FAIL_AT("identifier too long: %.*s", (int)len, p);
		for (i = 0; i < out->n; i++)
			if (strlen(out->v[i]) == len && !strncmp(out->v[i], p, len))
				break;
		if (i == out->n && out->n < MAX_NAMES) {
			memcpy(out->v[out->n], p, len);
			out->v[out->n][len] = '\0';
			out->n++;
		}
		p += len;
	}
}

/* include/liblocal.h's error codes with their values: LOCAL_EBASE and
 * LOCAL_ELAST left out, the first code = LOCAL_EBASE, then one up each. */
static void header_errors(struct names *codes)
{
	char *hdr = slurp("include/liblocal.h");
	char *body = between(hdr, "enum local_error {", "};", "include/liblocal.h");
	struct names all;
	int i;

	error_names(body, &all);
	codes->n = 0;
	for (i = 0; i < all.n; i++) {
		if (!strcmp(all.v[i], "LOCAL_EBASE") || !strcmp(all.v[i], "LOCAL_ELAST"))
			continue;
		strcpy(codes->v[codes->n], all.v[i]);
		codes->value[codes->n] = LOCAL_EBASE + codes->n;
		codes->n++;
	}
	if (codes->n < 10)
		FAIL_AT("only %d codes parsed from include/liblocal.h", codes->n);
	/* The parse agrees with the compiler's view of the enum. */
	CHECK_EQ(LOCAL_EBASE + codes->n, LOCAL_ELAST);
	free(body);
	free(hdr);
}

TEST(docs, man_page_synopsis_lists_every_error_code, 10)
{
	char *man = slurp("docs/liblocal.3");
	char *body = between(man, "enum local_error {", "};", "docs/liblocal.3 SYNOPSIS");
	struct names hdr, doc;
	int i;

	header_errors(&hdr);
	error_names(body, &doc);
	/* The synopsis spells out LOCAL_EBASE and LOCAL_ELAST too. */
	CHECK_EQ(doc.n, hdr.n + 2);
	for (i = 0; i < hdr.n; i++)
		if (strcmp(doc.v[i + 1], hdr.v[i]))
			FAIL_AT("liblocal(3) SYNOPSIS: %s where include/liblocal.h has %s",
				doc.v[i + 1], hdr.v[i]);
	free(body);
	free(man);
}

TEST(docs, man_page_errors_match_the_header, 10)
{
	char *man = slurp("docs/liblocal.3");
	char *errs = between(man, "\n.SH ERRORS\n", "\n.SH ", "docs/liblocal.3 ERRORS");
	struct names hdr;
	const char *p = errs;
	int n = 0;

	header_errors(&hdr);
	/* Each code's entry: .BR LOCAL_EXXX " (NNNNN)", in the header's order. */
	while ((p = strstr(p, "\n.BR LOCAL_E"))) {
		char name[48] = "";
		long value;

		/* The introduction names the bounds. */
		if (sscanf(p, "\n.BR %47[A-Z_]", name) == 1 &&
		    (!strcmp(name, "LOCAL_EBASE") || !strcmp(name, "LOCAL_ELAST"))) {
			p++;
			continue;
		}
		if (sscanf(p, "\n.BR %47[A-Z_] \" (%ld)\"", name, &value) != 2)
			FAIL_AT("liblocal(3) ERRORS: cannot parse \"%.40s\"", p + 1);
		if (n >= hdr.n)
			FAIL_AT("liblocal(3) ERRORS: %s is not in include/liblocal.h", name);
		if (strcmp(name, hdr.v[n]) || value != hdr.value[n])
			FAIL_AT("liblocal(3) ERRORS: %s (%ld) where include/liblocal.h has %s "
				"(%ld)",
				name, value, hdr.v[n], hdr.value[n]);
		n++;
		p++;
	}
	if (n != hdr.n)
		FAIL_AT("liblocal(3) ERRORS lists %d codes; include/liblocal.h has %d (next: %s)",
			n, hdr.n, hdr.v[n]);
	free(errs);
	free(man);
}

/* Is there a ".SS ..." line naming @fn() (alone or with others)? */
static bool has_section(const char *man, const char *fn)
{
	const char *p = man;
	char want[80];

	snprintf(want, sizeof(want), "%s()", fn);
	while ((p = strstr(p, "\n.SS "))) {
		const char *eol = strchr(p + 1, '\n');
		const char *hit = strstr(p, want);

		if (hit && (!eol || hit < eol) && (hit[-1] == ' ' || hit[-1] == ','))
			return true;
		p++;
	}
	return false;
}

TEST(docs, man_page_names_every_function, 10)
{
	char *hdr = slurp("include/liblocal.h");
	char *man = slurp("docs/liblocal.3");
	char *syn = between(man, "\n.SH SYNOPSIS\n", "\n.SH ", "docs/liblocal.3 SYNOPSIS");
	char *ret = between(man, "\n.SH RETURN VALUE\n", "\n.SH ", "docs/liblocal.3 RETURN VALUE");
	const char *p = hdr;
	int n = 0;

	while ((p = strstr(p, "\nLOCAL_API "))) {
		const char *paren = strchr(p, '('), *name = paren;
		char fn[64], want[80];

		if (!paren)
			break;
		while (name > p && (isalnum((unsigned char)name[-1]) || name[-1] == '_'))
			name--;
		snprintf(fn, sizeof(fn), "%.*s", (int)(paren - name), name);
		snprintf(want, sizeof(want), "%s(", fn);
		if (!strstr(syn, want))
			FAIL_AT("liblocal(3) SYNOPSIS does not declare %s()", fn);
		snprintf(want, sizeof(want), ".BR %s ()", fn);
		if (!strstr(ret, want))
			FAIL_AT("liblocal(3) RETURN VALUE does not name %s()", fn);
		if (!has_section(man, fn))
			FAIL_AT("liblocal(3) has no .SS section describing %s()", fn);
		n++;
		p = paren;
	}
	if (n < 20)
		FAIL_AT("only %d functions found in include/liblocal.h", n);
	free(ret);
	free(syn);
	free(man);
	free(hdr);
}

/* shmlockd's default capacities (shmlockd --help, shmlockd(8)). */
#define DEFAULT_CAPS                                                                            \
	{                                                                                       \
		.max_keys = 4096, .max_sessions = 1024, .max_waiters = 4096, .max_holds = 4096, \
		.max_value = 1024                                                               \
	}

TEST(docs, shmlockd_page_states_the_segment_size, 10)
{
	struct seg_caps caps = DEFAULT_CAPS;
	char *man = slurp("docs/shmlockd.8");
	const char *p = strstr(man, "With the default capacities the segment takes about ");
	double said, mib = (double)seg_size_for(&caps) / (1024.0 * 1024.0);

	if (!p ||
	    sscanf(p, "With the default capacities the segment takes about %lf MiB", &said) != 1)
		FAIL_AT("shmlockd(8) does not say \"With the default capacities the segment "
			"takes about N MiB\"");
	if (said - mib > 0.05 + 1e-9 || mib - said > 0.05 + 1e-9)
		FAIL_AT("shmlockd(8) says the segment takes about %.1f MiB; it takes %.2f MiB",
			said, mib);
	free(man);
}
