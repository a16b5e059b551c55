// SPDX-License-Identifier: MIT
/*
 * Who is at the other end of a connection. For a peer on the loopback
 * interface the kernel knows the owner of its socket, as it knows the
 * credentials of a Unix socket's peer (SO_PEERCRED): NETLINK_SOCK_DIAG
 * looks the peer's TCP socket up by the exact 4-tuple (its address and
 * port, ours) and reports the uid that created it. That user is then
 * measured against the rules of the control socket, so that a local
 * listener admits exactly the users the Unix socket admits: who may
 * search every directory on its path and write the socket file (the
 * owner's, group's or others' bits, in the kernel's order; root always),
 * then --allow-uid and --allow-gid (access.c).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <grp.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "core/broker.h"
#include "net.h"

static bool v4_loopback(const struct in_addr *a)
{
	return (ntohl(a->s_addr) >> 24) == 127;
}

/* ::ffff:a.b.c.d into @out. */
static bool v4_mapped(const struct in6_addr *a, struct in_addr *out)
{
	if (!IN6_IS_ADDR_V4MAPPED(a))
		return false;
	memcpy(&out->s_addr, &a->s6_addr[12], 4);
	return true;
}

static bool addr_loopback(const struct sockaddr *sa)
{
	struct in_addr v4;

	if (sa->sa_family == AF_INET)
		return v4_loopback(&((const struct sockaddr_in *)sa)->sin_addr);
	if (sa->sa_family != AF_INET6)
		return false;
	if (IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr))
		return true;
	return v4_mapped(&((const struct sockaddr_in6 *)sa)->sin6_addr, &v4) && v4_loopback(&v4);
}

bool net_fd_loopback(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	return !getsockname(fd, (struct sockaddr *)&ss, &len) &&
	       addr_loopback((struct sockaddr *)&ss);
}

/* Fill one side of @id from @sa (AF_INET or AF_INET6, maybe v4-mapped,
 * written as the family @fam). */
static void put_side(const struct sockaddr *sa, int fam, __be16 *port, __be32 *addr)
{
	if (sa->sa_family == AF_INET) {
		*port = ((const struct sockaddr_in *)sa)->sin_port;
		addr[0] = ((const struct sockaddr_in *)sa)->sin_addr.s_addr;
		return;
	}
	*port = ((const struct sockaddr_in6 *)sa)->sin6_port;
	if (fam == AF_INET)
		memcpy(addr, &((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr[12], 4);
	else
		memcpy(addr, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
}

int net_sock_uid(const void *peer, const void *local, uid_t *uid)
{
	const struct sockaddr *ps = peer, *ls = local;
	struct {
		struct nlmsghdr nh;
		struct inet_diag_req_v2 r;
	} req;
	struct sockaddr_nl nl = { .nl_family = AF_NETLINK };
	union {
		char buf[8192];
		struct nlmsghdr align;
	} ans;
	struct nlmsghdr *h;
	struct in_addr v4;
	int fd, fam = ps->sa_family, err = -ENOENT;
	ssize_t n;

	/* A v4 client of a v6 listener owns an AF_INET socket. */
	if (fam == AF_INET6 && v4_mapped(&((const struct sockaddr_in6 *)ps)->sin6_addr, &v4))
		fam = AF_INET;
	memset(&req, 0, sizeof(req));
	req.nh.nlmsg_len = sizeof(req);
	req.nh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	req.nh.nlmsg_flags = NLM_F_REQUEST; /* one socket, by its 4-tuple: no dump */
	req.nh.nlmsg_seq = 1;
	req.r.sdiag_family = (__u8)fam;
	req.r.sdiag_protocol = IPPROTO_TCP;
	req.r.idiag_states = ~0u;
	/* The peer's socket: its own side is "src". */
	put_side(ps, fam, &req.r.id.idiag_sport, req.r.id.idiag_src);
	put_side(ls, fam, &req.r.id.idiag_dport, req.r.id.idiag_dst);
	req.r.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
	req.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
	fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (fd < 0)
		return -errno;
	if (sendto(fd, &req, sizeof(req), 0, (struct sockaddr *)&nl, sizeof(nl)) < 0) {
		err = -errno;
		goto out;
	}
	n = recv(fd, ans.buf, sizeof(ans.buf), 0);
	if (n < 0) {
		err = -errno;
		goto out;
	}
	for (h = &ans.align; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
		const struct inet_diag_msg *m = NLMSG_DATA(h);

		if (h->nlmsg_type == NLMSG_ERROR) {
			const struct nlmsgerr *e = NLMSG_DATA(h);

			err = e->error ? e->error : -ENOENT;
			break;
		}
		if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(*m)))
			continue;
		/* The kernel matched all four; check what it says it found. */
		if (m->id.idiag_sport != req.r.id.idiag_sport ||
		    m->id.idiag_dport != req.r.id.idiag_dport ||
		    memcmp(m->id.idiag_src, req.r.id.idiag_src, fam == AF_INET ? 4 : 16) ||
		    memcmp(m->id.idiag_dst, req.r.id.idiag_dst, fam == AF_INET ? 4 : 16))
			continue;
		*uid = m->idiag_uid;
		err = 0;
		break;
	}
out:
	close(fd);
	return err;
}

/* A user and its groups, as the kernel checks file permissions. */
struct who {
	uid_t uid;
	gid_t groups[256];
	int ngroups; /* -1: not in the user database */
};

static void who_lookup(uid_t uid, struct who *w)
{
	struct passwd pw, *res = NULL;
	char buf[4096];

	w->uid = uid;
	w->ngroups = 256;
	if (getpwuid_r(uid, &pw, buf, sizeof(buf), &res) || !res ||
	    getgrouplist(pw.pw_name, pw.pw_gid, w->groups, &w->ngroups) < 0)
		w->ngroups = -1;
}

/*
 * The user database's answers, kept WHO_KEEP_NS per uid: a lookup is
 * getpwuid_r() and getgrouplist() (files, nss-systemd or a directory
 * service: 50k instructions and 16 system calls per connection here, or a network
 * round trip) for every connection of a local peer, on the event loop. A
 * user's new groups, or a user added or removed, count within WHO_KEEP_NS;
 * the kernel's own check of the control socket lags further, as it goes by
 * the groups a process got at login. Only the groups are kept: the socket's
 * path, modes and the allow lists are read at every check. The event loop is
 * the only caller (every face's connections are accepted there).
 */
#define WHO_KEPT 8
#define WHO_KEEP_NS (5ull * 1000000000ull)

static struct who_kept {
	struct who w;
	uint64_t at_ns; /* 0: empty */
} who_kept[WHO_KEPT];

static void who_of(uid_t uid, struct who *w)
{
	uint64_t now = mono_ns();
	struct who_kept *k, *oldest = &who_kept[0];

	for (k = who_kept; k < who_kept + WHO_KEPT; k++) {
		if (k->at_ns && k->w.uid == uid) {
			if (now - k->at_ns < WHO_KEEP_NS) {
				*w = k->w;
				return;
			}
			oldest = k; /* this uid's, out of date */
			break;
		}
		if (k->at_ns < oldest->at_ns)
			oldest = k;
	}
	who_lookup(uid, w);
	oldest->w = *w;
	oldest->at_ns = now ? now : 1;
}

static bool in_group(const struct who *w, gid_t g)
{
	int i;

	for (i = 0; i < w->ngroups; i++)
		if (w->groups[i] == g)
			return true;
	return false;
}

/* May @w do @bits (S_IWOTH, S_IXOTH: the "other" triplet's) to a file of
 * @st? The owner's bits for its owner, else the group's for a member,
 * else the others': the kernel's order. */
static bool may(const struct who *w, const struct stat *st, mode_t bits)
{
	if (w->uid == 0)
		return true;
	if (w->uid == st->st_uid)
		return st->st_mode & (bits << 6);
	if (in_group(w, st->st_gid))
		return st->st_mode & (bits << 3);
	return st->st_mode & bits;
}

/* Could @w connect() to the control socket: search every directory on the
 * way, and write the socket file? */
static bool socket_admits(const struct broker *b, const struct who *w)
{
	char path[sizeof(b->opts.socket_path)];
	struct stat st;
	char *slash;

	if (w->uid == 0)
		return true;
	snprintf(path, sizeof(path), "%s", b->opts.socket_path);
	if (stat(path, &st) || !S_ISSOCK(st.st_mode))
		return w->uid == geteuid(); /* no file to go by (an abstract socket) */
	if (!may(w, &st, S_IWOTH))
		return false;
	while ((slash = strrchr(path, '/'))) {
		if (slash == path)
			slash[1] = '\0'; /* "/" itself */
		else
			*slash = '\0';
		if (stat(path, &st) || !may(w, &st, S_IXOTH))
			return false;
		if (slash == path)
			break;
	}
	return true;
}

bool net_uid_admits(const struct broker *b, uid_t uid)
{
	struct who w;

	/* Root passes both checks below whatever its groups: no user database
	 * lookup (getpwuid_r() and getgrouplist(), files or a directory
	 * service) on the event loop for its connections. */
	if (uid == 0)
		return true;
	who_of(uid, &w);
	if (!socket_admits(b, &w))
		return false;
	return access_check_ids(b, uid, w.ngroups > 0 ? w.groups[0] : (gid_t)-1,
				w.ngroups > 0 ? w.groups : NULL,
				w.ngroups > 0 ? (uint32_t)w.ngroups : 0) == 0;
}

void net_peer_of(const struct broker *b, int fd, struct net_peer *p)
{
	struct sockaddr_storage ps, ls;
	socklen_t plen = sizeof(ps), llen = sizeof(ls);
	struct ucred cred;
	socklen_t clen = sizeof(cred);

	memset(p, 0, sizeof(*p));
	snprintf(p->addr, sizeof(p->addr), "local");
	if (getpeername(fd, (struct sockaddr *)&ps, &plen) ||
	    getsockname(fd, (struct sockaddr *)&ls, &llen)) {
		snprintf(p->key, sizeof(p->key), "?");
		return;
	}
	if (ps.ss_family == AF_UNIX) {
		if (!getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen)) {
			p->uid_known = true;
			p->uid = cred.uid;
		}
	} else if (ps.ss_family == AF_INET || ps.ss_family == AF_INET6) {
		p->tcp = true;
		if (ps.ss_family == AF_INET)
			inet_ntop(AF_INET, &((struct sockaddr_in *)&ps)->sin_addr, p->addr,
				  sizeof(p->addr));
		else
			inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ps)->sin6_addr, p->addr,
				  sizeof(p->addr));
		p->loopback = addr_loopback((struct sockaddr *)&ps);
		if (p->loopback && !net_sock_uid(&ps, &ls, &p->uid))
			p->uid_known = true;
	}
	if (p->uid_known) {
		snprintf(p->key, sizeof(p->key), "uid:%u", (unsigned)p->uid);
		p->uid_admitted = !b->opts.http.token_only && net_uid_admits(b, p->uid);
	} else {
		snprintf(p->key, sizeof(p->key), "%s", p->addr);
	}
}
