-- Loaded by tools_call.lua and held_call.lua: sends one MCP 2026-07-28 stateless tools/call,
-- its body read from a file beside these scripts, with the mirrored Mcp-Method/Mcp-Name headers.
local M = {}

function M.send(dir, body_file, tool)
  local file = assert(io.open(dir .. body_file, "rb"))
  local body = file:read("*a"):gsub("%s+$", "")
  file:close()
  wrk.method = "POST"
  wrk.body = body
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Accept"] = "application/json, text/event-stream"
  wrk.headers["MCP-Protocol-Version"] = "2026-07-28"
  wrk.headers["Mcp-Method"] = "tools/call"
  wrk.headers["Mcp-Name"] = tool
end

return M
