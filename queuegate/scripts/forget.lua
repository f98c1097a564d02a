-- forget: delete a room and everything Redis holds of it (its line and
-- sessions, counters, settings set at run time, seed, analytics, activity
-- log, the controller's figures), at an operator's word. A room that
-- `forget` (the setting) does not expire, a plain room's case, stays in
-- the console, the back office and /metrics for good once renamed or
-- tested. Runs after advance, so sessions already over do not count.
--
-- Refused while anybody is in the room, waiting or with a session: they
-- would lose their place or be let out, and the app that sent them there
-- probably still runs. The line can be drained first (drain.lua).
--
-- An app process that still has the room in its code makes it again at its
-- next call (a visitor, its ticker, its start), with the code's settings and
-- a new incarnation, so that every copy of the old one is dropped
-- (tick.lua). Keys of a visitor or client (user:, client:, proof:) keep
-- their own expiry: they are not listed anywhere to be deleted, and mean
-- nothing without the room.
--
-- Returns {waiting, active, the last session's end (ms, 0 = none)}: all 0
-- when the room is gone, then the settings it had set at run time (field,
-- value pairs, as kept: ms for durations; `pinned` among them), read in
-- this call, for the log kept aside (its own goes with it); otherwise
-- nothing was deleted.

advance()
local waiting = redis.call('ZCARD', KEYS[2])
if waiting > 0 or active_n > 0 then
  settled = true
  save_state()
  local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
  return {waiting, active_n, tonumber(last[2]) or 0}
end
local gone = {0, 0, 0}
for i, name in ipairs(SETTINGS) do
  if conf[i + 1] then
    gone[#gone + 1] = name
    gone[#gone + 1] = conf[i + 1]
  end
end
local pinned = redis.call('HGET', KEYS[5], 'pinned')
if pinned then
  gone[#gone + 1] = 'pinned'
  gone[#gone + 1] = pinned
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ALIVE, ALIVE_N)
for _, name in ipairs({'waits', 'arrivals', 'minutes', 'activity', 'health', 'health:admits', 'ticker'}) do
  redis.call('DEL', BASE .. name)
end
-- Every process drops what it copied of the room (admissions.py).
redis.call('PUBLISH', BASE .. 'revoked', '*:' .. now)
return gone
