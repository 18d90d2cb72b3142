#!/usr/bin/env bash
# Where a held call's and a redemption's CPU goes, next to a read: the CPU per request of each
# process on the pinned core — the gateway's user and system time, the Redis server's, the
# upstream's — at peak load, so a change to the approval paths can be judged by what it costs
# and not only by req/s, which this machine's noise moves more than the change does.
#
#   bash bench/approval-cpu.sh        # prints one line per path and round
#
# Setup as bench/run.sh's `pinned` scenario: the upstream (nginx answering POST /mcp with
# bench/upstream_response.json), a local redis-server (the replay store) and the gateway (one
# worker, bench/policy.yaml, audit to /dev/null) on CPU 0; wrk -t1 -c64 on CPU 1.
# APPROVAL_SCENARIO=default runs run.sh's `default` scenario instead: nothing pinned, the
# gateway's default workers, wrk -t2. There the load generator shares the CPUs with what it
# measures, so its own CPU per request and the whole machine's are printed too. Paths:
#   read     the read-only `tools/call` (bench/tools_call.lua): forwarded
#   held     distinct risky calls (bench/mint.lua): a token minted, a held result, nothing
#            forwarded; the bodies that redeem those tokens are kept for the next path
#   redeem   each of those bodies once (bench/redeem_once.lua): verified, spent in Redis,
#            forwarded
# Knobs: BENCH_GATEWAY_BIN (the build to measure; default this checkout's release build, built
# unless BENCH_SKIP_BUILD=1), APPROVAL_ROUNDS (2), APPROVAL_SECONDS (8), APPROVAL_SCENARIO
# (pinned).

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$ROOT/bench
ROUNDS=${APPROVAL_ROUNDS:-2}
SECS=${APPROVAL_SECONDS:-8}
SCENARIO=${APPROVAL_SCENARIO:-pinned}
case $SCENARIO in
    # SUT: the prefix of what is measured; LOAD: the load generator's, with its threads.
    pinned) SUT=(taskset -c 0) LOAD=(taskset -c 1 wrk -t1) WORKERS=(TOKIO_WORKER_THREADS=1) ;;
    default) SUT=() LOAD=(wrk -t2) WORKERS=() ;;
    *) printf '[approval-cpu] error: APPROVAL_SCENARIO is pinned or default\n' >&2; exit 1 ;;
esac

log() { printf '[approval-cpu] %s\n' "$*" >&2; }
die() { printf '[approval-cpu] error: %s\n' "$*" >&2; exit 1; }

NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[[ -x $NGINX ]] && command -v wrk >/dev/null && command -v redis-server >/dev/null \
    || die "needs nginx, wrk and redis-server (bench/run.sh installs them)"
if [[ ${BENCH_SKIP_BUILD:-0} != 1 ]]; then
    (cd "$ROOT" && cargo build --release --bin countersign --quiet)
fi
GATEWAY_BIN=${BENCH_GATEWAY_BIN:-$ROOT/target/release/countersign}
[[ -x $GATEWAY_BIN ]] || die "no gateway binary at $GATEWAY_BIN"

# shellcheck source=bench/fixed_upstream.sh
. "$BENCH/fixed_upstream.sh"
begin_run approval-cpu
UP=$(port); GW=$(port); REDIS=$(port)
start_fixed_upstream "$NGINX" "$UP" "${SUT[@]}"
start_redis "$REDIS" "${SUT[@]}"
write_replay_gateway_config "$REDIS" "$WORK/gateway.yaml"
env -u RUST_LOG -u TOKIO_WORKER_THREADS "${WORKERS[@]}" "${SUT[@]}" "$GATEWAY_BIN" serve \
    --config "$WORK/gateway.yaml" --upstream "http://127.0.0.1:$UP/mcp" \
    --listen "127.0.0.1:$GW" --admin off --policy "$BENCH/policy.yaml" \
    >/dev/null 2>"$WORK/gateway.log" &
GATEWAY_PID=$!
PIDS+=("$GATEWAY_PID")
wait_port "$GW"
URL=http://127.0.0.1:$GW/mcp

# ticks FIELD PID...: the processes' user (14), system (15) or both (0) clock ticks.
ticks() {
    local field=$1 pid total=0
    shift
    for pid in "$@"; do
        total=$((total + $(awk -v f="$field" '{print f ? $f : $14 + $15}' "/proc/$pid/stat")))
    done
    echo "$total"
}
upstream_pids() { echo "$UPSTREAM_PID" $(pgrep -P "$UPSTREAM_PID"); }

# busy: clock ticks all CPUs spent on anything but idling, since boot.
busy() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }

# measure PATH ROUND SCRIPT [ARGS...]: one peak run; prints req/s and µs of CPU per request.
measure() {
    local path=$1 round=$2 out requests load_cpu
    shift 2
    local user0 sys0 redis0 up0 busy0
    user0=$(ticks 14 "$GATEWAY_PID"); sys0=$(ticks 15 "$GATEWAY_PID")
    redis0=$(ticks 0 "$REDIS_PID"); up0=$(ticks 0 $(upstream_pids)); busy0=$(busy)
    # The load generator's own CPU (user + system seconds), from bash's `time`.
    out=$({ TIMEFORMAT='load-cpu %U %S'; time "${LOAD[@]}" -c64 -d"${SECS}s" -s "$@"; } 2>&1)
    requests=$(awk '/requests in/ {print $1}' <<<"$out")
    load_cpu=$(awk '/^load-cpu/ {print $2 + $3}' <<<"$out")
    [[ $path != redeem ]] || expect_redeemed_once "$out"
    awk -v p="$path" -v r="$round" -v n="$requests" -v s="$SECS" -v hz="$(getconf CLK_TCK)" \
        -v u=$(($(ticks 14 "$GATEWAY_PID") - user0)) -v k=$(($(ticks 15 "$GATEWAY_PID") - sys0)) \
        -v rd=$(($(ticks 0 "$REDIS_PID") - redis0)) -v up=$(($(ticks 0 $(upstream_pids)) - up0)) \
        -v all=$(($(busy) - busy0)) -v load="$load_cpu" \
        'BEGIN { us = 1e6 / hz / n;
            printf "| %s | %s | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n",
                p, r, n / s, u * us, k * us, rd * us, up * us, (u + k + rd + up) * us,
                load * 1e6 / n, all * us }'
}

log "warming up"
"${LOAD[@]}" -c64 -d2s -s "$BENCH/tools_call.lua" "$URL" >/dev/null
log "scenario $SCENARIO"
echo "| path | round | req/s | gateway user µs | gateway system µs | redis µs | upstream µs | system under test µs | load generator µs | machine µs per request |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for round in $(seq "$ROUNDS"); do
    measure read "$round" "$BENCH/tools_call.lua" "$URL"
    # Twice as long as the redemptions, so they do not run out of tokens.
    rm -f "$WORK"/minted.*
    "${LOAD[@]}" -c64 -d"$((2 * SECS))s" -s "$BENCH/mint.lua" "$URL" -- "$WORK/minted" >/dev/null
    measure held "$round" "$BENCH/mint.lua" "$URL" -- "$WORK/held"
    measure redeem "$round" "$BENCH/redeem_once.lua" "$URL" -- "$WORK/minted"
done
