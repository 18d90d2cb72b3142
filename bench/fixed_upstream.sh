# Sourced by bench/profile.sh, bench/instructions.sh, bench/list-instructions.sh,
# bench/syscalls.sh, bench/syscall-rates.sh, bench/copies.sh, bench/approval-cpu.sh,
# bench/yardstick.sh, bench/pgo-train.sh and scripts/pgo-build.sh (which installs bolt-22 with
# it): installing what a script lacks, free ports, the benchmark upstream (one nginx worker
# answering POST /mcp with bench/upstream_response.json), as bench/run.sh's `direct` target, the
# nginx proxy in front of it, reading a callgrind run's counters, and stopping what a script
# started. Expects BENCH (the bench directory) and
# WORK (a scratch directory; begin_run makes one).

# install_missing TOOL=PACKAGE...: installs from Debian the package of each tool that is not on
# PATH (nor in /usr/sbin, where nginx lives).
install_missing() {
    local pair tool missing=() sudo=""
    for pair in "$@"; do
        tool=${pair%%=*}
        command -v "$tool" >/dev/null || [[ -x /usr/sbin/$tool ]] || missing+=("${pair#*=}")
    done
    ((${#missing[@]})) || return 0
    printf 'installing %s\n' "${missing[*]}" >&2
    [[ $(id -u) -eq 0 ]] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# write_replay_gateway_config REDIS_PORT FILE: the gateway configuration of the approval paths:
# the replay store in the redis-server on REDIS_PORT, the audit trail discarded.
write_replay_gateway_config() {
    printf 'redis:\n  url: redis://127.0.0.1:%s\naudit:\n  path: /dev/null\n' "$1" >"$2"
}

# expect_redeemed_once WRK_OUTPUT: stops the script unless bench/redeem_once.lua saw every token
# it sent forwarded exactly once (none refused, none replayed).
expect_redeemed_once() {
    grep -q 'replays 0, not forwarded 0' <<<"$1" \
        || { printf 'some redemptions were not forwarded exactly once: %s\n' "$1" >&2; exit 1; }
}

# begin_run NAME: a scratch directory in WORK, an empty PIDS, and traps that stop everything
# started and remove WORK however the script ends.
begin_run() {
    WORK=$(mktemp -d "/tmp/countersign-$1.XXXXXX")
    chmod 755 "$WORK"
    PIDS=()
    trap stop_started EXIT
    trap 'exit 130' INT TERM
}

# start_fixed_upstream NGINX PORT [PREFIX...]: the benchmark upstream on PORT, run under PREFIX
# (e.g. `taskset -c 0`); sets UPSTREAM_PID (nginx's master) and waits for the port.
start_fixed_upstream() {
    local nginx=$1 port=$2
    shift 2
    write_fixed_upstream_conf "$port"
    "$@" "$nginx" -p "$WORK" -e "$WORK/error.log" -c "$WORK/nginx.conf" &
    UPSTREAM_PID=$!
    PIDS+=("$UPSTREAM_PID")
    wait_port "$port"
}

# start_redis PORT [PREFIX...]: a redis-server without persistence on PORT, run under PREFIX;
# sets REDIS_PID and waits for the port.
start_redis() {
    local port=$1
    shift
    "$@" redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no >/dev/null &
    REDIS_PID=$!
    PIDS+=("$REDIS_PID")
    wait_port "$port"
}

# stop_started: stops every process in PIDS, then removes WORK (for `trap stop_started EXIT`).
# nginx's workers outlive a killed master and would hold the script's output open; on TERM the
# master stops them and exits after them.
stop_started() {
    local pid
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    sleep 0.5
    for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$WORK"
}

# A port below the ephemeral range that no socket uses.
port() { local p; while :; do p=$((10000 + RANDOM % 22000)); ss -Htan "( sport = :$p )" | grep -q . || { echo "$p"; return; }; done; }

# wait_port PORT: returns once something listens on 127.0.0.1:PORT; exits after 20 s.
wait_port() {
    local _
    for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done
    printf 'nothing listening on 127.0.0.1:%s\n' "$1" >&2
    exit 1
}

# write_fixed_upstream_conf PORT: the upstream's nginx configuration, to $WORK/nginx.conf.
write_fixed_upstream_conf() {
    local body
    body=$(cat "$BENCH/upstream_response.json")
    # nginx's `return` takes a quoted string: escape backslashes and quotes.
    body=${body//\\/\\\\}
    body=${body//\'/\\\'}
    write_nginx_conf "$WORK" 1 "    server {
        listen 127.0.0.1:$1;
        location = /mcp { default_type application/json; return 200 '$body'; }
    }"
}

# nginx_proxy_server PORT UPSTREAM_PORT: the server block of nginx's `proxy_pass` on PORT to the
# upstream on UPSTREAM_PORT over a keep-alive pool, as bench/run.sh's `nginx` target runs it.
nginx_proxy_server() {
    cat <<CONF
    upstream mcp_upstream { server 127.0.0.1:$2; keepalive 256; keepalive_requests 10000000; }
    server {
        listen 127.0.0.1:$1;
        location = /mcp {
            proxy_pass http://mcp_upstream;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
CONF
}

# write_nginx_proxy_conf DIR PORT UPSTREAM_PORT WORKERS: DIR/nginx.conf, that proxy alone in an
# nginx of its own with WORKERS worker processes (a number or `auto`).
write_nginx_proxy_conf() {
    write_nginx_conf "$1" "$4" "$(nginx_proxy_server "$2" "$3")"
}

# write_nginx_conf DIR WORKERS SERVERS: DIR/nginx.conf, an nginx in the foreground with WORKERS
# worker processes, its pid, log and temporary files in DIR, no access log, keep-alive without a
# request limit, and SERVERS (upstream and server blocks) as its http section. Its last line is
# the http section's closing brace, where bench/yardstick.sh adds a server of its own.
write_nginx_conf() {
    local dir=$1
    mkdir -p "$dir/tmp"
    cat >"$dir/nginx.conf" <<CONF
daemon off;
worker_processes $2;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 10000000;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
$3
}
CONF
}

# callgrind_dump PID NAME: dumps the counters of the gateway that valgrind's callgrind runs as
# PID (writing into WORK), counted since they were last zeroed; sets CALLGRIND_PROFILE (the
# dump's file) and CALLGRIND_TOTAL (its instructions, all threads).
callgrind_dump() {
    callgrind_control -d "$2" "$1" >/dev/null
    CALLGRIND_PROFILE=$(ls -t "$WORK"/callgrind.out.* | head -1)
    CALLGRIND_TOTAL=$(callgrind_annotate "$CALLGRIND_PROFILE" 2>/dev/null \
        | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
}
