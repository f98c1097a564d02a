-- checkin: far-back visitors prove they are still here, many in one call
-- (see queuegate/farback.py): each one still in the line gets the time of
-- this call as their last poll, in liveness.lua's hash, as a poll of theirs
-- through enter would give them in `seen`. Moves nothing.
--
-- ARGV[4..] visitor ids
--
-- Returns the Redis time recorded, then the ids no longer in the line
-- (admitted, removed or drained since the view their process answers from).

local gone = alive_now({unpack(ARGV, 4)})
table.insert(gone, 1, now)
return gone
