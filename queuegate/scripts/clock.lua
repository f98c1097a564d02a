-- clock: the time every script works with, in ms. Redis TIME, so that all app
-- processes on all hosts agree.
--
-- ARGV[1] ""            Redis TIME
--         "<ms>"        this time instead (tests and simulations)
--         "d<ms>"       Redis TIME, and the caller's deadline in Redis time:
--                       a call that runs after it changes nothing and fails
--                       with LATE (its caller has given up and answered
--                       already; a place it took would be a ghost nobody holds)

local now
local clock = ARGV[1]
if clock ~= '' and string.byte(clock, 1) ~= 100 then -- 100 = 'd'
  now = tonumber(clock)
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if clock ~= '' and now > tonumber(string.sub(clock, 2)) then
    return redis.error_reply('LATE the caller gave up before Redis ran this call')
  end
end
