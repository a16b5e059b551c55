// SPDX-License-Identifier: MIT
/* The Consul-compatible API's command-line options (shmlockd(8), docs/consul-api.md). */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "consul.h"
#include "core/options.h"

const struct option consul_long_opts[CONSUL_NOPTS] = {
	{ "consul-listen", required_argument, NULL, OPT_CONSUL_LISTEN },
	{ "consul-session-ttl-min", required_argument, NULL, OPT_CONSUL_TTL_MIN },
	{ "consul-node-name", required_argument, NULL, OPT_CONSUL_NODE },
};

const char consul_usage_text[] =
	"Consul-compatible API (off unless a listener is given; docs/consul-api.md;\n"
	"token, limits and timeouts are the HTTP API's --auth-token, --http-*):\n"
	"  --consul-listen [HOST:]PORT  serve Consul's /v1/session, /v1/kv, /v1/status\n"
	"                          on TCP (host default 127.0.0.1); or the\n"
	"                          socket-activated fd named \"consul\"\n"
	"  --consul-session-ttl-min SECONDS  shortest session TTL accepted (default 10)\n"
	"  --consul-node-name NAME the node sessions belong to (default: hostname)\n";

void consul_opts_default(struct consul_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->ttl_min_s = 10;
}

int consul_opt_parse(struct consul_opts *o, int opt, const char *arg)
{
	switch (opt) {
	case OPT_CONSUL_LISTEN:
		return opt_string("consul-listen", arg, o->listen, sizeof(o->listen));
	case OPT_CONSUL_TTL_MIN:
		return opt_number("consul-session-ttl-min", arg, 1, 86400, &o->ttl_min_s);
	case OPT_CONSUL_NODE:
		return opt_string("consul-node-name", arg, o->node, sizeof(o->node));
	}
	return -1;
}
