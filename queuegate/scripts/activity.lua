-- activity: the room's log of operators' changes, written by the very call
-- that makes each change (configure, drain, remove, note), so that a change
-- from the console, the back office, or the app's own code is logged the
-- same way, and never a change without its entry. Comes after advance.lua.
--
-- <base>activity is a list, newest first, of the last ACTIVITY_KEEP
-- entries, each a JSON object {"at": ms, "who": text, "action": text,
-- "details": object}; it expires with the room's other keys (`forget`).

local ACTIVITY_KEEP = 500

-- `details` is a JSON object already (from the caller, or built here).
-- A change with no `who` ("") is a visitor's own, not an operator's: no entry.
local function note_activity(who, action, details)
  if who == '' then return end
  local key = BASE .. 'activity'
  redis.call('LPUSH', key, '{"at":' .. string.format('%.0f', now) .. ',"who":' .. cjson.encode(who)
    .. ',"action":' .. cjson.encode(action) .. ',"details":' .. details .. '}')
  redis.call('LTRIM', key, 0, ACTIVITY_KEEP - 1)
  if forget > 0 then redis.call('PEXPIRE', key, forget) end
end
