-- places: the open streams of one app process and room (queuegate/feeds.py)
-- prove their visitors are still here, many in one call, and learn where
-- each one stands: to check in, and to set their places right when the
-- room's pushes cannot say (a new subscription, a shuffle at a scheduled
-- opening, a room whose data was lost). Records liveness as checkin.lua
-- does. Moves nothing.
--
-- ARGV[4..] visitor ids
--
-- Returns the Redis time, the room's incarnation ("" = no state), then two
-- numbers for each id in order: its rank (0-based) and 0 while it waits;
-- -1 and its session's end (ms) once admitted; -1 and 0 when it has no
-- place (its stream asks what became of it).

local ids = {unpack(ARGV, 4)}
alive_now(ids)
local out = {now, redis.call('HGET', KEYS[5], 'inc') or ''}
for _, id in ipairs(ids) do
  local rank = redis.call('ZRANK', KEYS[2], id)
  if rank then
    out[#out + 1], out[#out + 2] = rank, 0
  else
    out[#out + 1] = -1
    out[#out + 1] = tonumber(redis.call('ZSCORE', KEYS[4], id)) or 0
  end
end
return out
