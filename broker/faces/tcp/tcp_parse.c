// SPDX-License-Identifier: MIT
/*
 * dflockd's request framing and validation (docs/tcp-protocol.md): three
 * '\n'-terminated lines, trailing '\r's stripped, lines of at most
 * TCP_LINE_MAX bytes; then command, key and argument checked in that order.
 * Pure functions of their input: tests/fuzz/fuzz_tcp.c runs them alone.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "tcp.h"

long tcp_frame(const char *buf, size_t len, const char *lines[3], size_t lens[3])
{
	size_t pos = 0;
	int i;

	for (i = 0; i < 3; i++) {
		size_t avail = len - pos, n;
		const char *nl = memchr(buf + pos, '\n',
					avail < TCP_LINE_MAX + 1 ? avail : TCP_LINE_MAX + 1);

		if (!nl)
			return avail > TCP_LINE_MAX ? -1 : 0;
		n = (size_t)(nl - (buf + pos));
		lines[i] = buf + pos;
		lens[i] = n;
		while (lens[i] && lines[i][lens[i] - 1] == '\r')
			lens[i]--;
		pos += n + 1;
	}
	return (long)pos;
}

static const char *const names[] = {
	[TC_L] = "l",	[TC_R] = "r",	[TC_N] = "n",	    [TC_E] = "e",
	[TC_W] = "w",	[TC_SL] = "sl", [TC_SR] = "sr",	    [TC_SN] = "sn",
	[TC_SE] = "se", [TC_SW] = "sw", [TC_AUTH] = "auth", [TC_STATS] = "stats",
};

const char *tcp_cmd_name(enum tcp_cmd c)
{
	return c > TC_NONE && c <= TC_STATS ? names[c] : "?";
}

static bool is_space(char c)
{
	/* Go's unicode.IsSpace over ASCII (strings.Fields, TrimSpace). */
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* Split @s into at most @max fields; returns how many there are (may be
 * more than @max: then only the first @max are filled). */
static int fields(const char *s, size_t n, const char *f[], size_t fl[], int max)
{
	size_t i = 0;
	int k = 0;

	while (i < n) {
		size_t start;

		while (i < n && is_space(s[i]))
			i++;
		if (i >= n)
			break;
		start = i;
		while (i < n && !is_space(s[i]))
			i++;
		if (k < max) {
			f[k] = s + start;
			fl[k] = i - start;
		}
		k++;
	}
	return k;
}

/* Go's strconv.Atoi: optional sign, decimal digits, in int64's range. */
static bool atoi64(const char *s, size_t n, int64_t *out)
{
	bool neg = false;
	uint64_t v = 0, lim;
	size_t i = 0;

	if (n && (s[0] == '+' || s[0] == '-')) {
		neg = s[0] == '-';
		i = 1;
	}
	if (i == n)
		return false;
	lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
	for (; i < n; i++) {
		unsigned d = (unsigned char)s[i] - '0';

		if (d > 9 || v > (lim - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*out = neg ? (int64_t)(0 - v) : (int64_t)v;
	return true;
}

static void trim(const char *s, size_t n, const char **o, size_t *on)
{
	while (n && is_space(*s)) {
		s++;
		n--;
	}
	while (n && is_space(s[n - 1]))
		n--;
	*o = s;
	*on = n;
}

static enum tcp_perr timeout_of(const char *s, size_t n, int64_t *out)
{
	if (!atoi64(s, n, out))
		return TE_INTEGER;
	if (*out < 0)
		return TE_TIMEOUT;
	if (*out > TCP_TIMEOUT_MAX_S)
		*out = TCP_TIMEOUT_MAX_S; /* as good as for ever */
	return TE_OK;
}

static enum tcp_perr lease_of(const char *s, size_t n, int64_t *out)
{
	if (!atoi64(s, n, out))
		return TE_INTEGER;
	if (*out <= 0 || *out > TCP_LEASE_MAX_S)
		return TE_LEASE;
	return TE_OK;
}

static enum tcp_perr limit_of(const char *s, size_t n, int64_t *out)
{
	if (!atoi64(s, n, out))
		return TE_INTEGER;
	if (*out <= 0 || *out > UINT32_MAX)
		return TE_LIMIT;
	return TE_OK;
}

static enum tcp_perr command_of(const char *s, size_t n, enum tcp_cmd *out)
{
	int i;

	for (i = TC_L; i <= TC_STATS; i++)
		if (strlen(names[i]) == n && !memcmp(names[i], s, n)) {
			*out = (enum tcp_cmd)i;
			return TE_OK;
		}
	return TE_COMMAND;
}

enum tcp_perr tcp_parse(const char *const lines[3], const size_t lens[3], struct tcp_req *out)
{
	const char *a = lines[2], *f[3], *t;
	size_t an = lens[2], fl[3], tn, i;
	enum tcp_perr e;
	int nf;

	/* Not a memset() of the two 257-byte buffers: each is written (and
	 * terminated) where it is used, and starts empty. */
	out->cmd = TC_NONE;
	out->key[0] = out->arg[0] = '\0';
	out->key_len = 0;
	out->timeout_s = out->lease_s = 0;
	out->limit = 1;
	e = command_of(lines[0], lens[0], &out->cmd);
	if (e)
		return e;
	if (out->cmd != TC_AUTH && out->cmd != TC_STATS) {
		if (!lens[1] || lens[1] > TCP_LINE_MAX)
			return TE_KEY;
		for (i = 0; i < lens[1]; i++)
			if (lines[1][i] == ' ' || lines[1][i] == '\t' || lines[1][i] == '\r' ||
			    lines[1][i] == '\n' || !lines[1][i]) /* keys are C strings here */
				return TE_KEY;
		memcpy(out->key, lines[1], lens[1]);
		out->key[lens[1]] = '\0';
		out->key_len = lens[1];
	}
	switch (out->cmd) {
	case TC_L:
		nf = fields(a, an, f, fl, 2);
		if (nf < 1 || nf > 2)
			return TE_FIELDS;
		e = timeout_of(f[0], fl[0], &out->timeout_s);
		if (!e && nf == 2)
			e = lease_of(f[1], fl[1], &out->lease_s);
		return e;
	case TC_SL:
		nf = fields(a, an, f, fl, 3);
		if (nf < 2 || nf > 3)
			return TE_FIELDS;
		e = timeout_of(f[0], fl[0], &out->timeout_s);
		if (!e)
			e = limit_of(f[1], fl[1], &out->limit);
		if (!e && nf == 3)
			e = lease_of(f[2], fl[2], &out->lease_s);
		return e;
	case TC_R:
	case TC_SR:
	case TC_AUTH:
		trim(a, an, &t, &tn);
		/* A NUL would cut the token or secret short of what was sent. */
		if ((!tn && out->cmd != TC_AUTH) || memchr(t, '\0', tn))
			return TE_TOKEN;
		memcpy(out->arg, t, tn);
		out->arg[tn] = '\0';
		return TE_OK;
	case TC_N:
	case TC_SN:
		nf = fields(a, an, f, fl, 2);
		if (nf < 1 || nf > 2)
			return TE_FIELDS;
		if (memchr(f[0], '\0', fl[0]))
			return TE_TOKEN;
		memcpy(out->arg, f[0], fl[0]);
		out->arg[fl[0]] = '\0';
		return nf == 2 ? lease_of(f[1], fl[1], &out->lease_s) : TE_OK;
	case TC_E:
		trim(a, an, &t, &tn);
		return tn ? lease_of(t, tn, &out->lease_s) : TE_OK;
	case TC_SE:
		nf = fields(a, an, f, fl, 2);
		if (nf < 1 || nf > 2)
			return TE_FIELDS;
		e = limit_of(f[0], fl[0], &out->limit);
		if (!e && nf == 2)
			e = lease_of(f[1], fl[1], &out->lease_s);
		return e;
	case TC_W:
	case TC_SW:
		nf = fields(a, an, f, fl, 1);
		if (nf != 1)
			return TE_FIELDS;
		return timeout_of(f[0], fl[0], &out->timeout_s);
	default: /* stats: key and argument ignored */
		return TE_OK;
	}
}
