#!/bin/sh
# doc-map-check.sh [MAP]: list the tracked source files that docs/architecture.md
# (or MAP) does not name, so the map stays a map of every file. Exit 1 if
# any, 2 if the map cannot be read.
#
# A file counts as named when the map has
#   - its path (`broker/core/loop.c`), or
#   - on one line, its folder (`broker/core/`, or a path in it) and its name in
#     backquotes (`loop.c`): a table row for several files of one folder, or
#   - its folder followed by /* (`tests/fuzz/corpus/*`): every file under it,
#     for folders of data rather than code.
# Run from anywhere inside the work tree; folders are those of the product,
# its tests, scripts and packaging.
set -eu

top=$(git rev-parse --show-toplevel)
map=${1:-$top/docs/architecture.md}
[ -r "$map" ] || { echo "doc-map-check: cannot read $map" >&2; exit 2; }
cd "$top"

git ls-files -- libshm broker cli include tests python scripts systemd ui debian |
	awk -v map="$map" '
	BEGIN {
		while ((getline line < map) > 0)
			doc[++n] = line
		close(map)
	}
	function named(f,    d, b, i, s, line) {
		d = f; sub(/[^\/]*$/, "", d)	# folder, with its slash
		b = substr(f, length(d) + 1)
		for (i = 1; i <= n; i++) {
			line = doc[i]
			if (index(line, f))
				return 1
			# a folder named with /*, or any folder above the file
			for (s = d; s != ""; sub(/[^\/]*\/$/, "", s))
				if (index(line, "`" s "*`"))
					return 1
			if (index(line, "`" b "`") && (index(line, "`" d) || index(line, " " d) || index(line, "(" d)))
				return 1
		}
		return 0
	}
	{ if (!named($0)) { print; missing++ } }
	END { exit missing > 0 }
	'
