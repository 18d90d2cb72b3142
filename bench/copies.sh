#!/usr/bin/env bash
# Bytes the gateway copies per request on the read path, and who copies them: every call of
# libc's `memcpy`/`memmove` is caught by a perf uprobe with its length and call stack.
#
#   bash bench/copies.sh
#
# Setup as bench/syscalls.sh: nginx answering every POST with bench/upstream_response.json, the
# gateway (release build, one tokio worker) in front of it, wrk sending bench/tools_call.lua (on
# 8 connections to warm up, then on one while counted, so perf keeps up with the stacks). A
# uprobe stops the gateway at every copy, so it runs a few hundred requests a second while
# counted: the figures are per request, not a speed. Copies the compiler inlines
# (small moves of known size) are not calls and are not counted; libc's copy routine is what
# shows in a CPU profile (`__memmove_avx_unaligned_erms`, bench/profile.sh).
# Needs root (uprobes) and perf (apt package linux-perf).
# Knobs: BENCH_SKIP_BUILD=1, COPIES_SECONDS (3), COPIES_SYMBOL (libc's copy routine to probe;
# default the first of its AVX, EVEX and SSE2 variants that perf can probe: libc picks one by
# CPU, and a run that catches nothing says to name the one in use), COPIES_TOP (20 rows).

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$ROOT/bench
SECONDS_TO_COUNT=${COPIES_SECONDS:-3}
TOP=${COPIES_TOP:-20}

log() { printf '[copies] %s\n' "$*" >&2; }

# shellcheck source=bench/fixed_upstream.sh
. "$BENCH/fixed_upstream.sh"
install_missing nginx=nginx wrk=wrk perf=linux-perf
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
if [[ ${BENCH_SKIP_BUILD:-0} != 1 ]]; then
    (cd "$ROOT" && cargo build --release --bin countersign --quiet)
fi

LIBC=$(ldd "$ROOT/target/release/countersign" | awk '/libc\.so/ {print $3}')
[[ -n $LIBC ]] || { log "the gateway links no libc"; exit 1; }
begin_run copies
EVENT=countersign_copies:copy
# The length is the third argument (rdx) of memcpy and memmove alike. The variants are local
# symbols that only perf's view of libc's debug information names, so each is tried in turn.
SYMBOL=""
for candidate in ${COPIES_SYMBOL:-__memmove_avx_unaligned_erms __memmove_evex_unaligned_erms \
    __memmove_sse2_unaligned_erms}; do
    if perf probe -q -x "$LIBC" --add "$EVENT=$candidate len=%dx:u64" 2>/dev/null; then
        SYMBOL=$candidate
        break
    fi
done
if [[ -z $SYMBOL ]]; then
    log "could not probe libc's copy routine in $LIBC; set COPIES_SYMBOL"
    exit 1
fi
trap 'perf probe -q --del "$EVENT" 2>/dev/null || true; stop_started' EXIT

UP=$(port)
GW=$(port)
start_fixed_upstream "$NGINX" "$UP"
env -u RUST_LOG TOKIO_WORKER_THREADS=1 "$ROOT/target/release/countersign" serve \
    --upstream "http://127.0.0.1:$UP/mcp" --listen "127.0.0.1:$GW" --admin off \
    --policy "$BENCH/policy.yaml" >/dev/null 2>&1 &
GW_PID=$!
PIDS+=("$GW_PID")
wait_port "$GW"
URL=http://127.0.0.1:$GW/mcp

wrk -t1 -c8 -d2s -s "$BENCH/tools_call.lua" "$URL" >/dev/null
perf record -q -e "$EVENT" --call-graph dwarf,4096 -m 1024 -p "$GW_PID" -o "$WORK/perf.data" \
    -- sleep "$((SECONDS_TO_COUNT + 1))" 2>/dev/null &
PERF_PID=$!
sleep 0.5
out=$(wrk -t1 -c1 -d"${SECONDS_TO_COUNT}s" -s "$BENCH/tools_call.lua" "$URL")
wait "$PERF_PID" || true
requests=$(awk '/requests in/ {print $1}' <<<"$out")
perf script -i "$WORK/perf.data" -F trace,ip,sym 2>/dev/null >"$WORK/copies.txt"
# A sample perf could not keep up with is a copy not counted: refuse rather than undercount.
lost=$(perf report -i "$WORK/perf.data" --stats 2>/dev/null \
    | awk -F: '/LOST/ { split($2, n, " "); if (n[1] + 0 > 0) print }' || true)
[[ -z $lost ]] || { log "perf lost samples, the counts would be short: $lost"; exit 1; }

python3 - "$WORK/copies.txt" "$requests" "$TOP" "$SYMBOL" <<'PY'
import collections, re, sys

path, requests, top, symbol = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
by_caller, calls_by_caller = collections.Counter(), collections.Counter()
by_site = collections.Counter()
length, frames = None, []

def count():
    if length is None:
        return
    own = [f for f in frames if "memmove" not in f and "memcpy" not in f]
    caller = own[0] if own else "?"
    by_caller[caller] += length
    calls_by_caller[caller] += 1
    by_site[(length, " <- ".join(f[:80] for f in own[:2]))] += 1

for line in open(path, errors="replace"):
    found = re.search(r"len=(\d+)", line)
    if found:
        count()
        length, frames = int(found.group(1)), []
    elif line.strip():
        parts = line.split(None, 1)
        if len(parts) == 2:
            frames.append(parts[1].strip())
count()

calls = sum(calls_by_caller.values())
total = sum(by_caller.values())
if calls == 0:
    sys.exit(f"no call of `{symbol}` caught: this CPU's libc copies with another variant; "
             "name it in COPIES_SYMBOL (bench/profile.sh shows it)")
print(f"{requests} requests; `{symbol}`: {calls / requests:.1f} calls and "
      f"{total / requests:,.0f} bytes per request\n")
print("| caller | bytes per request | calls per request |")
print("|---|---:|---:|")
for caller, copied in by_caller.most_common(top):
    caller_calls = calls_by_caller[caller] / requests
    print(f"| `{caller[:110]}` | {copied / requests:,.0f} | {caller_calls:.1f} |")
print("\n| bytes | per request | copied by (caller <- its caller) |")
print("|---:|---:|---|")
for (size, site), n in sorted(by_site.items(), key=lambda kv: -kv[0][0] * kv[1])[:top]:
    print(f"| {size} | {n / requests:.1f} | `{site}` |")
PY
