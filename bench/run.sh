#!/usr/bin/env bash
# Runs the shmarena benchmark suite: map ops against in-process floors,
# bbolt and Redis (warmed processes, 3 alternating rounds, medians with
# ranges); read hit and Store for values of 64 B to 256 KiB against a Go
# map behind RWMutex, ristretto v2, otter v2 and Redis; the ring against a
# Unix socket, a pipe and Redis Streams;
# per-operation latency distributions; a new worker's first-touch cost
# with and without Arena.Prefault (and on 2 MiB pages when a tmpfs with
# huge=always can be mounted); and the map's scaling curves. Writes
# bench/results.md and the SVG charts beside it. About 10-15 minutes;
# `run.sh -short` (what CI runs) takes under one. Extra arguments go to
# shmbench (see `go run ./cmd/shmbench -h`), e.g. `-only map,latency`.
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v redis-server >/dev/null 2>&1; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "installing redis-server with apt-get" >&2
		apt-get update -qq >/dev/null && apt-get install -y -qq redis-server >/dev/null ||
			echo "could not install redis-server: the Redis peers will be skipped" >&2
	else
		echo "redis-server not found: the Redis peers will be skipped" >&2
	fi
fi

tags=""
if [ "${SHMBENCH_LMDB:-1}" = 1 ] && [ -f cmd/shmbench/lmdb.go ]; then
	if [ ! -f /usr/include/lmdb.h ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		apt-get install -y -qq liblmdb-dev >/dev/null 2>&1 || true
	fi
	[ -f /usr/include/lmdb.h ] && tags="-tags=lmdb"
fi

tmp="$(mktemp -d)"
bin="$tmp/shmbench"
huge=()
cleanup() {
	if mountpoint -q "$tmp/huge" 2>/dev/null; then umount "$tmp/huge" || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT
# Huge pages for the first-touch section: a private tmpfs with
# huge=always, when we may mount one (root); else that row is skipped and
# results.md says why. SHMBENCH_HUGEDIR names one you mounted yourself.
if [ -n "${SHMBENCH_HUGEDIR:-}" ]; then
	huge=(-hugedir "$SHMBENCH_HUGEDIR")
elif [ "$(id -u)" = 0 ] && mkdir -p "$tmp/huge" &&
	mount -t tmpfs -o huge=always,size=2g,mode=0700 shmbench-huge "$tmp/huge" 2>/dev/null; then
	huge=(-hugedir "$tmp/huge")
fi
go build $tags -o "$bin" ./cmd/shmbench
"$bin" -out . "${huge[@]}" "$@"
