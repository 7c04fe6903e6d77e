#!/bin/sh
# irperop.sh BINARY BENCH [ARGS...]: instructions per operation of one
# benchmark of a `go test -c` binary, from callgrind: the benchmark runs
# for N and 3N iterations and the difference in instructions is divided by
# 2N, so setup and the runtime's start cancel out. Counts are exact and do
# not depend on how busy the machine is (see PROFILE.md).
# GOGC=off: under callgrind a run takes minutes, and the runtime forces a
# collection every two minutes, which then lands in one of the two runs
# and not the other (hundreds of instructions per op of noise on a
# benchmark whose setup leaves a large heap).
set -eu
bin=$1 bench=$2
shift 2
n=${IRN:-100000}
ir() {
	iters=$1
	shift
	out=$(mktemp)
	GOGC=off GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off valgrind --tool=callgrind \
		--callgrind-out-file=/dev/null "$bin" -test.run '^$' -test.bench "^$bench\$" \
		-test.benchtime "${iters}x" "$@" >/dev/null 2>"$out" || { cat "$out" >&2; exit 1; }
	sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$out"
	rm -f "$out"
}
a=$(ir "$n" "$@")
b=$(ir $((3 * n)) "$@")
echo "$bench $* : $(((b - a) / (2 * n))) instructions/op"
