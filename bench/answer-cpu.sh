#!/usr/bin/env bash
# The gateway's own CPU time per large answer: steadier than throughput on a shared box, where
# the direct figure moves by 2x from run to run. Same setup as growth.sh's `large` part:
# growth-upstream and the gateway (release, one tokio worker each) on CPU 0, growth-client
# `fetch --connections 4` on CPU 1, for ANSWER_SECONDS; CPU = the gateway's utime + stime over
# that time, divided by the answers it relayed.
#
#   bash bench/answer-cpu.sh [BYTES] [json|sse]     # default: just under 16 MiB, sse
#
# Knobs: BENCH_GATEWAY_BIN (the countersign binary; default target/release/countersign),
# ANSWER_SECONDS (6), ANSWER_PERF=1 (also record a perf profile of the gateway to
# bench/results/answer-perf.data). Build first: growth.sh without BENCH_SKIP_BUILD does.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BYTES=${1:-$(((16 << 20) - 256))}
FORMAT=${2:-sse}
SECONDS_RUN=${ANSWER_SECONDS:-6}
GATEWAY_BIN=${BENCH_GATEWAY_BIN:-$ROOT/target/release/countersign}
UPSTREAM_BIN=$ROOT/target/loadgen/release/growth-upstream
CLIENT_BIN=$ROOT/target/loadgen/release/growth-client
for bin in "$GATEWAY_BIN" "$UPSTREAM_BIN" "$CLIENT_BIN"; do
    [[ -x $bin ]] || { echo "answer-cpu: $bin is missing; run bench/growth.sh once to build" >&2; exit 1; }
done
WORK=$(mktemp -d)
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
    for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done
    echo "answer-cpu: port $1 never opened" >&2; exit 1
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

UP_PORT=$(free_port)
GW_PORT=$(free_port)
taskset -c 0 env TOKIO_WORKER_THREADS=1 "$UPSTREAM_BIN" --listen "127.0.0.1:$UP_PORT" --tools 0 &
PIDS+=($!)
cat >"$WORK/gateway.yaml" <<YAML
listen: 127.0.0.1:$GW_PORT
admin: "off"
policy: $ROOT/bench/policy.yaml
audit: { path: "off" }
upstreams:
  - name: default
    url: http://127.0.0.1:$UP_PORT/mcp
YAML
taskset -c 0 env -u RUST_LOG TOKIO_WORKER_THREADS=1 "$GATEWAY_BIN" serve --config "$WORK/gateway.yaml" \
    2>"$WORK/gateway.log" &
GW_PID=$!
PIDS+=("$GW_PID")
wait_port "$UP_PORT"
wait_port "$GW_PORT"

# One warm-up answer, so the first connection's setup is not counted.
taskset -c 1 "$CLIENT_BIN" fetch --url "http://127.0.0.1:$GW_PORT/mcp" --warmup 0 --duration 1 \
    --bytes "$BYTES" --format "$FORMAT" --connections 1 >/dev/null
if [[ ${ANSWER_PERF:-0} == 1 ]]; then
    mkdir -p "$ROOT/bench/results"
    taskset -c 1 perf record -q -F 499 -g -p "$GW_PID" -o "$ROOT/bench/results/answer-perf.data" \
        -- sleep "$SECONDS_RUN" &
    PIDS+=($!)
fi
before=$(cpu_ticks "$GW_PID")
taskset -c 1 "$CLIENT_BIN" fetch --url "http://127.0.0.1:$GW_PORT/mcp" --rss-pid "$GW_PID" --warmup 0 \
    --duration "$SECONDS_RUN" --bytes "$BYTES" --format "$FORMAT" --connections 4 >"$WORK/client.json"
after=$(cpu_ticks "$GW_PID")
python3 - "$WORK/client.json" "$before" "$after" "$SECONDS_RUN" "$(getconf CLK_TCK)" "$BYTES" "$FORMAT" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
before, after, seconds, tick = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
answers = r["rps"] * seconds
cpu_ms = (after - before) * 1000 / tick / max(answers, 1)
print(f"{int(sys.argv[6])} bytes as {sys.argv[7]}: gateway CPU {cpu_ms:.1f} ms per answer, "
      f"{r['mib_per_s']:.0f} MiB/s, {answers:.0f} answers, gateway RSS max {r['rss_max_kib'] / 1024:.0f} MiB, "
      f"errors {r['errors']}")
PY
