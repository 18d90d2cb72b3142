#!/usr/bin/env bash
# Proves the MCP test peers work before any Rust test relies on them: every client
# (Python SDK in legacy, 2026-07-28 and auto modes; TypeScript SDK) runs its `session`
# script straight against a fresh notes upstream (no gateway), twice, and the two
# transcripts must be identical. The clients must also agree with each other, and the
# transcript must show the upstream's real state and every side channel (progress,
# logs, elicitation, GET-stream notifications). Takes about 20 s.
#
# Usage: scripts/peers-selftest.sh   (after scripts/install-test-tools.sh)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -z "${COUNTERSIGN_PYTHON:-}" ]; then
	[ -f "$ROOT/.tools/env.sh" ] || {
		echo "peers-selftest: run scripts/install-test-tools.sh first" >&2
		exit 1
	}
	# shellcheck source=/dev/null
	. "$ROOT/.tools/env.sh"
fi

WORK="$(mktemp -d)"
UPSTREAM_PID=""
cleanup() {
	if [ -n "$UPSTREAM_PID" ]; then kill "$UPSTREAM_PID" 2>/dev/null || true; fi
	rm -rf "$WORK"
}
trap cleanup EXIT

fail() {
	echo "peers-selftest: FAIL: $*" >&2
	exit 1
}

free_port() {
	"$COUNTERSIGN_PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_upstream NAME [upstream args...]: sets UPSTREAM_URL, UPSTREAM_PID
start_upstream() {
	local name="$1" port
	shift
	port="$(free_port)"
	"$COUNTERSIGN_PYTHON" "$COUNTERSIGN_PEERS/python/upstream.py" --port "$port" "$@" \
		>"$WORK/$name.upstream.out" 2>"$WORK/$name.upstream.err" &
	UPSTREAM_PID=$!
	local _
	for _ in $(seq 1 300); do
		if grep -qx READY "$WORK/$name.upstream.out" 2>/dev/null; then break; fi
		kill -0 "$UPSTREAM_PID" 2>/dev/null || fail "upstream for $name exited: $(cat "$WORK/$name.upstream.err")"
		sleep 0.05
	done
	[ "$(cat "$WORK/$name.upstream.out")" = "READY" ] ||
		fail "upstream for $name did not print exactly READY within 15 s: $(cat "$WORK/$name.upstream.err")"
	UPSTREAM_URL="http://127.0.0.1:$port/mcp"
}

stop_upstream() {
	kill "$UPSTREAM_PID" 2>/dev/null || true
	wait "$UPSTREAM_PID" 2>/dev/null || true
	UPSTREAM_PID=""
}

# run NAME UPSTREAM_ARGS CLIENT...: a fresh upstream per run, transcript in $WORK/NAME.json
run() {
	local name="$1" upstream_args="$2"
	shift 2
	# shellcheck disable=SC2086 # upstream_args is a word list on purpose
	start_upstream "$name" $upstream_args
	if ! "$@" --url "$UPSTREAM_URL" >"$WORK/$name.json" 2>"$WORK/$name.err"; then
		fail "$name: client failed: $(cat "$WORK/$name.err")"
	fi
	stop_upstream
}

py_client() { "$COUNTERSIGN_PYTHON" "$COUNTERSIGN_PEERS/python/client.py" --script session --mode "$@"; }
ts_client() { "$COUNTERSIGN_NODE" "$COUNTERSIGN_PEERS/node/client.mjs" --script session "$@"; }

variants=(py-legacy py-modern py-auto ts py-legacy-json ts-json)
for round in 1 2; do
	run "py-legacy.$round" "" py_client legacy
	run "py-modern.$round" "" py_client 2026-07-28
	run "py-auto.$round" "" py_client auto
	run "ts.$round" "" ts_client
	run "py-legacy-json.$round" "--json-response" py_client legacy
	run "ts-json.$round" "--json-response" ts_client
done

for variant in "${variants[@]}"; do
	diff -u "$WORK/$variant.1.json" "$WORK/$variant.2.json" >&2 ||
		fail "$variant: two runs against fresh upstreams gave different transcripts"
done

"$COUNTERSIGN_PYTHON" - "$WORK" <<'EOF' || fail "transcripts do not show what the peers must do (see above)"
import json
import sys

work = sys.argv[1]
load = lambda name: json.load(open(f"{work}/{name}.1.json"))
problems = []

def without(transcript, *keys):
    return {k: v for k, v in transcript.items() if k not in keys}

def expect(cond, what):
    if not cond:
        problems.append(what)

t = {name: load(name) for name in ["py-legacy", "py-modern", "py-auto", "ts", "py-legacy-json", "ts-json"]}
expect(without(t["py-legacy"], "peer") == without(t["ts"], "peer"), "TypeScript and Python legacy transcripts differ")
expect(without(t["py-legacy-json"], "peer") == without(t["ts-json"], "peer"), "TS and Python differ on a JSON-response upstream")
expect(without(t["py-modern"], "mode", "serverName") == without(t["py-auto"], "mode", "serverName"),
       "2026-07-28 and auto transcripts differ")

legacy, modern = t["py-legacy"], t["py-modern"]
expect(legacy["protocolVersion"] == "2025-11-25", "legacy mode did not negotiate 2025-11-25")
expect(modern["protocolVersion"] == "2026-07-28", "2026-07-28 mode is not on 2026-07-28")
expect(t["py-auto"]["protocolVersion"] == "2026-07-28", "auto mode did not pick 2026-07-28 via server/discover")
expect(legacy["getStream"] == 200 and legacy["sessionDelete"] == 200, "legacy GET stream or DELETE did not get 200")
expect(modern["getStream"] is None and modern["sessionDelete"] is None, "2026-07-28 mode used GET or DELETE")
tools = {tool["name"]: tool for tool in legacy["tools"]}
expect(tools.get("touch", {}).get("annotations", "missing") is None, "touch must have no annotations")
expect(tools.get("delete_note", {}).get("annotations", {}).get("destructiveHint") is True, "delete_note not destructive")
expect(tools.get("get_note", {}).get("outputSchema") is True, "get_note has no outputSchema")
for name, transcript in [("legacy", legacy), ("2026-07-28", modern)]:
    steps = {step["call"]: step for step in transcript["steps"]}
    audit = transcript["steps"][-1]["result"]["structuredContent"]["entries"]
    expect([e["tool"] for e in audit] == ["add_note", "confirm_delete"], f"{name}: audit log is {audit}")
    expect([p["progress"] for p in steps["slow_count"].get("progress", [])] == [1, 2, 3, 4, 5],
           f"{name}: progress not seen")
    expect(len(steps["slow_count"].get("logs", [])) == 1, f"{name}: log message not seen")
    expect(len(steps["confirm_delete"].get("elicitations", [])) == 1, f"{name}: elicitation not seen")
expect(legacy["unsolicitedNotifications"] == ["notifications/resources/list_changed"] * 2,
       "legacy: GET-stream notifications not seen")
json_steps = {step["call"]: step for step in t["py-legacy-json"]["steps"]}
expect("error" in json_steps["confirm_delete"], "a JSON-response upstream cannot elicit, yet confirm_delete did")

for problem in problems:
    print(f"peers-selftest: {problem}", file=sys.stderr)
sys.exit(1 if problems else 0)
EOF

echo "peers-selftest: ${#variants[@]} transcripts deterministic and consistent across clients and eras" >&2
