-- quick: enter's quick answers for an anonymous visitor in a settled room
-- (see snapshot() in advance.lua): nothing has changed since the last call
-- that settled it but joins and polls, so a waiting visitor's place is their
-- rank, a newcomer's is the back, and the estimate comes from the figures
-- that call left, by the same rule (estimate.lua). A poll still proves the
-- visitor is here; a join costs the client one of its client_limit places
-- and counts in the analytics as the full path does. Runs after inside.lua,
-- estimate.lua and analytics.lua, and before advance.lua, whose set-up it
-- skips; the KEYS and ARGV are enter's.
--
-- Only for calls from the app (ARGV[2], the defaults, given, and the same
-- as stored) without a user (ARGV[6] empty), by a visitor in the line or,
-- in a room without a challenge, one who joins it (not one whose session
-- has just ended: held_until, from inside.lua, is nil) and takes no
-- analytics checkpoint. Returns {'waiting', now, id, rank, count, eta_ms,
-- poll_ms, joined, method} or {'limited', now, id, retry_after_ms} as
-- enter does. Anything else goes on to the full call.

-- A new place costs the client one of its `limit` places a minute, so one
-- client cannot fill the line. Nothing is counted when none is left.
local function over_client_limit(limit)
  if limit <= 0 or ARGV[7] ~= '1' then return false end
  local taken = redis.call('INCR', KEYS[6])
  if taken == 1 then redis.call('PEXPIRE', KEYS[6], 60000) end
  return taken > limit
end

if ARGV[2] ~= '' and ARGV[6] == '' then
  local got = redis.call('HMGET', KEYS[5], 'quick_until', 'defaults', 'quick', 'an_cp_at')
  if got[1] and now < tonumber(got[1]) and got[2] == ARGV[2] then
    local r = cmsgpack.unpack(got[3])
    local rank = redis.call('ZRANK', KEYS[2], ARGV[4])
    local joined = 0
    local line = redis.call('ZCARD', KEYS[2])
    if rank then
      redis.call('ZADD', KEYS[3], now, ARGV[4])
    elseif ARGV[5] == '1' and held_until == nil and r.challenge == 0 then
      -- The arrival number this join takes, if it takes no checkpoint.
      local seq = (tonumber(redis.call('GET', KEYS[1])) or 0) + 1
      local cp_at = tonumber(got[4])
      if cp_at ~= nil and now - cp_at < CHECKPOINT_MS and seq % CHECKPOINT_EVERY ~= 0 then
        if over_client_limit(r.client_limit) then
          return {'limited', now, ARGV[4], redis.call('PTTL', KEYS[6])}
        end
        redis.call('INCR', KEYS[1])
        redis.call('ZADD', KEYS[2], seq, ARGV[4])
        redis.call('ZADD', KEYS[3], now, ARGV[4])
        redis.call('HINCRBY', KEYS[5], 'joined', 1)
        an_count('an_j', 1)
        analytics_save(r.forget)
        if r.forget > 0 then
          for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], r.forget) end
        end
        rank, line, joined = line, line + 1, 1
      end
    end
    if rank then
      local ahead = rank
      if r.method == 'random' then ahead = math.floor((line - 1) / 2) end
      local wait = estimate(ahead, r, function()
        return r.staying, line, redis.call('ZCOUNT', KEYS[3], '-inf', now - r.abandon / 3)
      end)
      return {'waiting', now, ARGV[4], rank, line, wait, poll_after(wait, r.abandon), joined, r.method}
    end
  end
end
