#!/usr/bin/env bash
# The read path through a stdio upstream beside the plain-HTTP one, in the same run:
#
#   bash bench/stdio.sh
#
# Targets, all answering the read-only 2026-07-28 `tools/call` of bench/tools_call.json:
#   direct         nginx returning bench/upstream_response.json (as in bench/run.sh)
#   gateway-http   `countersign serve --upstream http://…` in front of that nginx
#   gateway-stdio  `countersign serve --upstream 'stdio:python3 bench/stdio_upstream.py'`: the
#                  same answer from a stdio program the gateway starts (stateless requests share
#                  one process)
# Both gateways run the release build with bench/policy.yaml, so the call takes the real read
# path. For each target and 1 and 16 connections: wrk closed loop, 3 s warm-up, then 10 s with
# --latency. Nothing is pinned; read the figures as a comparison within one run.
# Knobs: BENCH_DURATION (10), BENCH_SKIP_BUILD=1.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$ROOT/bench
DURATION=${BENCH_DURATION:-10}
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
log() { printf 'stdio.sh: %s\n' "$*" >&2; }

for tool in nginx wrk python3 curl; do
    command -v "$tool" >/dev/null || [[ -x /usr/sbin/$tool ]] || {
        log "installing $tool"
        apt-get install -y -qq "$tool" >/dev/null
    }
done
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
if [[ ${BENCH_SKIP_BUILD:-0} != 1 ]]; then
    log "building countersign (release)"
    cargo build --release -q --manifest-path "$ROOT/Cargo.toml" -p countersign
fi
BIN=$ROOT/target/release/countersign

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done; log "port $1 never opened"; exit 1; }

up_port=$(free_port); http_port=$(free_port); stdio_port=$(free_port)
body=$(python3 -c "import json,sys;print(json.dumps(json.load(open(sys.argv[1])),separators=(',',':')))" "$BENCH/upstream_response.json")
mkdir -p "$WORK/nginx"
cat >"$WORK/nginx/nginx.conf" <<NGINX
daemon off; worker_processes 1; pid $WORK/nginx/nginx.pid; error_log $WORK/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off; keepalive_requests 10000000;
  client_body_temp_path $WORK/nginx/b; proxy_temp_path $WORK/nginx/p; fastcgi_temp_path $WORK/nginx/f;
  uwsgi_temp_path $WORK/nginx/u; scgi_temp_path $WORK/nginx/s;
  server { listen 127.0.0.1:$up_port; location = /mcp { default_type application/json; return 200 '$body'; } }
}
NGINX
"$NGINX" -p "$WORK/nginx" -e "$WORK/nginx/error.log" -c "$WORK/nginx/nginx.conf" &
PIDS+=($!)
"$BIN" serve --upstream "http://127.0.0.1:$up_port/mcp" --listen "127.0.0.1:$http_port" \
    --admin off --audit off --policy "$BENCH/policy.yaml" 2>"$WORK/gateway-http.log" &
PIDS+=($!)
"$BIN" serve --upstream "stdio:python3 $BENCH/stdio_upstream.py" --listen "127.0.0.1:$stdio_port" \
    --admin off --audit off --policy "$BENCH/policy.yaml" 2>"$WORK/gateway-stdio.log" &
PIDS+=($!)
for port in "$up_port" "$http_port" "$stdio_port"; do wait_port "$port"; done

# Every target must answer the call with the upstream's result, or the figures measure
# something else (a held call, an error).
for port in "$up_port" "$http_port" "$stdio_port"; do
    answer=$(curl -s -X POST "http://127.0.0.1:$port/mcp" -H 'Content-Type: application/json' \
        -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2026-07-28' \
        -H 'Mcp-Method: tools/call' -H 'Mcp-Name: list_products' --data-binary @"$BENCH/tools_call.json")
    grep -q 'Wooden train set' <<<"$answer" || { log "port $port did not forward the call: $answer"; exit 1; }
done

printf '| target | connections | req/s | p50 | p90 | p99 |\n|---|---:|---:|---:|---:|---:|\n'
for target in "direct $up_port" "gateway-http $http_port" "gateway-stdio $stdio_port"; do
    set -- $target
    for c in 1 16; do
        wrk -t1 -c"$c" -d3s -s "$BENCH/tools_call.lua" "http://127.0.0.1:$2/mcp" >/dev/null
        out=$(wrk -t1 -c"$c" -d"${DURATION}s" --latency -s "$BENCH/tools_call.lua" "http://127.0.0.1:$2/mcp")
        grep -q 'Non-2xx' <<<"$out" && { log "$1: non-2xx answers"; echo "$out" >&2; exit 1; }
        rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
        pct() { awk -v p="$1%" '$1 == p {print $2}' <<<"$out"; }
        printf '| %s | %s | %s | %s | %s | %s |\n' "$1" "$c" "$rps" "$(pct 50)" "$(pct 90)" "$(pct 99)"
    done
done
