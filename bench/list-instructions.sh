#!/usr/bin/env bash
# Instructions the gateway executes per `tools/list` of 1,000 tools, counted by callgrind: the
# classification and rewriting cost of a large listing, repeatable on a busy machine where the
# listing's latency in bench/growth.sh moves by 2x from run to run.
#
#   bash bench/list-instructions.sh       # prints instructions per tools/list
#
# Setup as bench/growth.sh's `list` part: bench/loadgen's growth-upstream listing 1,000 tools
# (besides its own few), the gateway (release build, one tokio worker) with bench/policy.yaml in
# front of it. One session warms the gateway up (its first call pins the catalog, and one
# `tools/list` runs); then the counters are zeroed and one session sends LIST_REPEAT (10)
# `tools/list`s, each pinned and edited as every client's is. The figure is the instructions of
# that second session over LIST_REPEAT (its `initialize` and two read calls, under 1 % of it,
# included). valgrind runs SHA-256 in software, which the gateway does with the CPU's SHA
# instructions, so a definition hashed counts for more here than it costs.
# Knobs: BENCH_SKIP_BUILD=1, BENCH_GATEWAY_BIN (the binary to count), LIST_REPEAT (10),
# LIST_KEEP=FILE (keep the callgrind profile there, for callgrind_annotate).

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$ROOT/bench
REPEAT=${LIST_REPEAT:-10}

log() { printf '[list-instructions] %s\n' "$*" >&2; }
die() { printf '[list-instructions] error: %s\n' "$*" >&2; exit 1; }

# shellcheck source=bench/fixed_upstream.sh
. "$BENCH/fixed_upstream.sh"
install_missing valgrind=valgrind
if [[ ${BENCH_SKIP_BUILD:-0} != 1 ]]; then
    (cd "$ROOT" && cargo build --release --bin countersign --quiet)
    (cd "$BENCH/loadgen" && cargo build --release -q --target-dir "$ROOT/target/loadgen")
fi
GATEWAY_BIN=${BENCH_GATEWAY_BIN:-$ROOT/target/release/countersign}
UPSTREAM_BIN=$ROOT/target/loadgen/release/growth-upstream
CLIENT_BIN=$ROOT/target/loadgen/release/growth-client
for binary in "$GATEWAY_BIN" "$UPSTREAM_BIN" "$CLIENT_BIN"; do
    [[ -x $binary ]] || die "no binary at $binary (run without BENCH_SKIP_BUILD=1 to build it)"
done

begin_run list-instructions
UP=$(port); GW=$(port)
env TOKIO_WORKER_THREADS=1 "$UPSTREAM_BIN" --listen "127.0.0.1:$UP" --tools 1000 &
PIDS+=("$!")
wait_port "$UP"

cat >"$WORK/gateway.yaml" <<CONF
listen: 127.0.0.1:$GW
admin: "off"
policy: $BENCH/policy.yaml
audit:
  path: /dev/null
upstreams:
  - name: default
    url: http://127.0.0.1:$UP/mcp
CONF
env -u RUST_LOG TOKIO_WORKER_THREADS=1 valgrind --tool=callgrind \
    --callgrind-out-file="$WORK/callgrind.out" "$GATEWAY_BIN" serve --config "$WORK/gateway.yaml" \
    >/dev/null 2>"$WORK/valgrind.log" &
GW_PID=$!
PIDS+=("$GW_PID")
wait_port "$GW"
URL=http://127.0.0.1:$GW/mcp

log "warming up"
"$CLIENT_BIN" list --url "$URL" --repeat 1 >/dev/null || die "the warm-up session failed"
callgrind_control -z "$GW_PID" >/dev/null
"$CLIENT_BIN" list --url "$URL" --repeat "$REPEAT" >"$WORK/list.json" \
    || die "the measured session failed"
callgrind_dump "$GW_PID" list
tools=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tools"])' "$WORK/list.json")
[[ -n ${LIST_KEEP:-} ]] && cp "$CALLGRIND_PROFILE" "$LIST_KEEP"

echo
echo "| tools listed | tools/list sent | instructions per tools/list |"
echo "|---:|---:|---:|"
printf '| %s | %s | %s |\n' "$tools" "$REPEAT" "$(awk -v t="$CALLGRIND_TOTAL" -v n="$REPEAT" 'BEGIN {printf "%d", t / n}')"
