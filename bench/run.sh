#!/usr/bin/env bash
# Runs the shmarena benchmark suite: map ops against in-process floors,
# bbolt and Redis; the ring against a Unix socket, a pipe and Redis
# Streams; and the map's scaling curves. Writes bench/results.md and the
# SVG charts beside it. About 5-10 minutes; `run.sh -short` takes under one.
# Extra arguments go to shmbench (see `go run ./cmd/shmbench -h`).
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

bin="$(mktemp -d)/shmbench"
trap 'rm -rf "$(dirname "$bin")"' EXIT
go build $tags -o "$bin" ./cmd/shmbench
"$bin" -out . "$@"
