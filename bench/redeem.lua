-- Alternates holding a risky call and redeeming the token it returned: each thread keeps a
-- queue of tokens from held answers and spends one whenever it has one.
local tokens = {}
local counter = 0
local held, redeemed, refused = 0, 0, 0
local meta = '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
local headers = {["Content-Type"] = "application/json", ["Accept"] = "application/json, text/event-stream",
  ["MCP-Protocol-Version"] = "2026-07-28", ["Mcp-Method"] = "tools/call", ["Mcp-Name"] = "wipe"}
function request()
  counter = counter + 1
  local token = table.remove(tokens)
  local body
  if token then
    body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"wipe","arguments":{"n":' .. token.n .. ',"confirmationToken":"' .. token.t .. '"},' .. meta .. '}}'
  else
    body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"wipe","arguments":{"n":' .. counter .. '},' .. meta .. '}}'
  end
  return wrk.format("POST", nil, headers, body)
end
function response(status, hdrs, body)
  local t = body:match('"confirmationToken":"(mcp_cf_[^"]+)"')
  local n = body:match('"arguments":{"n":(%d+)')
  if t and n and body:find('requires_confirmation', 1, true) then
    table.insert(tokens, {t = t, n = n})
  end
end
