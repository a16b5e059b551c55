/* SPDX-License-Identifier: MIT */
/*
 * Prometheus text (metrics_render.c): the builder, and the broker-wide
 * metrics every face that serves /metrics shows (the HTTP API's GET
 * /metrics, the metrics-only listener).
 */
#ifndef SHMLOCKD_METRICS_TEXT_H
#define SHMLOCKD_METRICS_TEXT_H

#include <stddef.h>
#include <stdint.h>

struct broker;

/* A growing text; p is NULL after an allocation failure. */
struct text {
	char *p;
	size_t len, cap;
};

void text_put(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void text_gauge(struct text *t, const char *name, const char *help, uint64_t v);
void text_counter(struct text *t, const char *name, const char *help, uint64_t v);

/* Build info, the segment's counts, capacities and counters, and the wait
 * and hold time histograms summed over every session slot. */
void metrics_render_broker(struct broker *b, struct text *t);

#endif
