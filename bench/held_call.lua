-- wrk script: a risky MCP 2026-07-28 stateless tools/call (`wipe`, which the benchmark policy
-- holds for confirmation), from held_call.json beside this script. Every answer is a held result
-- with a fresh confirmation token; nothing reaches the upstream.
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local file = assert(io.open(dir .. "held_call.json", "rb"))
local body = file:read("*a"):gsub("%s+$", "")
file:close()

wrk.method = "POST"
wrk.body = body
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = "2026-07-28"
wrk.headers["Mcp-Method"] = "tools/call"
wrk.headers["Mcp-Name"] = "wipe"
