#!/usr/bin/env bash
# The training run of a profile-guided build (scripts/pgo-build.sh): drives an instrumented
# countersign binary through the work a production gateway does, so that the compiler lays out
# and inlines the code for the paths that run. Each part runs for a few seconds; what matters to
# the profile is which code runs and how often relative to the rest, not the volume.
#
#   bash bench/pgo-train.sh INSTRUMENTED_BINARY
#
# Parts, each against a fresh gateway process (every process adds its counts to the profile
# when it exits):
#   approvals  the benchmark upstream (nginx with a fixed answer) and a redis-server replay
#              store: stateless 2026-07-28 read-only calls forwarded, risky calls held with a
#              token minted, and those tokens redeemed (verified, spent in Redis, forwarded)
#   sessions   bench/loadgen's growth-upstream, a 2025-11-25 MCP server listing 1,000 tools:
#              sessions opened and calling in a loop, large answers as JSON and as SSE, and
#              tool listings (classified and rewritten)
# Not trained: stdio and HTTPS upstreams, legacy SSE clients, the approval page, identity
# providers. Their code is still optimized, only without measured branch weights.
#
# Needs nginx, wrk and redis-server (installed from Debian when missing) and bench/loadgen's
# binaries (built here when missing). Knob: PGO_TRAIN_SECONDS (3), the length of each step.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$ROOT/bench
BIN=${1:?usage: bench/pgo-train.sh INSTRUMENTED_BINARY}
SECS=${PGO_TRAIN_SECONDS:-3}

log() { printf '[pgo-train] %s\n' "$*" >&2; }
die() { printf '[pgo-train] error: %s\n' "$*" >&2; exit 1; }

# shellcheck source=bench/fixed_upstream.sh
. "$BENCH/fixed_upstream.sh"
install_missing nginx=nginx wrk=wrk redis-server=redis-server
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
LOADGEN_DIR=$ROOT/target/loadgen/release
if [[ ! -x $LOADGEN_DIR/growth-upstream || ! -x $LOADGEN_DIR/growth-client ]]; then
    log "building bench/loadgen (release)"
    (cd "$BENCH/loadgen" && cargo build --release --quiet --target-dir "$ROOT/target/loadgen")
fi
begin_run pgo-train

# start_gateway PORT ARGS...: the instrumented gateway on PORT; sets GATEWAY_PID.
start_gateway() {
    local port=$1
    shift
    env -u RUST_LOG "$BIN" serve --listen "127.0.0.1:$port" --admin off "$@" \
        >/dev/null 2>>"$WORK/gateway.log" &
    GATEWAY_PID=$!
    PIDS+=("$GATEWAY_PID")
    wait_port "$port"
}

# stop_gateway: SIGTERM and wait, so the process exits normally and writes its counts.
stop_gateway() {
    kill -TERM "$GATEWAY_PID"
    wait "$GATEWAY_PID" || die "the gateway exited with $? (log: $(tail -3 "$WORK/gateway.log"))"
}

log "approvals: reads, holds and redemptions through a gateway with a Redis replay store"
UP=$(port); GW=$(port); REDIS=$(port)
start_fixed_upstream "$NGINX" "$UP"
start_redis "$REDIS"
write_replay_gateway_config "$REDIS" "$WORK/gateway.yaml"
start_gateway "$GW" --config "$WORK/gateway.yaml" --upstream "http://127.0.0.1:$UP/mcp" \
    --policy "$BENCH/policy.yaml"
URL=http://127.0.0.1:$GW/mcp
wrk -t1 -c64 -d"${SECS}s" -s "$BENCH/tools_call.lua" "$URL" >/dev/null
# Twice as long as the redemptions, so they do not run out of tokens (a redemption is slower
# than a hold, and an instrumented binary more so).
wrk -t1 -c64 -d"$((2 * SECS))s" -s "$BENCH/mint.lua" "$URL" -- "$WORK/minted" >/dev/null
expect_redeemed_once "$(wrk -t1 -c64 -d"${SECS}s" -s "$BENCH/redeem_once.lua" "$URL" -- "$WORK/minted")"
stop_gateway

log "sessions: 2025-11-25 sessions, large answers and listings of 1,000 tools"
UP=$(port); GW=$(port)
env TOKIO_WORKER_THREADS=1 "$LOADGEN_DIR/growth-upstream" --listen "127.0.0.1:$UP" --tools 1000 &
PIDS+=($!)
wait_port "$UP"
start_gateway "$GW" --upstream "http://127.0.0.1:$UP/mcp" --policy "$BENCH/policy.yaml"
URL=http://127.0.0.1:$GW/mcp
CLIENT=$LOADGEN_DIR/growth-client
"$CLIENT" list --url "$URL" --repeat 20 >/dev/null
"$CLIENT" sessions --url "$URL" --sessions 16 --duration "$SECS" --warmup 0 >/dev/null
for format in json sse; do
    "$CLIENT" fetch --url "$URL" --bytes $((1 << 20)) --format "$format" --connections 4 \
        --duration 1 --warmup 0 >/dev/null
done
stop_gateway
log "done"
