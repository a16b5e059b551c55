// SPDX-License-Identifier: MIT
/*
 * Durations on the wire, against a real shmlockd: every face reads them with
 * the one parser (libshm/duration.c), so a duration that overflows, lacks its
 * unit or is spelt in hex is refused with the face's error (400 on Consul's
 * API), a value outside what the field allows gets that field's own error,
 * and sub-second values are kept where Consul accepts them, never rounded up
 * to a second.
 */
#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "broker_fixture.h"
#include "harness.h"
#include "net_fixture.h"

static int port;

static struct http_reply *consul(const char *method, const char *path, const char *body)
{
	static struct http_reply r;
	int rc;

	rc = http_do(&(struct http_req){ .method = method,
					 .url = strf("http://127.0.0.1:%d%s", port, path),
					 .body = body },
		     &r);
	if (rc != CURLE_OK)
		FAIL_AT("%s %s: %s", method, path, curl_easy_strerror((CURLcode)rc));
	return &r;
}

/* A broker with Consul's API and Consul's own session TTL range (10 s .. 24 h). */
static void start(struct broker_proc *b)
{
	static char listen[32];
	uint64_t until;

	curl_global_init(CURL_GLOBAL_DEFAULT);
	port = free_port();
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	broker_start(b, (const char *const[]){ "--consul-listen", listen, "--consul-node-name",
					       "node1", "--http-insecure-no-auth", NULL });
	until = now_ms() + 5000;
	for (;;) {
		struct http_reply r;

		if (!http_do(&(struct http_req){ .url = strf("http://127.0.0.1:%d/v1/status/leader",
							     port) },
			     &r) &&
		    r.status == 200)
			break;
		if (now_ms() > until)
			FAIL_AT("the Consul API does not answer");
		usleep(10000);
	}
}

/* PUT /v1/session/create @body must answer @status with a body starting
 * with @prefix (NULL: any). */
static void create_answers(const char *body, long status, const char *prefix)
{
	struct http_reply *r = consul("PUT", "/v1/session/create", body);

	if (r->status != status || (prefix && strncmp(r->body, prefix, strlen(prefix))))
		FAIL_AT("create %s: %ld %s; want %ld %s", body, r->status, r->body, status,
			prefix ? prefix : "");
}

/* @got must be the string @want. */
static void check_str(const char *got, const char *want)
{
	if (!got || strcmp(got, want))
		FAIL_AT("got \"%s\", want \"%s\"", got ? got : "(null)", want);
}

static size_t sessions(void)
{
	struct http_reply *r = consul("GET", "/v1/session/list", NULL);
	json_t *j = json_loads(r->body, 0, NULL);

	CHECK(r->status == 200 && json_is_array(j));
	return json_array_size(j);
}

/* The session created with @body, as /v1/session/info shows it. */
static json_t *created(const char *body)
{
	struct http_reply *r = consul("PUT", "/v1/session/create", body);
	json_t *j = json_loads(r->body, 0, NULL);
	const char *id = json_string_value(json_object_get(j, "ID"));

	if (r->status != 200 || !id)
		FAIL_AT("create %s: %ld %s", body, r->status, r->body);
	r = consul("GET", strf("/v1/session/info/%s", id), NULL);
	j = json_loads(r->body, 0, NULL);
	if (r->status != 200 || json_array_size(j) != 1)
		FAIL_AT("info %s: %ld %s", id, r->status, r->body);
	return json_array_get(j, 0);
}

/* A TTL that overflows 64-bit nanoseconds once made a session with no TTL
 * at all; a bare number and a hex number were taken as seconds. Consul's
 * time.ParseDuration refuses all three, and so must this API, creating
 * nothing. */
TEST(durations, consul_refuses_ttl_overflow_no_unit_and_hex, 30)
{
	struct broker_proc b;

	start(&b);
	create_answers("{\"TTL\":\"99999999h\"}", 400, "Request decode failed");
	create_answers("{\"TTL\":\"2562048h\"}", 400, "Request decode failed");
	create_answers("{\"TTL\":\"10\"}", 400, "Request decode failed");
	create_answers("{\"TTL\":\"0x10s\"}", 400, "Request decode failed");
	create_answers("{\"TTL\":\"1e3s\"}", 400, "Request decode failed");
	create_answers("{\"TTL\":\" 10s\"}", 400, "Request decode failed");
	create_answers("{\"TTL\":\"10s \"}", 400, "Request decode failed");
	create_answers("{\"TTL\":\"10sec\"}", 400, "Request decode failed");
	create_answers("{\"TTL\":\"inf\"}", 400, "Request decode failed");
	create_answers("{\"TTL\":\"nan\"}", 400, "Request decode failed");
	create_answers("{\"TTL\":30}", 400, "Request decode failed");
	CHECK_EQ(sessions(), 0);
	broker_stop_clean(&b);
}

/* Consul's session TTL range, 10 s .. 86400 s, has an error of its own;
 * its ends and Go's compound and sub-second forms are accepted, and a
 * sub-second TTL is kept as given. */
TEST(durations, consul_session_ttl_range_and_sub_second_ttl, 30)
{
	struct broker_proc b;

	start(&b);
	create_answers("{\"TTL\":\"9s\"}", 400, "Invalid Session TTL");
	create_answers("{\"TTL\":\"9999ms\"}", 400, "Invalid Session TTL");
	create_answers("{\"TTL\":\"86400001ms\"}", 400, "Invalid Session TTL");
	create_answers("{\"TTL\":\"25h\"}", 400, "Invalid Session TTL");
	create_answers("{\"TTL\":\"-10s\"}", 400, "Invalid Session TTL");
	CHECK_EQ(sessions(), 0);
	check_str(json_string_value(json_object_get(created("{\"TTL\":\"10s\"}"), "TTL")), "10s");
	check_str(json_string_value(json_object_get(created("{\"TTL\":\"24h\"}"), "TTL")),
		  "24h0m0s");
	check_str(json_string_value(json_object_get(created("{\"TTL\":\"1h30m\"}"), "TTL")),
		  "1h30m0s");
	check_str(json_string_value(json_object_get(created("{\"TTL\":\"10.5s\"}"), "TTL")),
		  "10.5s");
	check_str(json_string_value(json_object_get(created("{\"TTL\":\"12500ms\"}"), "TTL")),
		  "12.5s");
	check_str(json_string_value(json_object_get(created("{\"TTL\":\"0\"}"), "TTL")), "");
	broker_stop_clean(&b);
}

/* LockDelay: Go's durations with their sub-second values kept (nanoseconds
 * in the answer), Consul's numbers (seconds below 1000, else nanoseconds),
 * and the same refusals as TTL's. */
TEST(durations, consul_lock_delay_sub_second_and_refusals, 30)
{
	struct broker_proc b;

	start(&b);
	CHECK_EQ(json_integer_value(
			 json_object_get(created("{\"LockDelay\":\"250ms\"}"), "LockDelay")),
		 250000000);
	CHECK_EQ(json_integer_value(
			 json_object_get(created("{\"LockDelay\":\"1.5s\"}"), "LockDelay")),
		 1500000000);
	CHECK_EQ(json_integer_value(
			 json_object_get(created("{\"LockDelay\":\"1500us\"}"), "LockDelay")),
		 1500000);
	CHECK_EQ(json_integer_value(json_object_get(created("{\"LockDelay\":2}"), "LockDelay")),
		 2000000000);
	CHECK_EQ(json_integer_value(
			 json_object_get(created("{\"LockDelay\":250000000}"), "LockDelay")),
		 250000000);
	CHECK_EQ(
		json_integer_value(json_object_get(created("{\"LockDelay\":\"2m\"}"), "LockDelay")),
		60000000000ll); /* at most 60 s, as Consul */
	create_answers("{\"LockDelay\":\"99999999h\"}", 400, "Request decode failed");
	create_answers("{\"LockDelay\":\"10\"}", 400, "Request decode failed");
	create_answers("{\"LockDelay\":\"0x10s\"}", 400, "Request decode failed");
	create_answers("{\"LockDelay\":\"-1s\"}", 400, "Request decode failed");
	create_answers("{\"LockDelay\":-1}", 400, "Request decode failed");
	broker_stop_clean(&b);
}

/* A blocking query's ?wait=: Go's durations or bare seconds (as documented),
 * an overflow or a hex number refused with Consul's "Invalid wait time". */
TEST(durations, consul_wait_refuses_overflow_and_hex, 30)
{
	static const char *const bad[] = { "99999999h", "0x10s", "10x", "-1s", "1e3", "inf" };
	struct broker_proc b;
	struct http_reply *r;
	size_t i;

	start(&b);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		r = consul("GET", strf("/v1/kv/d?index=9223372036854775807&wait=%s", bad[i]), NULL);
		if (r->status != 400 || strcmp(r->body, "Invalid wait time"))
			FAIL_AT("wait=%s: %ld %s", bad[i], r->status, r->body);
	}
	/* Short waits answer at their end (404: no such key). */
	r = consul("GET", "/v1/kv/d?index=9223372036854775807&wait=50ms", NULL);
	CHECK_EQ(r->status, 404);
	r = consul("GET", "/v1/kv/d?index=9223372036854775807&wait=0.05", NULL);
	CHECK_EQ(r->status, 404);
	broker_stop_clean(&b);
}
