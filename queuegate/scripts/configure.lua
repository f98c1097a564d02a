-- configure: change a room's run-time settings. Runs after advance, so time
-- already elapsed is accounted under the old settings; then the room moves
-- under the new ones in the same call (`open` after `paused` admits at
-- once), and every app process uses them from its next call.
--
-- ARGV[4] who asks (the room's activity log: activity.lua)
-- ARGV[5] the change as they gave it, a JSON object, for that log
-- ARGV[6..] field, value pairs: the settings listed in advance.lua, and
-- seed / seed_sha256 (the lottery's secret and its published hash). An empty
-- value removes the field, so a setting falls back to its default from code.
-- Values are checked by the caller (queuegate.settings) before they get here.
--
-- A health target (target_ms > 0) is refused for a room without one in
-- code: the app's processes measure the responses only of rooms with a
-- `target` (queuegate.gate), so nothing would ever reach the controller.
-- Refused with REFUSED <why>, before anything is written.
--
-- Setting the rate or capacity of a room with a health target pins it: the
-- controller (health.lua) holds it until a `pinned` field of "" (unpin)
-- returns control.
--
-- Returns the number of fields written.

for i = 6, #ARGV, 2 do
  if ARGV[i] == 'target_ms' and (tonumber(ARGV[i + 1]) or 0) > 0 and (tonumber(default[14]) or 0) == 0 then
    return redis.error_reply('REFUSED target_ms: this room has no health target in code, so no app '
      .. 'process measures its responses and a target set here would never act. Give the room one '
      .. 'in code (Room(..., target=Health(p95_ms=' .. ARGV[i + 1] .. '))), then tune it here.')
  end
end

advance()
save_state()
moved() -- a new rate, state or opening changes what every waiting page shows
-- Copies of the room's admissions go (a session may now slide): admissions.py.
redis.call('PUBLISH', BASE .. 'revoked', '*:' .. now)
-- So does the view of the line built under the old ones (view.lua).
redis.call('HDEL', KEYS[5], 'view_at', 'view')
local n = 0
for i = 6, #ARGV, 2 do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', KEYS[5], ARGV[i])
  else
    redis.call('HSET', KEYS[5], ARGV[i], ARGV[i + 1])
    if (ARGV[i] == 'rate' or ARGV[i] == 'capacity') and target_ms > 0 then
      redis.call('HSET', KEYS[5], 'pinned', 1)
    end
  end
  n = n + 1
end
-- The room under its new settings, now.
read_settings(redis.call('HMGET', KEYS[5], unpack(SETTINGS)))
advance()
save_state()
note_activity(ARGV[4], 'settings', ARGV[5])
return n
