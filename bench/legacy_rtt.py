#!/usr/bin/env python3
"""Round trip of a read-only tools/call through a running gateway, over the legacy 2024-11-05
HTTP+SSE transport (POST to the announced endpoint, answer on the SSE stream) and over
Streamable HTTP (POST /mcp, answer in the response), alternating, one call at a time.

Usage: bench/legacy_rtt.py BASE_URL N [TOOL]
  e.g. countersign demo --listen 127.0.0.1:39162 --admin off &
       .tools/venv/bin/python bench/legacy_rtt.py http://127.0.0.1:39162 1000 list_products
Needs the test venv (scripts/install-test-tools.sh) for httpx2.
"""

import asyncio
import json
import statistics
import sys
import time

import httpx2 as httpx

BASE = sys.argv[1]
N = int(sys.argv[2])
TOOL = sys.argv[3] if len(sys.argv) > 3 else "list_products"
INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "rtt", "version": "1"}},
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
ACCEPT = {"accept": "application/json, text/event-stream"}


def call(i: int) -> dict:
    return {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": TOOL, "arguments": {}}}


async def legacy(client: httpx.AsyncClient) -> list[float]:
    async with client.stream("GET", f"{BASE}/sse") as stream:
        lines = stream.aiter_lines()

        async def next_data() -> str:
            data: list[str] = []
            async for line in lines:
                if line == "" and data:
                    return "\n".join(data)
                if line.startswith("data:"):
                    data.append(line[5:].strip())
            raise RuntimeError("the legacy stream ended")

        url = BASE + await next_data()
        await client.post(url, json=INIT)
        await next_data()
        await client.post(url, json=INITIALIZED)
        times = []
        for i in range(1, N + 1):
            started = time.perf_counter()
            response = await client.post(url, json=call(i))
            assert response.status_code == 202, response.status_code
            while json.loads(await next_data()).get("id") != i:
                pass
            times.append(time.perf_counter() - started)
        return times


async def streamable(client: httpx.AsyncClient) -> list[float]:
    response = await client.post(f"{BASE}/mcp", json=INIT, headers=ACCEPT)
    headers = {**ACCEPT, "mcp-session-id": response.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    await client.post(f"{BASE}/mcp", json=INITIALIZED, headers=headers)
    times = []
    for i in range(1, N + 1):
        started = time.perf_counter()
        response = await client.post(f"{BASE}/mcp", json=call(i), headers=headers)
        assert response.status_code == 200, response.text[:200]
        times.append(time.perf_counter() - started)
    await client.delete(f"{BASE}/mcp", headers=headers)
    return times


async def main() -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        for name, run in (("streamable", streamable), ("legacy", legacy)) * 2:
            ms = sorted(t * 1000 for t in await run(client))
            print(f"{name:10s} n={len(ms)} median={statistics.median(ms):.2f} ms p90={ms[int(len(ms) * 0.9)]:.2f} ms")


asyncio.run(main())
