#!/usr/bin/env bash
# System calls per request of the gateway (or a bench/floor mode) on the read path, counted by
# strace: repeatable whatever else the machine does, and the kernel's share of a request is
# mostly its system calls.
#
#   bash bench/syscalls.sh               # the gateway (release build)
#   bash bench/syscalls.sh raw           # a bench/floor mode: proxy, raw or hybrid
#
# Setup as bench/run.sh: nginx answering every POST with bench/upstream_response.json, the proxy
# with one tokio worker in front of it, wrk sending bench/tools_call.lua on 8 connections. After
# 2 s of warm-up, strace -c -f attaches for SYSCALLS_SECONDS (4) of load; each system call's
# count divided by the requests answered is printed.
# Knobs: BENCH_SKIP_BUILD=1, SYSCALLS_SECONDS.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$ROOT/bench
TARGET=${1:-gateway}
SECONDS_TO_COUNT=${SYSCALLS_SECONDS:-4}

log() { printf '[syscalls] %s\n' "$*" >&2; }

# shellcheck source=bench/fixed_upstream.sh
. "$BENCH/fixed_upstream.sh"
install_missing nginx=nginx wrk=wrk strace=strace
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
if [[ ${BENCH_SKIP_BUILD:-0} != 1 ]]; then
    if [[ $TARGET == gateway ]]; then
        (cd "$ROOT" && cargo build --release --bin countersign --quiet)
    else
        (cd "$BENCH/floor" && cargo build --release --quiet --target-dir "$ROOT/target/floor")
    fi
fi

begin_run syscalls
UP=$(port); PROXY=$(port)
start_fixed_upstream "$NGINX" "$UP"
case $TARGET in
gateway)
    env -u RUST_LOG TOKIO_WORKER_THREADS=1 "$ROOT/target/release/countersign" serve \
        --upstream "http://127.0.0.1:$UP/mcp" --listen "127.0.0.1:$PROXY" --admin off \
        --policy "$BENCH/policy.yaml" >/dev/null 2>&1 &
    ;;
proxy | raw | hybrid)
    env TOKIO_WORKER_THREADS=1 "$ROOT/target/floor/release/countersign-floor" "$TARGET" \
        "127.0.0.1:$PROXY" "127.0.0.1:$UP" >/dev/null 2>&1 &
    ;;
*) log "unknown target $TARGET (gateway, proxy, raw or hybrid)"; exit 2 ;;
esac
PROXY_PID=$!
PIDS+=("$PROXY_PID")
wait_port "$PROXY"
URL=http://127.0.0.1:$PROXY/mcp

wrk -t1 -c8 -d2s -s "$BENCH/tools_call.lua" "$URL" >/dev/null
strace -c -f -p "$PROXY_PID" -o "$WORK/strace.txt" 2>/dev/null &
STRACE_PID=$!
sleep 0.5
out=$(wrk -t1 -c8 -d"${SECONDS_TO_COUNT}s" -s "$BENCH/tools_call.lua" "$URL")
kill -INT "$STRACE_PID"
wait "$STRACE_PID" || true
requests=$(awk '/requests in/ {print $1}' <<<"$out")

echo "| system call | per request ($TARGET, $requests requests) |"
echo "|---|---:|"
awk -v n="$requests" 'NR > 2 && $NF != "total" && NF >= 5 { printf "%s %.2f\n", $NF, $4 / n }' \
    "$WORK/strace.txt" | sort -k2 -nr | awk '$2 >= 0.01 { printf "| `%s` | %s |\n", $1, $2 }'
