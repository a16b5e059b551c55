// SPDX-License-Identifier: MIT
/*
 * The one duration parser (libshm/duration.c) against Go's
 * time.ParseDuration, whose syntax Consul and `consul lock` users write: what
 * it takes and the value, what it refuses and why (no unit, an unknown unit,
 * out of range), and the bare seconds Consul's ?wait= also takes.
 */
#include <errno.h>
#include <string.h>

#include "duration.h"
#include "harness.h"

#define NS 1ll
#define US (1000 * NS)
#define MS (1000 * US)
#define S (1000 * MS)
#define MIN (60 * S)
#define H (60 * MIN)

static void takes(const char *s, int64_t want)
{
	const char *why = NULL;
	int64_t ns = -12345;
	int err = duration_parse(s, &ns, &why);

	if (err || ns != want)
		FAIL_AT("\"%s\": %d (%s), %lld; want %lld", s, err, why ? why : "", (long long)ns,
			(long long)want);
}

static void refuses(const char *s, int want_err, const char *want_why)
{
	const char *why = NULL;
	int64_t ns = 0;
	int err = duration_parse(s, &ns, &why);

	if (err != want_err || !why || (want_why && !strstr(why, want_why)))
		FAIL_AT("\"%s\": %d (%s), %lld; want %d (%s)", s, err, why ? why : "",
			(long long)ns, want_err, want_why ? want_why : "");
}

TEST(unit, durations_take_go_syntax, 10)
{
	takes("0", 0);
	takes("0s", 0);
	takes("-0", 0);
	takes("10s", 10 * S);
	takes("+10s", 10 * S);
	takes("-10s", -10 * S);
	takes("1.5s", 1500 * MS);
	takes(".5s", 500 * MS);
	takes("5.s", 5 * S);
	takes("250ms", 250 * MS);
	takes("1500us", 1500 * US);
	takes("1500\xc2\xb5s", 1500 * US); /* U+00B5 micro sign */
	takes("1500\xce\xbcs", 1500 * US); /* U+03BC Greek mu */
	takes("7ns", 7);
	takes("1h30m", H + 30 * MIN);
	takes("2h45m10.5s", 2 * H + 45 * MIN + 10500 * MS);
	takes("1m1m", 2 * MIN);
	takes("0.000000001s", 1);
	takes("1.0000000001s", S); /* below a nanosecond: dropped, as Go */
	takes("86400s", 86400 * S);
	takes("24h", 24 * H);
	/* The largest: int64 nanoseconds, about 2562047 hours. */
	takes("9223372036854775807ns", INT64_MAX);
	takes("2562047h47m16.854775807s", INT64_MAX);
}

TEST(unit, durations_refuse_what_go_refuses, 10)
{
	refuses("", -EINVAL, NULL);
	refuses("10", -EINVAL, "missing unit");
	refuses("1.5", -EINVAL, "missing unit");
	refuses("0x10s", -EINVAL, "unknown unit");
	refuses("1e3s", -EINVAL, "unknown unit");
	refuses("10sec", -EINVAL, "unknown unit");
	refuses("10S", -EINVAL, "unknown unit");
	refuses("10 s", -EINVAL, NULL);
	refuses(" 10s", -EINVAL, NULL);
	refuses("10s ", -EINVAL, NULL);
	refuses("s", -EINVAL, NULL);
	refuses(".s", -EINVAL, NULL);
	refuses("-", -EINVAL, NULL);
	refuses("+", -EINVAL, NULL);
	refuses("--1s", -EINVAL, NULL);
	refuses("1s-1s", -EINVAL, NULL);
	refuses("inf", -EINVAL, NULL);
	refuses("nan", -EINVAL, NULL);
	refuses("1.5.5s", -EINVAL, NULL);
}

TEST(unit, durations_beyond_int64_are_out_of_range, 10)
{
	refuses("99999999h", -ERANGE, "out of range");
	refuses("2562048h", -ERANGE, "out of range");
	refuses("2562047h47m16.854775808s", -ERANGE, "out of range");
	refuses("9223372036854775808ns", -ERANGE, "out of range");
	refuses("99999999999999999999999s", -ERANGE, "out of range");
	refuses("2562047h2562047h", -ERANGE, "out of range");
	refuses("-99999999h", -ERANGE, "out of range");
}

TEST(unit, bare_seconds_where_a_field_takes_them, 10)
{
	const char *why = NULL;
	int64_t ns = 0;

	CHECK_OK(duration_parse_or_seconds("30", &ns, &why));
	CHECK_EQ(ns, 30 * S);
	CHECK_OK(duration_parse_or_seconds("0.25", &ns, &why));
	CHECK_EQ(ns, 250 * MS);
	CHECK_OK(duration_parse_or_seconds("5m", &ns, &why));
	CHECK_EQ(ns, 5 * MIN);
	CHECK_RC(duration_parse_or_seconds("0x10", &ns, &why), -EINVAL);
	CHECK_RC(duration_parse_or_seconds("1e3", &ns, &why), -EINVAL);
	CHECK_RC(duration_parse_or_seconds("1.2.3", &ns, &why), -EINVAL);
	CHECK_RC(duration_parse_or_seconds("", &ns, &why), -EINVAL);
	CHECK_RC(duration_parse_or_seconds("99999999999", &ns, &why), -ERANGE);
	CHECK_RC(duration_parse_or_seconds("9999999999999999999999999999999999999999999999999999999"
					   "999999999999999",
					   &ns, &why),
		 -ERANGE);
}

TEST(unit, durations_print_as_go_and_parse_back, 10)
{
	static const struct {
		uint64_t ms;
		const char *s;
	} cases[] = { { 0, "0s" },
		      { 250, "250ms" },
		      { 1500, "1.5s" },
		      { 10500, "10.5s" },
		      { 90000, "1m30s" },
		      { 3600000, "1h0m0s" },
		      { 86400000, "24h0m0s" },
		      { 5400250, "1h30m0.25s" } };
	char buf[32];
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *why;
		int64_t ns;

		duration_format(cases[i].ms, buf, sizeof(buf));
		if (strcmp(buf, cases[i].s))
			FAIL_AT("%llu ms printed \"%s\", want \"%s\"",
				(unsigned long long)cases[i].ms, buf, cases[i].s);
		CHECK_OK(duration_parse(buf, &ns, &why));
		CHECK_EQ(duration_ms(ns), (int64_t)cases[i].ms);
	}
	CHECK_EQ(duration_ms(1), 1); /* a nanosecond is not "no wait" */
	CHECK_EQ(duration_ms(-1), 0);
}
