#!/usr/bin/env bash
# Memory under hostile bodies (issue 9; BENCHMARKS.md, "Memory under hostile bodies").
#
#   bash bench/memory.sh                # the amplification table, survival and return lines
#   bash bench/memory.sh --allocators   # survival and return figures per allocator setting
#
# The first form runs tests/tests/memory.rs against this checkout's `countersign` and prints, for
# every hostile body shape and outcome, how much one body just under the default 4 MiB
# `limits.max_body_bytes` grew the gateway's peak resident memory (VmHWM), then the survival
# test's and the memory-return test's figures. Those tests fail while a bound is not met; the
# figures are printed either way, and so is the exit status of the run.
#
# The second form builds the binary three times (system malloc, mimalloc, jemalloc: the
# `countersign` crate's features) and runs, for each build and for glibc malloc's environment
# settings, the long-string yardstick and the survival test (MEMORY_ROUNDS times each: they depend
# on how the concurrent requests interleave) and the memory-return test. It rebuilds the shipped
# (default-feature) binary at the end, so later test runs use it again.
#
# Knobs (environment): MEMORY_PROFILE (dev | release; default dev, the build the tests use),
# MEMORY_ROUNDS (3).
# Needs prlimit (util-linux) and Linux's /proc; starts only loopback processes, all stopped on
# exit by the tests themselves.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PROFILE=${MEMORY_PROFILE:-dev}
ROUNDS=${MEMORY_ROUNDS:-3}
case "$PROFILE" in
dev) PROFILE_DIR=debug ;;
*) PROFILE_DIR=$PROFILE ;;
esac
cd "$ROOT"

log() { printf '[memory] %s\n' "$*" >&2; }

# Environment for the tests (and so for the gateways they start): VAR=VALUE entries.
TEST_ENV=()

# run_tests FILTER [ARGS...]: the memory tests matching FILTER, one at a time (each gateway
# measured alone), their printed figures (table rows, survival and return lines) on stdout.
# Never fails: a failing bound is a figure too.
run_tests() {
	local filter=$1
	shift
	{ env "${TEST_ENV[@]}" cargo test -q --profile "$PROFILE" -p countersign-e2e --test memory -- \
		--nocapture --test-threads=1 "$@" "$filter" 2>&1 || true; } |
		grep -oE '\| .* \|$|survival under .*|memory return: .*' || true
}

build() {
	log "building countersign ($PROFILE${*:+, $*})"
	cargo build -q --profile "$PROFILE" -p countersign --bin countersign "$@"
}

if [[ "${1:-}" != "--allocators" ]]; then
	build
	echo "| shape | outcome | body | peak growth | factor |"
	echo "|---|---|---:|---:|---:|"
	run_tests grows_memory_at_most_tenfold
	run_tests the_gateway_survives
	run_tests resident_memory_returns
	exit 0
fi

BINS=$(mktemp -d)
trap 'rm -rf "$BINS"; build' EXIT

variant() { # NAME FEATURE-FLAGS...
	local name=$1
	shift
	build "$@"
	cp "target/$PROFILE_DIR/countersign" "$BINS/countersign-$name"
}
variant glibc --no-default-features
variant jemalloc --no-default-features --features jemalloc
variant mimalloc

# measure LABEL BINARY [VAR=VALUE...]: the tests start the gateway with their own environment,
# so glibc's settings reach it through them.
measure() {
	local label=$1 binary=$2
	shift 2
	TEST_ENV=("COUNTERSIGN_BIN=$BINS/countersign-$binary" "$@")
	echo
	echo "## $label"
	for _ in $(seq "$ROUNDS"); do
		run_tests allocator_yardstick --include-ignored
	done
	for _ in $(seq "$ROUNDS"); do
		run_tests the_gateway_survives
	done
	run_tests resident_memory_returns
}

# The test binary is built once, before the first measurement.
cargo test -q --profile "$PROFILE" -p countersign-e2e --test memory --no-run
measure "glibc malloc, defaults" glibc
measure "glibc malloc, MALLOC_ARENA_MAX=2" glibc MALLOC_ARENA_MAX=2
measure "glibc malloc, one arena, fixed 128 KiB mmap and trim thresholds" glibc \
	MALLOC_ARENA_MAX=1 MALLOC_MMAP_THRESHOLD_=131072 MALLOC_TRIM_THRESHOLD_=131072
measure "jemalloc (tikv-jemallocator, defaults)" jemalloc
measure "mimalloc with override (the shipped binary)" mimalloc
