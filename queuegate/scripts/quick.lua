-- quick: enter's quick answer for an anonymous visitor waiting in a settled
-- room (see snapshot() in advance.lua): nothing has changed since the last
-- call that settled it but joins and polls, so the visitor's place is their
-- rank, and the estimate comes from the figures that call left, by the same
-- rule (estimate.lua). The poll still proves the visitor is here. A
-- newcomer's join is answered by quick_join.lua, after analytics.lua, whose
-- set-up a poll skips. Runs after inside.lua and waiting.lua, before
-- analytics.lua and advance.lua; the KEYS and ARGV are enter's.
--
-- Only for calls from the app (ARGV[2], the defaults, given, and the same
-- as stored) without a user (ARGV[6] empty), by a visitor in the line.
-- Returns {'waiting', now, id, rank, count, eta_ms, poll_ms, joined, method,
-- arrival number} as enter does. Anything else goes on to the full call.

-- The snapshot's figures and the last analytics checkpoint, when this call
-- is a join quick_join.lua may answer: a room without a challenge, a
-- visitor with no place and no session that has just ended (held_until,
-- from inside.lua).
local quick_join -- per call
-- per call {
if ARGV[2] ~= '' and ARGV[6] == '' then
  local got = redis.call('HMGET', KEYS[5], 'quick_until', 'defaults', 'quick', 'an_cp_at')
  if got[1] and now < tonumber(got[1]) and got[2] == ARGV[2] then
    local r = snapshot_figures(got[3])
    local rank = redis.call('ZRANK', KEYS[2], ARGV[4])
    if rank then
      seen_now(ARGV[4])
      local place = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[4]))
      local line = redis.call('ZCARD', KEYS[2])
      local wait = quick_estimate(r, rank, line, quiet_counter(r.abandon), 0)
      return waiting_answer(r, ARGV[4], rank, line, wait, 0, place)
    elseif ARGV[5] == '1' and held_until == nil and r.challenge == 0 then
      quick_join = {r = r, cp_at = tonumber(got[4])}
    end
  end
end
-- per call }
