-- poll: the quick answer of enter for an anonymous visitor waiting in a
-- settled room (see snapshot() in advance.lua): nothing has changed since
-- the last call that settled it, so the visitor's place is its rank and the
-- estimate comes from the figures that call left, by the same rule
-- (estimate.lua). The poll still proves the visitor is here. Runs after
-- inside.lua and estimate.lua, and before analytics.lua and advance.lua,
-- whose set-up it skips; the KEYS and ARGV are enter's.
--
-- Only for calls from the app (ARGV[2], the defaults, given, and the same
-- as stored) without a user (ARGV[6] empty), by a visitor in the line;
-- returns {'waiting', now, id, rank, count, eta_ms, poll_ms, 0, method} as
-- enter does. Anything else goes on to the full call.

if ARGV[2] ~= '' and ARGV[6] == '' then
  local got = redis.call('HMGET', KEYS[5], 'quick_until', 'defaults', 'quick')
  if got[1] and now < tonumber(got[1]) and got[2] == ARGV[2] then
    local rank = redis.call('ZRANK', KEYS[2], ARGV[4])
    if rank then
      local r = cmsgpack.unpack(got[3])
      local line = redis.call('ZCARD', KEYS[2])
      redis.call('ZADD', KEYS[3], now, ARGV[4])
      local ahead = rank
      if r.method == 'random' then ahead = math.floor((line - 1) / 2) end
      local wait = estimate(ahead, r, function()
        return r.staying, line, redis.call('ZCOUNT', KEYS[3], '-inf', now - r.abandon / 3)
      end)
      return {'waiting', now, ARGV[4], rank, line, wait, poll_after(wait, r.abandon), 0, r.method}
    end
  end
end
