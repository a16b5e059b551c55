/* SPDX-License-Identifier: MIT */
/* Checks every face's command-line options share (options.c). */
#ifndef SHMLOCKD_OPTIONS_H
#define SHMLOCKD_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

/* --@name's @arg as a number in [@min, @max] into @out: 0, or -1 after
 * saying what was expected. */
int opt_number(const char *name, const char *arg, uint32_t min, uint32_t max, uint32_t *out);
/* --@name's @arg copied into @dst (@size bytes): 0, or -1 after saying it is
 * empty or too long. */
int opt_string(const char *name, const char *arg, char *dst, size_t size);

#endif
