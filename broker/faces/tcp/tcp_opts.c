// SPDX-License-Identifier: MIT
/* The TCP protocol's command-line options (see shmlockd(8), docs/tcp-protocol.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/options.h"
#include "tcp.h"

const struct option tcp_long_opts[TCP_NOPTS] = {
	{ "tcp-listen", required_argument, NULL, OPT_TCP_LISTEN },
	{ "tcp-max-connections", required_argument, NULL, OPT_TCP_MAX_CONNS },
	{ "tcp-read-timeout", required_argument, NULL, OPT_TCP_READ_TIMEOUT },
	{ "tcp-insecure-no-auth", no_argument, NULL, OPT_TCP_INSECURE },
	{ "tcp-tls-cert", required_argument, NULL, OPT_TCP_TLS_CERT },
	{ "tcp-tls-key", required_argument, NULL, OPT_TCP_TLS_KEY },
	{ "tcp-auth-timeout", required_argument, NULL, OPT_TCP_AUTH_TIMEOUT },
};

const char tcp_usage_text[] =
	"TCP line protocol (dflockd's; off unless a listener is given; see\n"
	"docs/tcp-protocol.md):\n"
	"  --tcp-listen [HOST:]PORT  serve it on TCP (host default 127.0.0.1)\n"
	"  --tcp-max-connections N   connections at once; more are closed at\n"
	"                          once (default: a quarter of the fd limit); one\n"
	"                          not authenticated yet makes room for a new one\n"
	"  --tcp-auth-timeout SECONDS  a connection not authenticated this long is\n"
	"                          answered 'error_auth' and closed (default 10)\n"
	"  --tcp-read-timeout SECONDS  a connection that sends no line this long\n"
	"                          (outside its waits) is answered 'error' and\n"
	"                          closed (default 23)\n"
	"  --tcp-insecure-no-auth  serve without --auth-token to everyone who\n"
	"                          connects (a loopback listener without it serves\n"
	"                          the users the control socket admits)\n"
	"  --tcp-tls-cert FILE     with --tcp-tls-key: TLS (1.2 and up) on every\n"
	"                          connection; FILE is a PEM certificate chain\n"
	"  --tcp-tls-key FILE      its PEM private key\n"
	"  (--auth-token and --default-lease-ttl apply to TCP as to HTTP)\n";

void tcp_opts_default(struct tcp_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->read_timeout_s = 23;
	o->auth_timeout_s = 10;
}

int tcp_opt_parse(struct tcp_opts *o, int opt, const char *arg)
{
	switch (opt) {
	case OPT_TCP_LISTEN:
		return opt_string("tcp-listen", arg, o->listen, sizeof(o->listen));
	case OPT_TCP_MAX_CONNS:
		return opt_number("tcp-max-connections", arg, 1, 1000000, &o->max_connections);
	case OPT_TCP_READ_TIMEOUT:
		return opt_number("tcp-read-timeout", arg, 1, 86400, &o->read_timeout_s);
	case OPT_TCP_AUTH_TIMEOUT:
		return opt_number("tcp-auth-timeout", arg, 1, 86400, &o->auth_timeout_s);
	case OPT_TCP_INSECURE:
		o->insecure_no_auth = true;
		return 0;
	case OPT_TCP_TLS_CERT:
		return opt_string("tcp-tls-cert", arg, o->tls_cert, sizeof(o->tls_cert));
	case OPT_TCP_TLS_KEY:
		return opt_string("tcp-tls-key", arg, o->tls_key, sizeof(o->tls_key));
	}
	return -1;
}
