-- wrk script: redeems confirmation tokens minted by mint.lua, each once. Thread k sends the lines
-- of "<prefix>.k", the file mint.lua's thread k wrote (run both with the same -t). A thread that
-- runs out sends its last body again
-- (a replay, refused): done() reports the replays and the answers that were not the upstream's,
-- and bench/run.sh refuses a measurement with any.
-- Usage: wrk ... -s bench/redeem_once.lua URL -- PREFIX
--
-- Each request costs the generator as little as the read path's fixed request does: a string
-- made beforehand, sent as it is. wrk.format per request (a header table walked, a string.format
-- per line, new strings to intern) took the generator as much CPU per request as the read
-- path's whole run, and in the `default` scenario the generator shares the CPUs with what it
-- measures. The requests are made on the thread's first request, not in init: wrk runs each
-- thread's init just before starting that thread, while the threads started before it already
-- send, and it counts what those answer meanwhile, so a long init would inflate the rate; made
-- here, their cost is inside the measured time instead.
local threads = {}
local next_id = 0
function setup(thread)
  next_id = next_id + 1
  thread:set("id", next_id)
  table.insert(threads, thread)
end

local path
local requests
local at = 0
replays = 0
refused = 0
function init(args)
  path = args[1] .. "." .. id
end

-- The thread's minted bodies, each as a whole HTTP request.
local function read_requests()
  local head = "POST " .. wrk.path .. " HTTP/1.1\r\nHost: " .. wrk.headers["Host"] .. "\r\n"
    .. "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
    .. "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: wipe\r\n"
    .. "Content-Length: "
  local made = {}
  for body in io.lines(path) do
    made[#made + 1] = head .. #body .. "\r\n\r\n" .. body
  end
  assert(#made > 0, "no minted bodies in " .. path)
  return made
end

function request()
  requests = requests or read_requests()
  at = at + 1
  if at > #requests then
    replays = replays + 1
    at = #requests
  end
  return requests[at]
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
