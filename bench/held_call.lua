-- wrk script: a risky MCP 2026-07-28 stateless tools/call (`wipe`, which the benchmark policy
-- holds for confirmation), from held_call.json beside this script. Every answer is a held result
-- with a fresh confirmation token; nothing reaches the upstream.
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
dofile(dir .. "fixed_call.lua").send(dir, "held_call.json", "wipe")
