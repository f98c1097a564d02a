-- newcomers: new visitors join a settled room (see snapshot() in
-- advance.lua) at the back of the line, the estimate from the snapshot's
-- figures, one or many in a call: enter's quick join (quick_join.lua) and
-- a process's joins sent together (join.lua). Each join costs its client
-- one of its client_limit places and counts in the analytics as the full
-- path does (a checkpoint where enter.lua would take one); a forgetting
-- room's new keys get their expiry. Runs after analytics.lua, with `cp_at`
-- (the last checkpoint's time) read.
--
-- join_quickly(r, joins): r is the snapshot's figures, joins a list of
-- {visitor id, client key, '1' if the key names a real client}, in arrival
-- order, of visitors with no place and no session. Returns their answers,
-- in order: enter's 'waiting' answer (joined = 1) or {'limited', now, id,
-- retry_after_ms}; one after the other, what the same joins would get from
-- as many calls at this moment, leaving the room as those calls would.

local function join_quickly(r, joins)
  local answers = {}
  local seq = tonumber(redis.call('GET', KEYS[1])) or 0
  local line = redis.call('ZCARD', KEYS[2])
  local placed, seen = {}, {}
  local quiet = quiet_counter(r.abandon)
  -- The places taken so far go into the line (a checkpoint reads it).
  local function place_them()
    local joined = #placed / 2
    if joined == 0 then return end
    redis.call('INCRBY', KEYS[1], joined)
    redis.call('ZADD', KEYS[2], unpack(placed))
    redis.call('ZADD', KEYS[3], unpack(seen))
    redis.call('HINCRBY', KEYS[5], 'joined', joined)
    placed, seen = {}, {}
  end
  for _, join in ipairs(joins) do
    local id = join[1]
    if over_client_limit(r.client_limit, join[2], join[3]) then
      answers[#answers + 1] = {'limited', now, id, redis.call('PTTL', join[2])}
    else
      seq = seq + 1
      placed[#placed + 1] = seq
      placed[#placed + 1] = id
      seen[#seen + 1] = now
      seen[#seen + 1] = id
      local answer, behind = quick_waiting(r, id, line, line + 1, 1, seq, quiet)
      answers[#answers + 1] = answer
      line = line + 1
      if takes_checkpoint(seq) then
        place_them()
        analytics_joined(seq, answer[6], function() return behind(slope_step(r.method)) end)
      else
        an_count('an_j', 1)
      end
    end
  end
  place_them()
  analytics_save(r.forget)
  if r.forget > 0 then
    for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], r.forget) end
  end
  return answers
end
