-- wrk script: the read-only MCP 2026-07-28 stateless tools/call that bench/run.sh measures.
-- The body is read from tools_call.json beside this script, the same file bench/loadgen sends.
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local file = assert(io.open(dir .. "tools_call.json", "rb"))
local body = file:read("*a"):gsub("%s+$", "")
file:close()

wrk.method = "POST"
wrk.body = body
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = "2026-07-28"
wrk.headers["Mcp-Method"] = "tools/call"
wrk.headers["Mcp-Name"] = "list_products"
