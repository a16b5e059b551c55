#!/bin/sh
# SPDX-License-Identifier: MIT
#
# make deb-check (run by make check): build the Debian packages out of tree,
# check them with lintian, install them on this machine, run the installed
# broker on private paths (no systemd needed), take a lock with the installed
# CLI, with a program built against the installed liblocal-dev and with the
# installed Python binding (when it was built), then purge the packages and
# check that nothing is left behind. See docs/packaging.md.
#
# Usage: tests/deb-check.sh [WORKDIR]   (as root; WORKDIR default: a new /tmp dir)
# Needs: scripts/install-deps.sh deb (the build dependencies and lintian).
set -eu

top=$(pwd)
# Debian's tools only: a python3.11 of pyenv (or anything else in
# /usr/local or ~) ahead in PATH has not Debian's modules, and a package
# must be built and tested with what the packages depend on.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
work=${1:-$(mktemp -d /tmp/shmlock-deb-check-XXXXXX)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
fails=0
broker_pid=
installed=
run=
shm=/shmlock-deb-check-$$
version=$(cat VERSION)
# The packages, in the order they are purged (dependents first).
PKGS="python3-shmlock shmlock liblocal-dev shmlockd liblocal0"

fail() {
	echo "  FAIL    $*" >&2
	fails=$((fails + 1))
}

ok() {
	echo "  OK      $*"
}

die() {
	echo "  FAIL    $*" >&2
	exit 1
}

state() { # the dpkg status of package $1: installed, config-files, not-installed
	dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || echo not-installed
}

stop_broker() {
	[ -n "$broker_pid" ] || return 0
	kill -TERM "$broker_pid" 2>/dev/null || true
	# Deadline 10 s, then SIGKILL: the check must end.
	i=0
	while kill -0 "$broker_pid" 2>/dev/null && [ $i -lt 100 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	kill -KILL "$broker_pid" 2>/dev/null || true
	wait "$broker_pid" 2>/dev/null || true
	broker_pid=
}

purge() {
	# shellcheck disable=SC2086
	dpkg --purge $PKGS >"$work/purge.log" 2>&1
}

cleanup() {
	stop_broker
	if [ -n "$installed" ]; then
		purge || cat "$work/purge.log" >&2
	fi
	# The keeper of a broker killed above exits once its socket is gone.
	[ -z "$run" ] || rm -rf "$run"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

[ "$(id -u)" = 0 ] || die "run as root: the check installs and purges packages"
# One check at a time on a machine: two would install and purge the same
# packages under each other.
exec 9>/run/lock/shmlock-deb-check.lock
flock -w 600 9 || die "another deb-check held /run/lock/shmlock-deb-check.lock for 10 minutes"
for p in $PKGS; do
	case $(state "$p") in
	not-installed) ;;
	*) die "$p is on this machine already ($(state "$p")): the check would remove it; purge it first" ;;
	esac
done

# ---- build, out of tree ----
# The files of the work tree (committed or not, less what .gitignore ignores):
# what a developer runs the check on is what is built; the tree stays clean.
src=$work/shmlock-$version
rm -rf "$src"
mkdir -p "$src"
if git -C "$top" rev-parse --git-dir >/dev/null 2>&1; then
	# shellcheck disable=SC2016
	git -C "$top" ls-files -co --exclude-standard -z |
		xargs -0 sh -c 'for f; do [ -e "$f" ] || [ -L "$f" ] && printf "%s\0" "$f"; done' sh |
		tar -C "$top" --null -T - -cf - | tar -C "$src" -xf -
else
	tar -C "$top" --exclude=./build -cf - . | tar -C "$src" -xf -
fi
start=$(date +%s)
if (cd "$src" && dpkg-buildpackage -us -uc -b -j2) >"$work/build.log" 2>&1; then
	ok "dpkg-buildpackage -us -uc -b ($(($(date +%s) - start)) s)"
else
	tail -40 "$work/build.log" >&2
	die "dpkg-buildpackage failed (log: $work/build.log)"
fi

debs=
for p in $PKGS; do
	f=$(find "$work" -maxdepth 1 -name "${p}_${version}_*.deb" | head -1)
	if [ -n "$f" ]; then
		debs="$debs $f"
	elif [ "$p" = python3-shmlock ] && [ ! -f python/pyproject.toml ]; then
		echo "  SKIP    python3-shmlock: no python/pyproject.toml in this tree"
	else
		fail "no ${p}_${version}_*.deb built"
	fi
done
[ "$fails" = 0 ] || exit 1

# ---- lintian, at its default level: errors and warnings fail ----
if lintian --fail-on error,warning "$work/shmlock_${version}_"*.changes >"$work/lintian.log" 2>&1; then
	ok "lintian: no error or warning ($(grep -c '^[EW]:' "$work/lintian.log" || true) tags)"
else
	grep -v 'root privileges' "$work/lintian.log" >&2 || true
	fail "lintian reports errors or warnings"
fi

# ---- install ----
# What the file system holds before: after the purge, nothing may be new.
snap() {
	find /etc /usr /lib /var/lib/systemd /var/lib/dpkg/info /run/shmlock \
		-xdev 2>/dev/null | sort
}
snap >"$work/before.txt"
installed=1
# apt resolves the dependencies (systemd for systemd-sysusers, the libraries).
# shellcheck disable=SC2086
if DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $debs \
	>"$work/install.log" 2>&1; then
	ok "apt-get install:$(for d in $debs; do printf ' %s' "${d##*/}"; done)"
else
	tail -30 "$work/install.log" >&2
	die "apt-get install failed (log: $work/install.log)"
fi
for p in $PKGS; do
	[ "$(state "$p")" = installed ] || continue
	dpkg -L "$p" >"$work/$p.list"
done

# What the maintainer scripts did: the user, the socket enabled, no broker.
if getent passwd shmlock >/dev/null && getent group shmlock >/dev/null; then
	ok "postinst created the user and group shmlock (systemd-sysusers)"
else
	fail "no user or group shmlock after install"
fi
wants=/etc/systemd/system/sockets.target.wants
if [ "$(readlink "$wants/shmlockd.socket")" = /lib/systemd/system/shmlockd.socket ]; then
	ok "shmlockd.socket enabled ($wants/shmlockd.socket)"
else
	fail "shmlockd.socket is not enabled"
fi
for u in shmlockd-http.socket shmlockd-tcp.socket shmlockd-consul.socket \
	shmlockd-metrics.socket; do
	[ ! -e "$wants/$u" ] || fail "$u enabled: it opens a listener the administrator did not ask for"
done
[ ! -e /etc/systemd/system/multi-user.target.wants/shmlockd.service ] ||
	fail "shmlockd.service enabled: it is socket-activated"
running() { # pids whose executable is the installed broker
	for d in /proc/[0-9]*; do
		[ "$(readlink "$d/exe" 2>/dev/null)" = /usr/sbin/shmlockd ] && echo "${d#/proc/}"
	done
	return 0
}
if [ -z "$(running)" ]; then
	ok "the install started no broker"
else
	fail "a broker runs from /usr/sbin/shmlockd after install: $(running)"
fi

# Files where the packages say (the man page links are symlinks to liblocal.3).
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
for f in /usr/lib/$ma/liblocal.so.0 /usr/lib/$ma/liblocal.so /usr/lib/$ma/liblocal.a \
	/usr/lib/$ma/pkgconfig/liblocal.pc /usr/include/liblocal.h /usr/sbin/shmlockd \
	/usr/bin/shmlock /usr/share/man/man1/shmlock.1.gz /usr/share/man/man8/shmlockd.8.gz \
	/usr/share/man/man3/liblocal.3.gz /usr/share/man/man3/local_lock.3.gz \
	/usr/share/bash-completion/completions/shmlock /usr/lib/sysusers.d/shmlock.conf \
	/lib/systemd/system/shmlockd.service /lib/systemd/system/shmlockd.socket; do
	[ -e "$f" ] || fail "$f is not installed"
done
grep -q '^ExecStart=/usr/sbin/shmlockd ' /lib/systemd/system/shmlockd.service ||
	fail "shmlockd.service does not run /usr/sbin/shmlockd"
# The operator's reading (dh_compress gzips the larger ones).
doc=/usr/share/doc/shmlockd
for f in README.md cluster.md security.md; do
	[ -e "$doc/$f" ] || [ -e "$doc/$f.gz" ] || fail "$doc/$f is not installed"
done
zcat -f "$doc/examples/shmlockd-network.conf"* 2>/dev/null | grep -q '^ExecStart=/usr/sbin/shmlockd ' ||
	fail "$doc/examples/shmlockd-network.conf does not run /usr/sbin/shmlockd"
ok "files in place: library, header, .pc, units, sysusers.d, man pages 1 3 8, completion, docs"

# ---- the installed broker, on private paths, as the user shmlock ----
# Its own directory, which the user shmlock can reach ($work is root's 0700).
run=$(mktemp -d /tmp/shmlock-deb-run-XXXXXX)
chown shmlock:shmlock "$run"
chmod 0755 "$run"
sock=$run/shmlockd.sock
setpriv --reuid=shmlock --regid=shmlock --init-groups \
	/usr/sbin/shmlockd --socket "$sock" --shm-name "$shm" --destroy-segment-on-exit \
	--log-level warning 2>"$work/broker.log" &
broker_pid=$!
i=0
until /usr/bin/shmlock status -socket="$sock" >/dev/null 2>&1; do
	kill -0 "$broker_pid" 2>/dev/null || { cat "$work/broker.log" >&2; die "the installed broker exited"; }
	[ $i -lt 100 ] || die "the installed broker did not answer on $sock within 10 s"
	sleep 0.1
	i=$((i + 1))
done
ok "/usr/sbin/shmlockd runs as shmlock on $sock"

# ---- a lock with the installed CLI ----
# CHILD is shell text, run as $SHELL -c (shmlock(1), -shell).
# shellcheck disable=SC2016
out=$(/usr/bin/shmlock lock -socket="$sock" deb/check 'echo "$SHMLOCK_HELD $SHMLOCK_KEY"') ||
	fail "shmlock lock failed"
if [ "$out" = "true deb/check" ]; then
	ok "/usr/bin/shmlock took deb/check ($out)"
else
	fail "shmlock lock ran its child with: '$out'"
fi

# ---- a program built against the installed liblocal-dev ----
cat >"$work/prog.c" <<'EOF'
#include <liblocal.h>
#include <stdio.h>

int main(void)
{
	LOCAL_OPTS(local_acquire_opts, ao, .timeout_ms = 5000);
	local_session *s;
	uint64_t token;
	int err;

	/* NULL options: the socket from $SHMLOCK_SOCKET. */
	err = local_session_open(NULL, &s);
	if (!err)
		err = local_lock(s, "deb/c", &ao, &token);
	if (err) {
		fprintf(stderr, "liblocal: %s\n", local_strerror(err));
		return 1;
	}
	printf("token %llu\n", (unsigned long long)token);
	local_release(s, "deb/c");
	local_session_close(s);
	return 0;
}
EOF
# shellcheck disable=SC2046
if cc -o "$work/prog" "$work/prog.c" $(pkg-config --cflags --libs liblocal) 2>"$work/cc.log"; then
	# /lib/$ma or /usr/lib/$ma: the same directory on a merged-/usr system.
	if ldd "$work/prog" | grep -q "liblocal.so.0 => .*lib/$ma/liblocal.so.0" &&
		out=$(SHMLOCK_SOCKET=$sock "$work/prog" 2>&1) && [ "${out%% *}" = token ]; then
		ok "a program linked with pkg-config liblocal took deb/c ($out)"
	else
		ldd "$work/prog" >&2
		fail "the program built against liblocal-dev did not take deb/c: $out"
	fi
else
	cat "$work/cc.log" >&2
	fail "cannot build a program with pkg-config --cflags --libs liblocal"
fi

# ---- the installed Python binding ----
if [ "$(state python3-shmlock)" = installed ]; then
	# From /, without SHMLOCK_LIBLOCAL: the module of the package, over the
	# liblocal.so.0 of liblocal0 (python3-shmlock's dependency), with its C
	# accelerator (python/ext/) in use.
	if out=$(cd / && env -u SHMLOCK_LIBLOCAL -u PYTHONPATH SHMLOCK_SOCKET="$sock" /usr/bin/python3 -c '
import shmlock, shmlock._fast
assert shmlock.__file__.startswith("/usr/lib/python3/dist-packages/shmlock/"), shmlock.__file__
with shmlock.lock("deb/python", timeout=5) as hold:
    libs = {l.split()[-1] for l in open("/proc/self/maps") if "/liblocal.so" in l}
    assert libs and all(p.startswith(("/usr/lib/", "/lib/")) for p in libs), libs
    # The package ships the accelerator, and lock() goes through it.
    assert shmlock.accelerator() == "_fast", shmlock.accelerator()
    assert shmlock._fast.__file__.startswith("/usr/lib/python3/dist-packages/shmlock/")
    assert isinstance(hold, shmlock._fast.Hold), type(hold)
    print("token", hold.token, "through", shmlock.accelerator())
' 2>&1); then
		ok "the installed binding (python3 -c import shmlock) took deb/python ($out)"
	else
		fail "the installed Python binding did not take deb/python: $out"
	fi
fi

stop_broker
[ ! -e "$sock" ] || fail "the broker left its socket $sock"
[ ! -e "/dev/shm${shm}" ] || fail "the broker left /dev/shm$shm"

# ---- purge: nothing left behind ----
if purge; then
	installed=
	ok "dpkg --purge $PKGS"
else
	cat "$work/purge.log" >&2
	fail "dpkg --purge failed"
fi
for p in $PKGS; do
	[ "$(state "$p")" = not-installed ] || fail "$p is $(state "$p") after purge"
done
left=0
for p in $PKGS; do
	[ -f "$work/$p.list" ] || continue
	while IFS= read -r f; do
		# "/." and the merged-/usr symlinks (/lib -> usr/lib) are the system's.
		[ "$f" != /. ] && [ ! -L "$f" ] || [ ! -d "$f" ] || continue
		if [ -d "$f" ]; then
			# A directory stays only when another package owns it too.
			[ -e "$f" ] && ! dpkg-query -S "$f" >/dev/null 2>&1 &&
				{ fail "$p left the directory $f"; left=$((left + 1)); }
		elif [ -e "$f" ] || [ -L "$f" ]; then
			fail "$p left $f"
			left=$((left + 1))
		fi
	done <"$work/$p.list"
done
[ "$left" = 0 ] && ok "every path of dpkg -L is gone (or a directory another package owns)"
snap >"$work/after.txt"
new=$(comm -13 "$work/before.txt" "$work/after.txt")
if [ -z "$new" ]; then
	ok "no new path under /etc /usr /lib /var/lib/systemd /var/lib/dpkg/info /run/shmlock"
else
	echo "$new" | head -20 >&2
	fail "new paths after purge (above)"
fi
# Debian policy: a purge leaves the system user (files may still be owned by it).
getent passwd shmlock >/dev/null && echo "  NOTE    the user shmlock stays after purge, as Debian policy wants"

if [ "$fails" = 0 ]; then
	rm -rf "$work"
	echo "deb-check: 1 passed, 0 failed"
else
	echo "deb-check: 0 passed, 1 failed ($fails checks; logs in $work)"
	exit 1
fi
