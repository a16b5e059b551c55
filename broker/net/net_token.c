// SPDX-License-Identifier: MIT
/*
 * The one token check. The token is given once (--auth-token,
 * --auth-token-file) and every face — HTTP, Consul, TCP, the web view and
 * the operator's status — asks here whether a request carries it. The
 * comparison looks at every byte of the configured token whatever the
 * guess, so its time tells nothing about how much of a guess was right.
 */
#include <string.h>
#include <strings.h>

#include "core/broker.h"
#include "net.h"

const char *net_token(const struct broker *b)
{
	return b->opts.http.auth_token;
}

bool net_const_eq(const char *want, const char *a, size_t alen)
{
	size_t n = strlen(want), i;
	unsigned char diff = alen != n;

	for (i = 0; i < n; i++)
		diff |= (unsigned char)(want[i] ^ (i < alen ? a[i] : 0));
	return diff == 0;
}

bool net_token_ok(const struct broker *b, const char *got, size_t got_len)
{
	const char *want = net_token(b);

	return want[0] && got && net_const_eq(want, got, got_len);
}

bool net_bearer_ok(const struct broker *b, const char *header)
{
	size_t got;

	if (!header || strncasecmp(header, "Bearer ", 7))
		return false;
	header += 7;
	while (*header == ' ' || *header == '\t')
		header++;
	got = strlen(header);
	while (got && (header[got - 1] == ' ' || header[got - 1] == '\t'))
		got--;
	return net_token_ok(b, header, got);
}
