#!/usr/bin/env bash
# Instructions the gateway executes per request, counted by callgrind: repeatable whatever else the
# machine is doing, so a change to the hot path can be judged on a shared box where throughput
# moves by 2x from run to run. Counts user space only (the kernel's share is not in them) and all
# of the gateway's threads.
#
#   bash bench/instructions.sh            # read, held and redeem paths; prints a table
#
# Setup as bench/run.sh: nginx answering every POST with bench/upstream_response.json, the gateway
# (release build, one tokio worker) with bench/policy.yaml in front of it, and a local
# redis-server as the replay store. Each path is warmed up, the counters are zeroed, then wrk
# sends it for a fixed time and the counters are dumped; instructions / requests answered is the
# figure. valgrind slows the gateway ~50x, so few requests are needed.
# Knobs: BENCH_SKIP_BUILD=1, BENCH_GATEWAY_BIN (the binary to count), INSTR_SECONDS (10),
# INSTR_KEEP=DIR (keep each path's callgrind profile there, for callgrind_annotate).

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$ROOT/bench
SECONDS_PER_PATH=${INSTR_SECONDS:-10}

log() { printf '[instructions] %s\n' "$*" >&2; }
die() { printf '[instructions] error: %s\n' "$*" >&2; exit 1; }

# shellcheck source=bench/fixed_upstream.sh
. "$BENCH/fixed_upstream.sh"
install_missing nginx=nginx wrk=wrk valgrind=valgrind redis-server=redis-server
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
if [[ ${BENCH_SKIP_BUILD:-0} != 1 ]]; then
    (cd "$ROOT" && cargo build --release --bin countersign --quiet)
fi
GATEWAY_BIN=${BENCH_GATEWAY_BIN:-$ROOT/target/release/countersign}
[[ -x $GATEWAY_BIN ]] || die "no gateway binary at $GATEWAY_BIN"

begin_run instructions
UP=$(port); GW=$(port); REDIS=$(port)
start_fixed_upstream "$NGINX" "$UP"
start_redis "$REDIS"

# valgrind runs the gateway ~50x slower, so Redis commands get far more than the default 250 ms
# before a redemption is refused as `store_unavailable` (fail closed, and then not counted).
cat >"$WORK/gateway.yaml" <<CONF
redis:
  url: redis://127.0.0.1:$REDIS
  command_timeout: 10s
CONF
env TOKIO_WORKER_THREADS=1 valgrind --tool=callgrind --callgrind-out-file="$WORK/callgrind.out" \
    "$GATEWAY_BIN" serve --config "$WORK/gateway.yaml" --upstream "http://127.0.0.1:$UP/mcp" \
    --listen "127.0.0.1:$GW" --admin off --policy "$BENCH/policy.yaml" \
    >/dev/null 2>"$WORK/valgrind.log" &
GW_PID=$!
PIDS+=("$GW_PID")
wait_port "$GW"
URL=http://127.0.0.1:$GW/mcp

# count NAME SECONDS SCRIPT [ARGS...]: instructions per answered request of SECONDS of SCRIPT.
declare -A per_request
count() {
    local name=$1 seconds=$2 script=$3 out requests
    shift 3
    callgrind_control -z "$GW_PID" >/dev/null
    out=$(wrk -t1 -c8 -d"${seconds}s" -s "$script" "$URL" "$@")
    callgrind_dump "$GW_PID" "$name"
    requests=$(awk '/requests in/ {print $1}' <<<"$out")
    [[ $name != redeem ]] || expect_redeemed_once "$out"
    per_request[$name]=$(awk -v t="$CALLGRIND_TOTAL" -v n="$requests" 'BEGIN {printf "%d", t / n}')
    if [[ -n ${INSTR_KEEP:-} ]]; then
        mkdir -p "$INSTR_KEEP"
        cp "$CALLGRIND_PROFILE" "$INSTR_KEEP/callgrind.$name.out"
    fi
    log "$name: $requests requests, ${per_request[$name]} instructions each"
}

log "warming up"
wrk -t1 -c8 -d3s -s "$BENCH/tools_call.lua" "$URL" >/dev/null
wrk -t1 -c8 -d3s -s "$BENCH/held_call.lua" "$URL" >/dev/null
count read "$SECONDS_PER_PATH" "$BENCH/tools_call.lua"
# Minting is the held path: distinct calls, each held with a new token. Redemptions run half as
# long, so they do not run out of tokens when the machine is busier than it was while minting.
count held "$SECONDS_PER_PATH" "$BENCH/mint.lua" -- "$WORK/minted"
count redeem $(((SECONDS_PER_PATH + 1) / 2)) "$BENCH/redeem_once.lua" -- "$WORK/minted"

echo
echo "| path | instructions per request |"
echo "|---|---:|"
for name in read held redeem; do
    printf '| %s | %s |\n' "$name" "${per_request[$name]}"
done
