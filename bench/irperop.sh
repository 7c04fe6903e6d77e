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
#
# IRFN=pattern counts only inside the functions it names (callgrind's
# --toggle-collect, e.g. IRFN='*BenchmarkCounterSpread.func1', the
# benchmark's loop closure) in one run of N, divided by N: the runtime's
# background work (the scavenger, whose share depends on how long the
# run took) then falls outside the count. Without it, two runs of one
# binary of BenchmarkCounterSpread differed by up to 100 instructions/op.
set -eu
bin=$1 bench=$2
shift 2
n=${IRN:-100000}
ir() {
	iters=$1
	shift
	out=$(mktemp)
	GOGC=off GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off valgrind --tool=callgrind \
		${IRFN:+--toggle-collect="$IRFN"} \
		--callgrind-out-file=/dev/null "$bin" -test.run '^$' -test.bench "^$bench\$" \
		-test.benchtime "${iters}x" "$@" >/dev/null 2>"$out" || { cat "$out" >&2; exit 1; }
	sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$out"
	rm -f "$out"
}
if [ -n "${IRFN:-}" ]; then
	echo "$bench $* : $(($(ir "$n" "$@") / n)) instructions/op inside $IRFN"
	exit 0
fi
a=$(ir "$n" "$@")
b=$(ir $((3 * n)) "$@")
echo "$bench $* : $(((b - a) / (2 * n))) instructions/op"
