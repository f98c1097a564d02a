-- quick_join: enter's quick answer for a newcomer joining a settled room
-- (see quick.lua, which found the snapshot and set quick_join): the back of
-- the line, the estimate from the snapshot's figures. The join costs the
-- client one of its client_limit places and counts in the analytics as the
-- full path does; a forgetting room's new keys get their expiry. Only for a
-- join that takes no analytics checkpoint (those go on to the full call).
-- Runs after analytics.lua, before advance.lua. Returns enter's 'waiting'
-- answer (joined = 1) or {'limited', now, id, retry_after_ms}.

if quick_join then
  local r = quick_join.r
  -- The arrival number this join takes, if it takes no checkpoint.
  local seq = (tonumber(redis.call('GET', KEYS[1])) or 0) + 1
  local cp_at = quick_join.cp_at
  if cp_at ~= nil and now - cp_at < CHECKPOINT_MS and seq % CHECKPOINT_EVERY ~= 0 then
    if over_client_limit(r.client_limit) then
      return {'limited', now, ARGV[4], redis.call('PTTL', KEYS[6])}
    end
    local line = redis.call('ZCARD', KEYS[2])
    redis.call('INCR', KEYS[1])
    redis.call('ZADD', KEYS[2], seq, ARGV[4])
    redis.call('ZADD', KEYS[3], now, ARGV[4])
    redis.call('HINCRBY', KEYS[5], 'joined', 1)
    an_count('an_j', 1)
    analytics_save(r.forget)
    if r.forget > 0 then
      for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], r.forget) end
    end
    return quick_waiting(r, line, line + 1, 1, seq)
  end
end
