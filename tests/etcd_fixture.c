// SPDX-License-Identifier: MIT
/* A real etcd cluster for a test (etcd_fixture.h). */
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "etcd_fixture.h"
#include "harness.h"
#include "net_fixture.h"

int etcd_req(int port, const char *path, const char *body, char *out)
{
	struct http_req req = { .url = strf("http://127.0.0.1:%d%s", port, path),
				.body = body,
				.timeout_ms = 1000 };

	return http_fetch(&req, out, ETCD_OUT) == 200 ? 0 : -1;
}

/* Start member @i of @e (its names and ports set; its data kept from an
 * earlier start, if any: a restart). */
void etcd3_spawn(struct etcd3 *e, int i)
{
	char cluster[300], name[16], data[128], curl[64], purl[64], log[128];
	int j, n = 0;

	for (j = 0; j < 3; j++)
		n += snprintf(cluster + n, sizeof(cluster) - (size_t)n, "%sm%d=http://127.0.0.1:%d",
			      j ? "," : "", j, e->pport[j]);
	snprintf(name, sizeof(name), "m%d", i);
	snprintf(data, sizeof(data), "%s/m%d", e->dir, i);
	snprintf(log, sizeof(log), "%s/m%d.log", e->dir, i);
	snprintf(curl, sizeof(curl), "http://127.0.0.1:%d", e->cport[i]);
	snprintf(purl, sizeof(purl), "http://127.0.0.1:%d", e->pport[i]);
	fflush(NULL);
	e->pid[i] = fork();
	CHECK(e->pid[i] >= 0);
	if (e->pid[i] == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execlp("etcd", "etcd", "--name", name, "--data-dir", data, "--listen-client-urls",
		       curl, "--advertise-client-urls", curl, "--listen-peer-urls", purl,
		       "--initial-advertise-peer-urls", purl, "--initial-cluster", cluster,
		       "--initial-cluster-state", "new", "--initial-cluster-token", e->dir,
		       "--heartbeat-interval", "50", "--election-timeout", "500", (char *)NULL);
		_exit(127);
	}
}

void etcd3_wait_healthy(struct etcd3 *e)
{
	char cmd[160];
	int i;

	for (i = 0; i < 3; i++) {
		char out[4096];

		if (!WAIT_FOR(etcd_req(e->cport[i], "/health", NULL, out) == 0 &&
				      strstr(out, "true"),
			      15000)) {
			snprintf(cmd, sizeof(cmd), "tail -5 %s/m%d.log >&2", e->dir, i);
			if (system(cmd))
				(void)0;
			FAIL_AT("etcd member %d not healthy", i);
		}
	}
}

void etcd3_start(struct etcd3 *e)
{
	int i;

	memset(e, 0, sizeof(*e));
	snprintf(e->dir, sizeof(e->dir), "/tmp/shmlock-test-%d-etcd-XXXXXX", (int)getpid());
	CHECK(mkdtemp(e->dir));
	for (i = 0; i < 3; i++) {
		e->cport[i] = free_port();
		e->pport[i] = free_port();
	}
	snprintf(e->eps, sizeof(e->eps), "etcd://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d",
		 e->cport[0], e->cport[1], e->cport[2]);
	for (i = 0; i < 3; i++)
		etcd3_spawn(e, i);
	etcd3_wait_healthy(e);
}

void etcd3_stop(struct etcd3 *e)
{
	char cmd[160];
	int i;

	for (i = 0; i < 3; i++)
		etcd3_kill(e, i);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", e->dir);
	if (system(cmd))
		fprintf(stderr, "could not remove %s\n", e->dir);
}

void etcd3_kill(struct etcd3 *e, int i)
{
	if (e->pid[i] > 0) {
		kill(e->pid[i], SIGKILL);
		waitpid(e->pid[i], NULL, 0);
		e->pid[i] = 0;
	}
}

void etcd3_signal(struct etcd3 *e, int sig)
{
	int i;

	for (i = 0; i < 3; i++)
		if (e->pid[i] > 0)
			kill(e->pid[i], sig);
}

void etcd_b64(const char *in, char *out)
{
	static const char tab[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t len = strlen(in), i;
	const unsigned char *p = (const unsigned char *)in;

	for (i = 0; i + 2 < len; i += 3) {
		*out++ = tab[p[i] >> 2];
		*out++ = tab[((p[i] & 3) << 4) | (p[i + 1] >> 4)];
		*out++ = tab[((p[i + 1] & 15) << 2) | (p[i + 2] >> 6)];
		*out++ = tab[p[i + 2] & 63];
	}
	if (i < len) {
		*out++ = tab[p[i] >> 2];
		if (i + 1 < len) {
			*out++ = tab[((p[i] & 3) << 4) | (p[i + 1] >> 4)];
			*out++ = tab[(p[i + 1] & 15) << 2];
		} else {
			*out++ = tab[(p[i] & 3) << 4];
			*out++ = '=';
		}
		*out++ = '=';
	}
	*out = '\0';
}

/* The range of etcd keys under @prefix hex(@key) @suffix (its last byte
 * bumped is the end), asked of the first member that answers: the answer in
 * @out (4096 bytes); -1: no answer from any member. */
int etcd_range_under(const struct etcd3 *e, const char *prefix, const char *key, const char *suffix,
		     bool count_only, char *out)
{
	char dir[600], from[900], to[900], body[2000];
	size_t n = (size_t)snprintf(dir, sizeof(dir), "%s", prefix);
	int i;

	for (i = 0; key[i]; i++)
		n += (size_t)sprintf(dir + n, "%02x", (unsigned char)key[i]);
	n += (size_t)sprintf(dir + n, "%s", suffix);
	etcd_b64(dir, from);
	dir[n - 1]++; /* '/' + 1: the end of the range */
	etcd_b64(dir, to);
	snprintf(body, sizeof(body), "{\"key\":\"%s\",\"range_end\":\"%s\",\"count_only\":%s}",
		 from, to, count_only ? "true" : "false");
	for (i = 0; i < 3; i++)
		if (e->pid[i] > 0 && etcd_req(e->cport[i], "/v3/kv/range", body, out) == 0)
			return 0;
	return -1;
}

/* How many etcd keys lie under @prefix hex(@key) @suffix (@suffix ends in
 * '/'; -1: no answer from any member). */
int etcd_count_under(const struct etcd3 *e, const char *prefix, const char *key, const char *suffix)
{
	char out[4096], *c;

	if (etcd_range_under(e, prefix, key, suffix, true, out))
		return -1;
	c = strstr(out, "\"count\":\"");
	return c ? atoi(c + 9) : 0;
}

/* The etcd lease of the first key under @prefix hex(@key) @suffix (0: none,
 * or no answer). */
long long etcd_lease_under(const struct etcd3 *e, const char *prefix, const char *key,
			   const char *suffix)
{
	char out[4096], *c;

	if (etcd_range_under(e, prefix, key, suffix, false, out))
		return 0;
	c = strstr(out, "\"lease\":\"");
	return c ? atoll(c + 9) : 0;
}

/* Revoke etcd lease @lease (a host's: as if it expired). */
void etcd_revoke(const struct etcd3 *e, long long lease)
{
	char body[64], out[4096];
	int i;

	snprintf(body, sizeof(body), "{\"ID\":\"%lld\"}", lease);
	for (i = 0; i < 3; i++)
		if (e->pid[i] > 0 && etcd_req(e->cport[i], "/v3/lease/revoke", body, out) == 0)
			return;
	FAIL_AT("lease %lld not revoked", lease);
}

/* Is member @i of @e the raft leader? -1: no answer. */
int etcd_is_leader(const struct etcd3 *e, int i)
{
	char out[4096], *m, *l;

	if (etcd_req(e->cport[i], "/v3/maintenance/status", "{}", out))
		return -1;
	m = strstr(out, "\"member_id\":\"");
	l = strstr(out, "\"leader\":\"");
	if (!m || !l)
		return -1;
	return strtoull(m + 13, NULL, 10) == strtoull(l + 10, NULL, 10);
}
