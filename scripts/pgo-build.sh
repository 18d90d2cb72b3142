#!/usr/bin/env bash
# The release binary, optimized with a profile of its own run, twice:
#   1. profile-guided optimization (PGO): build it instrumented, run bench/pgo-train.sh through
#      it, and build it again with the counts it recorded, so the compiler inlines and lays out
#      the code by how often each path ran;
#   2. post-link layout (BOLT): instrument that binary, run the same training through it, and
#      rewrite it so the blocks and functions that run together sit together, and the cold
#      ones leave the hot pages. This sees the final machine code, after inlining and linking,
#      which PGO cannot.
#
#   bash scripts/pgo-build.sh [OUT]      # OUT: where to put the binary
#                                        # (default target/pgo/countersign)
#
# Why: the gateway's request path crosses eleven layers and nine crates. Without a profile the
# compiler spreads that code over far more instruction cache than one request uses, and the
# same instructions run at about two thirds of the speed (BENCHMARKS.md, 2026-12-06); BOLT takes
# about 5 % more off the CPU per read on top of PGO. Every figure in BENCHMARKS.md since then is
# of this build unless it says otherwise.
#
# Needs the toolchain's `llvm-profdata` (the rustup component `llvm-tools`, added here when
# missing: it must be the LLVM that rustc itself uses), `llvm-bolt-22` and `merge-fdata-22`
# (Debian's bolt-22, installed when missing; BOLT reads machine code, so its LLVM need not be
# rustc's) and what bench/pgo-train.sh needs (nginx, wrk, redis-server from Debian). Takes two
# release builds and two training runs: about 25 min on 2 cores. The plain
# `cargo build --release` binary stays correct and supported; it is only slower.
#
# Knobs: PGO_DIR (target/pgo), the target directory of the PGO build; the instrumented build goes
# to PGO_DIR-train, the counts to PGO_DIR-profiles and BOLT's to PGO_DIR-bolt. PGO_BOLT=0 stops
# after PGO (for a machine without bolt-22); OUT is then the PGO binary.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${PGO_DIR:-$ROOT/target/pgo}
# Not cargo's own output path: BOLT rewrites a copy, and cargo would take a rewritten file for
# an up-to-date build and hand it to BOLT again.
OUT=${1:-$DIR/countersign}
PROFILES=$DIR-profiles
BOLT_DIR=$DIR-bolt
BOLT=${PGO_BOLT:-1}

log() { printf '[pgo-build] %s\n' "$*" >&2; }
die() { printf '[pgo-build] error: %s\n' "$*" >&2; exit 1; }
# logged LOG COMMAND...: runs COMMAND with its output in LOG; on failure stops with LOG's tail.
logged() {
    local log=$1
    shift
    "$@" >"$log" 2>&1 || die "$1 failed: $(tail -3 "$log")"
}

cd "$ROOT"
host=$(rustc -vV | awk '/^host:/ {print $2}')
profdata=$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata
if [[ ! -x $profdata ]]; then
    log "adding the rustup component llvm-tools (for llvm-profdata)"
    rustup component add llvm-tools >&2
fi
[[ -x $profdata ]] || die "no llvm-profdata at $profdata"
if [[ $BOLT == 1 ]]; then
    # shellcheck source=bench/fixed_upstream.sh
    . bench/fixed_upstream.sh
    install_missing llvm-bolt-22=bolt-22
    command -v llvm-bolt-22 >/dev/null && command -v merge-fdata-22 >/dev/null \
        || die "no llvm-bolt-22 (Debian's bolt-22); PGO_BOLT=0 builds without BOLT"
fi

log "building the instrumented binary"
rm -rf "$PROFILES"
RUSTFLAGS="-Cprofile-generate=$PROFILES" \
    cargo build --release --locked --quiet --bin countersign --target-dir "$DIR-train"

log "training"
bash bench/pgo-train.sh "$DIR-train/release/countersign"
"$profdata" merge -o "$PROFILES/merged.profdata" "$PROFILES"/*.profraw

log "building with the profile"
# BOLT moves functions only in a binary that kept its relocations.
link_flags=""
[[ $BOLT == 1 ]] && link_flags="-Clink-args=-Wl,--emit-relocs"
RUSTFLAGS="-Cprofile-use=$PROFILES/merged.profdata $link_flags" \
    cargo build --release --locked --quiet --bin countersign --target-dir "$DIR"
PGO_BIN=$DIR/release/countersign
if [[ $BOLT != 1 ]]; then
    install -D -m 0755 "$PGO_BIN" "$OUT"
    log "done (PGO only): $OUT"
    exit 0
fi

log "BOLT: instrumenting the PGO binary"
rm -rf "$BOLT_DIR"
mkdir -p "$BOLT_DIR"
# BOLT's instrumentation runtime aborts when it writes a symbol name over about 1 KiB, and the
# drop glue of a deeply nested future has names of up to 5.5 KiB. Those few (under 200) get short
# names first; BOLT only needs names that are unique and the same in the binary it trains and
# the one it rewrites, which both are this renamed copy.
nm --format=posix "$PGO_BIN" | awk 'length($1) > 400 {print $1}' | sort -u \
    | awk '{printf "%s countersign_long_symbol_%d\n", $1, NR}' >"$BOLT_DIR/renamed-symbols"
objcopy --redefine-syms="$BOLT_DIR/renamed-symbols" "$PGO_BIN" "$BOLT_DIR/countersign.pgo"
# One counts file per gateway process the training starts.
logged "$BOLT_DIR/instrument.log" llvm-bolt-22 "$BOLT_DIR/countersign.pgo" \
    -o "$BOLT_DIR/countersign.instrumented" -instrument \
    -instrumentation-file="$BOLT_DIR/counts" -instrumentation-file-append-pid
log "BOLT: training"
bash bench/pgo-train.sh "$BOLT_DIR/countersign.instrumented"
counts=("$BOLT_DIR"/counts.*.fdata)
[[ -e ${counts[0]} ]] || die "the BOLT training wrote no counts"
logged "$BOLT_DIR/merge.log" merge-fdata-22 "${counts[@]}" -o "$BOLT_DIR/merged.fdata"
log "BOLT: laying out the binary by ${#counts[@]} processes' counts"
# ext-tsp orders each function's blocks and cdsort the functions by the calls between them;
# cold blocks move to a separate section (split-*), identical functions fold into one (icf);
# the line tables are rewritten to match, so profiles and backtraces still name source lines.
mkdir -p "$(dirname "$OUT")"
logged "$BOLT_DIR/optimize.log" llvm-bolt-22 "$BOLT_DIR/countersign.pgo" -o "$OUT.bolt-tmp" \
    -data="$BOLT_DIR/merged.fdata" -reorder-blocks=ext-tsp -reorder-functions=cdsort \
    -split-functions -split-all-cold -icf=1 -use-gnu-stack -update-debug-sections
grep -h 'have non-empty execution profile' "$BOLT_DIR/optimize.log" | sed 's/^BOLT-INFO: /[pgo-build] /' >&2 || true
mv "$OUT.bolt-tmp" "$OUT"
log "done (PGO + BOLT): $OUT"
