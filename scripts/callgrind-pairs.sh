#!/bin/sh
# Instructions per acquire+release under callgrind.
#   scripts/callgrind-pairs.sh BUILD_DIR [N] [CASES...]
# BUILD_DIR holds liblocal.a and shmlockd (e.g. build/rel from
# `make O=build/rel build/rel/liblocal.a build/rel/shmlockd`).
# Prints "case instructions-per-pair" for each case. contendedP (P processes
# on one key) counts a contended lock+release cycle: run it on
# one CPU, as section 2's steadiest row does:
#   taskset -c 1 scripts/callgrind-pairs.sh build/rel 2000 contended8
set -e
O=${1:?build dir}
N=${2:-2000}
shift 2 || shift $#
CASES=${*:-lock watched sem semheld posixsem}
BIN=$O/callgrind-pairs
cc -O2 -g -std=gnu11 -D_GNU_SOURCE -Iinclude -Ilibshm scripts/callgrind-pairs.c $O/liblocal.a \
	-o "$BIN" -lpthread
for c in $CASES; do
	out=$O/callgrind.$c.out
	rm -f "$out"*
	valgrind -q --tool=callgrind --collect-atstart=no --trace-children=no \
		--callgrind-out-file="$out.%p" "$BIN" "$(realpath "$O/shmlockd")" "$c" "$N" >/dev/null
	f=$(grep -l "^desc: Trigger: Client Request: $c" "$out".* | head -1)
	tot=$(callgrind_annotate "$f" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
	echo "$c $(awk -v t="$tot" -v n="$N" 'BEGIN { printf "%.1f", t / n }') ($f)"
done
