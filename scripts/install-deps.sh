#!/bin/sh
# Install the Debian packages shmlock builds and tests with, when they are
# missing. Does nothing when everything is present; needs root otherwise.
set -eu

# spin for the protocol model (make model), valgrind for make valgrind;
# clang and its runtime for the libFuzzer targets; systemd for the unit tests
# (systemd-socket-activate, systemd-analyze verify, systemd-sysusers) and
# man-db so that verify checks Documentation=man:shmlockd(8); libcurl for the
# HTTP API tests and benchmark (a real HTTP client); OpenSSL for the TCP
# protocol's TLS (and the openssl tool its tests make certificates with).
PKGS="build-essential pkg-config liburcu-dev libsystemd-dev libcunit1-dev \
libmicrohttpd-dev libjansson-dev curl jq clang libclang-rt-14-dev systemd man-db \
spin valgrind libcurl4-openssl-dev libssl-dev openssl"

missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" != 0 ]; then
	echo "missing packages:$missing" >&2
	echo "run as root, or: sudo apt-get install -y$missing" >&2
	exit 1
fi
echo "installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
