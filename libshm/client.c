// SPDX-License-Identifier: MIT
/* Session open and close, and the per-process segment mappings. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "abi.h" /* sized options */
#include "client.h"
#include "lockword.h"
#include "clock.h"
#include "paths.h"
#include "procinfo.h"

#define BROKER_REPLY_TIMEOUT_S 10
/* Waiting for a broker that is down or restarting: retry after 5 ms,
 * doubling up to 250 ms, jittered so that the clients a restart kept
 * waiting do not all arrive in the same instant. */
#define BROKER_RETRY_FIRST_MS 5
#define BROKER_RETRY_MAX_MS 250
#define BROKER_WAIT_DEFAULT_MS 5000

static pthread_mutex_t maps_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mapping *maps;
_Atomic uint64_t fork_gen; /* not static: fastpath.c inlines session_usable() */
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void)
{
	atomic_fetch_add(&fork_gen, 1);
}

static void register_atfork(void)
{
	pthread_atfork(NULL, NULL, on_fork_child);
}

int session_usable(const local_session *s)
{
	if (!s)
		return -EINVAL;
	/* A generation counter bumped by an atfork handler: cheaper than
	 * getpid(), which is a real syscall in current glibc. */
	if (s->fork_gen != atomic_load_explicit(&fork_gen, memory_order_relaxed))
		return -LOCAL_EFORKED;
	return 0;
}

void hex_encode(const uint8_t *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	size_t i;

	for (i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

int hex_decode(const char *in, uint8_t *out, size_t n)
{
	size_t i;

	if (strlen(in) != 2 * n)
		return -EINVAL;
	for (i = 0; i < n; i++) {
		int hi = hexval(in[2 * i]), lo = hexval(in[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -EINVAL;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

/* What the last broker lookup of this thread found at each path tried. */
static __thread struct lookup_report last_lookup;

const struct lookup_report *broker_lookup_report(void)
{
	return &last_lookup;
}

/* How telling each outcome is: the error of a lookup is its highest. */
static int severity(int err)
{
	switch (err) {
	case -LOCAL_EACCESS:
		return 5;
	case -LOCAL_ENOTSOCK:
		return 4;
	case -LOCAL_EUNSAFE:
		return 3;
	case -LOCAL_EREFUSED:
		return 2;
	case -LOCAL_ENOSOCKET:
		return 1;
	default:
		return 0;
	}
}

/* Nothing was sent and a broker may yet come (starting, restarting). */
static bool may_come(int err)
{
	return err == -LOCAL_ENOSOCKET || err == -LOCAL_EREFUSED || err == -LOCAL_EBROKER;
}

/* One connect() to @path; the socket, or the outcome with its reason. */
static int try_connect(const char *path, struct lookup_try *t)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int sock, e;

	snprintf(t->path, sizeof(t->path), "%s", path);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (sock < 0) {
		t->err = -LOCAL_EBROKER;
		snprintf(t->why, sizeof(t->why), "socket(): %s", strerrordesc_np(errno));
		return t->err;
	}
	if (connect(sock, (const struct sockaddr *)&sa, sizeof(sa)) == 0) {
		t->err = 0;
		snprintf(t->why, sizeof(t->why), "connected");
		return sock;
	}
	e = errno;
	close(sock);
	switch (e) {
	case ENOENT:
	case ENOTDIR:
		t->err = -LOCAL_ENOSOCKET;
		snprintf(t->why, sizeof(t->why), "missing");
		break;
	case ECONNREFUSED:
		/* Also what connecting to a file that is no socket says. */
		if (stat(path, &st) == 0 && !S_ISSOCK(st.st_mode)) {
			t->err = -LOCAL_ENOTSOCK;
			snprintf(t->why, sizeof(t->why), "not a socket");
		} else {
			t->err = -LOCAL_EREFUSED;
			snprintf(t->why, sizeof(t->why),
				 "refused: a socket nobody listens on (a broker that died?)");
		}
		break;
	case EACCES:
	case EPERM:
		t->err = -LOCAL_EACCESS;
		if (stat(path, &st) == 0)
			snprintf(t->why, sizeof(t->why),
				 "permission denied (socket mode %04o, uid %u, gid %u; we are uid "
				 "%u)",
				 (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid,
				 (unsigned)st.st_gid, (unsigned)geteuid());
		else
			snprintf(t->why, sizeof(t->why), "permission denied (on its directory)");
		break;
	case EAGAIN:
		t->err = -LOCAL_EBROKER;
		snprintf(t->why, sizeof(t->why), "busy: its backlog is full");
		break;
	default:
		t->err = -LOCAL_EBROKER;
		snprintf(t->why, sizeof(t->why), "%s", strerrordesc_np(e));
	}
	return t->err;
}

static void pause_backoff(uint64_t *delay_ms, uint64_t deadline_ns)
{
	uint64_t now = mono_ns(), pause_ns;
	struct timespec ts;

	pause_ns = *delay_ms * 1000000ull * (4 + (now >> 10) % 4) / 4; /* x1..x1.75 */
	if (pause_ns > deadline_ns - now)
		pause_ns = deadline_ns - now;
	ts.tv_sec = (time_t)(pause_ns / 1000000000ull);
	ts.tv_nsec = (long)(pause_ns % 1000000000ull);
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
	if (*delay_ms < BROKER_RETRY_MAX_MS)
		*delay_ms =
			*delay_ms * 2 < BROKER_RETRY_MAX_MS ? *delay_ms * 2 : BROKER_RETRY_MAX_MS;
}

static void (*wait_notice_fn)(const char *paths, int wait_ms);
static int wait_notice_after_ms;

void broker_wait_notice(void (*fn)(const char *paths, int wait_ms), int after_ms)
{
	wait_notice_fn = fn;
	wait_notice_after_ms = after_ms;
}

/* Tell the notice function, once, what @l's lookup has been waiting for. */
static void wait_notice(const struct paths_list *l, uint64_t start_ns, uint64_t deadline_ns,
			bool *told)
{
	char paths[sizeof(l->path)];
	size_t off = 0;
	unsigned i;

	if (!wait_notice_fn || *told ||
	    mono_ns() - start_ns < (uint64_t)wait_notice_after_ms * 1000000ull)
		return;
	*told = true;
	paths[0] = '\0';
	for (i = 0; i < l->n && off < sizeof(paths); i++) {
		int n = snprintf(paths + off, sizeof(paths) - off, "%s%s", i ? ", " : "",
				 l->path[i]);

		if (n < 0)
			break;
		off += (size_t)n;
	}
	wait_notice_fn(paths, (int)((deadline_ns - start_ns) / 1000000ull));
}

int broker_find(const char *path, char used[PATHS_LEN], uint64_t deadline_ns)
{
	struct lookup_report *r = &last_lookup;
	uint64_t delay_ms = BROKER_RETRY_FIRST_MS, start_ns = mono_ns();
	struct paths_list l;
	bool told = false;
	int err;

	memset(r, 0, sizeof(*r));
	err = paths_candidates(path, &l);
	if (err)
		return err;
	r->given = l.given;
	for (;;) {
		int best = 0;
		bool retry = true;
		unsigned i;

		r->n = l.n;
		for (i = 0; i < l.n; i++) {
			struct lookup_try *t = &r->tries[i];
			const char *why = l.given ? NULL : paths_unsafe(l.path[i]);
			int sock;

			if (why) {
				snprintf(t->path, sizeof(t->path), "%s", l.path[i]);
				snprintf(t->why, sizeof(t->why), "not used: %s", why);
				t->err = -LOCAL_EUNSAFE;
			} else {
				sock = try_connect(l.path[i], t);
				if (sock >= 0) {
					r->n = i + 1;
					if (used)
						snprintf(used, PATHS_LEN, "%s", l.path[i]);
					return sock;
				}
			}
			if (!best || severity(t->err) > severity(best))
				best = t->err;
			retry &= may_come(t->err);
		}
		if (!retry || mono_ns() >= deadline_ns)
			return best;
		r->waited = true;
		wait_notice(&l, start_ns, deadline_ns, &told);
		pause_backoff(&delay_ms, deadline_ns);
	}
}

int broker_lookup_text(char *buf, size_t size)
{
	const struct lookup_report *r = &last_lookup;
	size_t off = 0;
	unsigned i;

	buf[0] = '\0';
	for (i = 0; i < r->n && off < size; i++) {
		int n = snprintf(buf + off, size - off, "%s%s: %s", i ? "; " : "", r->tries[i].path,
				 r->tries[i].why);

		if (n < 0)
			break;
		off += (size_t)n;
	}
	return r->n ? 0 : -ENOENT;
}

int broker_wait_default_ms(void)
{
	const char *env = getenv("SHMLOCK_BROKER_WAIT_MS");
	char *end;
	long v;

	if (!env || !*env)
		return BROKER_WAIT_DEFAULT_MS;
	v = strtol(env, &end, 10);
	if (*end || v < 0 || v > 3600000)
		return BROKER_WAIT_DEFAULT_MS;
	return (int)v;
}

/* One request and its reply on the connected @sock (closed here). */
static int exchange(int sock, const void *req, size_t len, struct proto_reply *rep, int *fd)
{
	struct timeval tv = { .tv_sec = BROKER_REPLY_TIMEOUT_S };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	char buf[sizeof(*rep) + 16];
	struct iovec iov = { buf, sizeof(buf) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *c;
	ssize_t n;
	int err, got_fd = -1;

	setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (send(sock, req, len, MSG_NOSIGNAL) != (ssize_t)len) {
		err = -LOCAL_EBROKER;
		goto out;
	}
	mh.msg_control = ctl.buf;
	mh.msg_controllen = sizeof(ctl.buf);
	do
		n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n <= 0) {
		err = -LOCAL_EBROKER;
		goto out;
	}
	for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
		    c->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(&got_fd, CMSG_DATA(c), sizeof(int));
	err = proto_decode_reply(buf, (size_t)n, rep);
	if (!err && fd) {
		*fd = got_fd;
		got_fd = -1;
	}
out:
	if (got_fd >= 0)
		close(got_fd);
	close(sock);
	return err;
}

int broker_call_find(const char *path, char used[PATHS_LEN], const void *req, size_t len,
		     struct proto_reply *rep, int *fd, uint64_t deadline_ns)
{
	int sock;

	if (fd)
		*fd = -1;
	if (path && strlen(path) >= PATHS_LEN)
		return -ENAMETOOLONG;
	sock = broker_find(path, used, deadline_ns);
	if (sock < 0)
		return sock;
	return exchange(sock, req, len, rep, fd);
}

int broker_call(const char *path, const void *req, size_t len, struct proto_reply *rep, int *fd,
		uint64_t deadline_ns)
{
	int err = broker_call_find(path, NULL, req, len, rep, fd, deadline_ns);

	/* The calls on an open session: the broker was found when it opened,
	 * so whatever is at its path now, it is gone (a restart, a crash):
	 * the contract of local_session_close() and the rest says so with
	 * one code. */
	if (severity(err) > 0)
		err = -LOCAL_EBROKER;
	return err;
}

/* Map the segment behind @fd once per process; consumes @fd. */
static int mapping_get(int fd, struct mapping **out)
{
	struct mapping *m;
	struct stat st;
	void *mem;
	int err = 0, seals;

	if (fstat(fd, &st) < 0) {
		close(fd);
		return -LOCAL_EBROKER;
	}
	/* A segment that any process holding it could shrink would SIGBUS us
	 * (and the broker) at will: brokers hand out a sealed memfd. */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
		close(fd);
		return -LOCAL_EPROTO;
	}
	pthread_mutex_lock(&maps_lock);
	for (m = maps; m; m = m->next)
		if (m->dev == st.st_dev && m->ino == st.st_ino)
			break;
	if (m) {
		m->refs++;
		goto out;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		err = -ENOMEM;
		goto out;
	}
	mem = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (mem == MAP_FAILED) {
		free(m);
		err = -ENOMEM;
		goto out;
	}
	err = seg_bind(&m->seg, mem, (size_t)st.st_size);
	if (err) {
		munmap(mem, (size_t)st.st_size);
		free(m);
		goto out;
	}
	m->dev = st.st_dev;
	m->ino = st.st_ino;
	m->refs = 1;
	m->next = maps;
	maps = m;
out:
	pthread_mutex_unlock(&maps_lock);
	close(fd);
	if (!err)
		*out = m;
	return err;
}

static void mapping_put(struct mapping *m)
{
	struct mapping **p;

	pthread_mutex_lock(&maps_lock);
	if (--m->refs == 0) {
		for (p = &maps; *p; p = &(*p)->next)
			if (*p == m) {
				*p = m->next;
				break;
			}
		munmap(m->seg.hdr, m->seg.size);
		free(m);
	}
	pthread_mutex_unlock(&maps_lock);
}

/* local_session_opts_init(): abi.c (sized options). */

static int build_open(const struct local_session_opts *o, struct proto_open *req)
{
	uint64_t start = 0;

	if (o->lock_delay_ms > LOCAL_LOCK_DELAY_MAX_MS || o->lock_delay_ms < -1)
		return -EINVAL;
	if (o->behavior != LOCAL_BEHAVIOR_RELEASE && o->behavior != LOCAL_BEHAVIOR_DELETE)
		return -EINVAL;
	if (o->flags & ~(unsigned)LOCAL_SESSION_NO_PROCESS_CHECK)
		return -EINVAL;
	memset(req, 0, sizeof(*req));
	proto_init_hdr(&req->hdr, MSG_OPEN, sizeof(*req));
	req->ttl_ms = o->ttl_ms;
	req->lock_delay_ms =
		o->lock_delay_ms < 0 ? LOCAL_LOCK_DELAY_DEFAULT_MS : (uint32_t)o->lock_delay_ms;
	req->behavior = (uint32_t)o->behavior;
	req->flags = o->flags;
	proc_start_time(getpid(), &start);
	req->start_time = start;
	strncpy(req->name, o->name ? o->name : program_invocation_short_name,
		sizeof(req->name) - 1);
	return 0;
}

static int send_close(const local_session *s);
static void session_free(local_session *s);
static void lock_identity_set(struct segment *seg, const struct proto_reply *rep);

/*
 * Where a new session starts looking for free nodes (the cache-line
 * audit of distinct keys): at a place of its own, two nodes (128 bytes) per
 * session slot. All sessions used to start at node 0, so two processes
 * locking their own keys took turns on the same hold node, and its line
 * went back and forth between their cores until a failed claim sent one of
 * them elsewhere; two nodes apart, not even the adjacent-line prefetcher
 * pairs two sessions' nodes. Only a starting point: the claim still takes
 * the first free node from there (node_claim_as()).
 */
static void hints_spread(local_session *s)
{
	const struct seg_caps *c = &s->seg->caps;

	if (c->max_holds)
		atomic_store_explicit(&s->hints.hold, (uint32_t)(s->who.slot * 2ull % c->max_holds),
				      memory_order_relaxed);
	if (c->max_waiters)
		atomic_store_explicit(&s->hints.wait,
				      (uint32_t)(s->who.slot * 2ull % c->max_waiters),
				      memory_order_relaxed);
}

int local_session_open(const struct local_session_opts *opts, local_session **out)
{
	struct local_session_opts copy; /* sized options, checked in abi.c */
	struct proto_reply rep;
	struct proto_open req;
	local_session *s;
	int err, fd, wait_ms;

	if (!out)
		return -EINVAL;
	pthread_once(&atfork_once, register_atfork);
	err = abi_session_opts(&opts, &copy);
	if (err)
		return err;
	err = build_open(opts, &req);
	if (err)
		return err;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->pending_lock, NULL);
	pthread_mutex_init(&s->handles_lock, NULL);
	if (opts->socket_path && strlen(opts->socket_path) >= sizeof(s->socket_path)) {
		err = -ENAMETOOLONG;
		goto fail;
	}
	wait_ms = opts->broker_wait_ms < 0 ? broker_wait_default_ms() : opts->broker_wait_ms;
	/* The broker found is the one the session's later calls go to. */
	err = broker_call_find(opts->socket_path, s->socket_path, &req, sizeof(req), &rep, &fd,
			       wait_ms ? mono_ns() + (uint64_t)wait_ms * 1000000ull : 0);
	if (err)
		goto fail;
	if (rep.status) {
		err = rep.status;
		if (fd >= 0)
			close(fd);
		goto fail;
	}
	if (fd < 0) {
		err = -LOCAL_EPROTO;
		goto fail;
	}
	memcpy(s->raw_id, rep.id, sizeof(s->raw_id));
	err = mapping_get(fd, &s->map);
	if (err) {
		send_close(s); /* do not leave it open until we exit */
		goto fail;
	}
	s->seg = &s->map->seg;
	s->who.slot = rep.slot;
	s->who.gen = rep.gen;
	if (!seg_session_at(s->seg, rep.slot)) {
		mapping_put(s->map);
		err = -LOCAL_EPROTO;
		goto fail;
	}
	hints_spread(s);
	/* The only handle of this session: every request it queues counts in
	 * hints.queued (the broker's in-process handles do not say so). */
	s->hints.sole = true;
	lock_identity_set(s->seg, &rep);
	hex_encode(rep.id, sizeof(rep.id), s->id);
	s->fork_gen = atomic_load(&fork_gen);
	*out = s;
	return 0;
fail:
	session_free(s);
	return err;
}

/*
 * Who this process is in lock words: its pid as the broker saw it open the
 * session (our pid, unless we live in another pid namespace than the
 * broker), since the broker is the one that reaps the locks of a process
 * that died. Only a process whose pid namespace is the broker's judges
 * owners itself: elsewhere a pid names another process, or none, and a
 * live owner could be taken for dead (even when our pid here happens to be
 * the one the broker sees). The namespace is compared by its identity, the
 * inode of /proc/self/ns/pid, never by pids.
 */
static void lock_identity_set(struct segment *seg, const struct proto_reply *rep)
{
	int32_t pid = rep->peer_pid;
	struct stat st;
	bool same_ns;

	if (pid <= 0 || (uint32_t)pid > LW_OWNER_MASK)
		return;
	same_ns = rep->pidns_ino && stat("/proc/self/ns/pid", &st) == 0 &&
		  (uint64_t)st.st_dev == rep->pidns_dev && (uint64_t)st.st_ino == rep->pidns_ino;
	/* Written once per mapping: every session of a process says the same. */
	if (seg->lock_self != (uint32_t)pid)
		seg->lock_self = (uint32_t)pid;
	if (seg->lock_judge != (same_ns ? &lw_pid_judge : NULL))
		seg->lock_judge = same_ns ? &lw_pid_judge : NULL;
}

static void session_free(local_session *s)
{
	struct pending *p;

	while ((p = s->pending)) {
		s->pending = p->next;
		free(p);
	}
	pthread_mutex_destroy(&s->pending_lock);
	pthread_mutex_destroy(&s->handles_lock);
	free(s);
}

local_session *session_inproc_new(struct segment *seg, struct owner who, const uint8_t id[16])
{
	local_session *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	pthread_mutex_init(&s->pending_lock, NULL);
	pthread_mutex_init(&s->handles_lock, NULL);
	s->seg = seg;
	s->who = who;
	hints_spread(s);
	memcpy(s->raw_id, id, sizeof(s->raw_id));
	hex_encode(id, sizeof(s->raw_id), s->id);
	s->fork_gen = atomic_load(&fork_gen);
	return s;
}

void session_inproc_free(local_session *s)
{
	if (s)
		session_free(s);
}

static int send_close(const local_session *s)
{
	struct proto_session_id req;
	struct proto_reply rep;
	int err;

	memset(&req, 0, sizeof(req));
	proto_init_hdr(&req.hdr, MSG_CLOSE, sizeof(req));
	memcpy(req.id, s->raw_id, sizeof(req.id));
	err = broker_call(s->socket_path, &req, sizeof(req), &rep, NULL, 0);
	return err ? err : rep.status;
}

int local_session_bind_process(local_session *s, pid_t pid)
{
	struct proto_bind req;
	struct proto_reply rep;
	int err = session_usable(s);

	if (err)
		return err;
	if (pid <= 0)
		return -EINVAL;
	memset(&req, 0, sizeof(req));
	proto_init_hdr(&req.hdr, MSG_BIND, sizeof(req));
	memcpy(req.id, s->raw_id, sizeof(req.id));
	req.pid = pid;
	err = broker_call(s->socket_path, &req, sizeof(req), &rep, NULL, 0);
	return err ? err : rep.status;
}

int local_session_close(local_session *s)
{
	int err;

	if (!s)
		return -EINVAL;
	err = session_usable(s);
	if (err == -LOCAL_EFORKED) {
		/* The parent still owns the session: free only our copy. */
		session_free(s);
		return -LOCAL_EFORKED;
	}
	api_handles_unpark(s);
	err = send_close(s);
	mapping_put(s->map);
	session_free(s);
	return err;
}

int local_session_renew(local_session *s)
{
	int err = session_usable(s);

	if (err)
		return err;
	if (!session_is(s->seg, s->who))
		return -LOCAL_ESESSION;
	atomic_store(&s->seg->sessions[s->who.slot].renewed_ns, mono_ns());
	/* Re-check: a renew that lands after expiry must not look successful. */
	return session_is(s->seg, s->who) ? 0 : -LOCAL_ESESSION;
}

const char *local_session_id(const local_session *s)
{
	return s ? s->id : "";
}
