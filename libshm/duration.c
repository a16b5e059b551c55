// SPDX-License-Identifier: MIT
/*
 * Durations as Go's time.ParseDuration reads them (duration.h), since
 * `consul lock` users pass -timeout=1m30s and Consul's clients send
 * TTL "15s", and expect the same spelling to work here.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "duration.h"

#define NS_PER_MS 1000000LL

static const struct unit {
	const char *name;
	int64_t ns;
} units[] = {
	{ "ns", 1LL },
	{ "us", 1000LL },
	{ "\xc2\xb5s", 1000LL }, /* U+00B5 micro sign */
	{ "\xce\xbcs", 1000LL }, /* U+03BC Greek small mu */
	{ "ms", NS_PER_MS },
	{ "s", 1000 * NS_PER_MS },
	{ "m", 60 * 1000 * NS_PER_MS },
	{ "h", 3600 * 1000 * NS_PER_MS },
};

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static int unit_of(const char *s, size_t len, int64_t *ns)
{
	size_t i;

	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (strlen(units[i].name) == len && !memcmp(units[i].name, s, len)) {
			*ns = units[i].ns;
			return 0;
		}
	return -EINVAL;
}

int duration_parse(const char *s, int64_t *ns, const char **why)
{
	uint64_t total = 0;
	bool neg = false;

	*why = "invalid duration";
	if (*s == '-' || *s == '+')
		neg = *s++ == '-';
	if (!strcmp(s, "0")) {
		*ns = 0;
		return 0;
	}
	if (!*s)
		return -EINVAL;
	while (*s) {
		uint64_t whole = 0, frac = 0, scale = 1;
		bool digits = false, overflow = false;
		int64_t unit;
		size_t ulen;

		if (!is_digit(*s) && *s != '.')
			return -EINVAL;
		for (; is_digit(*s); s++, digits = true) {
			if (whole > (UINT64_MAX - 9) / 10)
				overflow = true;
			whole = whole * 10 + (uint64_t)(*s - '0');
		}
		if (*s == '.') {
			/* Digits past the 18th cannot change the result. */
			for (s++; is_digit(*s); s++, digits = true)
				if (scale < 1000000000000000000ULL) {
					frac = frac * 10 + (uint64_t)(*s - '0');
					scale *= 10;
				}
		}
		if (!digits)
			return -EINVAL;
		for (ulen = 0; s[ulen] && !is_digit(s[ulen]) && s[ulen] != '.'; ulen++)
			;
		if (!ulen) {
			*why = "missing unit in duration (ns, us, ms, s, m or h)";
			return -EINVAL;
		}
		if (unit_of(s, ulen, &unit)) {
			*why = "unknown unit in duration (ns, us, ms, s, m or h)";
			return -EINVAL;
		}
		s += ulen;
		if (overflow || whole > (uint64_t)INT64_MAX / (uint64_t)unit)
			goto range;
		whole *= (uint64_t)unit;
		/* frac < scale <= 1e18 and unit <= 3.6e12: the product needs 128 bits. */
		whole += (uint64_t)((unsigned __int128)frac * (uint64_t)unit / scale);
		if (whole > (uint64_t)INT64_MAX)
			goto range;
		total += whole;
		if (total > (uint64_t)INT64_MAX)
			goto range;
	}
	*ns = neg ? -(int64_t)total : (int64_t)total;
	return 0;
range:
	*why = "duration out of range";
	return -ERANGE;
}

int duration_parse_or_seconds(const char *s, int64_t *ns, const char **why)
{
	char buf[64];
	size_t i, n = strlen(s), dots = 0;

	/* Only digits with at most one dot: seconds. Anything else (a sign,
	 * an exponent, hex, inf) is for duration_parse() to take or refuse. */
	for (i = 0; i < n; i++) {
		if (s[i] == '.')
			dots++;
		else if (!is_digit(s[i]))
			break;
	}
	if (!n || i < n || dots > 1)
		return duration_parse(s, ns, why);
	if (n + 2 > sizeof(buf)) {
		*why = "duration out of range";
		return -ERANGE;
	}
	memcpy(buf, s, n);
	buf[n] = 's';
	buf[n + 1] = '\0';
	return duration_parse(buf, ns, why);
}

int64_t duration_ms(int64_t ns)
{
	if (ns <= 0)
		return 0;
	return ns / NS_PER_MS + (ns % NS_PER_MS != 0);
}

void duration_format(uint64_t ms, char *buf, size_t size)
{
	uint64_t h = ms / 3600000, m = ms / 60000 % 60, s = ms / 1000 % 60, frac = ms % 1000;
	char secs[32];

	if (ms < 1000) {
		snprintf(buf, size, ms ? "%llums" : "0s", (unsigned long long)ms);
		return;
	}
	if (frac) {
		/* Go prints 1.5s, 1.25s: no trailing zeros. */
		int n = snprintf(secs, sizeof(secs), "%llu.%03llu", (unsigned long long)s,
				 (unsigned long long)frac);

		while (n > 0 && secs[n - 1] == '0')
			secs[--n] = '\0';
	} else {
		snprintf(secs, sizeof(secs), "%llu", (unsigned long long)s);
	}
	if (h)
		snprintf(buf, size, "%lluh%llum%ss", (unsigned long long)h, (unsigned long long)m,
			 secs);
	else if (m)
		snprintf(buf, size, "%llum%ss", (unsigned long long)m, secs);
	else
		snprintf(buf, size, "%ss", secs);
}
