/* SPDX-License-Identifier: MIT */
/*
 * The metrics-only listener (--metrics-listen, or the socket-activated fd
 * named "metrics"), which serves /metrics and nothing of the lock API; the
 * text it serves is the core's (core/metrics_text.h), which the HTTP API's
 * GET /metrics serves too.
 */
#ifndef SHMLOCKD_METRICS_H
#define SHMLOCKD_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "core/metrics_text.h"

/* The metrics-only listener, started if configured or socket-activated: the
 * face the core knows (core/face.h). */
struct face;
extern const struct face metrics_face;

#endif
