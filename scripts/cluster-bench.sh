#!/bin/sh
# Cluster keys on etcd (docs/cluster.md), measured on one machine: a 1-member
# etcd on loopback, two brokers standing for hosts. Prints
#  - the local handoff rate of a cluster key while the host holds it, against
#    a host-local key (two processes on one host alternating), $ROUNDS rounds
#    of $SECS s each, the two kinds of key interleaved (the machine's load
#    changes by the second), with the median ratio and its spread;
#  - cross-host handoff (one process per host alternating: every grant moves
#    the etcd lock between hosts);
#  - `shmlock lock` on a cluster key against `etcdctl lock`, N runs each.
# Usage: scripts/cluster-bench.sh [BUILD_DIR] (default build/check)
# ONLY=handoff runs the first part alone, ONLY=cross the cross-host one.
set -eu
O=${1:-build/check}
N=${N:-50}
SECS=${SECS:-3}
ROUNDS=${ROUNDS:-5}
T=$(mktemp -d /tmp/shmlock-cluster-bench-XXXXXX)
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$T"
}
trap cleanup EXIT INT TERM
. scripts/etcd-one.sh
etcd_one_start
for h in a b; do
	"$O/shmlockd" --socket "$T/$h.sock" --shm-name "/shmlock-bench-$$-$h" \
		--destroy-segment-on-exit --cluster "etcd://127.0.0.1:$CP" --cluster-prefix c/ \
		>"$T/$h.log" 2>&1 &
	pids="$pids $!"
done
for h in a b; do
	for _ in $(seq 100); do [ -S "$T/$h.sock" ] && break; sleep 0.1; done
done
cc -O2 -std=gnu11 -Iinclude scripts/cluster-bench.c "$O/liblocal.a" -lpthread -o "$T/cb"
if [ "${ONLY:-}" != cross ]; then
echo "== one host, two processes alternating: a handoff per grant"
echo "   ($ROUNDS rounds of $SECS s, host-local and cluster key interleaved; the ratio per round)"
: >"$T/ratios"
r=0
while [ "$r" -lt "$ROUNDS" ]; do
	l=$(timeout $((SECS + 60)) "$T/cb" l/h "$SECS" "$T/a.sock" "$T/a.sock")
	c=$(timeout $((SECS + 60)) "$T/cb" c/h "$SECS" "$T/a.sock" "$T/a.sock")
	lr=$(echo "$l" | awk '{ print $4 }')
	cr=$(echo "$c" | awk '{ print $4 }')
	ratio=$(awk "BEGIN { printf \"%.2f\", $lr / ($cr > 0 ? $cr : 1) }")
	echo "$ratio" >>"$T/ratios"
	echo "   round $((r + 1)): host-local $lr/s, cluster $cr/s: ${ratio}x"
	r=$((r + 1))
done
sort -n "$T/ratios" | awk '{ v[NR] = $1 } END {
	m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
	printf "cluster key vs host-local key: median %.2fx slower (min %.2fx, max %.2fx, %d rounds)\n",
		m, v[1], v[NR], NR }'
fi
[ "${ONLY:-}" = handoff ] && exit 0
echo "== two hosts, one process each alternating: every grant crosses hosts"
timeout $((SECS + 60)) "$T/cb" c/x "$SECS" "$T/a.sock" "$T/b.sock"
[ "${ONLY:-}" = cross ] && exit 0
echo "== $N sequential runs of 'true' under a lock"
s=$(date +%s.%N)
for _ in $(seq "$N"); do "$O/shmlock" lock -socket="$T/a.sock" c/cli true; done
e=$(date +%s.%N)
echo "shmlock lock (cluster key): $(awk "BEGIN { printf \"%.2f\", ($e - $s) * 1000 / $N }") ms each"
s=$(date +%s.%N)
for _ in $(seq "$N"); do "$O/shmlock" lock -socket="$T/a.sock" l/cli true; done
e=$(date +%s.%N)
echo "shmlock lock (host-local key): $(awk "BEGIN { printf \"%.2f\", ($e - $s) * 1000 / $N }") ms each"
s=$(date +%s.%N)
for _ in $(seq "$N"); do ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$CP" lock cli true >/dev/null; done
e=$(date +%s.%N)
echo "etcdctl lock: $(awk "BEGIN { printf \"%.2f\", ($e - $s) * 1000 / $N }") ms each"
