-- join: newcomers one app process sends together (queuegate/joins.py), by
-- newcomers.lua's rule, into a settled room. The KEYS and ARGV up to
-- ARGV[3] are every script's (see advance.lua), then:
--
-- KEYS[6..] each newcomer's client key (qg:{room}:client:<address>)
-- ARGV[4..] each newcomer's visitor id, then '1' when their client key
--           names a real client ('' = none), in arrival order
--
-- Returns 1, the time (ms), the room's method and the newcomers' answers,
-- in order, four numbers each (see newcomers.lua); or 0
-- alone when the room is not settled, was settled with other settings, or
-- asks a proof of work for a new place: then each is for the full call
-- (enter), one by one.

local got = redis.call('HMGET', KEYS[5], 'quick_until', 'defaults', 'quick', 'an_cp_at')
if ARGV[2] == '' or not got[1] or now >= tonumber(got[1]) or got[2] ~= ARGV[2] then return {0} end
local r = snapshot_figures(got[3])
if r.challenge ~= 0 then return {0} end
local ids, keys, counted = {}, {}, {}
for i = 6, #KEYS do
  local j = i - 5
  ids[j], keys[j], counted[j] = ARGV[2 * i - 8], KEYS[i], ARGV[2 * i - 7]
end
cp_at = tonumber(got[4])
return {1, now, r.method, join_quickly(r, ids, keys, counted)}
