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
-- So are the controller's own settings there (max_errors, floor, ceiling,
-- settle), which only a controller reads; their removal is not. So is a
-- change that leaves the room neither a rate nor a capacity.
-- So is an unpin (`pinned` "", `set --auto`) there when nothing is pinned:
-- no controller would take the rate back. A pin left from a deploy that had
-- a target is removed (`--reset all`, `--auto`), or the next deploy with a
-- target would come back pinned. Refused with REFUSED <why>, before
-- anything is written: this is the one place the rule lives (the console
-- and the back office send what the operator asked).
--
-- Setting what the controller of a room with a health target holds (its
-- rate, or the capacity of a room without one) pins it: the controller
-- (health.lua) leaves it until a `pinned` field of "" (unpin) returns
-- control, or a reset of that setting (below).
--
-- `rate` and `per` are one pair (visitors per interval), kept at run time
-- together or not at all, so that a deploy with another `per` never makes
-- a pair neither the code nor the operator chose: setting one keeps the
-- other at its value in force, resetting one resets both, and one set with
-- the other reset keeps the other at the code's value. But a rate the
-- controller holds is not the operator's half: `per` set or reset alone
-- leaves it where the controller put it. A value given for the setting
-- the controller holds pins it, an unpin in the same call or not.
--
-- A first pair `reset_all` (its value unread; `--reset all`) resets every
-- setting not given in the call and removes a pin if there is one, all
-- read and written here: a pin another operator makes meanwhile is wholly
-- before it (and reset with the rest) or wholly after (and kept). Read in
-- Python first, a pin made between that read and this call was kept, and
-- the rate it pinned reset: pinned at the code's rate.
--
-- Returns the fields written, as field, value pairs in the order given
-- (the pair's other half after them; with `reset_all`, the settings it
-- reset after those given; `pinned` 1 last where a value given pinned the
-- setting the controller held); a value of "" was removed. With `reset_all`
-- the first pair is `reset_all` and the settings set at run time before
-- it, comma-separated (as stats.lua's run_time). The activity log has the
-- change as given and that other half (and, for a reset_all, what it
-- reset: below).

local reset_all = ARGV[6] == 'reset_all'
local given, order = {}, {}
for i = reset_all and 8 or 6, #ARGV, 2 do
  if given[ARGV[i]] == nil then order[#order + 1] = ARGV[i] end
  given[ARGV[i]] = ARGV[i + 1]
end
local were = {}
local logged = {} -- what a reset_all changed beyond the settings given: the log's nulls
if reset_all then
  local pinned = redis.call('HGET', KEYS[5], 'pinned')
  local controlled = (target_ms > 0 and not pinned) and controlled_field() or ''
  for i, name in ipairs(SETTINGS) do
    local set = conf[i + 1] and name ~= controlled
    if set then were[#were + 1] = name end
    if given[name] == nil then
      if set then logged[#logged + 1] = name end
      given[name] = ''
      order[#order + 1] = name
    end
  end
  if pinned and given.pinned == nil then
    given.pinned = ''
    order[#order + 1] = 'pinned'
    logged[#logged + 1] = 'pinned'
  end
end

local CONTROLLER = {max_errors = true, floor = true, ceiling = true, settle = true}
for _, field in ipairs(order) do
  local value = given[field]
  if field == 'target_ms' and (tonumber(value) or 0) > 0 and (tonumber(default[14]) or 0) == 0 then
    return redis.error_reply('REFUSED target_ms: this room has no health target in code, so no app '
      .. 'process measures its responses and a target set here would never act. Give the room one '
      .. 'in code (Room(..., target=Health(p95_ms=' .. value .. '))), then tune it here.')
  end
  if CONTROLLER[field] and value ~= '' and (tonumber(default[14]) or 0) == 0 then
    return redis.error_reply('REFUSED ' .. field .. ': this room has no health target in code, so no '
      .. 'controller runs it and the setting would never act. Give the room one in code '
      .. '(Room(..., target=Health(p95_ms=300))), then tune it here.')
  end
  if field == 'pinned' and (tonumber(default[14]) or 0) == 0
      and redis.call('HEXISTS', KEYS[5], 'pinned') == 0 then
    return redis.error_reply('REFUSED pinned: this room has no health target in code, so no controller '
      .. 'sets its rate and none would take it back (--auto). Give the room one in code '
      .. '(Room(..., target=Health(p95_ms=300))) for that.')
  end
end

-- The setting the controller holds now (a health target, not pinned; nil:
-- none). A rate it holds is its, not the operator's: `per` set or reset
-- alone leaves it where the controller put it (resetting both threw it
-- away for the code's, ten times it).
-- (Read before anything is written: an unpin in this call counts.)
local controlled_now = nil
if target_ms > 0 and not (given.pinned ~= '' and redis.call('HGET', KEYS[5], 'pinned')) then
  controlled_now = controlled_field()
end
local pair_rate, pair_per = given.rate, given.per
if controlled_now == 'rate' and pair_rate == nil then
  -- Only `per` is given: it alone changes.
elseif pair_rate ~= nil or pair_per ~= nil then
  if (pair_rate or '') == '' and (pair_per or '') == '' then
    pair_rate, pair_per = '', ''
  else
    if pair_rate == nil then pair_rate = string.format('%.0f', rate) end
    if pair_per == nil then pair_per = string.format('%.0f', per) end
    if pair_rate == '' then pair_rate = default[1] or '' end
    if pair_per == '' then pair_per = default[2] or '' end
  end
  if given.rate == nil then order[#order + 1] = 'rate' end
  if given.per == nil then order[#order + 1] = 'per' end
end

-- A reset of the setting a pin holds gives it back to the controller, as
-- the code has it: `--reset rate` (or `--reset per`, which resets the pair)
-- put the code's value back and left it pinned there, the controller
-- frozen, and only `show` said so.
local pin_holds = controlled_field()
if given.pinned == nil and redis.call('HGET', KEYS[5], 'pinned') and (pin_holds == 'rate'
    and (given.rate == '' or pair_rate == '') or pin_holds == 'capacity' and given.capacity == '') then
  given.pinned = ''
  order[#order + 1] = 'pinned'
end

-- A change of the rate, its interval or the capacity that leaves a room
-- with neither a rate nor a capacity (0 is no limit for each) would let
-- everyone in: refused, as the code refuses such a room
-- (queuegate.settings). `set --rate 0` read as "let nobody in" and turned
-- the gate off. The rate after the change is the pair's above (a reset of
-- `per` alone resets the rate too, unless the controller holds it). A
-- change of anything else, or of a room already without either (a deploy
-- may make one under a run-time value), is not refused: pausing it must
-- stay possible.
local function after(value, value_now, index)
  if value == nil then return value_now end
  return tonumber(value ~= '' and value or default[index]) or 0
end
if (given.rate ~= nil or given.per ~= nil or given.capacity ~= nil) and (rate > 0 or capacity > 0)
    and after(pair_rate, rate, 1) == 0 and after(given.capacity, capacity, 3) == 0 then
  return redis.error_reply('REFUSED rate and capacity: with both 0 (no limit) the room would let '
    .. 'everyone in. To let nobody in, set the status to paused; to let everyone in on purpose, '
    .. 'to passthrough.')
end

-- A floor over the ceiling (0: none) once the change is made: refused, as
-- the code refuses such a Health. The ceiling wins over the floor
-- (health.lua), so the controller held the room under it, not at the
-- floor that promises the line keeps moving.
-- (A floor left to its default is never over the ceiling: made under it.)
if given.floor ~= nil or given.ceiling ~= nil then
  local floor_after = after(given.floor, floor_set, 16)
  local ceiling_after = after(given.ceiling, adapt_ceiling, 17)
  if floor_after > 0 and ceiling_after > 0 and ceiling_after < floor_after then
    return redis.error_reply(string.format('REFUSED floor and ceiling: the ceiling (%d) would be below '
      .. 'the floor (%d). Lower the floor or raise the ceiling (0: none) in the same change.',
      ceiling_after, floor_after))
  end
end

-- A change that makes the room draw (a lottery, a scheduled opening; a reset
-- to the code's, which may) needs the room's seed, as advance() does of a
-- room that draws: refused before anything is written (NO_SEED), and the
-- caller asks again with an offer.
if ARGV[3] == '' and not redis.call('HGET', KEYS[5], 'seed') then
  for _, field in ipairs(order) do
    local value = given[field]
    if field == 'method' and (value ~= '' and value or default[9]) == 'random'
        or field == 'opens_at' and (tonumber(value ~= '' and value or default[10]) or 0) > 0 then
      return redis.error_reply('NO_SEED this change makes the room draw, and it has no seed: call again with one')
    end
  end
end

advance()
save_state()
moved() -- a new rate, state or opening changes what every waiting page shows
-- Copies of the room's admissions go (a session may now slide): admissions.py.
redis.call('PUBLISH', BASE .. 'revoked', '*:' .. now)
-- So does the view of the line built under the old ones (view.lua).
redis.call('HDEL', KEYS[5], 'view_at', 'view')
-- The setting the controller holds once this change is made (a rate given
-- or reset may make it the rate, or the capacity). A value given for it
-- pins it, whatever the order of the fields: an unpin ("", `--auto`,
-- `--reset all`) is applied first. A value given for the other one pins
-- nothing (`--reset all --capacity 50` in a room whose controller holds
-- the rate leaves the rate to it).
local rate_after = after(given.rate, rate, 1)
local controlled_after = rate_after > 0 and 'rate' or 'capacity'
-- `held`: the value the controller last wrote (health.lua), until an
-- operator's value or reset of it; one given back to it (unpinned) is its too.
local pin_and_held = redis.call('HMGET', KEYS[5], 'pinned', 'held')
local was_pinned, held = pin_and_held[1], pin_and_held[2]
local target_after = after(given.target_ms, target_ms, 14)
if given.pinned == '' then redis.call('HDEL', KEYS[5], 'pinned') end
local written = {}
local pinned_now = false
if given.pinned == '' and was_pinned and target_after > 0 then
  held = controlled_after
  redis.call('HSET', KEYS[5], 'held', held)
end
if reset_all then written = {'reset_all', table.concat(were, ',')} end
for _, field in ipairs(order) do
  local value = given[field]
  if field == 'rate' and pair_rate ~= nil then value = pair_rate
  elseif field == 'per' and pair_per ~= nil then value = pair_per end
  if field == 'pinned' then
    -- (Unpinned above.)
  elseif value == '' then
    redis.call('HDEL', KEYS[5], field)
  elseif value ~= nil then
    redis.call('HSET', KEYS[5], field, value)
    -- (Only a value the caller gave pins, not the pair's other half.)
    if (given[field] or '') ~= '' and field == controlled_after and target_ms > 0 then
      redis.call('HSET', KEYS[5], 'pinned', 1)
      -- (Said when it takes the setting from a controller that runs on.)
      pinned_now = not was_pinned and target_after > 0
    end
  end
  if value ~= nil then
    written[#written + 1] = field
    written[#written + 1] = value
    if field == held then redis.call('HDEL', KEYS[5], 'held') end
  end
end
-- (Said last: the setting given took the controller's place.)
if pinned_now then
  written[#written + 1] = 'pinned'
  written[#written + 1] = '1'
end
-- The room under its new settings, now.
read_settings(redis.call('HMGET', KEYS[5], unpack(SETTINGS)))
advance()
save_state()
-- The log says the change as given, and the pair's other half that went
-- with it (a reset of `per` reset the rate too, and said only `per`).
local details = ARGV[5]
if (given.rate == nil and pair_rate ~= nil) or (given.per == nil and pair_per ~= nil) then
  local shown = cjson.decode(ARGV[5])
  if given.rate == nil then shown.rate = pair_rate == '' and cjson.null or tonumber(pair_rate) end
  if given.per == nil then shown.per = pair_per == '' and cjson.null or tonumber(pair_per) / 1000 end
  details = cjson.encode(shown)
end
-- A reset_all logs what it changed: the settings given, then each one set
-- at run time before it and a pin it removed (null: reset), or `all` when
-- it found nothing else to reset. (Added to the text, not decoded and encoded
-- again: the log keeps the order of the settings, as the caller gave them.)
if reset_all then
  -- (Not a pin removed when a value given pinned the setting again.)
  if redis.call('HEXISTS', KEYS[5], 'pinned') == 1 and logged[#logged] == 'pinned' then
    logged[#logged] = nil
  end
  if #logged == 0 then logged[1] = 'all' end
  for _, name in ipairs(logged) do
    local pair = '"' .. name .. '": null'
    details = details:match('^%s*{%s*}%s*$') and '{' .. pair .. '}' or details:gsub('}%s*$', ', ' .. pair .. '}')
  end
end
note_activity(ARGV[4], 'settings', details)
return written
