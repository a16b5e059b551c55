/* SPDX-License-Identifier: MIT */
/*
 * Prometheus metrics: the text builder and the broker-wide metrics
 * shared by the HTTP API's GET /metrics and the metrics-only listener
 * (--metrics-listen, or the socket-activated fd named "metrics"), which
 * serves /metrics and nothing of the lock API.
 */
#ifndef SHMLOCKD_METRICS_H
#define SHMLOCKD_METRICS_H

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

/* The metrics-only listener, started if configured or socket-activated: the
 * face the core knows (core/face.h). */
struct face;
extern const struct face metrics_face;

#endif
