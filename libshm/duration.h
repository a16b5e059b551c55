/* SPDX-License-Identifier: MIT */
/*
 * Durations, parsed once: Go's time.ParseDuration syntax, which Consul and
 * `consul lock` users write ("10s", "1.5s", "250ms", "1h30m", units ns, us,
 * µs, ms, s, m, h), read by the CLI's flags and Consul's API alike. Pure: no
 * state, no allocation, no clock.
 */
#ifndef SHMLOCK_DURATION_H
#define SHMLOCK_DURATION_H

#include <stddef.h>
#include <stdint.h>

/*
 * Parse a Go duration ("300ms", "-1.5h", "2h45m", "0") into nanoseconds. No
 * blanks, no bare number but "0", decimal digits only. Returns 0, -EINVAL
 * (not a duration: no unit, an unknown unit, no digits), or -ERANGE (beyond
 * what int64 nanoseconds hold, about 292 years), with *why set to a static
 * explanation either way.
 */
int duration_parse(const char *s, int64_t *ns, const char **why);

/*
 * As duration_parse(), and also a bare decimal number of seconds ("30",
 * "0.25"), for the fields that take one (Consul's ?wait=).
 */
int duration_parse_or_seconds(const char *s, int64_t *ns, const char **why);

/* Nanoseconds to milliseconds, rounding up so that 1ns is not "no wait". */
int64_t duration_ms(int64_t ns);

/* Milliseconds as Go prints a duration: "0s", "250ms", "1.5s", "1m30s", "2h0m0s". */
void duration_format(uint64_t ms, char *buf, size_t size);

#endif
