/* SPDX-License-Identifier: MIT */
/*
 * Kill soak: client processes hammer a few keys while a chaos loop SIGKILLs
 * them and the broker. What the clients see is checked against data they
 * own in a shared mapping of their own, separate from the broker's segment,
 * so a broken segment cannot hide its own faults.
 */
#ifndef SHMLOCK_SOAK_H
#define SHMLOCK_SOAK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "liblocal.h"

#define SOAK_MAX_CLIENTS 64
#define SOAK_LOCKS 4
#define SOAK_SEMS 2
#define SOAK_KEYS (SOAK_LOCKS + SOAK_SEMS) /* locks first, then semaphores */
#define SOAK_SEM_LIMIT 3
#define SOAK_MSGS 32
#define SOAK_MSG_LEN 320

/* Operation kinds, counted per kind and shown by the watchdog. */
#define SOAK_OPS(X)                     \
	X(LOCK_TRY, "lock try")         \
	X(LOCK_TIMED, "lock timed")     \
	X(LOCK_FOREVER, "lock forever") \
	X(SEM_TRY, "sem try")           \
	X(SEM_TIMED, "sem timed")       \
	X(SEM_FOREVER, "sem forever")   \
	X(ENQUEUE, "enqueue")           \
	X(WAIT, "wait")                 \
	X(RELEASE, "release")           \
	X(RENEW, "renew")               \
	X(HELD, "held/check")           \
	X(WATCH, "watch")               \
	X(INFO, "info")                 \
	X(OPEN, "session open")         \
	X(CLOSE, "session close")

enum soak_op {
#define X(name, text) OP_##name,
	SOAK_OPS(X)
#undef X
		OP_COUNT
};

/* Outcomes worth a line in the summary. */
enum soak_outcome {
	OUT_GRANTED,
	OUT_BUSY,     /* try found it taken */
	OUT_TIMEDOUT, /* timed acquire, wait or watch ran out */
	OUT_WATCH_FIRED,
	OUT_LEASE_LOST,	  /* a lease expired under a holder (legal, but unexpected) */
	OUT_SESSION_LOST, /* a TTL session ended (legal only when not renewed) */
	OUT_OPEN_RETRY,	  /* session open failed while the broker was down */
	OUT_CLOSE_ORPHAN, /* close while the broker was down: exit, let death clean up */
	/* A grant found more marks inside than the limit, but only counting
	 * marks whose lease or TTL session may have run out (legal). */
	OUT_OVER_EXPIRED,
	OUT_OCC_UNSETTLED, /* the marks changed through 1000 reads: no check */
	OUT_COUNT
};

/* One client index: whoever runs in it now, and what it is doing. */
struct soak_slot {
	/* Bumped by the parent before it kills the process in this slot, so
	 * an occupancy mark left by a killed process is known to be stale by
	 * the time the broker can hand its holds to anyone else. */
	_Atomic uint32_t inc;
	_Atomic uint32_t op;	       /* enum soak_op in progress */
	_Atomic uint32_t op_key;       /* SOAK_KEYS: none */
	_Atomic int64_t op_timeout_ms; /* <0: forever */
	_Atomic uint64_t op_start_ns;  /* 0: between operations */
	_Atomic uint64_t ops;
};

struct soak_shared {
	_Atomic int stop;
	/* Per key: the largest token any client was granted (tokens rise per
	 * key; they are not ordered across keys). */
	_Atomic uint64_t max_token[SOAK_KEYS];
	/* occ[k][i] = inc << 1 | 1 while the process in slot i is inside a
	 * critical section of key k, holding token occ_token[k][i]. */
	_Atomic uint64_t occ[SOAK_KEYS][SOAK_MAX_CLIENTS];
	_Atomic uint64_t occ_token[SOAK_KEYS][SOAK_MAX_CLIENTS];
	/* The mark counts only before occ_until (CLOCK_MONOTONIC ns; 0: no
	 * end): a lease or a TTL session can end a hold while its process
	 * still waits for a nested key, and the broker then rightly hands the
	 * slot on. The bound is taken before the call that started the lease
	 * or the TTL, so it is never later than the broker's. */
	_Atomic uint64_t occ_until[SOAK_KEYS][SOAK_MAX_CLIENTS];
	/* Counts every store to occ[k][*], after it: a scan that saw no
	 * change is a snapshot of one moment (client.c, occupancy()). */
	_Atomic uint64_t occ_changes[SOAK_KEYS];
	_Atomic uint64_t ops[OP_COUNT];
	_Atomic uint64_t outcomes[OUT_COUNT];
	_Atomic uint64_t violations;
	_Atomic uint32_t nmsg;
	char msg[SOAK_MSGS][SOAK_MSG_LEN];
	struct soak_slot slot[SOAK_MAX_CLIENTS];
};

struct soak_config {
	unsigned seconds;
	unsigned clients;
	uint64_t seed;
	char sock[128];
	char shm[64];
	char dir[64];
	char log[128];
	const char *broker_bin;
	bool verbose;
};

extern const char *const soak_key_name[SOAK_KEYS];
extern const char *const soak_op_name[OP_COUNT];

static inline uint32_t soak_limit(unsigned key)
{
	return key < SOAK_LOCKS ? 1 : SOAK_SEM_LIMIT;
}

/* xorshift64*: reproducible choices from the seed. */
static inline uint64_t rng_next(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ull;
}

static inline uint32_t rng_below(uint64_t *s, uint32_t n)
{
	return n ? (uint32_t)((rng_next(s) >> 32) % n) : 0;
}

uint64_t soak_now_ns(void);

/* Record a violation: counted, printed at once, kept for the summary. */
void soak_violation(struct soak_shared *sh, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* client.c: the body of a client process; never returns. */
void soak_client(struct soak_shared *sh, const struct soak_config *cfg, unsigned idx, uint32_t inc,
		 uint64_t seed) __attribute__((noreturn));

/* broker.c: start the broker (same socket and segment every time) and wait
 * until it answers; 0 or -1. */
int soak_broker_start(const struct soak_config *cfg, pid_t *pid);
bool soak_broker_answers(const char *sock);

#endif
