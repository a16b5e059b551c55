# shellcheck shell=sh
# Sourced by scripts/cluster-bench.sh and scripts/cluster-scale.sh: a 1-member
# etcd (Debian etcd-server) on free loopback ports, its data under $T/etcd.
# etcd_one_start sets CP (its client port) and adds its pid to $pids, which
# the caller's cleanup kills; it exits the script if etcd does not come up.

# A port nobody listens on (another etcd answering /health on ours would
# make a bench against the wrong cluster, or none).
port() {
	while :; do
		p=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 30000))
		ss -Htan "( sport = :$p or dport = :$p )" 2>/dev/null | grep -q . || { echo "$p"; return; }
	done
}

etcd_one_start() {
	CP=$(port)
	PP=$(port)
	etcd --name b --data-dir "$T/etcd" --listen-client-urls "http://127.0.0.1:$CP" \
		--advertise-client-urls "http://127.0.0.1:$CP" --listen-peer-urls "http://127.0.0.1:$PP" \
		--initial-advertise-peer-urls "http://127.0.0.1:$PP" \
		--initial-cluster "b=http://127.0.0.1:$PP" >"$T/etcd.log" 2>&1 &
	epid=$!
	pids="$pids $epid"
	for _ in $(seq 100); do
		curl -s "http://127.0.0.1:$CP/health" | grep -q true && break
		sleep 0.1
	done
	kill -0 "$epid" 2>/dev/null || { echo "etcd did not start:" >&2; tail -3 "$T/etcd.log" >&2; exit 1; }
}

# etcd's revision now: +1 at every write that changes a key (put, delete, a
# txn that changed something); lease grants and renewals do not count.
etcd_revision() {
	curl -s -X POST -d '{"key":"AA=="}' "http://127.0.0.1:$CP/v3/kv/range" |
		sed -n 's/.*"revision":"\([0-9]*\)".*/\1/p'
}
