// SPDX-License-Identifier: MIT
/* The HTTP API's command-line options (see shmlockd(8) and docs/http-api.md). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/options.h"
#include "http.h"

const struct option http_long_opts[HTTP_NOPTS] = {
	{ "http-listen", required_argument, NULL, OPT_HTTP_LISTEN },
	{ "http-socket", required_argument, NULL, OPT_HTTP_SOCKET },
	{ "http-session-idle-timeout", required_argument, NULL, OPT_HTTP_IDLE },
	{ "default-lease-ttl", required_argument, NULL, OPT_HTTP_LEASE },
	{ "auth-token", required_argument, NULL, OPT_HTTP_AUTH },
	{ "auth-token-file", required_argument, NULL, OPT_HTTP_AUTH_FILE },
	{ "http-max-sessions", required_argument, NULL, OPT_HTTP_MAX_SESSIONS },
	{ "http-max-sessions-per-ip", required_argument, NULL, OPT_HTTP_MAX_PER_IP },
	{ "http-rate-limit-per-ip", required_argument, NULL, OPT_HTTP_RATE },
	{ "http-rate-limit-burst", required_argument, NULL, OPT_HTTP_BURST },
	{ "http-cors-allowed-origins", required_argument, NULL, OPT_HTTP_CORS },
	{ "http-insecure-no-auth", no_argument, NULL, OPT_HTTP_INSECURE },
	{ "http-allowed-hosts", required_argument, NULL, OPT_HTTP_HOSTS },
	{ "http-max-connections", required_argument, NULL, OPT_HTTP_MAX_CONNS },
	{ "http-max-connections-per-ip", required_argument, NULL, OPT_HTTP_MAX_CONNS_PER_IP },
	{ "http-connection-timeout", required_argument, NULL, OPT_HTTP_CONN_TIMEOUT },
	{ "http-extensions", no_argument, NULL, OPT_HTTP_EXTENSIONS },
	{ "token-only", no_argument, NULL, OPT_HTTP_TOKEN_ONLY },
};

const char http_usage_text[] =
	"HTTP API (off unless a listener is given; see docs/http-api.md):\n"
	"  --http-listen [HOST:]PORT   serve HTTP on TCP (host default 127.0.0.1)\n"
	"  --http-socket PATH      serve HTTP on a Unix socket (curl --unix-socket)\n"
	"  --http-session-idle-timeout SECONDS  reap HTTP sessions idle for twice\n"
	"                          this (default 20)\n"
	"  --default-lease-ttl SECONDS  lease of HTTP holds that name none (default 33)\n"
	"  --auth-token TOKEN      require 'Authorization: Bearer TOKEN' (all but\n"
	"                          /health, /ready, /v1/openapi.json); needed off loopback\n"
	"  --auth-token-file FILE  ... read from FILE (first line); with or without\n"
	"                          it, a loopback client whose user the control\n"
	"                          socket admits needs none (docs/security.md)\n"
	"  --token-only            admit network clients (HTTP, Consul, TCP) by the\n"
	"                          token alone, never by their user\n"
	"  --http-insecure-no-auth serve TCP without a token to everyone who\n"
	"                          connects (needed off loopback without a token)\n"
	"  --http-allowed-hosts LIST  Host names accepted on TCP besides localhost and\n"
	"                          the address connected to (comma-separated)\n"
	"  --http-max-sessions N   HTTP sessions at once (default: half of\n"
	"                          --max-sessions; always below it)\n"
	"  --http-max-sessions-per-ip N  ... per client address (default: none)\n"
	"  --http-rate-limit-per-ip N    requests a second per address (default: none)\n"
	"  --http-rate-limit-burst N     burst above that rate (default: the rate)\n"
	"  --http-cors-allowed-origins LIST  comma-separated origins, '*' any (off)\n"
	"  --http-max-connections N  HTTP connections at once (default: a quarter of\n"
	"                          the fd limit, at most 16384)\n"
	"  --http-max-connections-per-ip N  ... per TCP client address (default: half\n"
	"                          of --http-max-connections)\n"
	"  --http-connection-timeout SECONDS  close a connection idle or with an\n"
	"                          unfinished request this long (default 30)\n"
	"  --http-extensions       shmlock's own answers where they say more than\n"
	"                          dflockd's (stats extras, 409 lease_expired on\n"
	"                          release/renew, strict bodies); default: dflockd's\n";

void http_opts_default(struct http_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->idle_timeout_s = 20;
	o->default_lease_s = 33;
	o->connection_timeout_s = 30;
}

bool http_enabled(const struct http_opts *o)
{
	return o->listen[0] || o->unix_path[0];
}

static int token_file(const char *path, char *dst, size_t size)
{
	FILE *f = fopen(path, "re");
	size_t n;

	if (!f || !fgets(dst, (int)size, f)) {
		fprintf(stderr, "shmlockd: --auth-token-file: cannot read '%s'\n", path);
		if (f)
			fclose(f);
		return -1;
	}
	fclose(f);
	n = strcspn(dst, "\r\n");
	dst[n] = '\0';
	if (!n) {
		fprintf(stderr, "shmlockd: --auth-token-file: '%s' holds no token\n", path);
		return -1;
	}
	return 0;
}

int http_opt_parse(struct http_opts *o, int opt, const char *arg)
{
	switch (opt) {
	case OPT_HTTP_LISTEN:
		return opt_string("http-listen", arg, o->listen, sizeof(o->listen));
	case OPT_HTTP_SOCKET:
		return opt_string("http-socket", arg, o->unix_path, sizeof(o->unix_path));
	case OPT_HTTP_IDLE:
		return opt_number("http-session-idle-timeout", arg, 1, 86400, &o->idle_timeout_s);
	case OPT_HTTP_LEASE:
		return opt_number("default-lease-ttl", arg, 1, 86400, &o->default_lease_s);
	case OPT_HTTP_AUTH:
		return opt_string("auth-token", arg, o->auth_token, sizeof(o->auth_token));
	case OPT_HTTP_AUTH_FILE:
		return token_file(arg, o->auth_token, sizeof(o->auth_token));
	case OPT_HTTP_MAX_SESSIONS:
		return opt_number("http-max-sessions", arg, 0, UINT32_MAX, &o->max_sessions);
	case OPT_HTTP_MAX_PER_IP:
		return opt_number("http-max-sessions-per-ip", arg, 0, UINT32_MAX,
				  &o->max_sessions_per_ip);
	case OPT_HTTP_RATE:
		return opt_number("http-rate-limit-per-ip", arg, 0, 1000000, &o->rate_per_ip);
	case OPT_HTTP_BURST:
		return opt_number("http-rate-limit-burst", arg, 1, 1000000, &o->rate_burst);
	case OPT_HTTP_CORS:
		return opt_string("http-cors-allowed-origins", arg, o->cors_origins,
				  sizeof(o->cors_origins));
	case OPT_HTTP_INSECURE:
		o->insecure_no_auth = true;
		return 0;
	case OPT_HTTP_HOSTS:
		return opt_string("http-allowed-hosts", arg, o->allowed_hosts,
				  sizeof(o->allowed_hosts));
	case OPT_HTTP_MAX_CONNS:
		return opt_number("http-max-connections", arg, 1, 1000000, &o->max_connections);
	case OPT_HTTP_MAX_CONNS_PER_IP:
		return opt_number("http-max-connections-per-ip", arg, 1, 1000000,
				  &o->max_connections_per_ip);
	case OPT_HTTP_CONN_TIMEOUT:
		return opt_number("http-connection-timeout", arg, 1, 86400,
				  &o->connection_timeout_s);
	case OPT_HTTP_TOKEN_ONLY:
		o->token_only = true;
		return 0;
	case OPT_HTTP_EXTENSIONS:
		o->extensions = true;
		return 0;
	}
	return -1;
}
