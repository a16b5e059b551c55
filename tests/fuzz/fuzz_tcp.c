// SPDX-License-Identifier: MIT
/*
 * libFuzzer target: the TCP protocol's framing and request parser
 * (broker/faces/tcp/tcp_parse.c) over arbitrary byte streams, as a connection's input
 * buffer sees them. Whatever they accept must be safe to act on: frames
 * inside the buffer with lines of at most TCP_LINE_MAX bytes, keys
 * non-empty and free of blanks and NULs (a key, token or secret cut short
 * at a NUL would name another), numbers in range; and a token that parses
 * formats back to itself (in lowercase).
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "faces/tcp/tcp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_req(const struct tcp_req *r)
{
	size_t i;

	if (r->cmd < TC_L || r->cmd > TC_LAST)
		abort();
	if (r->cmd == TC_SIGNAL && (!r->payload_len || r->payload_len > TCP_PAYLOAD_MAX ||
				    strlen(r->payload) != r->payload_len))
		abort();
	if (r->cmd != TC_AUTH && r->cmd != TC_STATS && r->cmd != TC_PING) {
		if (!r->key_len || r->key_len > TCP_LINE_MAX || strlen(r->key) != r->key_len)
			abort();
		for (i = 0; i < r->key_len; i++)
			if (r->key[i] == ' ' || r->key[i] == '\t' || r->key[i] == '\r' ||
			    r->key[i] == '\n')
				abort();
	}
	if (r->timeout_s < 0 || r->timeout_s > TCP_TIMEOUT_MAX_S)
		abort();
	if (r->lease_s < 0 || r->lease_s > TCP_LEASE_MAX_S)
		abort();
	if (r->limit < 1 || r->limit > UINT32_MAX)
		abort();
	if ((r->cmd == TC_R || r->cmd == TC_SR) && !r->arg[0])
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data;
	size_t pos = 0;

	while (pos < size) {
		const char *lines[3];
		size_t lens[3];
		struct tcp_req r;
		long n = tcp_frame(buf + pos, size - pos, lines, lens);
		int i;

		if (n <= 0)
			break;
		if ((size_t)n > size - pos)
			abort();
		for (i = 0; i < 3; i++)
			if (lens[i] > (i == 2 ? TCP_PAYLOAD_MAX : TCP_LINE_MAX) ||
			    lines[i] < buf + pos || lines[i] + lens[i] > buf + pos + n)
				abort();
		if (tcp_parse(lines, lens, &r) == TE_OK) {
			uint64_t fence, salt;
			char again[33];

			check_req(&r);
			if (tcp_parse_token(r.arg, &fence, &salt)) {
				tcp_format_token(fence, salt, again);
				if (strcasecmp(again, r.arg))
					abort();
			}
		}
		pos += (size_t)n;
	}
	return 0;
}
