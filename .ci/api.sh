#!/usr/bin/env bash
# .ci/api.sh: the exported API of every public package (the root module's
# and the extra modules'), one declaration a line, compared with the
# committed .ci/api.txt. A change of the API fails CI until the golden file
# is updated on purpose:
#
#   bash .ci/api.sh -update
#
# apicheck also fails when an exported declaration names an internal
# package, or a package exports a variable other than an error sentinel.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(. registry watchdog scripts adapters/bsmredislock adapters/goredsync extra/lockwatchprom extra/lockwatchotel)
got=$(mktemp)
trap 'rm -f "$got"' EXIT
go run ./.ci/apicheck "${pkgs[@]}" >"$got"
if [ "${1:-}" = "-update" ]; then
	cp "$got" .ci/api.txt
	echo "api: .ci/api.txt updated"
	exit 0
fi
if ! diff -u .ci/api.txt "$got"; then
	echo "api: the exported API changed (diff above: - committed, + now)."
	echo "api: if that is intended, run: bash .ci/api.sh -update, and say so in CHANGELOG.md"
	exit 1
fi
echo "api: unchanged ($(wc -l <"$got") declarations)"
