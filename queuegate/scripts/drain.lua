-- drain: empty the line. Everyone waiting loses their place (counted as
-- 'drained'); active sessions run on. Runs after advance.
--
-- ARGV[4] who asks (the room's activity log: activity.lua)
--
-- Returns the number of visitors removed from the line.

advance()
local n = redis.call('ZCARD', KEYS[2])
redis.call('DEL', KEYS[2], KEYS[3], ALIVE, ALIVE_N)
redis.call('HDEL', KEYS[5], 'view_at', 'view') -- the line it showed is gone (view.lua)
if n > 0 then
  redis.call('HINCRBY', KEYS[5], 'drained', n)
  push_drained = true
  moved()
end
settled = true
save_state()
note_activity(ARGV[4] or '', 'drain', '{"removed":' .. n .. '}')
return n
