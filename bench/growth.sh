#!/usr/bin/env bash
# How the gateway's cost grows (issue 11): idle SSE streams, large answers, many sessions, a
# large tool listing. Prints a markdown table (also bench/results/growth.md).
#
#   bash bench/growth.sh
#
# Everything runs on 127.0.0.1 between three separate processes:
#   growth-upstream  a purpose-built 2025-11-25 MCP server (bench/loadgen/src/bin/growth_upstream)
#   countersign      this checkout's release build, with a configuration file written here
#   growth-client    the sessions (bench/loadgen/src/bin/growth_client)
# The upstream and the gateway share CPU 0 (one tokio worker thread each), the client has
# CPU 1, as in bench/run.sh's `pinned` scenario; "direct" is the client against the upstream.
#
# Parts (GROWTH_PARTS, default all four):
#   streams   sessions' GET streams left open, gateway RSS at 0, 1,000, 5,000 and
#             GROWTH_STREAMS streams; then the upstream pushes one notification to every stream
#             and the client counts how many arrived.
#   sessions  GROWTH_SESSIONS sessions each calling the read-only `list_products` in a loop:
#             throughput, p50/p99, RSS; direct and through the gateway.
#   large     `get_blob` answers just under 1 MiB and 16 MiB (the default max_response_bytes),
#             as JSON and as one SSE event, on 4 sessions in a loop: MiB/s against direct.
#   list      an upstream listing 1,000 tools: the first tools/call of a fresh gateway (which
#             lists the catalog itself), a second call, and tools/list, against direct.
#
# File descriptors: each relayed stream holds a client and an upstream socket in the gateway.
# The soft limit is raised to the hard limit here (every process started inherits it); the
# default GROWTH_STREAMS leaves 200 descriptors of the gateway's for everything else.
#
# Knobs: GROWTH_STREAMS (hard limit / 2 − 100, at most 10000), GROWTH_SESSIONS (1000),
# GROWTH_DURATION (s per measurement, 5), GROWTH_WARMUP (1), GROWTH_ROUNDS (3, targets
# interleaved, median reported), GROWTH_PARTS, GROWTH_GATEWAY_BIN (the countersign binary to
# measure; default this checkout's release build), BENCH_SKIP_BUILD=1.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$ROOT/bench
RESULTS=$BENCH/results
PARTS=${GROWTH_PARTS:-streams sessions large list}
SESSIONS=${GROWTH_SESSIONS:-1000}
DURATION=${GROWTH_DURATION:-5}
WARMUP=${GROWTH_WARMUP:-1}
ROUNDS=${GROWTH_ROUNDS:-3}
WORK=$(mktemp -d)
PIDS=()

log() { printf '[growth] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# --- tools, limits, builds ---------------------------------------------------------------------

for tool in python3 taskset; do
    command -v "$tool" >/dev/null || {
        package=$tool; [[ $tool == taskset ]] && package=util-linux
        log "installing $package"
        apt-get install -y -qq "$package" >/dev/null
    }
done
ulimit -n "$(ulimit -Hn)"
FDS=$(ulimit -n)
STREAMS=${GROWTH_STREAMS:-$(( FDS / 2 - 100 < 10000 ? FDS / 2 - 100 : 10000 ))}
((FDS >= 2 * STREAMS + 100)) || die "$FDS file descriptors are too few for $STREAMS streams through the gateway"

if [[ ${BENCH_SKIP_BUILD:-0} != 1 ]]; then
    log "building countersign (release)"
    cargo build --release -q --manifest-path "$ROOT/Cargo.toml" -p countersign
    log "building bench/loadgen (release)"
    (cd "$BENCH/loadgen" && cargo build --release -q --target-dir "$ROOT/target/loadgen")
fi
GATEWAY_BIN=${GROWTH_GATEWAY_BIN:-$ROOT/target/release/countersign}
UPSTREAM_BIN=$ROOT/target/loadgen/release/growth-upstream
CLIENT_BIN=$ROOT/target/loadgen/release/growth-client
SUT=(taskset -c 0)
GEN=(taskset -c 1)
(($(nproc) >= 2)) || { SUT=(); GEN=(); }
CLIENT=("${GEN[@]}" "$CLIENT_BIN")

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
    for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done
    die "port $1 never opened"
}
# jget FILE KEY: one field of a JSON line.
jget() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2)}'; }
stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

# start_upstream EXTRA_TOOLS: sets UP_PID and UP_PORT.
start_upstream() {
    UP_PORT=$(free_port)
    "${SUT[@]}" env TOKIO_WORKER_THREADS=1 "$UPSTREAM_BIN" --listen "127.0.0.1:$UP_PORT" --tools "$1" &
    UP_PID=$!
    PIDS+=("$UP_PID")
    wait_port "$UP_PORT"
}

# start_gateway NAME: a gateway in front of the upstream on UP_PORT; sets GW_PID and GW_PORT.
start_gateway() {
    GW_PORT=$(free_port)
    # Every session of the run comes from 127.0.0.1, so the per-client limit must admit them
    # all; max_open stays under the descriptors left once each stream's upstream socket is
    # counted. The idle timeout (default 1 h) is far beyond the run, so no stream is ended
    # for a quiet upstream; keep-alive comments go out every 15 s as in production.
    cat >"$WORK/$1.yaml" <<YAML
listen: 127.0.0.1:$GW_PORT
admin: "off"
policy: $BENCH/policy.yaml
audit:
  path: $WORK/$1-audit.log
connections:
  max_open: $((STREAMS + 100))
  max_requests_per_client: $((STREAMS + 100))
  sse_keep_alive: 15s
  sse_idle_timeout: 1h
upstreams:
  - name: default
    url: http://127.0.0.1:$UP_PORT/mcp
YAML
    "${SUT[@]}" env -u RUST_LOG TOKIO_WORKER_THREADS=1 "$GATEWAY_BIN" serve --config "$WORK/$1.yaml" \
        2>"$WORK/$1.log" &
    GW_PID=$!
    PIDS+=("$GW_PID")
    wait_port "$GW_PORT"
}

mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }
ms() { awk -v u="$1" 'BEGIN {printf "%.2f", u / 1000}'; }

mkdir -p "$RESULTS"
REPORT=$WORK/report.md
{
    echo "# countersign cost growth — $(date -u +%Y-%m-%dT%H:%MZ)"
    echo
    echo "- commit: \`$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)\`$(git -C "$ROOT" diff --quiet HEAD -- crates 2>/dev/null || echo ' (crates/ has uncommitted changes)')"
    echo "- machine: $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), $(uname -r); load average at start $(load)"
    echo "- file descriptors: soft limit raised to the hard limit, $FDS, for every process"
    echo "- upstream and gateway on CPU 0 (TOKIO_WORKER_THREADS=1 each), client on CPU 1; measurements ${WARMUP}s warm-up + ${DURATION}s, median of $ROUNDS interleaved rounds"
} >"$REPORT"

# --- streams -----------------------------------------------------------------------------------

part_streams() {
    log "streams: $STREAMS idle GET streams (load $(load))"
    start_upstream 0
    start_gateway streams
    local out=$WORK/streams.json checkpoints="" n
    for n in 1000 5000; do ((n < STREAMS)) && checkpoints+="$n,"; done
    checkpoints+=$STREAMS
    "${CLIENT[@]}" streams --url "http://127.0.0.1:$GW_PORT/mcp" --rss-pid "$GW_PID" --upstream-pid "$UP_PID" \
        --checkpoints "$checkpoints" --push "http://127.0.0.1:$UP_PORT/push" >"$out" \
        || die "streams: the client failed"
    stop "$GW_PID"; stop "$UP_PID"
    python3 - "$out" "$STREAMS" >>"$REPORT" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); want = int(sys.argv[2])
points = r["checkpoints"]; base = points[0]["rss_kib"]
print("\n## Idle SSE streams (2025-11-25 GET streams)\n")
print("| streams open | gateway RSS MiB | growth since 0 MiB | gateway KiB per stream | upstream KiB per stream |")
print("|---:|---:|---:|---:|---:|")
ubase = points[0]["upstream_rss_kib"]
for p in points:
    n, k, u = p["streams"], p["rss_kib"], p["upstream_rss_kib"]
    per = f"{(k - base) / n:.1f}" if n else "—"
    uper = f"{(u - ubase) / n:.1f}" if n else "—"
    print(f"| {n:,} | {k / 1024:.1f} | {(k - base) / 1024:.1f} | {per} | {uper} |")
last = points[-1]
per = (last["rss_kib"] - base) / max(last["streams"], 1)
at10k = (base + per * 10000) / 1024
print(f"\nOpened {r['opened']:,} of {want:,} in {r['open_secs']:.1f} s ({r['failed']} failed). "
      f"The upstream pushed one notification to {r['pushed_upstream']:,} streams; the client received "
      f"{r['delivered']:,}. At the measured {per:.1f} KiB per stream, 10,000 streams take {at10k:.0f} MiB. "
      f"Bar: ≤ 200 MiB at 10,000 streams — **{'met' if at10k <= 200 and last['rss_kib'] / 1024 <= 200 else 'not met'}**; "
      f"every stream delivers — **{'met' if r['delivered'] == r['opened'] == want else 'not met'}**.")
PY
}

# --- call loops (sessions, large) ----------------------------------------------------------------

# measure_calls LABEL MODE ARGS...: ROUNDS rounds of the client against direct and gateway,
# interleaved; appends "LABEL target rps mib p50 p99 rss hash" lines to $WORK/calls.
measure_calls() {
    local label=$1 mode=$2 round target url pid out
    shift 2
    for round in $(seq "$ROUNDS"); do
        for target in direct gateway; do
            if [[ $target == direct ]]; then url=http://127.0.0.1:$UP_PORT/mcp pid=$UP_PID
            else url=http://127.0.0.1:$GW_PORT/mcp pid=$GW_PID; fi
            out=$WORK/$mode-$label-$target-$round.json
            "${CLIENT[@]}" "$mode" --url "$url" --rss-pid "$pid" --warmup "$WARMUP" \
                --duration "$DURATION" "$@" >"$out" || die "$label/$target: the client failed"
            [[ $(jget "$out" errors) == 0 && $(jget "$out" mismatched) == 0 ]] \
                || die "$label/$target: errors or answers of different sizes: $(cat "$out")"
            log "$label round $round: $target $(jget "$out" rps) calls/s, $(jget "$out" mib_per_s) MiB/s, p99 $(jget "$out" p99_us) µs (load $(load))"
            echo "$label $target $(jget "$out" rps) $(jget "$out" mib_per_s) $(jget "$out" p50_us) $(jget "$out" p99_us) $(jget "$out" rss_max_kib) $(jget "$out" body_hash) $(jget "$out" body_bytes)" >>"$WORK/calls"
        done
    done
}

# calls_row LABEL TARGET: the medians of one label and target, as table cells.
calls_row() {
    local col cells=()
    for col in 3 4 5 6 7; do
        cells+=("$(awk -v l="$1" -v t="$2" -v c="$col" '$1 == l && $2 == t {print $c}' "$WORK/calls" | median)")
    done
    printf '%s' "${cells[*]}"
}

part_sessions() {
    log "sessions: $SESSIONS sessions calling in a loop (load $(load))"
    start_upstream 0
    start_gateway sessions
    measure_calls sessions sessions --sessions "$SESSIONS"
    stop "$GW_PID"; stop "$UP_PID"
    {
        echo
        echo "## $SESSIONS concurrent sessions, each calling the read-only \`list_products\` in a loop (closed loop)"
        echo
        echo "| target | calls/s | p50 ms | p99 ms | RSS max MiB |"
        echo "|---|---:|---:|---:|---:|"
        local t rps mibs p50 p99 rss
        for t in direct gateway; do
            read -r rps mibs p50 p99 rss <<<"$(calls_row sessions "$t")"
            printf '| %s | %.0f | %s | %s | %s |\n' "$t" "$rps" "$(ms "$p50")" "$(ms "$p99")" "$(mib "$rss")"
        done
        read -r rps _ _ _ _ <<<"$(calls_row sessions gateway)"
        local drps
        read -r drps _ _ _ _ <<<"$(calls_row sessions direct)"
        echo
        echo "Gateway throughput $(awk -v g="$rps" -v d="$drps" 'BEGIN {printf "%.0f%%", 100 * g / d}') of direct; direct RSS is the upstream's."
    } >>"$REPORT"
}

part_large() {
    log "large answers (load $(load))"
    start_upstream 0
    start_gateway large
    local size format
    # Just under the default 16 MiB max_response_bytes (and max_sse_event_bytes) with the
    # JSON-RPC envelope around the text.
    for size in $((1 << 20)) $((16 << 20)); do
        for format in json sse; do
            measure_calls "$((size >> 20))MiB-$format" fetch --bytes "$((size - 256))" \
                --format "$format" --connections 4
        done
    done
    stop "$GW_PID"; stop "$UP_PID"
    {
        echo
        echo "## Large tools/call answers, 4 sessions in a loop"
        echo
        echo "| answer | direct MiB/s | gateway MiB/s | gateway / direct | direct p50 ms | gateway p50 ms | gateway p99 ms | gateway RSS max MiB | bytes identical |"
        echo "|---|---:|---:|---:|---:|---:|---:|---:|---|"
        local label drow grow same
        for label in 1MiB-json 1MiB-sse 16MiB-json 16MiB-sse; do
            read -r _ dmib dp50 _ _ <<<"$(calls_row "$label" direct)"
            read -r _ gmib gp50 gp99 grss <<<"$(calls_row "$label" gateway)"
            same=$(awk -v l="$label" '$1 == l {print $8, $9}' "$WORK/calls" | sort -u | wc -l)
            printf '| %s | %.0f | %.0f | %s | %s | %s | %s | %s | %s |\n' "$label" "$dmib" "$gmib" \
                "$(awk -v g="$gmib" -v d="$dmib" 'BEGIN {printf "%.0f%%", 100 * g / d}')" \
                "$(ms "$dp50")" "$(ms "$gp50")" "$(ms "$gp99")" "$(mib "$grss")" \
                "$([[ $same == 1 ]] && echo yes || echo no)"
        done
        echo
        echo "Bar: ≥ 50 % of direct throughput. \"bytes identical\": every target's first answer had the same length and FNV-1a hash."
    } >>"$REPORT"
}

# --- list ----------------------------------------------------------------------------------------

part_list() {
    log "tools/list of 1,000 tools (load $(load))"
    start_upstream 998
    local round out
    for round in $(seq "$ROUNDS"); do
        "${CLIENT[@]}" list --url "http://127.0.0.1:$UP_PORT/mcp" --repeat 20 >"$WORK/list-direct-$round.json" \
            || die "list/direct: the client failed"
        # A fresh gateway each round: its first call finds an empty catalog.
        start_gateway "list-$round"
        "${CLIENT[@]}" list --url "http://127.0.0.1:$GW_PORT/mcp" --repeat 20 >"$WORK/list-gateway-$round.json" \
            || die "list/gateway: the client failed"
        stop "$GW_PID"
    done
    stop "$UP_PID"
    local t key
    {
        echo
        echo "## tools/list of $(jget "$WORK/list-gateway-1.json" tools) tools (one session, sequential)"
        echo
        echo "| target | first tools/call ms | second tools/call ms | tools/list p50 ms |"
        echo "|---|---:|---:|---:|"
        for t in direct gateway; do
            printf '| %s |' "$t"
            for key in first_call_us second_call_us list_p50_us; do
                printf ' %s |' "$(ms "$(for out in "$WORK"/list-"$t"-*.json; do jget "$out" "$key"; done | median)")"
            done
            echo
        done
        echo
        echo "The gateway's first call of a fresh process lists the upstream's tools itself and classifies against them; later calls use the pinned catalog. Its tools/list adds the confirmationToken property where a tool may be held and pins the listing."
    } >>"$REPORT"
}

for part in $PARTS; do
    "part_$part"
    cp "$REPORT" "$RESULTS/growth.md"
done
echo "- load average at the end: $(load)" >>"$REPORT"
cp "$REPORT" "$RESULTS/growth.md"
echo
cat "$REPORT"
