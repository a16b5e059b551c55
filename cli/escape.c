// SPDX-License-Identifier: MIT
/*
 * Names and values made safe to print. Keys, session names and values are
 * any bytes a client chose: printed raw, an escape sequence rewrites the
 * operator's terminal and a newline forges a line of output (or of a log
 * that captures it). Every piece of human output of shmlock goes through
 * text_escape(), here and nowhere else; JSON output goes through jansson,
 * which escapes control characters itself (\u001b), with the strings that
 * are not UTF-8 percent-encoded first (json_text() in output.c).
 *
 * No allocation but the result, no stdio: the fuzz target of the command
 * line links this file with args.c.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Length of the valid UTF-8 sequence at @s (at most @left bytes), 0 if none:
 * no overlong forms, no surrogates, nothing above U+10FFFF. */
static size_t utf8_seq(const unsigned char *s, size_t left)
{
	size_t n, i;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		n = 3;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		n = 4;
	else
		return 0;
	if (n > left)
		return 0;
	for (i = 1; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0) ||
	    (s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90))
		return 0;
	return n;
}

/* Printed as they are: everything but C0 controls, DEL, the C1 controls
 * (U+0080..U+009F, which some terminals obey as ESC [ and friends) and the
 * backslash that introduces our escapes. */
static bool plain(const unsigned char *s, size_t n, unsigned flags)
{
	if (n == 1)
		return s[0] >= 0x20 && s[0] != 0x7f && s[0] != '\\' &&
		       !(s[0] == '"' && (flags & ESC_QUOTE));
	return !(n == 2 && s[0] == 0xc2 && s[1] < 0xa0);
}

char *text_escape(const char *v, size_t len, unsigned flags)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *s = (const unsigned char *)v;
	char *out = malloc(4 * len + 1), *p = out;
	size_t i = 0;

	if (!out)
		return NULL;
	while (i < len) {
		size_t n = utf8_seq(s + i, len - i), k;

		if (n && plain(s + i, n, flags)) {
			memcpy(p, s + i, n);
			p += n;
			i += n;
			continue;
		}
		/* Not printable: each byte of it, escaped. */
		for (k = 0; k < (n ? n : 1); k++, i++) {
			*p++ = '\\';
			switch (s[i]) {
			case '\\':
			case '"':
				*p++ = (char)s[i];
				break;
			case '\n':
				*p++ = 'n';
				break;
			case '\r':
				*p++ = 'r';
				break;
			case '\t':
				*p++ = 't';
				break;
			default:
				*p++ = 'x';
				*p++ = hex[s[i] >> 4];
				*p++ = hex[s[i] & 15];
			}
		}
	}
	*p = '\0';
	return out;
}

char *value_text(const char *v, size_t len)
{
	return text_escape(v, len, 0);
}

char *percent_encode(const char *s)
{
	return percent_encoden(s, strlen(s));
}

char *percent_encoden(const char *s, size_t len)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t i;
	char *out = malloc(3 * len + 1), *p = out;

	if (!out)
		return NULL;
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		/* RFC 3986's unreserved characters as they are, as the HTTP
		 * API's key_encoding writes them. */
		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		    c == '-' || c == '.' || c == '_' || c == '~') {
			*p++ = (char)c;
		} else {
			*p++ = '%';
			*p++ = hex[c >> 4];
			*p++ = hex[c & 15];
		}
	}
	*p = '\0';
	return out;
}
