#!/bin/sh
# Install the Debian packages shmlock needs, when they are missing. Does
# nothing when everything is present; needs root otherwise.
#
# Usage: scripts/install-deps.sh [run|deb|all]
#   run  what building and running need (make run): compiler, headers and
#        libraries of the broker, the CLI and liblocal
#   deb  that and what building the Debian packages needs (make deb,
#        make deb-check: debian/control's Build-Depends, and lintian)
#   all  (default) all of these and the test toolchain (make check, make bench)
set -eu

# Building and running: liburcu (broker), libsystemd (sd_notify, socket
# activation), libmicrohttpd and jansson (HTTP API, CLI's -json), OpenSSL
# (TLS on the TCP protocol's listener); libcurl (the broker is an etcd client
# for cluster keys, docs/cluster.md).
RUN_PKGS="build-essential pkg-config liburcu-dev libsystemd-dev libmicrohttpd-dev \
libjansson-dev libssl-dev \
libcurl4-openssl-dev"

# Testing: CUnit; spin for the protocol model (make model), valgrind for make
# valgrind; clang and its runtime for the libFuzzer targets; systemd for the
# unit tests (systemd-socket-activate, systemd-analyze verify,
# systemd-sysusers) and man-db so that verify checks
# Documentation=man:shmlockd(8); libcurl for the HTTP API tests and
# benchmark (a real HTTP client); curl and jq for the CLI and HTTP tests;
# the openssl tool, with which the TCP tests make their TLS certificates;
# etcd-server, a real etcd cluster for the cluster-key tests, and
# etcd-client (etcdctl) for scripts/cluster-bench.sh.
TEST_PKGS="libcunit1-dev curl jq clang libclang-rt-14-dev systemd man-db spin valgrind \
libcurl4-openssl-dev openssl \
etcd-server etcd-client"
# chromium: the web view's tests drive Debian's headless Chromium (tests/it_ui.c, tests/ui/cdp.py).
TEST_PKGS="$TEST_PKGS chromium"
# python3-consul: a real Consul client against the Consul-compatible API (tests/it_consul.c).
TEST_PKGS="$TEST_PKGS python3-consul"
# python3-pytest: the Python binding's tests (make python-check; asyncio without a plugin);
# python3-dev: the headers its C accelerator builds with (python/ext/, make python-check, make bench).
TEST_PKGS="$TEST_PKGS python3-pytest python3-dev"
# cppcheck: the static check in make check (make static-check); clang-format for make lint.
TEST_PKGS="$TEST_PKGS cppcheck clang-format"

# Debian packages (debian/, make deb-check): debhelper (dh_installsysusers
# needs 13.11's sequence), dh-python and pybuild's pyproject plugin with
# setuptools for python3-shmlock, python3-all-dev for its C accelerator
# (every supported Python's headers), fakeroot and dpkg-dev for
# dpkg-buildpackage, lintian for the policy check.
DEB_PKGS="debhelper dh-python python3-all python3-all-dev pybuild-plugin-pyproject python3-setuptools \
fakeroot dpkg-dev lintian"

case "${1:-all}" in
run) PKGS=$RUN_PKGS ;;
deb) PKGS="$RUN_PKGS $DEB_PKGS" ;;
all) PKGS="$RUN_PKGS $TEST_PKGS $DEB_PKGS" ;;
*)
	echo "usage: $0 [run|deb|all]" >&2
	exit 2
	;;
esac

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
