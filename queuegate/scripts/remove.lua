-- remove: take a visitor out of the room, from the line or from the active
-- set, and give a freed slot to the next in line at once. Runs after advance.
-- Used for `release` (the protected action is done: an admission ends; one
-- still in line is left there, as nothing was done, but in a passthrough
-- room) and `leave` (gave up, or taken out); either way a later visit
-- starts again at the back.
--
-- ARGV[4] visitor id
-- ARGV[5] counter to increment in the state hash ('released' or 'left')
-- ARGV[6] the operator who asks, for the room's activity log (activity.lua);
--         "" (the visitor's own release or leave): no entry; nor for a
--         release of one still in line (it changes nothing)
--
-- Returns 1 if the visitor held a place it took (active, or for `leave`
-- waiting), else 0.

advance()
local id = ARGV[4]
local seq = tonumber(redis.call('ZSCORE', KEYS[2], id))
local held = 0
-- A release of one still in line leaves them there (it counted them as
-- released and took their place); but in a passthrough room, where one in
-- line is let through (enter.lua) and the app releases them when done,
-- it takes the place as before.
local acts = not (seq and ARGV[5] == 'released' and status ~= 'passthrough')
if acts then
  local was_active = redis.call('ZREM', KEYS[4], id)
  held = was_active + redis.call('ZREM', KEYS[2], id)
  if seq and ARGV[5] == 'left' then analytics_gave_up(seq, now) end
  redis.call('ZREM', KEYS[3], id)
  take_alive({id})
  note_ended(was_active)
  -- Processes holding a copy of this admission drop it (admissions.py):
  -- also when Redis no longer knows the visitor (its data lost, a copy
  -- outliving it), so that a remove always revokes every copy.
  redis.call('PUBLISH', BASE .. 'revoked', id .. ':' .. now)
  if held > 0 then
    went(id, seq)
    redis.call('HINCRBY', KEYS[5], ARGV[5], 1)
    active_n = redis.call('ZCARD', KEYS[4])
    move_line()
  end
end
settled = true
save_state()
-- A release of one still in line changed nothing: not logged (the caller is
-- told, by the 0). Anything else is, holding a place or not: it revoked
-- any copy of an admission the app's processes hold.
if acts then
  note_activity(ARGV[6] or '', ARGV[5] == 'left' and 'remove' or 'release',
    '{"visitor":' .. cjson.encode(id) .. ',"held_a_place":' .. (held > 0 and 'true' or 'false') .. '}')
end
return held > 0 and 1 or 0
