#!/bin/sh
# SPDX-License-Identifier: MIT
# Build dflockd-client-ts (the TypeScript client of dflockd) into DIR, for
# tests/it_tcp_signal.c: SHMLOCK_DFLOCKD_TS=DIR/dist/client.js. The client is
# not ours to ship, so it is fetched and built here, never committed.
#
#   scripts/dflockd-client-ts.sh DIR [GIT-URL-OR-DIR [REV]]
#
# Defaults: the project's GitHub repository at v1.11.0 (the release whose
# publish() and SignalConnection speak the signal commands). Needs git, node
# and npm (TypeScript is installed into DIR).
set -eu
dir=${1:?usage: $0 DIR [GIT-URL-OR-DIR [REV]]}
src=${2:-https://github.com/mtingers/dflockd-client-ts}
rev=${3:-v1.11.0}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
rm -rf "$dir/src.git"
git clone --quiet --no-checkout "$src" "$dir/src.git"
git -C "$dir/src.git" show "$rev:src/client.ts" >"$dir/client.ts"
rm -rf "$dir/src.git"
cd "$dir"
[ -x node_modules/.bin/tsc ] ||
	npm install --silent --no-audit --no-fund --no-save typescript@5 >/dev/null
echo '{"type": "module"}' >package.json # emit an ES module, as the package does
# The client's own types want @types/node; the JavaScript is emitted anyway.
node_modules/.bin/tsc --target es2022 --module nodenext --moduleResolution nodenext \
	--skipLibCheck --outDir dist client.ts >/dev/null || true
[ -s dist/client.js ] || { echo "$0: no dist/client.js built" >&2; exit 1; }
cp package.json dist/package.json
echo "$dir/dist/client.js"
