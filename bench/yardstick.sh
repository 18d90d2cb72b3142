#!/usr/bin/env bash
# How far the gateway is from nginx, and how much of that any hyper proxy pays: peak req/s and
# CPU per request of four targets on the same benchmark request, interleaved round by round so a
# machine that speeds up or slows down moves all four alike.
#
#   bash bench/yardstick.sh           # prints one line per target and round, then medians
#
# Targets, each in front of the same upstream (nginx answering POST /mcp with
# bench/upstream_response.json, as bench/run.sh's `direct`):
#   direct    the upstream itself
#   nginx     nginx `proxy_pass` with upstream keep-alive (the same nginx process as the upstream)
#   nginx-apart  the same proxy in a process of its own, as bench/run.sh runs it (it then wakes
#             the upstream's process as the gateway does)
#   floor     bench/floor: hyper's server and one hyper client connection, inspecting nothing
#   floor-inline  the same, the client connection driven in the server connection's task
#   floor-raw the same proxy without hyper: httparse, one read and one write per message each way
#   floor-hybrid  hyper's server in front of floor-raw's upstream side
#   gateway   countersign with bench/policy.yaml, full inspection, audit to /dev/null
# Setup as run.sh's `pinned` scenario: everything under test on CPU 0 (one nginx worker, one tokio
# worker), wrk -t1 -c64 on CPU 1. CPU per request is the target process's user+system time over
# the requests answered (its system time also in a column of its own); nginx's includes the
# upstream's share (they are one process), so subtract direct's to compare it with the others.
# Forced switches per request: how often the target's threads were switched out while still
# runnable, over the requests answered; on a shared core, mostly preempted by the upstream they
# had just woken (nginx's proxy shares its process with the upstream, so it has none of those).
# YARDSTICK_SCENARIO=default instead: nothing pinned, nginx `worker_processes auto`, the gateway
# and the floor with their default worker counts, wrk -t2 (run.sh's `default` scenario).
# Knobs: YARDSTICK_ROUNDS (3), YARDSTICK_SECONDS (5), YARDSTICK_TARGETS (default `direct nginx
# floor floor-inline gateway`; the last column compares with nginx, or with nginx-apart when
# nginx is not among them), BENCH_SKIP_BUILD=1, GATEWAY_BIN (another build of the gateway), GATEWAY_B_BIN
# (a second build, measured as `gateway-b`: add it to YARDSTICK_TARGETS for an A/B comparison).

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$ROOT/bench
ROUNDS=${YARDSTICK_ROUNDS:-3}
SECONDS_PER_RUN=${YARDSTICK_SECONDS:-5}

log() { printf '[yardstick] %s\n' "$*" >&2; }

NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[[ -x $NGINX ]] && command -v wrk >/dev/null || {
    log "needs nginx and wrk (bench/run.sh installs them)"
    exit 1
}
if [[ ${BENCH_SKIP_BUILD:-0} != 1 ]]; then
    (cd "$ROOT" && cargo build --release --bin countersign --quiet)
    (cd "$BENCH/floor" && cargo build --release --quiet --target-dir "$ROOT/target/floor")
fi
FLOOR_BIN=$ROOT/target/floor/release/countersign-floor
[[ -x $FLOOR_BIN ]] || FLOOR_BIN=$BENCH/floor/target/release/countersign-floor

renice -n "${BENCH_NICE:--10}" -p $$ >/dev/null 2>&1 || true
WORK=$(mktemp -d /tmp/countersign-yardstick.XXXXXX)
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

# shellcheck source=bench/fixed_upstream.sh
. "$BENCH/fixed_upstream.sh"
UP=$(port)
NX=$(port)
GW=$(port)
write_fixed_upstream_conf "$UP"
if [[ ${YARDSTICK_SCENARIO:-pinned} == default ]]; then
    SUT=(env)
    GEN=(env)
    ONE_WORKER=()
    WRK_THREADS=2
    sed -i 's/^worker_processes 1;/worker_processes auto;/' "$WORK/nginx.conf"
else
    SUT=(taskset -c 0)
    GEN=(taskset -c 1)
    ONE_WORKER=(TOKIO_WORKER_THREADS=1)
    WRK_THREADS=1
fi
# The nginx proxy lives in the upstream's process, as a second server block.
sed -i '$d' "$WORK/nginx.conf"
{ nginx_proxy_server "$NX" "$UP"; echo "}"; } >>"$WORK/nginx.conf"
"${SUT[@]}" "$NGINX" -p "$WORK" -e "$WORK/error.log" -c "$WORK/nginx.conf" &
PIDS+=($!)
NGINX_MASTER=$!
# nginx-apart: the proxy alone, in a second nginx.
NA=$(port)
write_nginx_proxy_conf "$WORK/apart" "$NA" "$UP" \
    "$(awk '/^worker_processes/ {print $2}' "$WORK/nginx.conf" | tr -d ';')"
"${SUT[@]}" "$NGINX" -p "$WORK/apart" -e "$WORK/apart/error.log" -c "$WORK/apart/nginx.conf" &
PIDS+=($!)
NGINX_APART_MASTER=$!
# The floor's modes, one process each, under the yardstick's target names.
declare -A port pid
declare -A floor_mode=([floor]=proxy [floor-inline]=proxy-inline [floor-raw]=raw [floor-hybrid]=hybrid)
for target in "${!floor_mode[@]}"; do
    port[$target]=$(port)
    "${SUT[@]}" env "${ONE_WORKER[@]}" "$FLOOR_BIN" "${floor_mode[$target]}" \
        "127.0.0.1:${port[$target]}" "127.0.0.1:$UP" >/dev/null 2>&1 &
    PIDS+=($!)
    pid[$target]=$!
done
"${SUT[@]}" env -u RUST_LOG "${ONE_WORKER[@]}" "${GATEWAY_BIN:-$ROOT/target/release/countersign}" serve \
    --upstream "http://127.0.0.1:$UP/mcp" --listen "127.0.0.1:$GW" --admin off \
    --policy "$BENCH/policy.yaml" >/dev/null 2>"$WORK/gateway.log" &
PIDS+=($!)
GATEWAY_PID=$!
# An A/B comparison: a second build of the gateway, measured as the target `gateway-b`.
GB=$(port)
if [[ -n ${GATEWAY_B_BIN:-} ]]; then
    "${SUT[@]}" env -u RUST_LOG "${ONE_WORKER[@]}" "$GATEWAY_B_BIN" serve \
        --upstream "http://127.0.0.1:$UP/mcp" --listen "127.0.0.1:$GB" --admin off \
        --policy "$BENCH/policy.yaml" >/dev/null 2>"$WORK/gateway-b.log" &
    PIDS+=($!)
    GATEWAY_B_PID=$!
    wait_port "$GB"
fi
for p in "$UP" "$NX" "$NA" "$GW" "${port[@]}"; do wait_port "$p"; done
NGINX_WORKERS=$(pgrep -P "$NGINX_MASTER" | tr '\n' ' ')

# ticks PID...: "user+system system forced" time of the processes, in clock ticks, and the
# times their threads were switched out while still runnable (preempted, mostly by the upstream
# they woke on a shared core).
ticks() {
    local pid user=0 sys=0 forced=0 u s task
    for pid in "$@"; do
        read -r u s < <(awk '{print $14, $15}' "/proc/$pid/stat")
        user=$((user + u)) sys=$((sys + s))
        for task in /proc/"$pid"/task/*; do
            forced=$((forced + $(awk '/^nonvoluntary_ctxt_switches/ {print $2}' "$task/status")))
        done
    done
    echo "$((user + sys)) $sys $forced"
}
port+=([direct]=$UP [nginx]=$NX [nginx-apart]=$NA [gateway]=$GW [gateway-b]=$GB)
pid+=([direct]=$NGINX_WORKERS [nginx]=$NGINX_WORKERS [nginx-apart]="$(pgrep -P "$NGINX_APART_MASTER" | tr '\n' ' ')"
    [gateway]=$GATEWAY_PID [gateway-b]=${GATEWAY_B_PID:-})
declare -A rates cpus syss forceds
read -ra TARGETS <<<"${YARDSTICK_TARGETS:-direct nginx floor floor-inline gateway}"
TICK_NS=$((1000000000 / $(getconf CLK_TCK)))

for target in "${TARGETS[@]}"; do
    "${GEN[@]}" wrk -t"$WRK_THREADS" -c64 -d2s -s "$BENCH/tools_call.lua" "http://127.0.0.1:${port[$target]}/mcp" >/dev/null
done
for round in $(seq "$ROUNDS"); do
    for target in "${TARGETS[@]}"; do
        # shellcheck disable=SC2086 # a list of pids
        read -r before sys_before forced_before < <(ticks ${pid[$target]})
        out=$("${GEN[@]}" wrk -t"$WRK_THREADS" -c64 -d"${SECONDS_PER_RUN}s" -s "$BENCH/tools_call.lua" \
            "http://127.0.0.1:${port[$target]}/mcp")
        # shellcheck disable=SC2086
        read -r after sys_after forced_after < <(ticks ${pid[$target]})
        if grep -q "Non-2xx" <<<"$out"; then
            log "$target answered errors: $out"
            exit 1
        fi
        rate=$(awk '/Requests\/sec/ {printf "%d", $2}' <<<"$out")
        requests=$(awk '/requests in/ {print $1}' <<<"$out")
        cpu=$(awk -v t=$((after - before)) -v ns="$TICK_NS" -v n="$requests" 'BEGIN {printf "%.1f", t * ns / n / 1000}')
        sys=$(awk -v t=$((sys_after - sys_before)) -v ns="$TICK_NS" -v n="$requests" 'BEGIN {printf "%.1f", t * ns / n / 1000}')
        forced=$(awk -v f=$((forced_after - forced_before)) -v n="$requests" 'BEGIN {printf "%.2f", f / n}')
        printf 'round %s  %-12s %7s req/s  %5s µs CPU per request (%s system), %s forced switches\n' \
            "$round" "$target" "$rate" "$cpu" "$sys" "$forced"
        rates[$target]+="$rate "
        cpus[$target]+="$cpu "
        syss[$target]+="$sys "
        forceds[$target]+="$forced "
    done
done

median() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
echo
# Against the nginx proxy in the run: the one sharing the upstream's process if it ran, else the
# one in a process of its own (as bench/run.sh runs it).
yard=nginx
[[ -n ${rates[nginx]:-} ]] || yard=nginx-apart
echo "| target | peak req/s (median of $ROUNDS) | CPU µs per request | of which system | forced switches per request | × $yard |"
echo "|---|---:|---:|---:|---:|---:|"
nginx_rate=$(median <<<"${rates[$yard]:-}")
for target in "${TARGETS[@]}"; do
    rate=$(median <<<"${rates[$target]}")
    printf '| %s | %s | %s | %s | %s | %s |\n' "$target" "$rate" "$(median <<<"${cpus[$target]}")" \
        "$(median <<<"${syss[$target]}")" "$(median <<<"${forceds[$target]}")" \
        "$(awk -v a="$rate" -v b="$nginx_rate" 'BEGIN {if (b > 0) printf "%.2f", a / b; else printf "—"}')"
done
