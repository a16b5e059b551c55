// SPDX-License-Identifier: MIT
/*
 * What dflockd's two protocols, the HTTP API and the TCP protocol, share
 * (dflockd.h): the text shape of a lock token, and the first holder a stats
 * answer shows. Pure functions of their input and of liblocal:
 * tests/fuzz/fuzz_tcp.c runs the token's with the TCP parser.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "dflockd.h"

static void put_hex16(char *out, uint64_t v)
{
	/* Two digits a byte from a table: one per grant, on every acquire. */
	static const char pairs[] =
		"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
		"202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"
		"404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f"
		"606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f"
		"808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"
		"a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
		"c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf"
		"e0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";
	int i;

	for (i = 14; i >= 0; i -= 2, v >>= 8)
		memcpy(out + i, pairs + 2 * (v & 0xff), 2);
}

void tcp_format_token(uint64_t fence, uint64_t salt, char out[33])
{
	/* By hand: one per grant, and snprintf() cost more than the grant. */
	put_hex16(out, fence);
	put_hex16(out + 16, salt);
	out[32] = '\0';
}

/* One more than the value of a hex digit (either case); 0: not one. */
static const uint8_t hexval1[256] = {
	['0'] = 1,  ['1'] = 2,	['2'] = 3,  ['3'] = 4,	['4'] = 5,  ['5'] = 6,
	['6'] = 7,  ['7'] = 8,	['8'] = 9,  ['9'] = 10, ['a'] = 11, ['b'] = 12,
	['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16, ['A'] = 11, ['B'] = 12,
	['C'] = 13, ['D'] = 14, ['E'] = 15, ['F'] = 16,
};

static bool hex16(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	int i;

	for (i = 0; i < 16; i++) {
		unsigned d = hexval1[(unsigned char)s[i]];

		if (!d)
			return false;
		v = v << 4 | (d - 1);
	}
	*out = v;
	return true;
}

bool tcp_parse_token(const char *s, uint64_t *fence, uint64_t *salt)
{
	return strnlen(s, 33) == 32 && hex16(s, fence) && hex16(s + 16, salt);
}

static int take_first(const struct local_holder *hl, void *arg)
{
	struct first_holder *f = arg;

	memcpy(f->session, hl->session, sizeof(f->session));
	f->lease_ms = hl->lease_remaining_ms;
	return 1; /* stop: the first is all stats show */
}

void stats_first_holder(local_session *observer, const char *key, struct first_holder *f)
{
	f->session[0] = '\0';
	f->lease_ms = 0;
	local_holders(observer, key, take_first, f);
}
