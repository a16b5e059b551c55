#!/bin/sh
# `make run`: shmlockd in the foreground on this user's default socket and
# segment, with a short demo of a lock handed over between two processes
# started once the broker answers. Stop with Ctrl-C.
set -eu
broker=$1
demo=$2

echo "shmlockd: Ctrl-C stops it; its segment stays with shmlockd-keeper" \
	"(pkill -TERM -x shmlockd-keeper ends that too)"
"$demo" --wait-for-broker &
exec "$broker"
