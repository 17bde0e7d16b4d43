#!/usr/bin/env bash
# .ci/consumer.sh: the root module and the extra modules install as a user
# gets them. It writes a file-system module proxy from this checkout that
# serves github.com/lockwatch/lockwatch, .../extra/lockwatchprom and
# .../extra/lockwatchotel at v0.1.0 (.ci/modproxy). Then, in a copy of the
# module .ci/consumer in a temporary directory, which requires the three at
# v0.1.0 and replaces nothing, it builds and runs an application that uses
# the root (registry, watchdog, both adapters), lockwatchprom and
# lockwatchotel, with GOPROXY=file://<that proxy>,<the usual proxy> for the
# third-party modules. The modules github.com/lockwatch/lockwatch/... are
# removed from the module cache before and after, so that the build gets
# them from the proxy written here and no later build finds these copies.
# It first checks that the extra modules import no internal package of the
# root module. Run it from anywhere: bash .ci/consumer.sh
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
version=v0.1.0
cache=$(go env GOMODCACHE)

# forget removes this project's modules from the module cache.
forget() {
	local d
	for d in "$cache/github.com/lockwatch" "$cache/cache/download/github.com/lockwatch"; do
		if [ -e "$d" ]; then
			chmod -R u+w "$d"
			rm -rf "$d"
		fi
	done
}
work=$(mktemp -d)
trap 'forget; rm -rf "$work"' EXIT
forget

# A module cannot rely on another module's internal packages (the go
# command lets the extra modules import them, as their paths share a
# prefix, but they are no API).
if grep -rn --include='*.go' '"github.com/lockwatch/lockwatch/internal/' extra/; then
	echo "the extra modules import internal packages of the root module" >&2
	exit 1
fi

go run ./.ci/modproxy -o "$work/proxy" -version "$version" . extra/lockwatchprom extra/lockwatchotel

cp -R "$root/.ci/consumer" "$work/app"
if ! grep -q "^	github.com/lockwatch/lockwatch $version\$" "$work/app/go.mod"; then
	echo ".ci/consumer/go.mod does not require github.com/lockwatch/lockwatch $version" >&2
	exit 1
fi
if grep -q '^replace' "$work/app/go.mod"; then
	echo ".ci/consumer/go.mod has a replace" >&2
	exit 1
fi

(
	cd "$work/app"
	export GOWORK=off GOTOOLCHAIN=local
	# The go command indexes a module version's files once, in GOCACHE,
	# and trusts the index from then on: a version is immutable. This one
	# is not (v0.1.0 written from each checkout), and a later checkout's
	# new file went unseen ("undefined: runWait", run 26). No index.
	export GODEBUG="${GODEBUG:+$GODEBUG,}goindex=0"
	export GOPROXY="file://$work/proxy,$(go env GOPROXY)"
	export GONOSUMDB=github.com/lockwatch/lockwatch # not in the checksum database
	export GOFLAGS="$(go env GOFLAGS) -mod=mod"
	go build -o "$work/consumer" .
	echo "modules used:"
	go list -m -f '{{.Path}} {{.Version}} {{.Dir}}' \
		github.com/lockwatch/lockwatch \
		github.com/lockwatch/lockwatch/extra/lockwatchprom \
		github.com/lockwatch/lockwatch/extra/lockwatchotel |
		tee "$work/used"
	while read -r path v dir; do
		if [ "$v" != "$version" ] || [ "$dir" != "$cache/$path@$version" ]; then
			echo "$path $v comes from $dir, not from the proxy at $version" >&2
			exit 1
		fi
	done <"$work/used"
	go mod verify
)
"$work/consumer"
