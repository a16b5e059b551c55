#!/bin/sh
# C reproductions of the bugs the model found (docs/reliability.md). Each
# program pins the race with a linker --wrap of an internal function and
# prints what happens. Not part of make check.
#
# Usage: tests/model/repro/run.sh [O]   (O: a build dir with liblocal.a and
# shmlockd, default build/check)
#   wake_death   releaser killed between handoff and wake (fixed in 46ded9f:
#                expect "waiter returned")
#   claim_store  fast-path claim swept while its process lives (fixed in
#                46ded9f: expect the hold table to stay full, no double holder)
#   lost_delay   lock-delay after a waiter that died before taking up its
#                grant (open: prints the delay left, documented 0)
#   node_reuse   granted waiter's node re-queued on another key before the
#                granter unlinks it (open: key a's queue names b's nodes)
set -eu
o=${1:-build/check}
here=$(dirname "$0")
export SHMLOCK_BROKER_BIN="$PWD/$o/shmlockd"
for t in wake_death:waiter_wake claim_store:node_claim_as lost_delay: node_reuse:queue_unlink_locked; do
	name=${t%%:*}
	wrap=${t#*:}
	cc -D_GNU_SOURCE -Iinclude -Ilibshm -Itests "$here/$name.c" tests/broker_fixture.c \
		tests/harness.c "$o/liblocal.a" ${wrap:+-Wl,--wrap=$wrap} -lpthread -o "$o/repro-$name"
	echo "== $name"
	timeout 60 "$o/repro-$name" || echo "($name exited $?)"
done
