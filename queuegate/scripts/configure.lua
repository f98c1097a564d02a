-- configure: change a room's run-time settings. Runs after advance, so time
-- already elapsed is accounted under the old settings and the new ones apply
-- from now on, in every app process at their next call.
--
-- ARGV[10..] field, value pairs; fields: rate, per, capacity, session,
-- sliding, abandon, max_step, status. An empty value removes the field, so
-- the room falls back to the default it has in code. Values are checked by
-- the caller (queuegate.settings) before they get here.
--
-- Returns the number of fields written.

save_state()
local n = 0
for i = 10, #ARGV, 2 do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', KEYS[5], ARGV[i])
  else
    redis.call('HSET', KEYS[5], ARGV[i], ARGV[i + 1])
  end
  n = n + 1
end
return n
