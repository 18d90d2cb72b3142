#!/usr/bin/env bash
# CPU profile of the gateway at peak load, with perf (apt package linux-perf).
#
#   bash bench/profile.sh            # then: perf report -i bench/results/perf.data
#
# Same setup as bench/run.sh's `pinned` scenario: the benchmark upstream (nginx, fixed response)
# and the gateway (TOKIO_WORKER_THREADS=1) on CPU 0, wrk on CPU 1, saturating. perf samples the
# gateway process only, with DWARF call graphs (the release profile keeps line tables).
# Knobs: PROFILE_SECONDS (default 10), BENCH_SKIP_BUILD=1, PROFILE_GATEWAY_BIN (another build,
# such as scripts/pgo-build.sh's), PROFILE_SCENARIO=default (run.sh's `default` scenario instead:
# nothing pinned, the gateway's default worker count, wrk -t2). Writes bench/results/perf.data and
# bench/results/profile.txt (time by activity: the gateway's own code or the system call it is
# in; flat and caller-folded top symbols).

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$ROOT/bench
RESULTS=$BENCH/results
SECONDS_TO_PROFILE=${PROFILE_SECONDS:-10}
SCENARIO=${PROFILE_SCENARIO:-pinned}
case $SCENARIO in
    pinned) SUT=(taskset -c 0); GEN=(taskset -c 1); WORKERS=(TOKIO_WORKER_THREADS=1); THREADS=1 ;;
    default) SUT=(); GEN=(); WORKERS=(); THREADS=2 ;;
    *) printf '[profile] PROFILE_SCENARIO is pinned or default, not %s\n' "$SCENARIO" >&2; exit 2 ;;
esac
GATEWAY_BIN=${PROFILE_GATEWAY_BIN:-$ROOT/target/release/countersign}

log() { printf '[profile] %s\n' "$*" >&2; }

# shellcheck source=bench/fixed_upstream.sh
. "$BENCH/fixed_upstream.sh"
install_missing nginx=nginx wrk=wrk perf=linux-perf
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
if [[ ${BENCH_SKIP_BUILD:-0} != 1 ]]; then
    (cd "$ROOT" && cargo build --release --bin countersign --quiet)
fi

# Raised priority, as in run.sh, so other work on a shared machine disturbs the profile less.
renice -n "${BENCH_NICE:--10}" -p $$ >/dev/null 2>&1 || true

WORK=$(mktemp -d /tmp/countersign-profile.XXXXXX)
chmod 755 "$WORK"
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

UP=$(port)
GW=$(port)
while [[ $GW == "$UP" ]]; do GW=$(port); done
write_fixed_upstream_conf "$UP"
${SUT[@]+"${SUT[@]}"} "$NGINX" -p "$WORK" -e "$WORK/error.log" -c "$WORK/nginx.conf" &
PIDS+=($!)
wait_port "$UP"
${SUT[@]+"${SUT[@]}"} env -u RUST_LOG ${WORKERS[@]+"${WORKERS[@]}"} "$GATEWAY_BIN" serve \
    --upstream "http://127.0.0.1:$UP/mcp" --listen "127.0.0.1:$GW" --admin off --policy "$BENCH/policy.yaml" \
    >/dev/null 2>"$WORK/gateway.log" &
GW_PID=$!
PIDS+=("$GW_PID")
wait_port "$GW"

mkdir -p "$RESULTS"
URL=http://127.0.0.1:$GW/mcp
${GEN[@]+"${GEN[@]}"} wrk -t$THREADS -c64 -d2s -s "$BENCH/tools_call.lua" "$URL" >/dev/null
log "profiling the gateway (pid $GW_PID) for ${SECONDS_TO_PROFILE}s at peak load"
${GEN[@]+"${GEN[@]}"} wrk -t$THREADS -c64 -d"$((SECONDS_TO_PROFILE + 2))s" -s "$BENCH/tools_call.lua" "$URL" >"$RESULTS/profile-wrk.txt" &
WRK_PID=$!
sleep 1
${GEN[@]+"${GEN[@]}"} perf record -q -F 997 --call-graph dwarf,16384 -p "$GW_PID" -o "$RESULTS/perf.data" \
    -- sleep "$SECONDS_TO_PROFILE" 2>/dev/null
wait "$WRK_PID"
{
    echo "# wrk during the profile"
    cat "$RESULTS/profile-wrk.txt"
    echo
    echo "# time by activity: user code, or the system call a kernel sample is in"
    # The kernel's loopback TCP work for a send runs in the sender's context, so a send to the
    # upstream carries the upstream side's receive and the wake-up of its process, and, where
    # that wake-up preempts the gateway, the switch away and back ("with a switch").
    perf script -i "$RESULTS/perf.data" -F ip,sym 2>/dev/null | python3 -c '
import collections, sys
counts, total, frames = collections.Counter(), 0, []
CALLS = ("sendto", "send"), ("writev", "writev"), ("recvfrom", "recv"), ("epoll_wait", "epoll_wait")
def system_call(frames):
    # By the kernel function that runs it, whichever library (libc, rustix) made the call; a
    # sample taken on the way out (a switch before returning to user space) has only the
    # caller: its innermost user-space frames name the call.
    kernel = " ".join(f for f in frames if f.startswith("[k]"))
    for call, name in CALLS:
        if f"sys_{call}" in kernel or f"do_{call}" in kernel:
            return name
    if kernel:
        caller = " ".join([f.split(" (")[0] for f in frames if not f.startswith("[k]")][:3])
        for call, name in CALLS:
            if any(word in (call, name) for word in caller.replace("::", " ").split()):
                return name
    return None
def tally(frames):
    global total
    if not frames:
        return
    total += 1
    stack = " ".join(frames)
    call = system_call(frames)
    if call == "send":
        upstream = "http1_conn" in stack or "upstream" in stack
        what = "send to the upstream" if upstream else "send to the client"
    elif call == "writev":
        what = "writev to the client"
    elif call is not None:
        what = call
    elif frames[0].startswith("[k]"):
        what = "other kernel"
    else:
        what = "user code"
    if "finish_task_switch" in stack:
        what += ", with a switch"
    counts[what] += 1
for line in sys.stdin:
    line = line.strip()
    if not line:
        tally(frames)
        frames = []
        continue
    address, _, symbol = line.partition(" ")
    frames.append(("[k] " if address.startswith("ffffffff") else "") + symbol)
tally(frames)
for what, n in counts.most_common():
    print(f"{100 * n / max(total, 1):5.1f} %  {what}")
'
    echo
    echo "# self time by symbol"
    perf report -i "$RESULTS/perf.data" --no-children --sort dso --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | sed 's/  */ /g'
    echo
    perf report -i "$RESULTS/perf.data" --no-children --sort symbol --stdio -g none --percent-limit 0.5 2>/dev/null \
        | grep -v '^#' | grep -v '^$' | sed 's/  */ /g; s/ - - *$//'
    echo
    echo "# inclusive time by symbol (children)"
    perf report -i "$RESULTS/perf.data" --children --sort symbol --stdio -g none --percent-limit 0.5 2>/dev/null \
        | grep -v '^#' | grep -v '^$' | grep -v '(inlined)' | sed 's/  */ /g; s/ - - *$//' \
        | grep -E 'countersign|hyper|serde|http::|tokio::sync|prometheus|tracing|malloc|free|memmove|writev|recv|epoll' | cut -c1-200
    echo
    echo "# samples of the gateway's own code on atomic instructions"
    # A locked instruction's cost lands on it or, by the sampling's skid, on the one after it:
    # reference counts (Arc, Bytes), tokio's task states, mutexes. Counted over every annotated
    # instruction of the binary, weighted by its function's samples.
    perf annotate -i "$RESULTS/perf.data" --stdio --dsos "$GATEWAY_BIN" 2>/dev/null \
        | python3 -c '
import re, sys
weight, rows = None, []
for line in sys.stdin:
    header = re.search(r"Disassembly of (.*) for .* \((\d+) samples", line)
    if header:
        weight, function = int(header.group(2)), header.group(1)
        continue
    row = re.match(r"\s*([0-9.]+)\s*:\s*[0-9a-f]+:\s*(.*)", line)
    if row and weight:
        rows.append((function, weight * float(row.group(1)) / 100, row.group(2)))
total = sum(n for _, n, _ in rows)
atomic = sum(n for i, (f, n, ins) in enumerate(rows)
             if ins.startswith(("lock", "xchg"))
             or (i and rows[i - 1][0] == f and rows[i - 1][2].startswith("lock")))
print(f"{atomic:.0f} of {total:.0f} samples ({100 * atomic / max(total, 1):.1f} %)")
'
} >"$RESULTS/profile.txt"
log "wrote $RESULTS/profile.txt and $RESULTS/perf.data"
head -n 80 "$RESULTS/profile.txt"
