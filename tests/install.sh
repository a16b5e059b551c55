#!/bin/sh
# SPDX-License-Identifier: MIT
#
# make install-check (run by make check): install as a package would, into a
# scratch DESTDIR, and check what landed where; link programs against the
# installed library; uninstall and check that exactly what install wrote is
# gone, empty directories it created included.
#
# Usage: tests/install.sh O SCRATCH   (O: the build directory, already built)
set -eu

o=$1
scratch=$2
make=${MAKE:-make}
top=$(pwd)
fails=0

fail() {
	echo "  FAIL    $*" >&2
	fails=$((fails + 1))
}

ok() {
	echo "  OK      $*"
}

# Quiet sub-makes; the variables of the calling make (CRASH_POINTS, WERROR)
# come through MAKEFLAGS, so nothing is rebuilt.
m() {
	"$make" --no-print-directory -s -C "$top" O="$o" "$@" >"$scratch.log" 2>&1 || {
		cat "$scratch.log" >&2
		echo "  FAIL    make $*" >&2
		exit 1
	}
}

rm -rf "$scratch" "$scratch.log"
mkdir -p "$scratch"
dest=$scratch/root
# A file of someone else's in a directory install writes to: it stays.
mkdir -p "$dest/usr/lib"
echo other >"$dest/usr/lib/other-package.so"

# ---- one version number ----
version=$(cat VERSION)
maj=${version%%.*}
rest=${version#*.}
min=${rest%%.*}
grep -q "^#define LOCAL_VERSION_MAJOR $maj\$" include/liblocal.h ||
	fail "include/liblocal.h: LOCAL_VERSION_MAJOR is not $maj (VERSION says $version)"
grep -q "^#define LOCAL_VERSION_MINOR $min\$" include/liblocal.h ||
	fail "include/liblocal.h: LOCAL_VERSION_MINOR is not $min (VERSION says $version)"
grep -q "^LIBLOCAL_$maj\.$min " libshm/liblocal.map ||
	fail "libshm/liblocal.map: no LIBLOCAL_$maj.$min node (VERSION says $version)"
grep -q "\"version\": \"$version\"" docs/openapi.json ||
	fail "docs/openapi.json: info.version is not $version"
[ "$("$o/shmlock" version | cut -d' ' -f2)" = "$version" ] ||
	fail "shmlock version does not print $version"
for page in docs/liblocal.3 docs/shmlock.1 docs/shmlockd.8; do
	grep -q "^\.TH .* \"shmlock $version\" " "$page" ||
		fail "$page: its .TH line does not say shmlock $version"
done
ok "VERSION ($version) agrees with the header, the symbol map, the OpenAPI document, the man pages"

# ---- LICENSE ----
if [ -f LICENSE ] && grep -q "MIT License" LICENSE &&
	grep -q "Permission is hereby granted, free of charge" LICENSE; then
	ok "LICENSE is the MIT license"
else
	fail "no MIT LICENSE file"
fi
if grep -L "SPDX-License-Identifier: MIT" cli/*.c libshm/*.c $(find broker -name "*.[ch]") include/*.h | grep .; then
	fail "the files above have no MIT SPDX header"
fi

# ---- install PREFIX=/usr ----
m install DESTDIR="$dest" PREFIX=/usr
pc=$dest/usr/lib/pkgconfig/liblocal.pc
if grep -qx "prefix=/usr" "$pc" && grep -qx "libdir=/usr/lib" "$pc" &&
	grep -qx "includedir=/usr/include" "$pc" && grep -qx "Version: $version" "$pc"; then
	ok "liblocal.pc says /usr"
else
	fail "liblocal.pc does not say /usr:"
	cat "$pc" >&2
fi
flags=$(PKG_CONFIG_SYSROOT_DIR=$dest PKG_CONFIG_LIBDIR=$dest/usr/lib/pkgconfig \
	pkg-config --cflags --libs liblocal | sed "s/ *$//")
[ "$flags" = "-I$dest/usr/include -L$dest/usr/lib -llocal" ] ||
	fail "pkg-config --cflags --libs liblocal: $flags"

unitdir=$(pkg-config --variable=systemdsystemunitdir systemd 2>/dev/null || true)
[ -n "$unitdir" ] || unitdir=/lib/systemd/system
if grep -q "^ExecStart=/usr/sbin/shmlockd " "$dest$unitdir/shmlockd.service" 2>/dev/null &&
	[ -f "$dest$unitdir/shmlockd.socket" ]; then
	ok "PREFIX=/usr: units in $unitdir, ExecStart=/usr/sbin/shmlockd"
else
	fail "PREFIX=/usr: no shmlockd.service (ExecStart=/usr/sbin/shmlockd) in $unitdir"
fi

# The operator's reading: README, guides, the network drop-in naming the
# installed broker.
docdir=$dest/usr/share/doc/shmlock
if [ -f "$docdir/README.md" ] && [ -f "$docdir/cluster.md" ] && [ -f "$docdir/security.md" ] &&
	grep -q "^ExecStart=/usr/sbin/shmlockd " "$docdir/examples/shmlockd-network.conf" 2>/dev/null; then
	ok "PREFIX=/usr: README, guides and the network drop-in in /usr/share/doc/shmlock"
else
	fail "PREFIX=/usr: docs missing from /usr/share/doc/shmlock"
fi

# Every function of the header has its man page link.
n=0
for f in $(sed -n 's/^LOCAL_API [^(]*[ *]\(local_[a-z_0-9]*\)(.*/\1/p' include/liblocal.h); do
	n=$((n + 1))
	[ "$(cat "$dest/usr/share/man/man3/$f.3" 2>/dev/null)" = ".so man3/liblocal.3" ] ||
		fail "no man page link $f.3 -> liblocal.3"
done
[ "$n" -gt 20 ] || fail "only $n functions found in include/liblocal.h"
ok "$n man page links (man local_lock finds liblocal(3))"

# ---- the static library exports the public API only ----
lib=$dest/usr/lib/liblocal.a
nm -g --defined-only "$lib" | awk 'NF == 3 { print $3 }' | sort >"$scratch/exported"
grep -o 'local_[a-z_0-9]*' libshm/liblocal.map | sort >"$scratch/public"
if cmp -s "$scratch/exported" "$scratch/public"; then
	ok "liblocal.a defines $(wc -l <"$scratch/public") global names, all of liblocal.map"
else
	fail "liblocal.a's global names differ from liblocal.map's (< archive, > map):"
	diff "$scratch/exported" "$scratch/public" | grep '^[<>]' | head -20 >&2
fi

cat >"$scratch/prog.c" <<'EOF'
#include <stdio.h>
#include <string.h>
#include <liblocal.h>

/* Names liblocal uses inside: they must not clash with the program's. */
int hex_encode(const char *s);
int hex_encode(const char *s)
{
	return (int)strlen(s);
}

int key_hash(void);
int key_hash(void)
{
	return 7;
}

int main(void)
{
	struct local_session_opts o;

	local_session_opts_init(&o);
	printf("%d %d %s\n", hex_encode("abc"), key_hash(), local_strerror(-LOCAL_EBROKER));
	return 0;
}
EOF
if cc -std=c11 -Wall -Werror -I"$dest/usr/include" "$scratch/prog.c" "$lib" -lpthread \
	-o "$scratch/prog-static" 2>"$scratch/cc.log"; then
	out=$("$scratch/prog-static")
	case $out in
	"3 7 "*) ok "a program with its own hex_encode() links liblocal.a statically" ;;
	*) fail "the static program printed: $out" ;;
	esac
else
	fail "a program with its own hex_encode() does not link liblocal.a:"
	head -5 "$scratch/cc.log" >&2
fi
# shellcheck disable=SC2086
if cc -std=c11 -Wall -Werror "$scratch/prog.c" $flags -Wl,-rpath,"$dest/usr/lib" \
	-o "$scratch/prog-shared" 2>"$scratch/cc.log" && "$scratch/prog-shared" >/dev/null; then
	ok "the same program links and runs with pkg-config's flags (shared)"
else
	fail "the program does not link or run against liblocal.so:"
	head -5 "$scratch/cc.log" >&2
fi

# The README's C snippet builds, and checks what every call returns.
awk '/^```c$/ { on = 1; next } /^```$/ { on = 0 } on' README.md >"$scratch/readme.c"
{
	sed -n '/^#include/p' "$scratch/readme.c"
	echo "int main(void) {"
	sed '/^#include/d' "$scratch/readme.c"
	echo "}"
} >"$scratch/readme-main.c"
if cc -std=c11 -Wall -Wextra -Werror -I"$dest/usr/include" "$scratch/readme-main.c" "$lib" \
	-lpthread -o "$scratch/readme" 2>"$scratch/cc.log"; then
	ok "the README's C snippet builds"
else
	fail "the README's C snippet does not build:"
	head -5 "$scratch/cc.log" >&2
fi
# A call whose result is dropped: local_*() at the start of a statement.
if grep -E '^[[:space:]]*local_[a-z_]+\(' "$scratch/readme.c"; then
	fail "the README's C snippet ignores the result of the calls above"
fi

# ---- uninstall: exactly what install wrote ----
m uninstall DESTDIR="$dest" PREFIX=/usr
left=$(cd "$dest" && find . -mindepth 1 | sort | tr '\n' ' ')
if [ "$left" = "./usr ./usr/lib ./usr/lib/other-package.so " ]; then
	ok "uninstall removed every file and directory install made, and nothing else"
else
	fail "after uninstall, left: $left"
fi

# ---- install PREFIX=/usr/local ----
dest2=$scratch/root2
m install DESTDIR="$dest2" PREFIX=/usr/local
grep -qx "prefix=/usr/local" "$dest2/usr/local/lib/pkgconfig/liblocal.pc" ||
	fail "PREFIX=/usr/local: liblocal.pc does not say /usr/local"
if grep -q "^ExecStart=/usr/local/sbin/shmlockd " \
	"$dest2/usr/local/lib/systemd/system/shmlockd.service" 2>/dev/null &&
	[ ! -e "$dest2/lib" ] && [ ! -e "$dest2/usr/lib" ]; then
	ok "PREFIX=/usr/local: units in /usr/local/lib/systemd/system, nothing outside PREFIX"
else
	fail "PREFIX=/usr/local: units not (only) under /usr/local/lib/systemd/system"
	(cd "$dest2" && find . -name 'shmlockd*') >&2
fi
m uninstall DESTDIR="$dest2" PREFIX=/usr/local
[ ! -e "$dest2" ] || fail "PREFIX=/usr/local: after uninstall, left: $(cd "$dest2" && find .)"

if [ "$fails" -ne 0 ]; then
	echo "install-check: $fails failure(s)" >&2
	exit 1
fi
rm -rf "$scratch" "$scratch.log"
echo "  OK      install-check"
