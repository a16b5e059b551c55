// SPDX-License-Identifier: MIT
/* Checks every face's command-line options share (options.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "options.h"

int opt_string(const char *name, const char *arg, char *dst, size_t size)
{
	if (strlen(arg) >= size || !*arg) {
		fprintf(stderr, "shmlockd: --%s: empty or too long\n", name);
		return -1;
	}
	strcpy(dst, arg);
	return 0;
}

int opt_number(const char *name, const char *arg, uint32_t min, uint32_t max, uint32_t *out)
{
	unsigned long long v;
	char *end;

	errno = 0;
	v = strtoull(arg, &end, 10);
	if (errno || !*arg || *arg == '-' || *end || v < min || v > max) {
		fprintf(stderr, "shmlockd: --%s: expected a number in %u..%u, got '%s'\n", name,
			min, max, arg);
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}
