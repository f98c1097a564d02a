-- clock: the time every script works with, in ms. Redis TIME, so that all app
-- processes on all hosts agree; ARGV[1] overrides it for tests ("" = TIME).

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
