#!/bin/sh
# A long cross-host kill soak of cluster keys (docs/cluster.md, "Soak"): the
# cluster/kill_soak (a lock) and cluster/sem_kill_soak (a semaphore of 2
# slots) tests of make check, each run for $SECONDS (default 600) against
# a real 3-member etcd and three brokers, with holders SIGKILLed every few
# tens of milliseconds and a broker SIGKILLed every 5-15 s (restarted at
# once, re-adopting its lease, or after the TTL). Runs $RUNS runs (default 1)
# with seeds $SEED, $SEED+1, ... (default 42); prints each run's figures
# (grants, kills, overlaps, token regressions, revision falls, errors by
# code) and exits non-zero at the first failed run.
# Usage: scripts/cluster-soak.sh [BUILD_DIR]   (default build/check)
set -eu
O=${1:-build/check}
SECS=${SECONDS_SOAK:-${SECONDS:-600}}
RUNS=${RUNS:-1}
SEED=${SEED:-42}
i=0
while [ "$i" -lt "$RUNS" ]; do
	s=$((SEED + i))
	for t in kill_soak sem_kill_soak; do
		echo "== cluster $t: run $((i + 1))/$RUNS, $SECS s, seed $s ($(date -u +%H:%M:%S))"
		SHMLOCK_CLUSTER_SOAK_S=$SECS SHMLOCK_CLUSTER_SOAK_SEED=$s \
			SHMLOCK_TEST_TIMEOUT_S=$((SECS + 120)) \
			SHMLOCK_BROKER_BIN=$(realpath "$O/shmlockd") \
			SHMLOCK_CLI_BIN=$(realpath "$O/shmlock") \
			"$O/tests/shmlock-tests" "cluster/$t"
	done
	i=$((i + 1))
done
