#!/usr/bin/env bash
# Run the MCP conformance suite (@modelcontextprotocol/conformance, server mode) against a URL,
# normally countersign's /mcp endpoint with tests/peers/node/conformance-upstream.mjs behind it.
#
#   scripts/conformance.sh GATEWAY_URL [extra conformance `server` options...]
#   e.g. scripts/conformance.sh http://localhost:8080/mcp
#        scripts/conformance.sh http://localhost:8080/mcp --suite all
#        scripts/conformance.sh http://localhost:8080/mcp --scenario dns-rebinding-protection
#
# Environment:
#   COUNTERSIGN_NODE          Node >= 22 binary (the suite crashes on Node 20: fs.globSync)
#   COUNTERSIGN_NODE_MODULES  node_modules dir holding @modelcontextprotocol/conformance
#
# Runs the default `active` suite unless told otherwise, keeps the CLI log and every scenario's
# checks.json in a fresh temp dir, prints one line per scenario and a final `N passed, M failed`
# (scenarios), and exits non-zero if any check failed or the CLI itself failed. When
# --expected-failures is given, the exit code is the CLI's (baseline semantics) instead.
# The Rust e2e test does not use this script; it is for humans.
set -euo pipefail

usage() {
  sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

[[ $# -ge 1 ]] || usage
case "$1" in -h|--help) usage ;; esac
url=$1
shift

node=${COUNTERSIGN_NODE:-}
modules=${COUNTERSIGN_NODE_MODULES:-}
if [[ -z $node || ! -x $node ]]; then
  echo "conformance.sh: set COUNTERSIGN_NODE to a Node >= 22 binary (got '${node}')" >&2
  exit 2
fi
cli=$modules/@modelcontextprotocol/conformance/dist/index.js
if [[ -z $modules || ! -f $cli ]]; then
  echo "conformance.sh: set COUNTERSIGN_NODE_MODULES to a node_modules dir containing" \
    "@modelcontextprotocol/conformance (looked for '${cli}')" >&2
  exit 2
fi
major=$("$node" -p 'process.versions.node.split(".")[0]')
if (( major < 22 )); then
  echo "conformance.sh: $node is Node $major; the conformance CLI needs Node >= 22" >&2
  exit 2
fi

baseline=0
for arg in "$@"; do
  [[ $arg == --expected-failures* ]] && baseline=1
done

out=$(mktemp -d "${TMPDIR:-/tmp}/countersign-conformance.XXXXXX")
log=$out/conformance.log
version=$("$node" -p 'require(process.argv[1]).version' "$modules/@modelcontextprotocol/conformance/package.json" 2>/dev/null || echo '?')
echo "conformance $version (node $("$node" --version)) against $url" >&2

set +e
"$node" "$cli" server --url "$url" -o "$out/results" "$@" >"$log" 2>&1
cli_rc=$?
set -e

# Summarise from the checks.json files (dir names: server-<scenario>-<ISO timestamp with : and . as ->).
summary_rc=0
"$node" - "$out/results" <<'EOF' || summary_rc=$?
const fs = require('node:fs');
const path = require('node:path');
const dir = process.argv[2];
let entries = [];
try { entries = fs.readdirSync(dir); } catch { /* no results at all */ }
const rows = [];
const stamp = /^server-(.+)-(\d{4}-\d{2}-\d{2}T[\d-]+Z)$/;
// Run order = timestamp order.
entries = entries.filter((n) => stamp.test(n)).sort((a, b) => stamp.exec(a)[2].localeCompare(stamp.exec(b)[2]));
for (const name of entries) {
  const m = stamp.exec(name);
  if (!m) continue;
  let checks;
  try { checks = JSON.parse(fs.readFileSync(path.join(dir, name, 'checks.json'), 'utf8')); }
  catch (e) { checks = [{ status: 'FAILURE', id: 'unreadable-checks', errorMessage: String(e) }]; }
  const count = (s) => checks.filter((c) => c.status === s).length;
  const failed = checks.filter((c) => c.status === 'FAILURE');
  rows.push({ scenario: m[1], ok: failed.length === 0, pass: count('SUCCESS'), fail: failed.length,
              warn: count('WARNING'), failedIds: failed.map((c) => `${c.id}${c.errorMessage ? ` (${c.errorMessage})` : ''}`) });
}
const width = Math.max(0, ...rows.map((r) => r.scenario.length));
for (const r of rows) {
  let line = `${r.ok ? 'PASS' : 'FAIL'}  ${r.scenario.padEnd(width)}  ${r.pass} passed, ${r.fail} failed`;
  if (r.warn) line += `, ${r.warn} warning${r.warn === 1 ? '' : 's'}`;
  if (!r.ok) line += `  <- ${r.failedIds.join('; ')}`;
  console.log(line);
}
const passed = rows.filter((r) => r.ok).length;
console.log(`${passed} passed, ${rows.length - passed} failed`);
process.exit(rows.length === 0 ? 3 : rows.length === passed ? 0 : 1);
EOF

echo "results and CLI log kept in $out" >&2
if (( summary_rc == 3 )); then
  echo "conformance.sh: no scenario results were written (CLI exit $cli_rc); see $log" >&2
  tail -n 20 "$log" >&2 || true
  exit 1
fi
if (( baseline )); then
  echo "conformance.sh: --expected-failures given: exit code is the CLI's baseline verdict ($cli_rc)" >&2
  exit "$cli_rc"
fi
if (( cli_rc != 0 || summary_rc != 0 )); then
  exit 1
fi
exit 0
