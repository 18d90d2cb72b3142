-- wrk script: holds distinct risky calls (`wipe` with n = thread id * 1e9 + counter) and writes,
-- for each token it is given, the body that redeems it: one line per body, to
-- "<prefix>.<thread>", for redeem_once.lua and `bench/loadgen --bodies-file` to send once each.
-- Usage: wrk ... -s bench/mint.lua URL -- PREFIX
local threads = {}
local next_id = 0
function setup(thread)
  next_id = next_id + 1
  thread:set("id", next_id)
  table.insert(threads, thread)
end

local meta = '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
local counter = 0
local out
local written = 0
function init(args)
  out = assert(io.open(args[1] .. "." .. id, "w"))
end

function request()
  counter = counter + 1
  local body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"wipe","arguments":{"n":'
    .. (id * 1000000000 + counter) .. '},' .. meta .. '}}'
  return wrk.format("POST", nil, {["Content-Type"] = "application/json",
    ["Accept"] = "application/json, text/event-stream", ["MCP-Protocol-Version"] = "2026-07-28",
    ["Mcp-Method"] = "tools/call", ["Mcp-Name"] = "wipe"}, body)
end

function response(status, headers, body)
  local token = body:match('"confirmationToken":"(mcp_cf_[^"]+)"')
  local n = body:match('"arguments":{"n":(%d+)')
  if token and n then
    out:write('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"wipe","arguments":{"n":'
      .. n .. ',"confirmationToken":"' .. token .. '"},' .. meta .. '}}\n')
    written = written + 1
    -- Flushed as it goes: the thread's file is not closed before wrk exits.
    if written % 256 == 0 then out:flush() end
  end
end
