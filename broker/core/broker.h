/* SPDX-License-Identifier: MIT */
/* shmlockd's internal interfaces. */
#ifndef SHMLOCKD_BROKER_H
#define SHMLOCKD_BROKER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <urcu/urcu-memb.h>
#include <urcu/rculfhash.h>

#include "keyops.h"
#include "client.h"
#include "proto.h"
#include "faces/http/http.h"
#include "faces/tcp/tcp.h"
#include "faces/consul/consul.h"
#include "cluster/cluster.h"
#include "owners.h"
#include "face.h"

/* A per-event log line that may come in bursts (100 000 leases expiring
 * together): at most BLOG_BURST lines a second, then one line saying how
 * many were left out. */
#define BLOG_BURST 100
struct blog_limit {
	uint64_t window_ns;
	uint32_t lines, dropped;
};
bool blog_allow(struct blog_limit *l, uint64_t now_ns);

/* A warning that repeats while a condition lasts (a sweep retried every
 * second): written after 1 s, 2 s, 4 s ... up to BLOG_BACKOFF_MAX_S apart,
 * each time with the count of repeats left out since the last. Zeroed: the
 * first line goes out at once. */
#define BLOG_BACKOFF_MAX_S 256
struct blog_backoff {
	uint64_t next_ns;
	uint32_t interval_s, suppressed;
};
/* Whether to write the repeat now; *@suppressed: how many were left out
 * before this one. */
bool blog_backoff_allow(struct blog_backoff *l, uint64_t now_ns, uint32_t *suppressed);

/* The core's timer kinds (those of a face are its own: face_schedule()). */
enum timer_kind {
	TIMER_TTL = 1,		 /* a = session slot, b = generation */
	TIMER_DELAY = 2,	 /* a = key index: grant waiters when lock-delay ends */
	TIMER_SCAN = 3,		 /* periodic: repair mutexes whose owner died unseen */
	TIMER_LEASE = 4,	 /* a = hold node: its lease may have run out */
	TIMER_GC = 5,		 /* periodic: reclaim keys idle for --gc-idle */
	TIMER_SWEEP = 6,	 /* a = slot, b = gen: finish a sweep a stalled key held up */
	TIMER_NOTIFY = 16,	 /* a = enum notify_what: service-manager messages */
	TIMER_LISTEN_REARM = 40, /* re-enable accepting after EMFILE (conns.c) */
};

struct timer {
	uint64_t at_ns;		  /* CLOCK_MONOTONIC */
	const struct face *owner; /* NULL: the core's own */
	uint32_t kind, a, b;
};

struct timer_heap {
	struct timer *v;
	size_t n, cap;
};

/*
 * A slot this broker is still sweeping (a key it needs was busy): neither
 * free for a new session nor a stray to reclaim, whatever the slot says.
 */
struct slot_sweep {
	bool pending;
	bool lost;
	uint32_t gen;
	/* The session's process, for nodes it may still be filling in. */
	pid_t creator_pid;
	uint64_t start_time;
	struct blog_backoff busy_log;
};

/* Broker-side record of a live session. The segment slot carries what
 * clients need to read; who owns it and whether it lives is decided here. */
struct bsession {
	uint8_t id[16];
	uint32_t slot, gen;
	int pidfd; /* -1: no process check, or its process has exited */
	/* local_session_bind_process(): a child of the session's process that
	 * must exit too before the session ends (-1: none). */
	int bound_pidfd;
	pid_t bound_pid;
	/* Who opened it, as the kernel said (SO_PEERCRED and /proc at open,
	 * or checked against /proc at adoption): never read back from the
	 * slot, which every client can write. */
	pid_t creator_pid;
	uid_t uid;
	uint64_t start_time;
	bool no_process_check; /* it outlives its process (asked for at open) */
	struct cds_lfht_node node;
	struct rcu_head rcu;
};

#define ACCESS_MAX 64

struct broker_opts {
	char socket_path[108];
	char shm_name[256];
	struct seg_caps caps;
	int log_level;
	uint32_t gc_idle_ms; /* 0: reclaim idle keys only when the table is full */
	bool foreground_demo;
	bool destroy_segment_on_exit;
	bool force_pidfd_fallback; /* tests: pretend SO_PEERPIDFD is missing */
	/* access.c: --allow-uid, --allow-gid, --socket-group */
	uint32_t allow_uid[ACCESS_MAX], allow_gid[ACCESS_MAX];
	uint32_t nallow_uid, nallow_gid;
	bool have_group;
	gid_t group;
	bool check; /* --check: validate the segment read-only and exit */
	/* shm.c: --replace-segment, --replace-wait */
	bool replace_segment;
	uint32_t replace_wait_ms;
	struct http_opts http;
	struct tcp_opts tcp;
	struct consul_opts consul;   /* consul_*.c: the Consul-compatible API */
	char metrics_listen[128];    /* metrics.c: --metrics-listen; "" when off */
	struct cluster_opts cluster; /* cluster_*.c: cluster keys on etcd */
};

struct broker {
	struct broker_opts opts;
	struct segment seg;
	void *mem;
	size_t mem_size;
	int shm_fd;	      /* the description clients get (it carries the in-use mark) */
	int keep_fd;	      /* the one the keeper and the fd store hold */
	int lock_fd;	      /* flocked: this broker owns the segment */
	bool keeper;	      /* a keeper holds our segment (keeper.c) */
	bool seg_rejected;    /* the live header no longer validates: no new sessions */
	bool owns_segment;    /* holds the flock that makes it ours alone */
	bool served;	      /* reached the event loop */
	bool created_segment; /* shm.c: made by this run, not adopted */
	int listen_fd;
	bool listen_owned;   /* we bound it (not socket-activated): unlink at exit */
	struct conns *conns; /* conns.c: connections yet to send their request */
	int epfd, timerfd, sigfd;
	struct watch *watches; /* watch.c: by fd */
	int nwatches;
	const struct face *faces[FACES_MAX]; /* faces.c: registered in main.c */
	unsigned nfaces;
	uint64_t armed_ns; /* what timerfd is set to; 0: disarmed */
	struct timer_heap timers;
	struct cds_lfht *by_id;	   /* id -> bsession, read under RCU */
	struct bsession **by_slot; /* slot -> bsession, event loop only */
	struct slot_sweep *sweeps; /* slot -> a sweep this broker owes it (sessions.c) */
	uint64_t started_ns;
	uint64_t quarantined_seen; /* stats.quarantined last reported */
	bool stopping;
	int exit_code; /* a refusal's own exit status (EXIT_*), 0: the generic 1 */
	/* notify.c */
	bool notify;	      /* $NOTIFY_SOCKET set: a service manager listens */
	bool seg_from_store;  /* the segment fd came from systemd's fd store */
	uint64_t watchdog_ns; /* WATCHDOG=1 interval (half WATCHDOG_USEC); 0: off */
	char status[128];     /* the last STATUS= sent */
	/* leases.c */
	int lease_efd;
	pthread_t lease_thread;
	bool lease_thread_running;
	_Atomic bool leases_stop;
	uint64_t *lease_at; /* per node: the deadline its heap entry is for */
	struct blog_limit expiry_log;
	/* http_*.c: NULL unless the HTTP API is on */
	struct http *http;
	/* tcp_*.c: NULL unless the TCP protocol is on */
	struct tcp *tcp;
	/* metrics.c: NULL unless the metrics-only listener is on */
	struct metrics *metrics;
	/* signals.c: dflockd's pub/sub subscriptions; NULL when there are none */
	struct signals *signals;
	/* cluster_*.c: NULL unless --cluster is given */
	struct cluster *cluster;
};

/* delay_notes.c: who put a key in lock-delay (MSG_OP_LOCK_DELAY). */
void delay_notes_init(void);
/* 0 and *out (pid, how, remaining_ms, name) while @key is in lock-delay
 * after a lost hold, else -ENOENT. */
int delay_note_get(const char *key, size_t len, struct proto_op_delay *out);

/* access.c */
struct ucred;
int access_parse_ids(const char *s, uint32_t *ids, uint32_t *n);
int access_parse_group(const char *s, gid_t *out);
/* 0 when the peer may open sessions and act as an operator, else -LOCAL_EDENIED. */
int access_check(const struct broker *b, int conn, const struct ucred *cred);
/* The same for a user known by ids (a loopback TCP peer, broker/net/). */
int access_check_ids(const struct broker *b, uint32_t uid, uint32_t gid, const uint32_t *groups,
		     uint32_t ngroups);

/* log.c: stderr with sd-daemon priority prefixes, which journald parses. */
void blog(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An audit line (what an operator did, and who): never rate-limited, so that
 * a flood of refused requests cannot push it out. */
void blog_audit(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void blog_set_level(int level);
/* Is stderr the journal ($JOURNAL_STREAM matches it)? Else lines are stamped. */
bool blog_to_journal(void);
int blog_parse_level(const char *s);
/* Lines of one format beyond this many a second are counted, not written. */
#define BLOG_SIMILAR_BURST 100
/* Write the summaries of left-out lines whose window has ended. */
void blog_tick(void);
/* @in with controls and non-UTF-8 bytes escaped (\n, \xHH) into @out; its length. */
size_t blog_escape(const char *in, char *out, size_t size);

/* Exit statuses of refusals an operator must act on (shmlockd(8)). */
#define EXIT_SEG_IN_USE 3  /* segment to replace is still mapped by live processes */
#define EXIT_SEG_FOREIGN 4 /* segment name taken by a file we must not adopt */
#define EXIT_UNSAFE_PATH 5 /* socket path in a directory others control */

/* shm.c: attach the existing segment or create one. */
int shm_setup(struct broker *b);
void shm_teardown(struct broker *b);
/* 0 while the live header validates; logs the change, sets seg_rejected. */
int shm_revalidate(struct broker *b);

/* keeper.c: the process that keeps the segment's fd while no broker runs
 * (keeper_proto.h: its protocol and keeper_path()). */
int keeper_fetch(const char *path, int *fd); /* -ENOENT, -ECONNREFUSED: none */
int keeper_quit(const char *path);
int keeper_start(struct broker *b, int memfd);
void keeper_stop(struct broker *b);
/* The label of the segment memfd @fd ("/memfd:LABEL" without the prefix):
 * 0, -EINVAL (not a memfd) or -errno. */
int segment_fd_label(int fd, char *buf, size_t size);
/* 0 when @fd (from the keeper or the fd store, named by @where in the log)
 * is the segment of our --shm-name; else logs why not and returns -EEXIST
 * with b->exit_code = EXIT_SEG_FOREIGN. */
int segment_fd_is_ours(struct broker *b, int fd, const char *where);

/* listen.c: the control socket, socket-activated or bound. */
/* Under socket activation, set opts.socket_path to the path of the socket
 * passed (so that the keeper sits beside the socket served): before
 * shm_setup(). */
void listen_use_activated_path(struct broker *b);
int listen_setup(struct broker *b);
void listen_teardown(struct broker *b);
/*
 * Bind a Unix socket of @type at @path, born mode 0660 (group: --socket-group),
 * creating missing directories 0755. Refuses (-EPERM, b->exit_code =
 * EXIT_UNSAFE_PATH) a path through a directory another user could change, or a
 * name taken by anything but a stale socket of ours; -EADDRINUSE when a server
 * answers there. @what names the socket in the log. Returns the bound fd.
 */
int safe_bind_unix(struct broker *b, const char *path, int type, const char *what);
/* sendmsg() @len bytes of @buf on @sock with @flags, and @fd along with them
 * (SCM_RIGHTS) when it is >= 0 (listen.c; the control socket's replies and
 * the keeper's answers). */
ssize_t send_with_fd(int sock, const void *buf, size_t len, int fd, int flags);

/* timers.c */
int timer_add(struct timer_heap *h, uint64_t at_ns, const struct face *owner, uint32_t kind,
	      uint32_t a, uint32_t b);
bool timer_peek(const struct timer_heap *h, struct timer *out);
void timer_pop(struct timer_heap *h);
void timer_free(struct timer_heap *h);

/* identity.c: what /proc says of a process. */
/* Its effective uid (what SO_PEERCRED gives): 0 or -errno. */
int proc_euid(pid_t pid, uid_t *out);
/* Does @pid map the file behind @fd (by device and inode)? 1, 0, or -errno;
 * -EACCES: /proc will not say (another user's process, and we are not root). */
int proc_maps_fd(pid_t pid, int fd);

/* sessions.c */
int sessions_init(struct broker *b);
void sessions_fini(struct broker *b);
/* Open a session for a peer; fills slot/gen/id. Returns 0 or -code. */
int session_open(struct broker *b, const struct proto_open *req, int pidfd, pid_t pid, uid_t uid,
		 uint64_t start_time, struct proto_reply *rep);
/* Close by id. @voluntary: the owner asked (no lock-delay). */
int session_close_id(struct broker *b, const uint8_t id[16], bool voluntary);
/* MSG_BIND from process @peer: bind its child @pid to the session @id. */
int session_bind(struct broker *b, const uint8_t id[16], pid_t peer, pid_t pid);
/* The slot of the live session @id, or IDX_NONE. */
uint32_t session_slot_of(struct broker *b, const uint8_t id[16]);
/* End the session in @slot (@lost: apply lock-delay); @why goes to the log. */
void session_end_slot(struct broker *b, uint32_t slot, bool lost, const char *why);
/* Operator: release a key from one holder or all (lock-delay applies). */
int force_release(struct broker *b, const struct proto_force_release *req);
/* The process behind @slot's pidfd exited. */
void session_died(struct broker *b, uint32_t slot);
/* A session's public name, "s<slot>g<generation>" (as /v1/stats shows
 * holders): never its id, which is a capability, in logs or listings. */
void session_public_id(uint32_t slot, uint32_t gen, char *out, size_t size);
/* Repair keys whose mutex owner died (see segment_repair_dead_mutexes()). */
void repair_dead_mutexes(struct broker *b);
/* Grant queues that a full hold table left waiting on a free key. */
void grant_stranded(struct broker *b);
/* Re-adopt sessions recorded in an existing segment (broker restart). */
void sessions_adopt(struct broker *b);
void session_ttl_due(struct broker *b, uint32_t slot, uint32_t gen);
void session_sweep_due(struct broker *b, uint32_t slot, uint32_t gen);
/* Sweep and free slots that are not free but that no session of this broker
 * owns (clients can write any slot's state): periodic. */
void sessions_reclaim_untracked(struct broker *b);

/* How long the broker waits for a key mutex before it defers the work: a
 * client stopped inside a critical section must not stall the broker. */
#define BROKER_LOCK_MS 200
/* What one turn of the event loop may spend waiting on busy lock words in
 * all (see lock_budget_ns): a stall of many keys costs this per turn, and
 * the work on the rest is deferred and retried. */
#define BROKER_TURN_LOCK_MS 20
/* Grant waiters of key @idx whose lock-delay has ended. */
void key_delay_due(struct broker *b, uint32_t idx);
/* A core timer (timers.c; a face's: face_schedule()). */
void broker_schedule(struct broker *b, uint64_t at_ns, uint32_t kind, uint32_t a, uint32_t b2);

/* leases.c */
int leases_start(struct broker *b);
void leases_stop(struct broker *b);
void leases_drain(struct broker *b);
/* The lease bitmap into the heap, without the eventfd (rings of our own). */
void leases_collect(struct broker *b);
void lease_due(struct broker *b, uint32_t node, uint64_t at);
/* Remember in the holder's slot that its hold of key @key ended by expiry, so
 * that its next call says LOCAL_EEXPIRED (@why 0) or, for a cluster key's
 * lock lost by the host, LOCAL_ECLUSTER (@why 1: cluster_main.c). */
void record_expiry(struct segment *seg, uint32_t slot, uint32_t key, uint64_t token, uint32_t why);

/* notify.c: sd_notify(3) readiness, STATUS=, WATCHDOG=1 and the fd store. */
enum notify_what { NOTIFY_STATUS = 1, NOTIFY_WATCHDOG = 2 };
/* The fd named @name passed by the service manager (fd store), or -1. */
int notify_stored_fd(const char *name);
/* Store the segment fd, send READY=1 and STATUS=, start the periodic pings. */
void notify_ready(struct broker *b);
/* A TIMER_NOTIFY deadline passed. */
void notify_due(struct broker *b, uint32_t what);
/* STOPPING=1; drop the stored segment fd if the segment is being removed. */
void notify_stopping(struct broker *b);

/* check.c: shmlockd --check. Returns the exit status (0, 1 or 2). */
int check_segment(const struct broker_opts *o);

/* loop.c */
int loop_run(struct broker *b);

/* watch.c: the fds of face.h's loop_watch(). */
struct epoll_event;
/* Run the callback of the watch @ev reports (none if it was unwatched since,
 * or, with @only, if its callback is not @only): true when one ran. */
bool loop_dispatch(struct broker *b, const struct epoll_event *ev, loop_fn *only);
void loop_watches_free(struct broker *b);

#endif
