/* SPDX-License-Identifier: MIT */
/*
 * The broker's wire protocol, over a SOCK_SEQPACKET Unix socket: one request
 * datagram, one reply datagram (the reply to OPEN carries the segment's fd by
 * SCM_RIGHTS). Both sides check magic and version on every message, so a
 * client and broker of different versions fail with LOCAL_EVERSION instead of
 * misreading each other. Internal: never part of include/.
 */
#ifndef SHMLOCK_PROTO_H
#define SHMLOCK_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "segment.h"

#define PROTO_MAGIC 0x4c4d4853u /* "SHML" */
#define PROTO_VERSION 2u

enum proto_type {
	MSG_OPEN = 1,	       /* open a session; reply carries the segment fd */
	MSG_CLOSE = 2,	       /* close a session by id (the id is the secret) */
	MSG_DESTROY = 3,       /* operator: invalidate any session by id */
	MSG_FORCE_RELEASE = 4, /* operator: release a key from a holder, or all */
	MSG_BIND = 5,	       /* bind a child of the session's process to the session too */
	/*
	 * Operator requests served by the broker itself, without a session:
	 * they work with every table full, and read the segment with bounded
	 * patience (a key whose mutex a stalled process holds is reported
	 * busy). Each takes a struct proto_op and is answered by one
	 * struct proto_op_reply followed by its records; a listing comes in
	 * pages, each request naming where the last page ended (cursor).
	 */
	MSG_OP_STATS = 10,	/* one struct proto_op_stats */
	MSG_OP_KEYS = 11,	/* key entries from cursor, by prefix: proto_op_key */
	MSG_OP_INFO = 12,	/* one key, with its value: proto_op_key */
	MSG_OP_HOLDERS = 13,	/* the key's holds from node cursor: proto_op_holder */
	MSG_OP_SESSIONS = 14,	/* session slots from cursor: proto_op_session */
	MSG_OP_RESET = 15,	/* reset a quarantined key: no records */
	MSG_OP_BROKER = 16,	/* the broker itself: one struct proto_op_broker */
	MSG_OP_LOCK_DELAY = 17, /* why a key is in lock-delay: 0 or 1 proto_op_delay */
	MSG_OP_WAITERS = 18,	/* the key's queued requests from node cursor: proto_op_waiter */
	MSG_REPLY = 100,
	MSG_OP_REPLY = 101,
};

#define MSG_OP_FIRST MSG_OP_STATS
#define MSG_OP_LAST MSG_OP_WAITERS

struct proto_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t len; /* whole message, header included */
	uint32_t reserved;
};

struct proto_open {
	struct proto_hdr hdr;
	uint32_t ttl_ms;
	uint32_t lock_delay_ms;
	uint32_t behavior;
	uint32_t flags;
	uint64_t start_time; /* the client's /proc/self/stat start time */
	char name[SEG_NAME_MAX];
};

struct proto_session_id {
	struct proto_hdr hdr;
	uint8_t id[16];
};

struct proto_reply {
	struct proto_hdr hdr;
	int32_t status; /* 0 or a negative liblocal code */
	uint32_t slot;
	uint32_t gen;
	uint32_t seg_abi;
	uint8_t id[16];
	/* MSG_OPEN: the client's pid as the broker sees it (SO_PEERCRED), the
	 * owner it writes into lock words; and the broker's pid namespace
	 * (st_dev and st_ino of its /proc/self/ns/pid), so that the client
	 * judges owners only if its own pids are the broker's. */
	int32_t peer_pid;
	uint32_t reserved;
	uint64_t pidns_dev;
	uint64_t pidns_ino;
};

struct proto_force_release {
	struct proto_hdr hdr;
	uint8_t holder[16]; /* the holder's session id */
	uint32_t all;	    /* 1: every holder (holder ignored) */
	uint32_t key_len;
	char key[LOCAL_KEY_MAX + 1];
};

/* ---- operator requests (MSG_OP_*) ---- */

/* proto_op.flags */
#define PROTO_OP_QUARANTINED 1u /* MSG_OP_KEYS: only quarantined entries */
#define PROTO_OP_HOLDERS 2u	/* MSG_OP_KEYS: each key's holder records follow it */
#define PROTO_OP_FLAGS (PROTO_OP_QUARANTINED | PROTO_OP_HOLDERS)

#define PROTO_OP_END UINT32_MAX /* proto_op_reply.next: no further page */
/* Records of one page stop short of this many bytes (a value comes on top). */
#define PROTO_OP_PAGE 32768u
/* The largest reply: a page, or one key with the largest value. */
#define PROTO_OP_MAX_REPLY (PROTO_OP_PAGE + LOCAL_VALUE_MAX + 1024u)

struct proto_op {
	struct proto_hdr hdr;
	uint32_t cursor;  /* where the page starts (entry, slot or node index) */
	uint32_t flags;	  /* PROTO_OP_* */
	uint32_t key_len; /* MSG_OP_KEYS: the prefix (0: every key); else the key */
	char key[LOCAL_KEY_MAX + 1];
};

struct proto_op_reply {
	struct proto_hdr hdr; /* MSG_OP_REPLY; len covers the records */
	int32_t status;	      /* 0 or a negative liblocal code */
	uint32_t next;	      /* the cursor of the next page, or PROTO_OP_END */
	uint32_t count;	      /* records that follow */
	uint32_t reserved;
};

/* proto_op_key.flags and the flags liblocal reports (LOCAL_KEY_*). */
#define PROTO_KEY_QUARANTINED 1u      /* taken out of service as damaged */
#define PROTO_KEY_BUSY 2u	      /* its mutex stayed held: fields read without it */
#define PROTO_KEY_MORE_HOLDERS 0x100u /* too many to send along: ask MSG_OP_HOLDERS */

/* Every record starts with its size (8-byte multiple, trailing bytes included). */
struct proto_op_key {
	uint32_t size;
	uint32_t flags; /* PROTO_KEY_* */
	uint32_t entry; /* index in the key table */
	int32_t kind;
	uint32_t limit, holders, waiters;
	int32_t holder_pid;
	uint64_t token, lock_index, modify_index, lock_delay_remaining_ms;
	uint8_t holder_id[16];
	char holder_name[SEG_NAME_MAX];
	uint32_t key_len;     /* bytes of key that follow */
	uint32_t value_len;   /* bytes of value after the key (MSG_OP_INFO), else 0 */
	uint32_t value_total; /* the value's length */
	uint32_t nholders;    /* PROTO_OP_HOLDERS: holder records right after this one */
};

struct proto_op_holder {
	uint32_t size;
	int32_t pid;
	uint8_t session[16];
	char name[SEG_NAME_MAX];
	uint64_t token, lease_remaining_ms;
};

struct proto_op_waiter {
	uint32_t size;
	int32_t pid;
	uint8_t session[16];
	char name[SEG_NAME_MAX];
	uint64_t seq;	     /* arrival order within the key */
	uint64_t waiting_ms; /* since it queued */
};

struct proto_op_session {
	uint32_t size;
	int32_t pid;
	uint8_t id[16];
	char name[SEG_NAME_MAX];
	uint32_t uid, ttl_ms, lock_delay_ms, behavior, holds, waiting, flags, state;
	uint64_t ttl_remaining_ms;
};

/* MSG_OP_BROKER: what `shmlock status` shows of the broker (not of the
 * client that asks). Strings are NUL-terminated; "" when off. */
#define PROTO_BROKER_TCP_TLS 1u		   /* the TCP protocol speaks TLS */
#define PROTO_BROKER_AUTH_TOKEN 2u	   /* HTTP and TCP need the token */
#define PROTO_BROKER_HTTP_ACTIVATED 4u	   /* an HTTP socket came from systemd */
#define PROTO_BROKER_TCP_ACTIVATED 8u	   /* a TCP socket came from systemd */
#define PROTO_BROKER_CONTROL_ACTIVATED 16u /* the control socket came from systemd */
#define PROTO_BROKER_METRICS_ACTIVATED 32u /* the metrics socket came from systemd */
#define PROTO_BROKER_CONSUL_ACTIVATED 64u  /* the Consul API's socket came from systemd */
struct proto_op_broker {
	uint32_t size;
	uint32_t seg_abi, proto_version, broker_pid;
	uint64_t uptime_ms;
	char version[40];
	char socket_path[112];
	char shm_name[256];
	char http_listen[128];
	char http_socket[112];
	char tcp_listen[128];
	uint32_t flags; /* PROTO_BROKER_* */
	uint32_t reserved;
	/* Added later: a broker that predates them sends a shorter record
	 * (its size says so), read as "" here. */
	char metrics_listen[128];
	char consul_listen[128];
};

/* MSG_OP_LOCK_DELAY: the hold whose loss put the key in lock-delay. */
#define PROTO_DELAY_LOST 1u	/* REL_LOST */
#define PROTO_DELAY_SESSION 2u	/* REL_SESSION_END: its session ended */
#define PROTO_DELAY_DIED 0x100u /* ... because its process died */
struct proto_op_delay {
	uint32_t size;
	int32_t pid;  /* the process that opened the session */
	uint32_t how; /* PROTO_DELAY_* */
	uint32_t reserved;
	uint64_t remaining_ms;
	char name[SEG_NAME_MAX];
};

struct proto_op_stats {
	uint32_t size;
	uint32_t broker_pid;
	uint64_t uptime_ms;
	uint32_t sessions, keys, holds, waiters;
	uint32_t max_sessions, max_keys, max_holds, max_waiters, max_value;
	uint32_t quarantined_keys; /* entries quarantined now (stats.quarantined counts events) */
	uint64_t grants, timeouts, handoffs, lease_expiries, ttl_expiries;
	uint64_t crash_cleanups, repairs, quarantined, sessions_opened, sessions_closed;
};

/* MSG_BIND: the session @id ends only once @pid, a child of the process
 * that opened it, has exited too. */
struct proto_bind {
	struct proto_hdr hdr;
	uint8_t id[16];
	int32_t pid;
	uint32_t reserved;
};

union proto_request {
	struct proto_hdr hdr;
	struct proto_open open;
	struct proto_session_id sid;
	struct proto_bind bind;
	struct proto_force_release force;
	struct proto_op op;
};

#define PROTO_MAX_MSG sizeof(union proto_request)

void proto_init_hdr(struct proto_hdr *h, uint16_t type, uint32_t len);

/*
 * Decode a request of @len bytes from an untrusted peer into @out.
 * Returns its type, -LOCAL_EVERSION (another protocol version) or -LOCAL_EPROTO
 * (anything malformed: size, magic, type, unterminated name, bad options).
 */
int proto_decode_request(const void *buf, size_t len, union proto_request *out);

/* Decode the broker's reply: 0, -LOCAL_EVERSION or -LOCAL_EPROTO. */
int proto_decode_reply(const void *buf, size_t len, struct proto_reply *out);

/*
 * Decode the head of an operator reply of @len bytes into @out, checking that
 * its records tile the rest exactly (each at least @min_rec bytes, 8-byte
 * multiples). Returns 0, -LOCAL_EVERSION or -LOCAL_EPROTO.
 */
int proto_decode_op_reply(const void *buf, size_t len, struct proto_op_reply *out, size_t min_rec);

#endif
