#!/usr/bin/env python3
"""The benchmark upstream as a stdio MCP server: every `tools/call` is answered with the fixed
result of bench/upstream_response.json (the demo store's real `list_products` answer, id
replaced), so a stdio upstream is measured on the same exchange as the nginx one.

It also answers `initialize`, `ping` and `tools/list` (one read-only tool), so it works for
clients that open a session; notifications are ignored. Reads newline-delimited JSON-RPC on
stdin, writes answers on stdout, nothing else.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "upstream_response.json"), "rb") as f:
    CALL_RESULT = json.loads(f.read())["result"]

TOOLS = {
    "tools": [
        {
            "name": "list_products",
            "description": "List the products.",
            "inputSchema": {"type": "object", "properties": {}},
            "annotations": {"readOnlyHint": True},
        }
    ]
}


def answer(request):
    method = request.get("method")
    if method == "tools/call":
        return CALL_RESULT
    if method == "initialize":
        version = request.get("params", {}).get("protocolVersion", "2025-11-25")
        return {
            "protocolVersion": version,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "bench-stdio-upstream", "version": "1"},
        }
    if method == "tools/list":
        return TOOLS
    return {}


def main():
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        line = line.strip()
        if not line:
            continue
        message = json.loads(line)
        if "id" not in message or "method" not in message:
            continue
        reply = {"jsonrpc": "2.0", "id": message["id"], "result": answer(message)}
        out.write(json.dumps(reply, separators=(",", ":")).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    main()
