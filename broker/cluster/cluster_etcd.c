// SPDX-License-Identifier: MIT
/*
 * A small blocking client of etcd's v3 JSON gateway (/v3/...): libcurl easy
 * handles, one per thread, and jansson. Keys and values travel in base64,
 * int64 fields as strings. Endpoints are tried in turn, the one that answered
 * last first; TLS and authentication as etcdctl offers them.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "core/broker.h"
#include "clock.h"
#include "cluster_int.h"

/* Connecting to a member must not eat the whole budget of a call: a dead
 * member refuses at once, a stopped one would hang. */
#define CONNECT_MS 500L
#define CANCEL_POLL_MS 50   /* perform(): how soon a cancel is seen */
#define ATTEMPT_MIN_MS 250u /* an attempt at one endpoint, at least (attempt_ms()) */

void etcd_b64(const void *in, size_t len, char *out)
{
	static const char tab[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const unsigned char *p = in;
	size_t i;

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

int64_t etcd_i64(const json_t *obj, const char *name)
{
	json_t *v = json_object_get(obj, name);

	if (json_is_integer(v))
		return (int64_t)json_integer_value(v);
	if (json_is_string(v))
		return strtoll(json_string_value(v), NULL, 10);
	return 0;
}

int etcd_init(struct etcd *e, const struct cluster_opts *o)
{
	memset(e, 0, sizeof(*e));
	e->o = o;
	e->h = curl_easy_init();
	e->m = curl_multi_init();
	if (!e->h || !e->m) {
		etcd_fini(e);
		return -ENOMEM;
	}
	return 0;
}

void etcd_fini(struct etcd *e)
{
	if (e->m)
		curl_multi_cleanup(e->m);
	if (e->h)
		curl_easy_cleanup(e->h);
	e->h = NULL;
	e->m = NULL;
}

struct buf {
	char *p;
	size_t n, cap;
	bool watch;  /* a watch: stop at the first event */
	int verdict; /* watch: 1 deleted, 2 cancelled by etcd */
	/* A stream (etcd_watch_stream()): each complete message to @cb. */
	int (*cb)(json_t *msg, void *arg);
	void *arg;
};

/* Hand every complete JSON message at the start of @b to its callback
 * (the gateway streams them one after the other); keep the rest. 0, or the
 * callback's non-zero answer (stop). */
static int stream_messages(struct buf *b)
{
	size_t off = 0;
	int r = 0;

	while (!r) {
		json_error_t je;
		json_t *m;

		while (off < b->n && (b->p[off] == ' ' || b->p[off] == '\n' || b->p[off] == '\r'))
			off++;
		if (off == b->n)
			break;
		m = json_loadb(b->p + off, b->n - off, JSON_DISABLE_EOF_CHECK, &je);
		if (!m)
			break; /* incomplete: wait for more */
		off += (size_t)je.position;
		r = b->cb(m, b->arg);
		json_decref(m);
	}
	memmove(b->p, b->p + off, b->n - off);
	b->n -= off;
	b->p[b->n] = '\0';
	return r;
}

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *arg)
{
	struct buf *b = arg;
	size_t n = size * nmemb;

	if (b->n + n + 1 > b->cap) {
		size_t cap = (b->n + n + 1) * 2;
		char *p;

		if (cap > (1u << 24) || !(p = realloc(b->p, cap)))
			return 0;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, ptr, n);
	b->n += n;
	b->p[b->n] = '\0';
	if (b->cb && stream_messages(b)) {
		b->verdict = 1;
		return 0; /* the callback is done: abort the stream */
	}
	if (b->watch) {
		/* The watch filters out puts (NOPUT): any event is a delete. */
		if (strstr(b->p, "\"events\""))
			b->verdict = 1;
		else if (strstr(b->p, "\"canceled\":true"))
			b->verdict = 2;
		if (b->verdict)
			return 0; /* done: abort the stream */
	}
	return n;
}

static int on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	_Atomic bool *cancel = arg;

	(void)dt, (void)dn, (void)ut, (void)un;
	return cancel && atomic_load(cancel) ? 1 : 0;
}

/*
 * Run the transfer on e->h. One that can be cancelled goes through the multi
 * interface, waiting in slices of CANCEL_POLL_MS and checking *@cancel
 * between them: libcurl calls the progress callback only about once a second
 * while a transfer is idle (a quiet watch), so a stop or a worker's cancel
 * used to wait up to a second for it (a clean broker stop took ~1 s). The
 * progress callback stays as a second check.
 */
static CURLcode perform(struct etcd *e, _Atomic bool *cancel)
{
	CURLcode rc = CURLE_RECV_ERROR;
	CURLMsg *msg;
	int running = 1, left;

	if (!cancel || curl_multi_add_handle(e->m, e->h) != CURLM_OK)
		return curl_easy_perform(e->h);
	for (;;) {
		if (curl_multi_perform(e->m, &running) != CURLM_OK) {
			rc = CURLE_FAILED_INIT;
			break;
		}
		if (!running)
			break;
		if (atomic_load(cancel)) {
			rc = CURLE_ABORTED_BY_CALLBACK;
			break;
		}
		if (curl_multi_poll(e->m, NULL, 0, CANCEL_POLL_MS, NULL) != CURLM_OK) {
			rc = CURLE_FAILED_INIT;
			break;
		}
	}
	while (!running && (msg = curl_multi_info_read(e->m, &left)))
		if (msg->msg == CURLMSG_DONE && msg->easy_handle == e->h)
			rc = msg->data.result;
	curl_multi_remove_handle(e->m, e->h);
	return rc;
}

/* One request to one endpoint. Returns the curl code; *status the HTTP one. */
static CURLcode post_once(struct etcd *e, const char *url, const char *body, struct buf *b,
			  long timeout_ms, _Atomic bool *cancel, long *status)
{
	const struct cluster_opts *o = e->o;
	struct curl_slist *hdrs = NULL;
	char auth[600];
	CURLcode rc;

	curl_easy_reset(e->h);
	hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
	if (e->token[0]) {
		snprintf(auth, sizeof(auth), "Authorization: %s", e->token);
		hdrs = curl_slist_append(hdrs, auth);
	}
	curl_easy_setopt(e->h, CURLOPT_URL, url);
	curl_easy_setopt(e->h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(e->h, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(e->h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(e->h, CURLOPT_WRITEDATA, b);
	curl_easy_setopt(e->h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e->h, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(e->h, CURLOPT_CONNECTTIMEOUT_MS,
			 timeout_ms < CONNECT_MS ? timeout_ms : CONNECT_MS);
	curl_easy_setopt(e->h, CURLOPT_NOPROXY, "*");
	curl_easy_setopt(e->h, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(e->h, CURLOPT_XFERINFODATA, (void *)cancel);
	curl_easy_setopt(e->h, CURLOPT_NOPROGRESS, 0L);
	if (o->cacert[0])
		curl_easy_setopt(e->h, CURLOPT_CAINFO, o->cacert);
	if (o->cert[0])
		curl_easy_setopt(e->h, CURLOPT_SSLCERT, o->cert);
	if (o->key[0])
		curl_easy_setopt(e->h, CURLOPT_SSLKEY, o->key);
	if (o->insecure_skip_verify) {
		curl_easy_setopt(e->h, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(e->h, CURLOPT_SSL_VERIFYHOST, 0L);
	}
	rc = perform(e, cancel);
	*status = 0;
	curl_easy_getinfo(e->h, CURLINFO_RESPONSE_CODE, status);
	curl_slist_free_all(hdrs);
	return rc;
}

static int authenticate(struct etcd *e, uint32_t timeout_ms, _Atomic bool *cancel);

/*
 * One attempt's share of what is left of a call's budget: a stopped member
 * accepts the connection (the kernel does) and never answers, so one attempt
 * given the whole budget cost every renewal its deadline while the quorum
 * was fine. While another endpoint is left to try in this round (@tried of
 * @n), an attempt gets half of what is left (at least ATTEMPT_MIN_MS), the
 * last one all of it: a slow but live member (a loaded disk, an election
 * after the leader died) keeps as much time as can be spared, and a member
 * that refuses at once (dead) leaves its share to the others. A watch,
 * quiet by nature, keeps all of it.
 */
static long attempt_ms(const struct buf *b, uint32_t n, uint32_t tried, uint64_t left_ns)
{
	uint64_t left = left_ns / 1000000ull + 1, share;

	if (b->watch || b->cb || tried + 1 >= n)
		return (long)left;
	share = left / 2;
	if (share < ATTEMPT_MIN_MS)
		share = ATTEMPT_MIN_MS;
	return (long)(share < left ? share : left);
}

/* POST to the endpoints in turn until one answers; @b gets the body. */
static int post_raw(struct etcd *e, const char *path, const char *body, struct buf *b,
		    uint32_t timeout_ms, _Atomic bool *cancel, bool may_auth)
{
	uint64_t end = mono_ns() + (uint64_t)timeout_ms * 1000000ull;
	uint32_t tries = 0, n = e->o->nendpoints;
	char url[300];

	if (may_auth && e->o->user[0] && !e->token[0]) {
		int err = authenticate(e, timeout_ms, cancel);

		if (err)
			return err;
	}
	for (;;) {
		uint64_t now = mono_ns();
		long status;
		CURLcode rc;

		if (cancel && atomic_load(cancel))
			return -ECANCELED;
		if (now >= end)
			return -ETIMEDOUT;
		snprintf(url, sizeof(url), "%s%s", e->o->endpoints[e->cur % n], path);
		b->n = 0;
		if (b->p)
			b->p[0] = '\0';
		rc = post_once(e, url, body, b, attempt_ms(b, n, tries, end - now), cancel,
			       &status);
		if ((b->watch || b->cb) && b->verdict)
			return 0;
		if (rc == CURLE_ABORTED_BY_CALLBACK)
			return -ECANCELED;
		if (rc == CURLE_OK && status == 401 && may_auth && e->o->user[0] && tries < n) {
			/* The token expired (etcd's simple tokens do): once more. */
			e->token[0] = '\0';
			if (authenticate(e, timeout_ms, cancel) == 0) {
				tries++;
				continue;
			}
		}
		if (rc == CURLE_OK && status > 0 && status < 500)
			return status == 200 ? 0 : -EIO;
		if ((b->watch || b->cb) && rc == CURLE_OPERATION_TIMEDOUT)
			return -EAGAIN; /* a quiet watch: the caller looks again */
		blog(LOG_DEBUG, "cluster: %s: %s (HTTP %ld)", url,
		     rc ? curl_easy_strerror(rc) : "server error", status);
		/* Unreachable, stopped or failing member: the next one. */
		e->cur = (e->cur + 1) % n;
		if (++tries >= n) {
			struct timespec ts = { 0, 50000000L }; /* all down: not a busy loop */

			tries = 0;
			nanosleep(&ts, NULL);
		}
	}
}

static int authenticate(struct etcd *e, uint32_t timeout_ms, _Atomic bool *cancel)
{
	json_t *req = json_pack("{s:s, s:s}", "name", e->o->user, "password", e->o->password);
	struct buf b = { 0 };
	json_t *rep;
	char *body;
	int err;

	body = req ? json_dumps(req, JSON_COMPACT) : NULL;
	json_decref(req);
	if (!body)
		return -ENOMEM;
	err = post_raw(e, "/v3/auth/authenticate", body, &b, timeout_ms, cancel, false);
	free(body);
	if (!err) {
		rep = json_loads(b.p ? b.p : "", 0, NULL);
		if (json_is_string(json_object_get(rep, "token")) &&
		    strlen(json_string_value(json_object_get(rep, "token"))) < sizeof(e->token))
			strcpy(e->token, json_string_value(json_object_get(rep, "token")));
		else
			err = -EIO;
		json_decref(rep);
	}
	if (err)
		blog(LOG_WARNING, "cluster: etcd authentication as %s failed", e->o->user);
	free(b.p);
	return err;
}

int etcd_post(struct etcd *e, const char *path, json_t *body, json_t **out, uint32_t timeout_ms,
	      _Atomic bool *cancel)
{
	char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
	struct buf b = { 0 };
	int err;

	json_decref(body);
	if (out)
		*out = NULL;
	if (!s)
		return -ENOMEM;
	err = post_raw(e, path, s, &b, timeout_ms, cancel, true);
	free(s);
	if (!err && out) {
		*out = json_loads(b.p ? b.p : "", 0, NULL);
		if (!*out)
			err = -EIO;
	}
	if (err == -EIO)
		blog(LOG_DEBUG, "cluster: %s: error answer: %.200s", path, b.p ? b.p : "");
	free(b.p);
	return err;
}

int etcd_watch_delete(struct etcd *e, const char *key_b64, int64_t from_rev, uint32_t timeout_ms,
		      _Atomic bool *cancel)
{
	json_t *req = json_pack("{s:{s:s, s:s, s:[s]}}", "create_request", "key", key_b64,
				"start_revision", "", "filters", "NOPUT");
	struct buf b = { .watch = true };
	char rev[24], *s;
	int err;

	if (!req)
		return -ENOMEM;
	snprintf(rev, sizeof(rev), "%lld", (long long)from_rev);
	json_object_set_new(json_object_get(req, "create_request"), "start_revision",
			    json_string(rev));
	s = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	if (!s)
		return -ENOMEM;
	err = post_raw(e, "/v3/watch", s, &b, timeout_ms, cancel, true);
	free(s);
	free(b.p);
	if (err)
		return err == -ETIMEDOUT ? -EAGAIN : err;
	if (b.verdict == 1)
		return 0;
	return -EAGAIN; /* cancelled by etcd (compaction), or the stream ended */
}

int etcd_watch_stream(struct etcd *e, json_t *req, uint32_t timeout_ms, _Atomic bool *cancel,
		      int (*cb)(json_t *msg, void *arg), void *arg)
{
	struct buf b = { .cb = cb, .arg = arg };
	char *s = req ? json_dumps(req, JSON_COMPACT) : NULL;
	int err;

	json_decref(req);
	if (!s)
		return -ENOMEM;
	err = post_raw(e, "/v3/watch", s, &b, timeout_ms, cancel, true);
	free(s);
	free(b.p);
	if (err == -ETIMEDOUT)
		return -EAGAIN;
	if (!err && !b.verdict)
		return -EAGAIN; /* the stream ended (a member went away): again */
	return err;
}

json_t *etcd_cmp_lease(const char *k64, int64_t lease)
{
	char ls[24];

	snprintf(ls, sizeof(ls), "%" PRId64, lease);
	return json_pack("{s:s, s:s, s:s, s:s}", "key", k64, "target", "LEASE", "result", "EQUAL",
			 "lease", ls);
}

json_t *etcd_op_del_if_lease(const char *k64, int64_t lease)
{
	return json_pack("{s:{s:[o], s:[{s:{s:s}}]}}", "request_txn", "compare",
			 etcd_cmp_lease(k64, lease), "success", "request_delete_range", "key", k64);
}

int etcd_del_if_lease(struct etcd *e, const char *k64, int64_t lease, uint32_t timeout_ms,
		      _Atomic bool *cancel)
{
	return etcd_post(e, "/v3/kv/txn",
			 json_pack("{s:[o], s:[{s:{s:s}}]}", "compare", etcd_cmp_lease(k64, lease),
				   "success", "request_delete_range", "key", k64),
			 NULL, timeout_ms, cancel);
}

/* Base64 decoding of @in into @out (room for 3 * strlen(in) / 4 bytes);
 * the length, or -1 on a bad character. */
ssize_t etcd_unb64(const char *in, void *out)
{
	unsigned char *o = out;
	uint32_t acc = 0;
	int bits = 0;
	ssize_t n = 0;

	for (; *in && *in != '='; in++) {
		const char *tab =
			"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
		const char *c = strchr(tab, *in);

		if (!c)
			return -1;
		acc = (acc << 6) | (uint32_t)(c - tab);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			o[n++] = (unsigned char)(acc >> bits);
		}
	}
	return n;
}
