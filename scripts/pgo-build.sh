#!/usr/bin/env bash
# The release binary, optimized with a profile of its own run (profile-guided optimization):
# build it instrumented, run bench/pgo-train.sh through it, and build it again with the counts
# it recorded, so the compiler inlines and lays out the code by how often each path ran.
#
#   bash scripts/pgo-build.sh [OUT]      # OUT: where to put the binary
#                                        # (default target/pgo/release/countersign)
#
# Why: the gateway's request path crosses eleven layers and nine crates. Without a profile the
# compiler spreads that code over far more instruction cache than one request uses, and the
# same instructions run at about two thirds of the speed (BENCHMARKS.md, 2026-12-06). Every
# figure in BENCHMARKS.md since then is of this build unless it says otherwise.
#
# Needs the toolchain's `llvm-profdata` (the rustup component `llvm-tools`, added here when
# missing: it must be the LLVM that rustc itself uses) and what bench/pgo-train.sh needs
# (nginx, wrk, redis-server from Debian). Takes two release builds: about 20 min on 2 cores.
# The plain `cargo build --release` binary stays correct and supported; it is only slower.
#
# Knob: PGO_DIR (target/pgo), the target directory of the final build; the instrumented build
# goes to PGO_DIR-train and the counts to PGO_DIR-profiles.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${PGO_DIR:-$ROOT/target/pgo}
OUT=${1:-$DIR/release/countersign}
PROFILES=$DIR-profiles

log() { printf '[pgo-build] %s\n' "$*" >&2; }
die() { printf '[pgo-build] error: %s\n' "$*" >&2; exit 1; }

cd "$ROOT"
host=$(rustc -vV | awk '/^host:/ {print $2}')
profdata=$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata
if [[ ! -x $profdata ]]; then
    log "adding the rustup component llvm-tools (for llvm-profdata)"
    rustup component add llvm-tools >&2
fi
[[ -x $profdata ]] || die "no llvm-profdata at $profdata"

log "building the instrumented binary"
rm -rf "$PROFILES"
RUSTFLAGS="-Cprofile-generate=$PROFILES" \
    cargo build --release --locked --quiet --bin countersign --target-dir "$DIR-train"

log "training"
bash bench/pgo-train.sh "$DIR-train/release/countersign"
"$profdata" merge -o "$PROFILES/merged.profdata" "$PROFILES"/*.profraw

log "building with the profile"
RUSTFLAGS="-Cprofile-use=$PROFILES/merged.profdata" \
    cargo build --release --locked --quiet --bin countersign --target-dir "$DIR"
if [[ $OUT != "$DIR/release/countersign" ]]; then
    install -D -m 0755 "$DIR/release/countersign" "$OUT"
fi
log "done: $OUT"
