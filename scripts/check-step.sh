#!/bin/sh
# SPDX-License-Identifier: MIT
#
# One step of make check: run COMMAND with its output (stdout and stderr)
# in LOGDIR/NAME.log, say on one line whether it passed and how long it
# took (wall and CPU seconds), and on failure print its log whole. Steps
# run side by side (Makefile, check), so their output is never interleaved:
# each one's is a file. The summary line also goes to LOGDIR/times, which
# `make check` prints at the end.
#
# Usage: scripts/check-step.sh LOGDIR NAME COMMAND [ARG...]
#        scripts/check-step.sh --summary LOGDIR   (the table, and the total
#        since LOGDIR/start was written)
set -u

if [ "$1" = --summary ]; then
	dir=$2
	echo
	echo "make check, step by step (logs in $dir/):"
	sed 's/^/  /' "$dir/times" 2>/dev/null
	awk -v s="$(cat "$dir/start")" -v e="$(date +%s)" -v l="$(cut -d' ' -f1-3 /proc/loadavg)" \
		'BEGIN { printf "  total %d min %02d s; load averages %s at the end\n",
			(e - s) / 60, (e - s) % 60, l }'
	exit 0
fi

dir=$1
name=$2
shift 2
mkdir -p "$dir"
log=$dir/$name.log
now() { date +%s.%N; }
# The CPU time of this shell's waited-for children (`times`, second line):
# the step and every process it waited for, not a broker or client that was
# reparented to init.

start=$(now)
echo "  START   $name ($(date -u +%H:%M:%S))"
"$@" >"$log" 2>&1 </dev/null
rc=$?
end=$(now)
# `times` in this shell, not in a $(...) subshell, which has no children.
times >"$dir/.$name.times"
cpu=$(sed -n '2{s/m/ /g;s/s//g;p;}' "$dir/.$name.times" | awk '{ print $1 * 60 + $2 + $3 * 60 + $4 }')
rm -f "$dir/.$name.times"
line=$(awk -v n="$name" -v s="$start" -v e="$end" -v c="$cpu" -v l="$(cut -d' ' -f1 /proc/loadavg)" \
	'BEGIN { printf "%-16s %7.1f s wall %7.1f s CPU  (load %s at the end)", n, e - s, c, l }')
if [ $rc = 0 ]; then
	echo "  PASS    $line"
	echo "PASS $line" >>"$dir/times"
else
	echo "===== $name failed (exit $rc); its output ($log):" >&2
	cat "$log" >&2
	echo "===== end of $name's output" >&2
	echo "  FAIL    $line" >&2
	echo "FAIL $line" >>"$dir/times"
fi
exit $rc
