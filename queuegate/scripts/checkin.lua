-- checkin: far-back visitors prove they are still here, many in one call
-- (see queuegate/farback.py): each one still in the line gets the time of
-- this call as their last poll, in liveness.lua's hash, as a poll of theirs
-- through enter would give them in `seen`. Moves nothing.
--
-- ARGV[4..] visitor ids
--
-- Returns the Redis time recorded, then the ids no longer in the line
-- (admitted, removed or drained since the view their process answers from).

local ids = {unpack(ARGV, 4)}
local places = redis.call('ZMSCORE', KEYS[2], unpack(ids))
local here, gone = {}, {now}
for i, id in ipairs(ids) do
  if places[i] then here[#here + 1] = id else gone[#gone + 1] = id end
end
if #here > 0 then alive_now(here) end
return gone
