-- wrk script: redeems confirmation tokens minted by mint.lua, each once. Thread k sends the lines
-- of "<prefix>.k", the file mint.lua's thread k wrote (run both with the same -t). A thread that
-- runs out sends its last body again
-- (a replay, refused): done() reports the replays and the answers that were not the upstream's,
-- and bench/run.sh refuses a measurement with any.
-- Usage: wrk ... -s bench/redeem_once.lua URL -- PREFIX
local threads = {}
local next_id = 0
function setup(thread)
  next_id = next_id + 1
  thread:set("id", next_id)
  table.insert(threads, thread)
end

local bodies = {}
local at = 0
replays = 0
refused = 0
function init(args)
  for line in io.lines(args[1] .. "." .. id) do table.insert(bodies, line) end
  assert(#bodies > 0, "no minted bodies for thread " .. id)
end

local headers = {["Content-Type"] = "application/json", ["Accept"] = "application/json, text/event-stream",
  ["MCP-Protocol-Version"] = "2026-07-28", ["Mcp-Method"] = "tools/call", ["Mcp-Name"] = "wipe"}
function request()
  at = at + 1
  if at > #bodies then
    replays = replays + 1
    at = #bodies
  end
  return wrk.format("POST", nil, headers, bodies[at])
end

function response(status, hdrs, body)
  -- The upstream's fixed answer names the demo store's products.
  if status ~= 200 or not body:find('TOY-001', 1, true) then refused = refused + 1 end
end

function done(summary, latency, requests)
  local r, f = 0, 0
  for _, thread in ipairs(threads) do
    r = r + thread:get("replays")
    f = f + thread:get("refused")
  end
  io.write(string.format("redeem: replays %d, not forwarded %d\n", r, f))
end
