#!/bin/sh
# Cluster keys at scale (docs/cluster.md, "Holding"; docs/performance.md):
# brokers standing for hosts (3, then 5: $HOSTS) on ONE etcd member started
# here, $PROCS processes per host taking and releasing cluster keys in a loop
# for $SECS s in three patterns (scripts/cluster-scale.c):
#   affine  each host its own $KEYS keys;
#   shared  every host the same $SHARED keys;
#   random  every host any of $KEYS * hosts keys.
# For each, the local operations (a lock and its release) per second and the
# etcd writes per 1000 operations: etcd's revision before and after the run,
# which rises by one at every write that changes a key (lease renewals do
# not count). The run includes each key's first acquisition. Then the target:
# with host affinity at default settings, at most 1 etcd write per 10^4
# local operations (MET / NOT MET). Brokers are started afresh for each run
# (a clean stop gives every cached key back), with default cluster options
# ($BROKER_OPTS adds some, e.g. "--cluster-idle 5ms" for the old behaviour).
# Usage: scripts/cluster-scale.sh [BUILD_DIR] (default build/check)
set -eu
O=${1:-build/check}
SECS=${SECS:-10}
HOSTS=${HOSTS:-3 5}
PROCS=${PROCS:-2}
KEYS=${KEYS:-10}
SHARED=${SHARED:-2}
PATTERNS=${PATTERNS:-affine shared random}
T=$(mktemp -d /tmp/shmlock-cluster-scale-XXXXXX)
pids=""
hpids=""
stop_hosts() {
	for p in $hpids; do kill "$p" 2>/dev/null || true; done
	for p in $hpids; do wait "$p" 2>/dev/null || true; done
	hpids=""
}
cleanup() {
	stop_hosts
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$T"
}
trap cleanup EXIT INT TERM
. scripts/etcd-one.sh
etcd_one_start
cc -O2 -std=gnu11 -Iinclude scripts/cluster-scale.c "$O/liblocal.a" -lpthread -o "$T/cs"
echo "   one etcd member on loopback; $PROCS processes per host; $SECS s per run; load average:$(uptime | sed 's/.*average://')"
printf '   %-7s %5s %12s %22s %11s %16s %9s %7s\n' pattern hosts "local ops/s" "per host (min-max)" \
	"etcd writes" "writes/1000 ops" timeouts errors
: >"$T/affine"
run=0
for H in $HOSTS; do
	for pat in $PATTERNS; do
		run=$((run + 1))
		socks=""
		h=0
		while [ "$h" -lt "$H" ]; do
			# shellcheck disable=SC2086 # BROKER_OPTS: words
			"$O/shmlockd" --socket "$T/$run-$h.sock" --shm-name "/shmlock-scale-$$-$run-$h" \
				--destroy-segment-on-exit --cluster "etcd://127.0.0.1:$CP" \
				--cluster-prefix c/ ${BROKER_OPTS:-} >"$T/$run-$h.log" 2>&1 &
			hpids="$hpids $!"
			socks="$socks $T/$run-$h.sock"
			h=$((h + 1))
		done
		for s in $socks; do
			for _ in $(seq 100); do [ -S "$s" ] && break; sleep 0.1; done
		done
		nk=$KEYS
		[ "$pat" = shared ] && nk=$SHARED
		r0=$(etcd_revision)
		# shellcheck disable=SC2086 # the sockets: words
		out=$(timeout $((SECS + 60)) "$T/cs" "$pat" "$SECS" "$nk" "$PROCS" $socks)
		r1=$(etcd_revision)
		stop_hosts
		echo "$out" | awk -v pat="$pat" -v H="$H" -v secs="$SECS" -v w=$((r1 - r0)) '{
			ops = $2; min = -1; max = 0
			for (i = 4; i < 4 + H; i++) { if (min < 0 || $i < min) min = $i; if ($i > max) max = $i }
			printf "   %-7s %5d %12.0f %22s %11d %16.3f %9d %7d\n", pat, H, ops / secs,
				sprintf("%.0f-%.0f", min / secs, max / secs), w,
				ops ? w * 1000 / ops : 0, $(5 + H), $(7 + H) }'
		[ "$pat" = affine ] && echo "$out" | awk -v H="$H" -v w=$((r1 - r0)) \
			'{ print H, w, $2 }' >>"$T/affine"
	done
done
[ -s "$T/affine" ] && awk '{
	per = $3 ? $2 * 10000 / $3 : 1e9
	if (per > 1) bad = 1
	s = s sprintf("%s%d hosts %.3f", s ? ", " : "", $1, per)
} END {
	printf "target: affine keys at default settings, <= 1 etcd write per 10^4 local operations: %s per 10^4 ... %s\n",
		s, bad ? "NOT MET" : "MET"
}' "$T/affine"
