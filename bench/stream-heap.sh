#!/usr/bin/env bash
# Where an idle SSE stream's memory goes: the live heap of a gateway holding N idle 2025-11-25
# GET streams, attributed to the code that allocated it, per stream.
#
#   bash bench/stream-heap.sh            # ~2 min; STREAM_HEAP_STREAMS (default 2000)
#
# The gateway is built with the system allocator (`--no-default-features`), since heaptrack
# sees malloc calls and mimalloc would hide them, and runs under heaptrack (apt package
# heaptrack) in front of bench/loadgen's growth-upstream; growth-client opens the streams,
# reads RSS, has the upstream push one notification to each, and the gateway is stopped while
# they are still open, so heaptrack's peak is the N streams' live heap. Each allocation is
# charged to the innermost frame that is not allocator or container glue (Vec growth,
# BytesMut::reserve, Box::new, …), and the top owners are printed in bytes per stream.
# Writes bench/results/stream-heap.md; the raw profile stays in bench/results/raw/.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$ROOT/bench
RESULTS=$BENCH/results
STREAMS=${STREAM_HEAP_STREAMS:-2000}
WORK=$(mktemp -d)
PIDS=()

log() { printf '[stream-heap] %s\n' "$*" >&2; }
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

command -v heaptrack >/dev/null || {
    log "installing heaptrack"
    apt-get install -y -qq heaptrack >/dev/null
}
ulimit -n "$(ulimit -Hn)"
((STREAMS * 2 + 100 <= $(ulimit -n))) || { log "too few file descriptors for $STREAMS streams"; exit 1; }

log "building countersign with the system allocator, and bench/loadgen (release)"
cargo build --release -q --manifest-path "$ROOT/Cargo.toml" -p countersign --no-default-features \
    --target-dir "$ROOT/target/system-alloc"
(cd "$BENCH/loadgen" && cargo build --release -q --target-dir "$ROOT/target/loadgen")
GATEWAY_BIN=$ROOT/target/system-alloc/release/countersign
LOADGEN=$ROOT/target/loadgen/release

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
    for _ in $(seq 300); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done
    log "port $1 never opened"; exit 1
}

UP_PORT=$(free_port)
GW_PORT=$(free_port)
TOKIO_WORKER_THREADS=1 "$LOADGEN/growth-upstream" --listen "127.0.0.1:$UP_PORT" --tools 0 &
UP_PID=$!
PIDS+=("$UP_PID")
wait_port "$UP_PORT"
# As bench/growth.sh: every stream comes from 127.0.0.1, so the per-client limit admits them all.
cat >"$WORK/gateway.yaml" <<YAML
listen: 127.0.0.1:$GW_PORT
admin: "off"
policy: $BENCH/policy.yaml
audit:
  path: $WORK/audit.log
connections:
  max_open: $((STREAMS + 100))
  max_requests_per_client: $((STREAMS + 100))
  sse_keep_alive: 15s
  sse_idle_timeout: 1h
upstreams:
  - name: default
    url: http://127.0.0.1:$UP_PORT/mcp
YAML
mkdir -p "$RESULTS/raw"
PROFILE=$RESULTS/raw/stream-heap
rm -f "$PROFILE".*
env -u RUST_LOG TOKIO_WORKER_THREADS=1 heaptrack -o "$PROFILE" "$GATEWAY_BIN" serve \
    --config "$WORK/gateway.yaml" >"$WORK/heaptrack.log" 2>&1 &
PIDS+=($!)
wait_port "$GW_PORT"
GW_PID=$(pgrep -n -f "serve --config $WORK/gateway.yaml")

log "opening $STREAMS idle streams"
"$LOADGEN/growth-client" streams --url "http://127.0.0.1:$GW_PORT/mcp" --rss-pid "$GW_PID" \
    --upstream-pid "$UP_PID" --checkpoints "$STREAMS" --push "http://127.0.0.1:$UP_PORT/push" \
    >"$WORK/streams.json"
kill -INT "$GW_PID"
for _ in $(seq 100); do [[ -e $PROFILE.zst || -e $PROFILE.gz ]] && ! kill -0 "$GW_PID" 2>/dev/null && break; sleep 0.2; done
sleep 1
PROFILE_FILE=$(ls "$PROFILE".* | head -1)

heaptrack_print -f "$PROFILE_FILE" --print-peaks 0 --print-allocators 0 --print-leaks 0 \
    --print-temporary 0 --print-histogram 0 -F "$WORK/stacks.txt" --flamegraph-cost-type peak \
    >/dev/null 2>&1
python3 - "$WORK/stacks.txt" "$WORK/streams.json" "$STREAMS" >"$WORK/report.md" <<'PY'
import collections, json, re, sys

stacks, streams_json, streams = sys.argv[1], sys.argv[2], int(sys.argv[3])
# Frames that only move memory on behalf of their caller: the owner is further out.
glue = re.compile(r"alloc|raw_vec|RawVec|finish_grow|reserve|with_capacity|__rdl|_rust|std3sys|"
                  r"clone|to_vec|to_owned|^from$|push|extend|grow|new_uninit|Box|Arc|spec_|collect|"
                  r"insert|copy_from_slice|bytes_mut|BytesMut|memcpy")
owners, total = collections.Counter(), 0
for line in open(stacks):
    stack, _, cost = line.rstrip().rpartition(" ")
    frames = [f for f in stack.split(";") if f.strip()]
    total += int(cost)
    owner = next((f for f in reversed(frames) if not glue.search(f.split(" (")[0])), frames[-1])
    owners[owner[:110]] += int(cost)
run = json.load(open(streams_json))
base, last = run["checkpoints"][0], run["checkpoints"][-1]
rss = (last["rss_kib"] - base["rss_kib"]) * 1024 / max(last["streams"], 1)
print(f"# Live heap of {streams:,} idle SSE streams\n")
print(f"- RSS (system allocator, under heaptrack): {rss / 1024:.1f} KiB per stream; "
      f"heap at peak: {total / streams / 1024:.1f} KiB per stream (everything, start-up included)")
print(f"- delivered {run['delivered']:,} of {run['pushed_upstream']:,} pushed notifications\n")
print("| bytes per stream | allocated in |\n|---:|---|")
for owner, cost in owners.most_common(15):
    print(f"| {cost / streams:,.0f} | `{owner}` |")
PY
cp "$WORK/report.md" "$RESULTS/stream-heap.md"
cat "$WORK/report.md"
