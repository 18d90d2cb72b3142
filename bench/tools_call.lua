-- wrk script: the read-only MCP 2026-07-28 stateless tools/call that bench/run.sh measures.
-- The body is read from tools_call.json beside this script, the same file bench/loadgen sends.
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
dofile(dir .. "fixed_call.lua").send(dir, "tools_call.json", "list_products")
