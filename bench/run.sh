#!/usr/bin/env bash
# Benchmarks countersign against nginx on this machine, in one run, and prints a markdown table.
#
#   bash bench/run.sh
#
# Four targets, all answering the same read-only MCP 2026-07-28 `tools/call` (bench/tools_call.json
# with the headers in bench/tools_call.lua):
#   direct    the benchmark upstream: nginx returning a fixed JSON-RPC response
#             (bench/upstream_response.json, the demo store's real `list_products` answer)
#   nginx     a second nginx doing proxy_pass to that upstream over a keep-alive pool
#   gateway   `countersign serve --upstream <that upstream>`
#   gateway-https  a second gateway in front of the same upstream nginx reached over TLS (its
#             `https://` listener, certificate of a CA made for the run, trusted with
#             `tls.ca_file`), HTTP/2 by ALPN (BENCH_TLS_HTTP2=0: nginx offers HTTP/1.1 only)
# and two targets of a third gateway, with its replay store in a local redis-server (part of the
# system under test, on its CPU), for the approval paths (BENCH_APPROVALS=0 leaves them out):
#   held      a risky call (`wipe`, bench/held_call.json): classified, a token minted, a held
#             result returned, nothing forwarded
#   redeem    the same call with a token minted for it beforehand (bench/mint.lua): the token
#             verified, spent in Redis, the call forwarded; each token sent once
#
# For each target: peak throughput with wrk (closed loop), then latency percentiles at a constant
# rate of half the gateway's peak with bench/loadgen (open loop, wrk2-style; wrk2 is not packaged
# in Debian). Two scenarios:
#   pinned    system under test (upstream + proxy) on CPU 0, load generator on CPU 1;
#             nginx `worker_processes 1`, gateway TOKIO_WORKER_THREADS=1
#   default   nothing pinned; nginx `worker_processes auto`, gateway's default runtime (one
#             worker thread per core), wrk -t2
# Every measurement is repeated BENCH_ROUNDS times, targets interleaved; the median is reported.
#
# Knobs (environment): BENCH_DURATION (s, default 10), BENCH_WARMUP (s, 2), BENCH_ROUNDS (3),
# BENCH_CONNECTIONS (64), BENCH_SCENARIOS ("pinned default"), BENCH_SKIP_BUILD=1,
# BENCH_PGO (1: build and measure the profile-guided release binary, scripts/pgo-build.sh; 0: the
# plain `cargo build --release` one), BENCH_GATEWAY_BIN (the countersign binary to measure;
# default this checkout's release build of that kind),
# BENCH_NICE (-10: priority of every process started here; 0 leaves it alone),
# BENCH_QUIET_BUDGET (900 s spent at most waiting for an idle machine and redoing disturbed
# measurements), BENCH_MAX_FOREIGN (5: % of the CPUs other processes may use before a redo),
# BENCH_TLS_HTTP2 (1: the TLS upstream offers h2 by ALPN; 0: HTTP/1.1 only), BENCH_HTTPS (1; 0
# leaves out the gateway-https target, e.g. for a BENCH_GATEWAY_BIN older than HTTPS upstreams),
# BENCH_APPROVALS (1; 0 leaves out the held and redeem targets).
# Results: stdout and bench/results/latest.md; raw tool output in bench/results/raw/.
# Everything started here listens on 127.0.0.1 only and is stopped on exit.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$ROOT/bench
DURATION=${BENCH_DURATION:-10}
WARMUP=${BENCH_WARMUP:-2}
ROUNDS=${BENCH_ROUNDS:-3}
CONNECTIONS=${BENCH_CONNECTIONS:-64}
SCENARIOS=${BENCH_SCENARIOS:-pinned default}
RESULTS=$BENCH/results
RAW=$RESULTS/raw

HEADERS=(
    "Content-Type: application/json"
    "Accept: application/json, text/event-stream"
    "MCP-Protocol-Version: 2026-07-28"
    "Mcp-Method: tools/call"
    "Mcp-Name: list_products"
)

log() { printf '[bench] %s\n' "$*" >&2; }
die() { printf '[bench] error: %s\n' "$*" >&2; exit 1; }

# --- tools -------------------------------------------------------------------------------------

missing=()
command -v nginx >/dev/null || [[ -x /usr/sbin/nginx ]] || missing+=(nginx)
command -v wrk >/dev/null || missing+=(wrk)
command -v taskset >/dev/null || missing+=(util-linux)
command -v curl >/dev/null || missing+=(curl)
command -v openssl >/dev/null || missing+=(openssl)
APPROVALS=${BENCH_APPROVALS:-1}
if [[ $APPROVALS == 1 ]]; then
    command -v redis-server >/dev/null || missing+=(redis-server)
fi
if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

# The shipped build is profile-guided and laid out by BOLT (scripts/pgo-build.sh); BENCH_PGO=0
# measures the plain `cargo build --release` binary instead.
PGO=${BENCH_PGO:-1}
if [[ $PGO == 1 ]]; then
    BUILT_BIN=$ROOT/target/pgo/countersign
    build_gateway() { bash "$ROOT/scripts/pgo-build.sh" "$BUILT_BIN"; }
else
    BUILT_BIN=$ROOT/target/release/countersign
    build_gateway() { (cd "$ROOT" && cargo build --release --bin countersign --quiet); }
fi
if [[ ${BENCH_SKIP_BUILD:-0} != 1 ]]; then
    log "building countersign (release$([[ $PGO == 1 ]] && echo ', PGO + BOLT: scripts/pgo-build.sh, ~25 min'))"
    build_gateway
    log "building bench/loadgen (release)"
    (cd "$BENCH/loadgen" && cargo build --release --quiet --target-dir "$ROOT/target/loadgen")
fi
# The machine may be shared with other work (builds, tests). Run everything from here on at a
# raised priority, the same for every target, so that work disturbs the measurements less.
NICE=${BENCH_NICE:--10}
if [[ $NICE != 0 ]] && ! renice -n "$NICE" -p $$ >/dev/null 2>&1; then
    log "cannot set nice $NICE (not root?); running at normal priority"
    NICE=0
fi

# BENCH_GATEWAY_BIN measures another build (say, the previous commit's) with this script.
GATEWAY_BIN=${BENCH_GATEWAY_BIN:-$BUILT_BIN}
LOADGEN=$ROOT/target/loadgen/release/countersign-loadgen
[[ -x $GATEWAY_BIN && -x $LOADGEN ]] || die "binaries missing; run without BENCH_SKIP_BUILD"

# --- processes -----------------------------------------------------------------------------------

WORK=$(mktemp -d /tmp/countersign-bench.XXXXXX)
chmod 755 "$WORK"
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A CA and a server certificate for 127.0.0.1, made for this run, for the TLS upstream; the
# gateway-https target trusts the CA with `tls.ca_file`.
TLS_HTTP2=${BENCH_TLS_HTTP2:-1}
HTTPS=${BENCH_HTTPS:-1}
make_tls_files() {
    local dir=$WORK/tls
    mkdir -p "$dir"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -subj "/CN=countersign bench CA" -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -subj "/CN=127.0.0.1" -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n' \
        >"$dir/server.ext"
    openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
        -CAcreateserial -days 2 -extfile "$dir/server.ext" -out "$dir/server.pem" 2>/dev/null
}
make_tls_files

USED_PORTS=" "
# free_port VAR: a loopback port no socket uses, below the ephemeral range (so no outgoing
# connection can be holding it), not handed out before in this run.
EPHEMERAL_LOW=32768
[[ -r /proc/sys/net/ipv4/ip_local_port_range ]] && read -r EPHEMERAL_LOW _ </proc/sys/net/ipv4/ip_local_port_range
((EPHEMERAL_LOW > 12000)) || EPHEMERAL_LOW=32768
port_in_use() {
    if command -v ss >/dev/null; then
        ss -Htan "( sport = :$1 )" | grep -q .
    else
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
    fi
}
free_port() {
    local port
    while :; do
        port=$((10000 + RANDOM % (EPHEMERAL_LOW - 10000)))
        [[ $USED_PORTS == *" $port "* ]] && continue
        if ! port_in_use "$port"; then
            USED_PORTS+="$port "
            printf -v "$1" '%s' "$port"
            return
        fi
    done
}

wait_port() {
    local port=$1 i
    for i in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
        sleep 0.1
    done
    die "nothing listening on 127.0.0.1:$port"
}

stop_pid() {
    local pid=$1 keep=() p
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    for p in "${PIDS[@]}"; do [[ $p == "$pid" ]] || keep+=("$p"); done
    PIDS=("${keep[@]}")
}

# nginx's `return` takes a quoted string: escape backslashes and quotes; `$` would interpolate.
UPSTREAM_BODY=$(cat "$BENCH/upstream_response.json")
[[ $UPSTREAM_BODY != *'$'* ]] || die "upstream_response.json must not contain \$"
NGINX_BODY=${UPSTREAM_BODY//\\/\\\\}
NGINX_BODY=${NGINX_BODY//\'/\\\'}

# start_nginx NAME PORT WORKERS SERVER_BLOCK [CPU_PREFIX...] -> sets NGINX_PID
start_nginx() {
    local name=$1 port=$2 workers=$3 server=$4
    shift 4
    local dir=$WORK/$name
    mkdir -p "$dir/tmp"
    cat >"$dir/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes $workers;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 10000000;
    keepalive_timeout 120s;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    $server
}
EOF
    "$@" "$NGINX" -p "$dir" -e "$dir/error.log" -c "$dir/nginx.conf" &
    NGINX_PID=$!
    PIDS+=("$NGINX_PID")
    wait_port "$port"
}

# pids of an nginx master and its workers
nginx_pids() { echo "$1" "$(pgrep -P "$1" | tr '\n' ' ')"; }

# cpu_ticks PID... -> utime+stime summed, in clock ticks
cpu_ticks() {
    local total=0 pid stat
    for pid in "$@"; do
        stat=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
        stat=${stat##*) }
        set -- $stat
        total=$((total + ${12} + ${13}))
    done
    echo "$total"
}

# sample_rss OUT PID...: every 100 ms the VmRSS of the PIDs, summed; their peak is kept in OUT.
# Runs beside a latency measurement until killed, so it starts no process per sample (bash
# builtins only, and a FIFO nobody writes to as its clock): a fork and exec every 100 ms is a
# stall of about a millisecond on whatever CPU it lands, which is the p99 being measured.
sample_rss() {
    local out=$1 peak=0 total pid key value tick
    shift
    rm -f "$out.tick"
    mkfifo "$out.tick"
    exec {tick}<>"$out.tick"
    while :; do
        total=0
        for pid in "$@"; do
            while read -r key value _; do
                if [[ $key == VmRSS: ]]; then
                    total=$((total + value))
                    break
                fi
            done 2>/dev/null <"/proc/$pid/status"
        done
        if ((total > peak)); then
            peak=$total
            echo "$peak" >"$out"
        fi
        read -r -t 0.1 -u "$tick" _ || true
    done
}
# Started under the generator's prefix (`taskset`), so a bash of its own runs it.
export -f sample_rss

hwm_kib() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }

median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

json_field() { sed -n "s/.*\"$2\":\([0-9.]*\).*/\1/p" "$1"; }

curl_target() {
    local url=$1 args=() h
    for h in "${HEADERS[@]}"; do args+=(-H "$h"); done
    curl -sS --max-time 5 -o "$WORK/probe.body" -w '%{http_code}' "${args[@]}" \
        --data-binary @"$BENCH/tools_call.json" "$url"
}

# The machine may be shared (other builds, tests). Before each measurement wait until both CPUs
# are nearly idle, and redo a measurement that other processes disturbed, within a time budget.
QUIET_BUDGET=${BENCH_QUIET_BUDGET:-900}
MAX_FOREIGN=${BENCH_MAX_FOREIGN:-5}
QUIET_SPENT=0

# Idle share of all CPUs over one second.
cpu_idle_pct() {
    local a b
    read -ra a </proc/stat; sleep 1; read -ra b </proc/stat
    local total=0 i
    for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
    echo $(( (100 * (b[4] - a[4] + b[5] - a[5])) / (total > 0 ? total : 1) ))
}

wait_quiet() {
    local start=$SECONDS idle
    while ((QUIET_SPENT + SECONDS - start < QUIET_BUDGET)); do
        idle=$(cpu_idle_pct)
        ((idle >= 95)) && break
        ((SECONDS - start == 1)) && log "waiting for a quiet machine (${idle}% idle)"
    done
    QUIET_SPENT=$((QUIET_SPENT + SECONDS - start))
}

# redo ATTEMPT: true when the measurement just taken should be taken again.
redo() {
    local verdict
    verdict=$(awk -v f="$LAST_FOREIGN" -v m="$MAX_FOREIGN" 'BEGIN {print (f > m)}')
    ((verdict == 1 && $1 < 3)) || return 1
    ((QUIET_SPENT < QUIET_BUDGET)) || return 1
    QUIET_SPENT=$((QUIET_SPENT + WARMUP + DURATION))
    log "disturbed by other processes ($LAST_FOREIGN% of the CPUs); measuring again"
}

# Foreign CPU use: busy time of the whole machine minus what this benchmark's own processes used.
# The box may be shared; this says how much a measurement was disturbed.
HZ=$(getconf CLK_TCK)
busy_ticks() { local a; read -ra a </proc/stat; echo $((a[1] + a[2] + a[3] + a[6] + a[7] + a[8])); }
# Sets CHILD_TICKS: CPU used by this shell's finished children (wrk, loadgen), via `times`; must
# not run in a subshell.
children_ticks() {
    times >"$WORK/times"
    CHILD_TICKS=$(awk -v hz="$HZ" 'NR == 2 {t = 0; for (i = 1; i <= 2; i++) {split($i, p, /[ms]/); t += p[1] * 60 + p[2]}; printf "%d", t * hz}' "$WORK/times")
}
measure_start() {
    children_ticks
    M_GEN=$CHILD_TICKS
    # shellcheck disable=SC2086
    M_SUT=$(cpu_ticks $SUT_PIDS)
    M_BUSY=$(busy_ticks)
    M_T0=$(date +%s.%N)
}
# Sets LAST_FOREIGN: the share of all CPUs that other processes used during the measurement.
measure_end() {
    local busy sut t1
    busy=$(busy_ticks)
    # shellcheck disable=SC2086
    sut=$(cpu_ticks $SUT_PIDS)
    t1=$(date +%s.%N)
    children_ticks
    LAST_FOREIGN="$(awk -v b=$((busy - M_BUSY)) -v s=$((sut - M_SUT)) -v g=$((CHILD_TICKS - M_GEN)) \
        -v w="$(awk -v a="$M_T0" -v b="$t1" 'BEGIN {print b - a}')" -v hz="$HZ" -v n="$NPROC" \
        'BEGIN {f = 100 * (b - s - g) / (w * hz * n); printf "%.1f", (f < 0 ? 0 : f)}')"
}

mkdir -p "$RAW"
rm -f "$RAW"/*
REPORT=$WORK/report.md
NPROC=$(nproc)
{
    echo "# countersign benchmark — $(date -u +%Y-%m-%dT%H:%MZ)"
    echo
    echo "- commit: \`$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)\`$(git -C "$ROOT" diff --quiet HEAD -- crates 2>/dev/null || echo ' (crates/ has uncommitted changes)')"
    echo "- gateway binary: \`${GATEWAY_BIN#"$ROOT"/}\`$([[ -z ${BENCH_GATEWAY_BIN:-} && $PGO == 1 ]] && echo ' (PGO + BOLT, scripts/pgo-build.sh)')"
    echo "- machine: $NPROC CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), $(uname -r)"
    echo "- tools: $("$NGINX" -v 2>&1 | sed 's/.*: //'), $(wrk -v 2>&1 | head -1 | awk '{print $1, $2}'), bench/loadgen (open loop)"
    echo "- per measurement: ${WARMUP}s warm-up + ${DURATION}s, $CONNECTIONS connections, median of $ROUNDS interleaved rounds; all benchmark processes at nice $NICE"
    echo "- request: MCP 2026-07-28 stateless \`tools/call list_products\` ($(wc -c <"$BENCH/tools_call.json" | tr -d ' ') B body), response $(wc -c <"$BENCH/upstream_response.json" | tr -d ' ') B JSON"
} >"$REPORT"

# --- per-target requests ---------------------------------------------------------------------------

HELD_HEADERS=(
    "Content-Type: application/json"
    "Accept: application/json, text/event-stream"
    "MCP-Protocol-Version: 2026-07-28"
    "Mcp-Method: tools/call"
    "Mcp-Name: wipe"
)

# wrk_script TARGET: the script its peak runs send (redeem: bodies minted beforehand).
wrk_script() {
    case $1 in
        held) echo "$BENCH/held_call.lua" ;;
        redeem) echo "$BENCH/redeem_once.lua" ;;
        *) echo "$BENCH/tools_call.lua" ;;
    esac
}

# loadgen_request_args TARGET: sets LG_REQUEST to the loadgen arguments naming its request.
loadgen_request_args() {
    local h headers=("${HEADERS[@]}")
    case $1 in
        held) LG_REQUEST=(--body-file "$BENCH/held_call.json"); headers=("${HELD_HEADERS[@]}") ;;
        redeem) LG_REQUEST=(--bodies-file "$WORK/minted-all"); headers=("${HELD_HEADERS[@]}") ;;
        *) LG_REQUEST=(--body-file "$BENCH/tools_call.json") ;;
    esac
    for h in "${headers[@]}"; do LG_REQUEST+=(--header "$h"); done
}

# mint URL SECONDS WRK_THREADS [GEN...]: holds distinct calls for SECONDS and leaves the bodies
# that redeem their tokens in $WORK/minted.<thread> (and all of them in $WORK/minted-all).
mint() {
    local url=$1 seconds=$2 threads=$3
    shift 3
    rm -f "$WORK"/minted.* "$WORK/minted-all"
    "$@" wrk -t"$threads" -c"$CONNECTIONS" -d"${seconds}s" -s "$BENCH/mint.lua" "$url" -- "$WORK/minted" >/dev/null
    cat "$WORK"/minted.* >"$WORK/minted-all"
    MINTED=$(wc -l <"$WORK/minted-all")
}

# drop_spent_keys: removes the spent-token keys of earlier runs from the benchmark's Redis, before
# a measurement. Those tokens are never sent again, and left alone their keys expire together,
# `token_ttl` (5 minutes) after they were spent: a peak run leaves 100,000 and more, and Redis
# expiring that many at once stalls every command for tens of milliseconds, on the CPU of
# whichever target is being measured five minutes later.
drop_spent_keys() {
    [[ $APPROVALS == 1 ]] || return 0
    redis-cli -p "$redis_port" --scan --pattern '*:jti' | xargs -r -n 1000 redis-cli -p "$redis_port" unlink >/dev/null
}

# Spent-token keys the benchmark's Redis has ever held: each forwarded redemption adds one. A
# spent key lives only as long as its token (`token_ttl`, 5 minutes), so the keys of earlier
# runs expire while later ones are counted: those are added back from the server's own count of
# expired keys, or a later round would look as if it had spent fewer tokens than it did.
redis_keys() {
    local keys expired
    keys=$(redis-cli -p "$1" dbsize)
    expired=$(redis-cli -p "$1" info stats | tr -d '\r' | awk -F: '$1 == "expired_keys" {print $2}')
    [[ $keys =~ ^[0-9]+$ && $expired =~ ^[0-9]+$ ]] || die "cannot count the keys of the Redis on port $1"
    echo $((keys + expired))
}

# --- one scenario ----------------------------------------------------------------------------------

run_scenario() {
    local scenario=$1
    local sut=() gen=() workers threads wrk_threads
    case $scenario in
        pinned)
            sut=(taskset -c 0); gen=(taskset -c 1)
            workers=1; threads=1; wrk_threads=1 ;;
        default)
            workers=auto; threads=""; wrk_threads=2 ;;
        *) die "unknown scenario $scenario" ;;
    esac
    ((NPROC >= 2)) || { sut=(); gen=(); }

    local up_port up_tls_port nginx_port gw_port gw_tls_port
    free_port up_port; free_port up_tls_port; free_port nginx_port; free_port gw_port
    free_port gw_tls_port

    local h2=""
    [[ $TLS_HTTP2 == 1 ]] && h2=" http2"
    start_nginx "upstream-$scenario" "$up_port" "$workers" "
    server {
        listen 127.0.0.1:$up_port;
        listen 127.0.0.1:$up_tls_port ssl$h2;
        ssl_certificate $WORK/tls/server.pem;
        ssl_certificate_key $WORK/tls/server.key;
        location = /mcp {
            default_type application/json;
            return 200 '$NGINX_BODY';
        }
    }" "${sut[@]}"
    local up_pid=$NGINX_PID

    start_nginx "proxy-$scenario" "$nginx_port" "$workers" "
    upstream mcp_upstream {
        server 127.0.0.1:$up_port;
        keepalive 256;
        keepalive_requests 10000000;
    }
    server {
        listen 127.0.0.1:$nginx_port;
        location = /mcp {
            proxy_pass http://mcp_upstream;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
        }
    }" "${sut[@]}"
    local nginx_pid=$NGINX_PID

    local gw_env=(env -u RUST_LOG -u TOKIO_WORKER_THREADS)
    [[ -n $threads ]] && gw_env+=("TOKIO_WORKER_THREADS=$threads")
    "${sut[@]}" "${gw_env[@]}" "$GATEWAY_BIN" serve \
        --upstream "http://127.0.0.1:$up_port/mcp" \
        --listen "127.0.0.1:$gw_port" --admin off --policy "$BENCH/policy.yaml" \
        >/dev/null 2>"$RAW/gateway-$scenario.log" &
    local gw_pid=$!
    PIDS+=("$gw_pid")
    wait_port "$gw_port"

    # The same gateway, in front of the same upstream over TLS: an upstream entry with `tls:`
    # needs a configuration file.
    printf 'upstreams:\n  - name: default\n    url: https://127.0.0.1:%s/mcp\n    tls: { ca_file: %s }\n' \
        "$up_tls_port" "$WORK/tls/ca.pem" >"$WORK/gateway-https-$scenario.yaml"
    local gw_tls_pid=""
    if [[ $HTTPS == 1 ]]; then
        "${sut[@]}" "${gw_env[@]}" "$GATEWAY_BIN" serve --config "$WORK/gateway-https-$scenario.yaml" \
            --listen "127.0.0.1:$gw_tls_port" --admin off --policy "$BENCH/policy.yaml" \
            >/dev/null 2>"$RAW/gateway-https-$scenario.log" &
        gw_tls_pid=$!
        PIDS+=("$gw_tls_pid")
        wait_port "$gw_tls_port"
    fi

    # The approval paths: a gateway whose replay store is a local Redis, both in the system under
    # test.
    local redis_port gw_redis_port redis_pid="" gw_redis_pid=""
    free_port redis_port; free_port gw_redis_port
    if [[ $APPROVALS == 1 ]]; then
        "${sut[@]}" redis-server --bind 127.0.0.1 --port "$redis_port" --save '' --appendonly no \
            --maxmemory-policy noeviction --daemonize no >"$RAW/redis-$scenario.log" 2>&1 &
        redis_pid=$!
        PIDS+=("$redis_pid")
        wait_port "$redis_port"
        "${sut[@]}" "${gw_env[@]}" "$GATEWAY_BIN" serve \
            --upstream "http://127.0.0.1:$up_port/mcp" --redis "redis://127.0.0.1:$redis_port" \
            --listen "127.0.0.1:$gw_redis_port" --admin off --policy "$BENCH/policy.yaml" \
            >/dev/null 2>"$RAW/gateway-redis-$scenario.log" &
        gw_redis_pid=$!
        PIDS+=("$gw_redis_pid")
        wait_port "$gw_redis_port"
    fi

    declare -A url pids
    url[direct]=http://127.0.0.1:$up_port/mcp
    url[nginx]=http://127.0.0.1:$nginx_port/mcp
    url[gateway]=http://127.0.0.1:$gw_port/mcp
    url[gateway-https]=http://127.0.0.1:$gw_tls_port/mcp
    pids[direct]="$(nginx_pids "$up_pid")"
    pids[nginx]="$(nginx_pids "$nginx_pid")"
    pids[gateway]=$gw_pid
    pids[gateway-https]=$gw_tls_pid
    url[held]=http://127.0.0.1:$gw_redis_port/mcp
    url[redeem]=${url[held]}
    pids[held]="$gw_redis_pid $redis_pid"
    pids[redeem]=${pids[held]}
    local targets=(direct nginx gateway) t code
    [[ $HTTPS == 1 ]] && targets+=(gateway-https)
    [[ $APPROVALS == 1 ]] && targets+=(held redeem)
    SUT_PIDS="${pids[direct]} ${pids[nginx]} ${pids[gateway]} ${pids[gateway-https]:-} ${pids[held]:-}"
    FOREIGN=""

    for t in "${targets[@]}"; do
        [[ $t == held || $t == redeem ]] && continue
        code=$(curl_target "${url[$t]}") || die "$t: request failed"
        [[ $code == 200 ]] || die "$t: HTTP $code: $(head -c 300 "$WORK/probe.body")"
        # A different body means the call was not forwarded (held or refused): the figures
        # would measure something else.
        cmp -s "$WORK/probe.body" "$BENCH/upstream_response.json" \
            || die "$t answers with a body that differs from upstream_response.json: $(head -c 300 "$WORK/probe.body")"
    done

    if [[ $APPROVALS == 1 ]]; then
        # A held call must come back held, and its token must redeem: otherwise these targets
        # would measure refusals.
        mint "${url[held]}" 1 1 "${gen[@]}"
        ((MINTED > 0)) || die "held: no confirmation token came back"
        local keys_before h redeem_args=()
        keys_before=$(redis_keys "$redis_port")
        for h in "${HELD_HEADERS[@]}"; do redeem_args+=(-H "$h"); done
        code=$(curl -sS --max-time 5 -o "$WORK/probe.body" -w '%{http_code}' "${redeem_args[@]}" \
            --data-binary "$(head -n 1 "$WORK/minted-all")" "${url[redeem]}") || die "redeem: request failed"
        cmp -s "$WORK/probe.body" "$BENCH/upstream_response.json" \
            || die "redeem: the redeemed call was not forwarded: $(head -c 300 "$WORK/probe.body")"
        (($(redis_keys "$redis_port") == keys_before + 1)) || die "redeem: no token was spent in Redis"
    fi

    log "$scenario: ports upstream $up_port (TLS $up_tls_port), nginx $nginx_port, gateway $gw_port, gateway-https $gw_tls_port"

    # Peak throughput: wrk, closed loop.
    local round out rps attempt
    declare -A peak_samples
    for round in $(seq "$ROUNDS"); do
        for t in "${targets[@]}"; do
            # The redeem target warms up on held calls, which spend no tokens.
            local warm_script
            warm_script=$(wrk_script "$([[ $t == redeem ]] && echo held || echo "$t")")
            "${gen[@]}" wrk -t"$wrk_threads" -c"$CONNECTIONS" -d"${WARMUP}s" -s "$warm_script" "${url[$t]}" >/dev/null
            out=$RAW/wrk-$scenario-$t-$round.txt
            attempt=0
            while :; do
                attempt=$((attempt + 1))
                # Twice the run's length of held calls: minting is cheaper than redeeming, so
                # no connection runs out of tokens.
                [[ $t == redeem ]] && mint "${url[$t]}" $((2 * DURATION)) "$wrk_threads" "${gen[@]}"
                drop_spent_keys
                wait_quiet
                measure_start
                "${gen[@]}" wrk -t"$wrk_threads" -c"$CONNECTIONS" -d"${DURATION}s" --latency \
                    -s "$(wrk_script "$t")" "${url[$t]}" $([[ $t == redeem ]] && echo -- "$WORK/minted") >"$out"
                measure_end
                if grep -qE 'Non-2xx|Socket errors' "$out"; then
                    cat "$out" >&2
                    die "$scenario/$t: wrk saw errors"
                fi
                if [[ $t == redeem ]] && ! grep -q 'redeem: replays 0, not forwarded 0' "$out"; then
                    cat "$out" >&2
                    die "$scenario/redeem: some redemptions were not forwarded exactly once"
                fi
                rps=$(awk '/^Requests\/sec:/ {print $2}' "$out")
                log "$scenario round $round: $t peak $rps req/s (foreign CPU $LAST_FOREIGN%)"
                redo "$attempt" || break
            done
            FOREIGN+="$LAST_FOREIGN "
            peak_samples[$t]+="$rps "
        done
    done
    declare -A peak
    for t in "${targets[@]}"; do
        peak[$t]=$(tr ' ' '\n' <<<"${peak_samples[$t]}" | grep . | median)
    done

    # Latency at a constant rate: half the gateway's peak, the same rate for every target.
    local rate
    rate=$(awk -v p="${peak[gateway]}" 'BEGIN {printf "%d", p / 2}')
    declare -A p50 p90 p99 p999 rss cpu lag spent_share
    local s before after sampler rssmax
    local lg_args=(--rate "$rate" --duration "$DURATION" --warmup "$WARMUP"
        --connections "$CONNECTIONS")
    local needed keys_before
    # Tokens one constant-rate redeem run spends (warm-up included), with a margin.
    needed=$(awk -v r="$rate" -v s=$((WARMUP + DURATION)) 'BEGIN {printf "%d", r * s * 1.1 + 100}')
    for round in $(seq "$ROUNDS"); do
        for t in "${targets[@]}"; do
            out=$RAW/loadgen-$scenario-$t-$round.json
            attempt=0
            while :; do
                attempt=$((attempt + 1))
                drop_spent_keys
                wait_quiet
                if [[ $t == redeem ]]; then
                    local mint_seconds
                    # Minting writes every token to a file, so it runs slower than the held
                    # peak: start at twice the time that rate needs, and double it until enough.
                    mint_seconds=$(awk -v n="$needed" -v p="${peak[held]}" 'BEGIN {printf "%d", 2 * n / p + 1}')
                    while :; do
                        mint "${url[$t]}" "$mint_seconds" "$wrk_threads" "${gen[@]}"
                        ((MINTED >= needed)) && break
                        ((mint_seconds < 300)) || die "$scenario/redeem: minted $MINTED tokens, $needed needed"
                        log "$scenario/redeem: minted $MINTED tokens, $needed needed; minting longer"
                        mint_seconds=$((2 * mint_seconds))
                    done
                    keys_before=$(redis_keys "$redis_port")
                fi
                # Minting is over: from here on the run's own CPU, memory and foreign load.
                # shellcheck disable=SC2086
                before=$(cpu_ticks ${pids[$t]})
                rm -f "$WORK/rss-$t"
                # On the generator's side, as the load generator: off the measured CPU.
                # shellcheck disable=SC2086
                "${gen[@]}" bash -c 'sample_rss "$@"' sample_rss "$WORK/rss-$t" ${pids[$t]} &
                sampler=$!
                measure_start
                loadgen_request_args "$t"
                if ! "${gen[@]}" "$LOADGEN" --url "${url[$t]}" "${lg_args[@]}" "${LG_REQUEST[@]}" \
                    --timeline "$RAW/timeline-$scenario-$t-$round.tsv" >"$out"; then
                    kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true
                    cat "$out" >&2
                    die "$scenario/$t: loadgen saw errors"
                fi
                kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true
                measure_end
                # shellcheck disable=SC2086
                after=$(cpu_ticks ${pids[$t]})
                if [[ $t == redeem ]]; then
                    # Every request a fresh token, every one spent once and forwarded: loadgen
                    # sees only HTTP statuses, Redis counts the spent tokens.
                    local sent spent
                    sent=$(awk -v r="$rate" -v s=$((WARMUP + DURATION)) 'BEGIN {printf "%d", r * s}')
                    spent=$(($(redis_keys "$redis_port") - keys_before))
                    # A redemption the replay store could not confirm in time is refused (fail
                    # closed), answered but not forwarded: reported, not hidden.
                    spent_share[$t]+="$(awk -v a="$spent" -v b="$sent" 'BEGIN {printf "%.1f", 100 * a / b}') "
                    ((spent >= sent * 99 / 100)) || log "$scenario/redeem: only $spent tokens spent for about $sent requests"
                fi
                log "$scenario round $round: $t at $rate req/s: p50 $(json_field "$out" p50_us) us, p99 $(json_field "$out" p99_us) us, achieved $(json_field "$out" achieved_rate) req/s (foreign CPU $LAST_FOREIGN%)"
                redo "$attempt" || break
            done
            FOREIGN+="$LAST_FOREIGN "
            rssmax=$(cat "$WORK/rss-$t" 2>/dev/null || echo 0)
            p50[$t]+="$(json_field "$out" p50_us) "
            p90[$t]+="$(json_field "$out" p90_us) "
            p99[$t]+="$(json_field "$out" p99_us) "
            p999[$t]+="$(json_field "$out" p999_us) "
            lag[$t]+="$(json_field "$out" lag_p99_us) "
            rss[$t]+="$rssmax "
            # CPU microseconds per request over the whole run (warm-up included).
            cpu[$t]+="$(awk -v d=$((after - before)) -v hz="$HZ" -v r="$rate" \
                -v s=$((WARMUP + DURATION)) 'BEGIN {printf "%.1f", d / hz * 1e6 / (r * s)}') "
        done
    done
    local gw_hwm
    gw_hwm=$(hwm_kib "$gw_pid")

    local m
    med() { tr ' ' '\n' <<<"$1" | grep . | median; }
    ms() { awk -v u="$1" 'BEGIN {printf "%.3f", u / 1000}'; }
    mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }
    {
        echo
        case $scenario in
            pinned) echo "## Scenario \`pinned\`: upstream + proxy on CPU 0, load generator on CPU 1; nginx 1 worker, gateway TOKIO_WORKER_THREADS=1" ;;
            default) echo "## Scenario \`default\`: nothing pinned; nginx \`worker_processes auto\`, gateway default runtime ($NPROC worker threads), wrk -t2" ;;
        esac
        echo
        echo "Latency columns: constant $rate req/s (half the gateway's peak), open loop."
        echo
        echo "| target | peak req/s | p50 ms | p90 ms | p99 ms | p99.9 ms | added p99 ms | CPU µs/req | RSS max MiB |"
        echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        local d99
        d99=$(med "${p99[direct]}")
        for t in "${targets[@]}"; do
            m=$(med "${p99[$t]}")
            local added="—"
            [[ $t == direct ]] || added=$(awk -v a="$m" -v b="$d99" 'BEGIN {printf "%+.3f", (a - b) / 1000}')
            printf '| %s | %.0f | %s | %s | %s | %s | %s | %s | %s |\n' "$t" "${peak[$t]}" \
                "$(ms "$(med "${p50[$t]}")")" "$(ms "$(med "${p90[$t]}")")" "$(ms "$m")" \
                "$(ms "$(med "${p999[$t]}")")" "$added" "$(med "${cpu[$t]}")" "$(mib "$(med "${rss[$t]}")")"
        done
        echo
        echo "Gateway VmHWM over the whole scenario (peak runs included): $(mib "$gw_hwm") MiB." \
             "Load-generator timer slack p99 (not counted in latency): $(med "${lag[gateway]}") µs." \
             "$([[ $APPROVALS == 1 ]] && echo "Redemptions forwarded at the constant rate (tokens spent in Redis per request sent, %, by round): ${spent_share[redeem]% }.")" \
             "Peak samples (req/s) — direct: ${peak_samples[direct]% }; nginx: ${peak_samples[nginx]% }; gateway: ${peak_samples[gateway]% }$([[ $HTTPS == 1 ]] && echo "; gateway-https: ${peak_samples[gateway-https]% }")$([[ $APPROVALS == 1 ]] && echo "; held: ${peak_samples[held]% }; redeem: ${peak_samples[redeem]% }")." \
             "$([[ $HTTPS == 1 ]] && echo "gateway-https reaches the upstream over TLS ($([[ $TLS_HTTP2 == 1 ]] && echo 'HTTP/2 by ALPN' || echo 'HTTP/1.1')); its added p99 is against the plain direct p99.")" \
             "Other processes on the machine used $(tr ' ' '\n' <<<"$FOREIGN" | grep . | awk '{s += $1; if ($1 > m) m = $1} END {printf "%.1f%% of the CPUs on average, %.1f%% at most", s / NR, m}') during the measurements."
        echo
        local gpeak=${peak[gateway]} npeak=${peak[nginx]} gadd nadd bar_p99
        gadd=$(awk -v a="$(med "${p99[gateway]}")" -v b="$d99" 'BEGIN {printf "%.3f", (a - b) / 1000}')
        nadd=$(awk -v a="$(med "${p99[nginx]}")" -v b="$d99" 'BEGIN {printf "%.3f", (a - b) / 1000}')
        # Pinned: at most 0.5 ms over direct; default: no more than nginx adds.
        bar_p99=$([[ $scenario == pinned ]] && echo 0.5 || echo "$nadd")
        echo "Bar: throughput ≥ nginx — $(awk -v g="$gpeak" -v n="$npeak" 'BEGIN {printf "%s (%.2f× nginx)", (g >= n ? "**met**" : "**not met**"), g / n}');" \
             "added p99 ≤ $bar_p99 ms$([[ $scenario == pinned ]] || echo " (nginx's)") — $(awk -v a="$gadd" -v b="$bar_p99" 'BEGIN {print (a <= b ? "**met**" : "**not met**")}') (${gadd} ms)$(
                 [[ $APPROVALS == 1 ]] && echo "; redeem throughput within 20 % of the read path — $(awk -v r="${peak[redeem]}" -v h="${peak[held]}" -v g="$gpeak" 'BEGIN {printf "%s (%.2f× the gateway read path; held %.2f×)", (r >= 0.8 * g ? "**met**" : "**not met**"), r / g, h / g}')")."
        echo
        echo "CPU µs/req is the serving processes' CPU time per request at the constant rate:" \
             "for direct the upstream nginx, for held and redeem the gateway plus its redis-server."
    } >>"$REPORT"

    stop_pid "$gw_pid"
    [[ -z $gw_tls_pid ]] || stop_pid "$gw_tls_pid"
    [[ -z $gw_redis_pid ]] || stop_pid "$gw_redis_pid"
    [[ -z $redis_pid ]] || stop_pid "$redis_pid"
    stop_pid "$nginx_pid"
    stop_pid "$up_pid"
    # Keep what is measured so far, should a later scenario fail.
    cp "$REPORT" "$RESULTS/latest.md"
}

for scenario in $SCENARIOS; do
    log "scenario $scenario"
    run_scenario "$scenario"
done

cp "$REPORT" "$RESULTS/latest.md"
echo
cat "$REPORT"
