#!/usr/bin/env bash
# System calls and context switches per request at peak load, the gateway beside the nginx proxy,
# counted by the kernel's syscall tracepoints with `perf stat` (no stop per call, unlike
# bench/syscalls.sh's strace, so the load and the batching it brings are those of a real run).
#
#   bash bench/syscall-rates.sh            # pinned, as bench/run.sh's `pinned` scenario
#   bash bench/syscall-rates.sh default    # nothing pinned, default worker counts, wrk -t2
#
# Targets, in front of the same upstream (nginx answering POST /mcp with
# bench/upstream_response.json): `nginx`, nginx `proxy_pass` in a process of its own (the
# yardstick's `nginx-apart`, as bench/run.sh runs it), and `gateway` (bench/policy.yaml, audit to
# /dev/null). Each gets 2 s of warm-up, then RATES_SECONDS of wrk -c64 while perf counts.
# Needs root (tracepoints) and perf (apt package linux-perf).
# Knobs: BENCH_SKIP_BUILD=1, GATEWAY_BIN (another build), RATES_SECONDS (5).

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$ROOT/bench
SCENARIO=${1:-pinned}
SECONDS_TO_COUNT=${RATES_SECONDS:-5}
GATEWAY_BIN=${GATEWAY_BIN:-$ROOT/target/release/countersign}

# shellcheck source=bench/fixed_upstream.sh
. "$BENCH/fixed_upstream.sh"
install_missing nginx=nginx wrk=wrk perf=linux-perf
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
if [[ ${BENCH_SKIP_BUILD:-0} != 1 ]]; then
    (cd "$ROOT" && cargo build --release --bin countersign --quiet)
fi

case $SCENARIO in
pinned) SUT=(taskset -c 0) GEN=(taskset -c 1) WORKERS=1 THREADS=1 ;;
default) SUT=(env) GEN=(env) WORKERS=auto THREADS=2 ;;
*) printf 'unknown scenario %s (pinned or default)\n' "$SCENARIO" >&2; exit 2 ;;
esac

begin_run syscall-rates
UP=$(port)
NX=$(port)
GW=$(port)
write_fixed_upstream_conf "$UP"
sed -i "s/^worker_processes .*/worker_processes $WORKERS;/" "$WORK/nginx.conf"
"${SUT[@]}" "$NGINX" -p "$WORK" -e "$WORK/error.log" -c "$WORK/nginx.conf" &
PIDS+=($!)
write_nginx_proxy_conf "$WORK/proxy" "$NX" "$UP" "$WORKERS"
"${SUT[@]}" "$NGINX" -p "$WORK/proxy" -e "$WORK/proxy/error.log" -c "$WORK/proxy/nginx.conf" &
PROXY_MASTER=$!
PIDS+=("$PROXY_MASTER")
gateway_env=(env -u RUST_LOG -u TOKIO_WORKER_THREADS)
[[ $SCENARIO == pinned ]] && gateway_env+=(TOKIO_WORKER_THREADS=1)
"${SUT[@]}" "${gateway_env[@]}" "$GATEWAY_BIN" serve --upstream "http://127.0.0.1:$UP/mcp" \
    --listen "127.0.0.1:$GW" --admin off --policy "$BENCH/policy.yaml" >/dev/null 2>"$WORK/gw.log" &
GATEWAY_PID=$!
PIDS+=("$GATEWAY_PID")
for p in "$UP" "$NX" "$GW"; do wait_port "$p"; done

CALLS=(epoll_wait recvfrom read sendto writev write futex epoll_ctl)
events=$(printf 'syscalls:sys_enter_%s,' "${CALLS[@]}")context-switches
declare -A per_request
for target in nginx gateway; do
    if [[ $target == gateway ]]; then port=$GW pids=$GATEWAY_PID
    else port=$NX pids=$(pgrep -P "$PROXY_MASTER" | paste -sd,); fi
    url=http://127.0.0.1:$port/mcp
    "${GEN[@]}" wrk -t"$THREADS" -c64 -d2s -s "$BENCH/tools_call.lua" "$url" >/dev/null
    "${GEN[@]}" wrk -t"$THREADS" -c64 -d"$((SECONDS_TO_COUNT + 2))s" -s "$BENCH/tools_call.lua" \
        "$url" >"$WORK/wrk-$target.txt" &
    wrk_pid=$!
    sleep 1
    perf stat -x, -e "$events" -p "$pids" -o "$WORK/stat-$target.txt" -- sleep "$SECONDS_TO_COUNT"
    wait "$wrk_pid"
    rate=$(awk '/Requests\/sec/ {print $2}' "$WORK/wrk-$target.txt")
    per_request[$target-rate]=$rate
    while IFS=, read -r count _ event _; do
        [[ $count =~ ^[0-9]+$ ]] || continue
        per_request[$target-${event#syscalls:sys_enter_}]=$(
            awk -v c="$count" -v r="$rate" -v s="$SECONDS_TO_COUNT" 'BEGIN {printf "%.3f", c / (r * s)}')
    done <"$WORK/stat-$target.txt"
done

echo "Scenario \`$SCENARIO\`: per request at peak (nginx ${per_request[nginx-rate]} req/s," \
    "gateway ${per_request[gateway-rate]} req/s)"
echo
echo "| | nginx | gateway |"
echo "|---|---:|---:|"
for call in "${CALLS[@]}" context-switches; do
    name=\`$call\`
    [[ $call == context-switches ]] && name="context switches"
    echo "| $name | ${per_request[nginx-$call]:-0} | ${per_request[gateway-$call]:-0} |"
done
