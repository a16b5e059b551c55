#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The broker's own cost per acquire+release over the network:
# user-space instructions (callgrind) or system calls (strace -c) per op,
# counted over a fixed number of ops only (connections opened and warmed up
# first, outside the count), so figures are stable on a busy machine,
# unlike CPU times.
#
#   scripts/netcpu-profile.sh callgrind|strace BROKER tcp|http|connect CLIENTS OPS own|shared
#
# Prints "<tool> <proto> <clients> <keys>: <N> per op" and, for strace, the
# table of system calls (totals over CLIENTS*OPS ops). The client is
# scripts/netcpu-drive.py (slow, but only the broker is counted). Needs
# valgrind (scripts/install-deps.sh installs it) or strace (not installed
# there: a developer's tool, not used by make check).
#
# connect: each op is a new HTTP connection with one GET /v1/stats, made as
# user NETCPU_UID (default 65534; run as root, which setpriv needs), and
# admitted by that uid as the control socket would admit it (the socket's
# group is the user's): what the admission of a local peer costs.
set -eu

tool=$1 bin=$2 proto=$3 nclients=$4 ops=$5 keys=$6
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d /tmp/netcpu-XXXXXX)
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
bpid= spid=

cleanup() {
	[ -n "$spid" ] && kill "$spid" 2>/dev/null || true
	[ -n "$bpid" ] && kill "$bpid" 2>/dev/null && wait "$bpid" 2>/dev/null || true
	exec 3>&- 4<&- 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT

set -- --socket "$dir/sock" --shm-name "/netcpu-$$" --destroy-segment-on-exit
run_as=
if [ "$proto" = tcp ]; then
	set -- "$@" --tcp-listen "127.0.0.1:$port" --tcp-insecure-no-auth
elif [ "$proto" = http ]; then
	set -- "$@" --http-listen "127.0.0.1:$port" --http-insecure-no-auth
else
	uid=${NETCPU_UID:-65534}
	gid=$(id -g "$uid" 2>/dev/null || echo "$uid")
	chmod 0755 "$dir"
	set -- "$@" --http-listen "127.0.0.1:$port" --socket-group "$gid"
	run_as="setpriv --reuid=$uid --regid=$gid --clear-groups"
fi
if [ "$tool" = callgrind ]; then
	valgrind --tool=callgrind --callgrind-out-file="$dir/cg.%p" "$bin" "$@" \
		>"$dir/log" 2>&1 &
else
	"$bin" "$@" >"$dir/log" 2>&1 &
fi
bpid=$!
i=0
until /usr/bin/python3 -c "import socket; socket.create_connection(('127.0.0.1',$port)).close()" \
	2>/dev/null; do
	i=$((i + 1))
	[ $i -lt 600 ] || { cat "$dir/log" >&2; echo "broker did not start" >&2; exit 1; }
	sleep 0.1
done

mkfifo "$dir/in" "$dir/out"
$run_as /usr/bin/python3 "$here/netcpu-drive.py" "$proto" "$port" "$nclients" "$ops" "$keys" \
	<"$dir/in" >"$dir/out" &
exec 3>"$dir/in" 4<"$dir/out"
read -r line <&4 # ready

if [ "$tool" = callgrind ]; then
	callgrind_control -z "$bpid" >/dev/null
else
	tids=$(ls /proc/$bpid/task | sed 's/^/-p /')
	# shellcheck disable=SC2086
	strace -c -f -o "$dir/strace" $tids 2>/dev/null &
	spid=$!
	sleep 1 # attached
fi
echo go >&3
read -r line <&4 # done
total=$((nclients * ops))
if [ "$tool" = callgrind ]; then
	callgrind_control -d "$bpid" >/dev/null
	sleep 1
	f=$(ls -t "$dir"/cg.*.* 2>/dev/null | head -1)
	ir=$(sed -n 's/^summary: //p;s/^totals: //p' "$f" | head -1 | cut -d' ' -f1)
	echo "callgrind $proto $nclients $keys: $((ir / total)) instructions per op" \
		"($ir over $total ops)"
	[ -z "${NETCPU_KEEP:-}" ] || cp "$f" "$NETCPU_KEEP"
else
	kill -INT "$spid"
	wait "$spid" 2>/dev/null || true
	spid=
	calls=$(awk '$NF == "total" { print $4 }' "$dir/strace")
	echo "strace $proto $nclients $keys: $(awk "BEGIN { printf \"%.2f\", $calls / $total }")" \
		"system calls per op ($calls over $total ops)"
	cat "$dir/strace"
fi
echo go >&3
