-- clock: the time every script works with, in ms. Redis TIME, so that all app
-- processes on all hosts agree.
--
-- ARGV[1] ""            Redis TIME
--         "<ms>"        this time instead (tests and simulations)
--         "d<ms>"       Redis TIME, and the caller's deadline in Redis time:
--                       a call that runs after it changes nothing and fails
--                       with LATE (its caller has given up and answered
--                       already; a place it took would be a ghost nobody holds)
--
-- Lines marked "per call" run at each call: where they stand in a script,
-- and at the start of each call in a function library (queuegate.scripts:
-- library), whose functions are made once, when it is loaded.

-- The time ARGV[1] asks for, or nil when its deadline has passed.
local function clock_now(clock)
  if clock ~= '' and string.byte(clock, 1) ~= 100 then return tonumber(clock) end -- 100 = 'd'
  local t = redis.call('TIME')
  local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if clock ~= '' and ms > tonumber(string.sub(clock, 2)) then return nil end
  return ms
end
local now = clock_now(ARGV[1]) -- per call
if not now then return redis.error_reply('LATE the caller gave up before Redis ran this call') end -- per call
