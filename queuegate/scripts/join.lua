-- join: newcomers one app process sends together (queuegate/joins.py), by
-- newcomers.lua's rule, into a settled room. The KEYS and ARGV up to
-- ARGV[3] are every script's (see advance.lua), then:
--
-- KEYS[6..] each newcomer's client key (qg:{room}:client:<address>;
--           qg:{room}:client: for none)
-- ARGV[4..] each newcomer's visitor id, in the same order: arrival order
--
-- Returns 1, the time (ms), the room's method, the arrival counter and the
-- line's length before the newcomers, and their answers, in order, two
-- numbers each (see newcomers.lua); or 0 alone when the room is not
-- settled, was settled with other settings, or asks a proof of work for a
-- new place: then each is for the full call (enter), one by one.

local got = redis.call('HMGET', KEYS[5], 'quick_until', 'defaults', 'quick', 'an_cp_at')
if ARGV[2] == '' or not got[1] or now >= tonumber(got[1]) or got[2] ~= ARGV[2] then return {0} end
local r = snapshot_figures(got[3])
if r.challenge ~= 0 then return {0} end
cp_at = tonumber(got[4])
local answers, seq, line = join_quickly(r, #KEYS - 5)
return {1, now, r.method, seq, line, answers}
