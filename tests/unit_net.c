// SPDX-License-Identifier: MIT
/*
 * The pure parts of the network module (broker/net/, linked into the
 * tests): the token comparison, connection caps and deadlines, the spacing
 * of failed authentications, and which requests a web page could send
 * without a CORS preflight.
 */
#include <string.h>

#include "harness.h"
#include "net/net.h"

TEST(unit, net_token_compare_is_exact, 10)
{
	CHECK(net_const_eq("s3cret", "s3cret", 6));
	CHECK(!net_const_eq("s3cret", "s3cre", 5));
	CHECK(!net_const_eq("s3cret", "s3cret1", 7));
	CHECK(!net_const_eq("s3cret", "s3creT", 6));
	CHECK(!net_const_eq("s3cret", "", 0));
	/* Only @alen bytes count: "s3cret\0x" is not "s3cret" as 8 bytes. */
	CHECK(!net_const_eq("s3cret", "s3cret\0x", 8));
	CHECK(net_const_eq("", "", 0));
}

TEST(unit, net_simple_writes_are_the_ones_without_a_preflight, 10)
{
	CHECK(net_simple_write("POST", NULL));
	CHECK(net_simple_write("POST", ""));
	CHECK(net_simple_write("POST", "text/plain"));
	CHECK(net_simple_write("POST", "text/plain;charset=UTF-8"));
	CHECK(net_simple_write("POST", " TEXT/PLAIN ; charset=utf-8"));
	CHECK(net_simple_write("POST", "application/x-www-form-urlencoded"));
	CHECK(net_simple_write("POST", "multipart/form-data; boundary=x"));
	CHECK(!net_simple_write("POST", "application/json"));
	CHECK(!net_simple_write("POST", "text/plainx"));
	CHECK(!net_simple_write("PUT", "text/plain"));
	CHECK(!net_simple_write("DELETE", NULL));
	CHECK(!net_simple_write("GET", NULL)); /* simple, but reads */
	CHECK(!net_simple_write("HEAD", "text/plain"));
}

TEST(unit, net_origins_match_exactly_and_star_only_when_asked, 10)
{
	const char *list = "http://a.example, https://b.example:8080,*";

	CHECK(net_origin_in(list, "http://a.example", false));
	CHECK(net_origin_in(list, "https://b.example:8080", false));
	CHECK(!net_origin_in(list, "http://a.example.evil", false));
	CHECK(!net_origin_in(list, "http://c.example", false));
	CHECK(net_origin_in(list, "http://c.example", true));
	CHECK(!net_origin_in("", "http://a.example", true));
}

static void conn(struct net_conn *c, const char *key)
{
	memset(c, 0, sizeof(*c));
	c->fd = -1;
	strcpy(c->key, key);
}

TEST(unit, net_pool_caps_evict_the_oldest_pending_only, 10)
{
	struct net_pool p = { .max = 3, .max_per_peer = 2, .deadline_ns = 100 };
	struct net_conn a, b, c, d, e;

	conn(&a, "uid:0");
	conn(&b, "uid:0");
	conn(&c, "uid:0");
	conn(&d, "10.0.0.1");
	conn(&e, "10.0.0.2");
	CHECK(net_pool_add(&p, &a, 0) == NULL);
	CHECK(net_pool_add(&p, &b, 1) == NULL);
	CHECK_EQ(net_pool_count(&p, "uid:0"), 2);
	/* Its peer is at its cap: its oldest pending one makes room. */
	CHECK(net_pool_add(&p, &c, 2) == &a);
	CHECK(a.doomed);
	CHECK_EQ(net_pool_count(&p, "uid:0"), 2);
	CHECK_EQ(p.live, 2);
	net_pool_del(&p, &a);
	/* b and c have sent their heads: nothing to evict, d refused at the
	 * peer cap? No: d is another peer; the overall cap (3) has room. */
	net_pool_ready(&p, &b);
	net_pool_ready(&p, &c);
	CHECK(net_pool_add(&p, &d, 3) == NULL);
	CHECK_EQ(p.live, 3);
	/* Overall cap: d is pending, so it goes for e. */
	CHECK(net_pool_add(&p, &e, 4) == &d);
	net_pool_del(&p, &d);
	net_pool_ready(&p, &e);
	/* Nothing pending at the cap: the new one is refused. */
	conn(&d, "10.0.0.3");
	CHECK(net_pool_add(&p, &d, 5) == &d);
	net_pool_del(&p, &d); /* never linked: no-op */
	CHECK_EQ(p.live, 3);
	net_pool_del(&p, &b);
	net_pool_del(&p, &c);
	net_pool_del(&p, &e);
	CHECK_EQ(p.live, 0);
	CHECK(p.head == NULL && p.tail == NULL);
}

TEST(unit, net_pool_pending_per_peer_evicts_that_peers_own, 10)
{
	struct net_pool p = { .max = 10, .max_pending_per_peer = 2 };
	struct net_conn a, b, c, d;

	conn(&a, "uid:65534");
	conn(&b, "uid:65534");
	conn(&c, "uid:0");
	conn(&d, "uid:65534");
	CHECK(net_pool_add(&p, &a, 0) == NULL);
	CHECK(net_pool_add(&p, &c, 1) == NULL); /* another peer's, older than b */
	CHECK(net_pool_add(&p, &b, 2) == NULL);
	/* A third pending one of nobody's: its own oldest goes, not root's. */
	CHECK(net_pool_add(&p, &d, 3) == &a);
	net_pool_del(&p, &a);
	/* Authenticated ones are not pending: no cap of this kind. */
	net_pool_ready(&p, &b);
	net_pool_ready(&p, &d);
	conn(&a, "uid:65534");
	CHECK(net_pool_add(&p, &a, 4) == NULL);
	CHECK_EQ(net_pool_count(&p, "uid:65534"), 3);
	net_pool_del(&p, &a);
	net_pool_del(&p, &b);
	net_pool_del(&p, &c);
	net_pool_del(&p, &d);
	CHECK_EQ(p.live, 0);
}

TEST(unit, net_pool_deadline_counts_from_the_head_start, 10)
{
	struct net_pool p = { .max = 10, .deadline_ns = 100 };
	struct net_conn a, b;

	conn(&a, "uid:0");
	conn(&b, "uid:0");
	CHECK(net_pool_add(&p, &a, 0) == NULL);
	CHECK(net_pool_add(&p, &b, 50) == NULL);
	CHECK(net_pool_overdue(&p, 99) == NULL);
	CHECK(net_pool_overdue(&p, 100) == &a); /* however much it trickled */
	CHECK(net_pool_overdue(&p, 100) == NULL);
	/* b's head came; its next request's head starts a new deadline. */
	net_pool_ready(&p, &b);
	CHECK(net_pool_overdue(&p, 1000) == NULL);
	net_pool_pending(&p, &b, 1000);
	CHECK(net_pool_overdue(&p, 1099) == NULL);
	CHECK(net_pool_overdue(&p, 1100) == &b);
	net_pool_del(&p, &a);
	net_pool_del(&p, &b);
	CHECK_EQ(p.live, 0);
}

TEST(unit, net_failed_authentications_are_spaced_per_peer, 10)
{
	struct net_rates t = { 0 };
	uint64_t now = 1000000000ull, d = NET_AUTH_DELAY_NS;

	CHECK_EQ(net_auth_fail_at(&t, "uid:65534", now), now + d);
	/* Guessing over other connections at once: one answer per delay. */
	CHECK_EQ(net_auth_fail_at(&t, "uid:65534", now), now + 2 * d);
	CHECK_EQ(net_auth_fail_at(&t, "uid:65534", now + 1), now + 3 * d);
	/* Another peer is not held back by it. */
	CHECK_EQ(net_auth_fail_at(&t, "192.0.2.1", now), now + d);
	/* Once the queue has passed, a failure waits one delay again. */
	CHECK_EQ(net_auth_fail_at(&t, "uid:65534", now + 10 * d), now + 11 * d);
	net_rate_free(&t);
}
