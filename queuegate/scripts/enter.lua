-- enter: one gated request or status poll of one visitor. Runs after advance.
--
-- ARGV[10] visitor id (random, from the signed cookie)
-- ARGV[11] 1 = a visitor with no place joins the line, 0 = only report
--
-- Returns a flat list, first the outcome and Redis time (ms):
--   {'active', now, expiry_ms, joined}     may pass; joined = 1 if just now
--   {'waiting', now, rank, count, eta_ms, poll_ms, joined}
--                                          rank 0-based; eta_ms -1 = unknown
--   {'closed', now}                        room closed (no active session)
--   {'pass', now}                          gate switched off (passthrough)
--   {'none', now}                          no place and ARGV[11] = 0

local id = ARGV[10]
local result

if status == 'passthrough' then
  result = {'pass', now}
else
  local expiry = tonumber(redis.call('ZSCORE', KEYS[4], id))
  if expiry ~= nil then
    if sliding then
      expiry = now + session
      redis.call('ZADD', KEYS[4], expiry, id)
    end
    result = {'active', now, expiry, 0}
  elseif status == 'closed' then
    -- Sold out or over: nobody new joins, and those waiting are told so
    -- (their place is kept in case the operator opens the room again).
    result = {'closed', now}
  else
    local rank = redis.call('ZRANK', KEYS[2], id)
    local count = redis.call('ZCARD', KEYS[2])
    if rank then
      -- A reload or poll keeps the place and proves the visitor is still here.
      redis.call('ZADD', KEYS[3], now, id)
      local wait = eta(rank)
      result = {'waiting', now, rank, count, wait, poll_after(wait), 0}
    elseif ARGV[11] ~= '1' then
      result = {'none', now}
    elseif count == 0 and status == 'open' and room_for(1) > 0 then
      -- Nobody waits and there is room: straight in.
      redis.call('ZADD', KEYS[4], now + session, id)
      note_admitted(1)
      result = {'active', now, now + session, 1}
    else
      -- A newcomer, or someone whose session ended or who left: the back.
      local seq = redis.call('INCR', KEYS[1])
      redis.call('ZADD', KEYS[2], seq, id)
      redis.call('ZADD', KEYS[3], now, id)
      redis.call('HINCRBY', KEYS[5], 'joined', 1)
      local wait = eta(count)
      result = {'waiting', now, count, count + 1, wait, poll_after(wait), 1}
    end
  end
end

save_state()
return result
