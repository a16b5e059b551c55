#!/bin/sh
# Cluster keys on etcd (docs/cluster.md), measured on one machine: a 1-member
# etcd on loopback, two brokers standing for hosts. Prints
#  - one process's lock+release of a cluster key its host holds, against a
#    host-local key (both lock-free), $ROUNDS rounds of $SECS s each,
#    interleaved, the median ratio (cluster speed / host-local speed) and
#    its spread, with its target (at least 0.8) as MET / NOT MET;
#  - the local handoff rate of a cluster key while the host holds it, against
#    a host-local key (two processes on one host alternating), $ROUNDS rounds
#    of $SECS s each, the two kinds of key interleaved (the machine's load
#    changes by the second), with the median ratio, its spread and its
#    target (at least 0.9);
#  - cross-host handoff (one process per host alternating: every grant moves
#    the etcd lock between hosts);
#  - `shmlock lock` on a cluster key against `etcdctl lock`, N runs each.
# Usage: scripts/cluster-bench.sh [BUILD_DIR] (default build/check)
# ONLY=handoff runs the first two parts alone, ONLY=cross the cross-host one.
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
# Hosts a and b take the key in turns; host h holds its keys (cached while
# no other host asks, for --cluster-idle: the local figures are of a key
# its host holds, and the key-switching runs leave each key idle for 20 ms
# at a time).
for h in a b h; do
	"$O/shmlockd" --socket "$T/$h.sock" --shm-name "/shmlock-bench-$$-$h" \
		--destroy-segment-on-exit --cluster "etcd://127.0.0.1:$CP" --cluster-prefix c/ \
		>"$T/$h.log" 2>&1 &
	pids="$pids $!"
done
for h in a b h; do
	for _ in $(seq 100); do [ -S "$T/$h.sock" ] && break; sleep 0.1; done
done
cc -O2 -std=gnu11 -Iinclude scripts/cluster-bench.c "$O/liblocal.a" -lpthread -o "$T/cb"
# The median of the ratios in $T/ratios, its spread, the median anchor
# (host-local figure) in $T/anchors, and the target: $1 what, $2 the
# minimum ratio, $3 the anchor's unit.
verdict() {
	a=$(sort -n "$T/anchors" | awk '{ v[NR] = $1 } END {
		print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
	sort -n "$T/ratios" | awk -v what="$1" -v want="$2" -v a="$a" -v unit="$3" '
		{ v[NR] = $1 } END {
		m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
		printf "%s: cluster key at median %.2fx a host-local key (min %.2fx, max %.2fx, %d rounds; host-local median %s %s)\n",
			what, m, v[1], v[NR], NR, a, unit;
		printf "  target: %s, cluster key >= %.2fx host-local (anchor: host-local %s %s, same run): %s\n",
			what, want, a, unit, (m >= want ? "MET" : "NOT MET") }'
}
# A round's figures: one run of "$T/cb" $1 (-u: ns per lock+release, the
# ratio host-local / cluster; -h: handoffs per second, the ratio cluster /
# host-local) with host-local key $2 and cluster key $3, which it alternates
# (the machine's load falls on both alike), and the sockets after them.
round() {
	mode=$1 lk=$2 ck=$3
	shift 3
	# shellcheck disable=SC2046 # two figures
	set -- $(timeout $((SECS + 60)) "$T/cb" "$mode" "$lk" "$ck" "$SECS" "$@" | awk '{ print $5, $6 }')
	l=${1:-0} c=${2:-0}
	if [ "$mode" = -u ]; then
		unit=ns
		ratio=$(awk "BEGIN { printf \"%.2f\", $l / ($c > 0 ? $c : 1) }")
	else
		unit=handoffs/s
		ratio=$(awk "BEGIN { printf \"%.2f\", $c / ($l > 0 ? $l : 1) }")
	fi
}
# $ROUNDS rounds of round(); ratios in $T/ratios, host-local figures in
# $T/anchors.
rounds() {
	: >"$T/ratios"
	: >"$T/anchors"
	r=0
	while [ "$r" -lt "$ROUNDS" ]; do
		round "$@"
		echo "$ratio" >>"$T/ratios"
		echo "$l" >>"$T/anchors"
		echo "   round $((r + 1)): host-local $l $unit, cluster $c $unit: ${ratio}x"
		r=$((r + 1))
	done
}
if [ "${ONLY:-}" != cross ]; then
echo "== one host, one process: lock+release of a key the host holds (lock-free)"
echo "   ($ROUNDS rounds of $SECS s, each alternating the two keys in batches of 1000: median ns per batch)"
rounds -u l/u c/u "$T/h.sock"
verdict "uncontended lock+release" 0.8 "ns"
echo "== one host, two processes alternating: a handoff per grant"
echo "   ($ROUNDS rounds of $SECS s, both processes switching between the keys every 20 ms)"
rounds -h l/h c/h "$T/h.sock" "$T/h.sock"
verdict "two-process handoffs" 0.9 "handoffs/s"
echo "   (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
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
