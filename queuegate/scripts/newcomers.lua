-- newcomers: new visitors join a settled room (see snapshot() in
-- advance.lua) at the back of the line, the estimate from the snapshot's
-- figures, one or many in a call: enter's quick join (quick_join.lua) and
-- a process's joins sent together (join.lua). Each join costs its client
-- one of its client_limit places and counts in the analytics as the full
-- path does (a checkpoint where enter.lua would take one); a forgetting
-- room's new keys get their expiry. Runs after analytics.lua, with `cp_at`
-- (the last checkpoint's time) read.
--
-- join_quickly(r, n): r is the snapshot's figures; the call's first n
-- newcomers, visitors with no place and no session, in arrival order, are
-- ARGV[4..] (their ids) and KEYS[6..] (their client keys: the key of no
-- address, `<base>client:`, names none), read where they stand: lists made
-- of them cost more than their reading. Returns their answers, two numbers
-- each in a flat list (a reply of many small tables costs Redis more than
-- the joins' own work): the estimated wait (ms) and the poll interval (ms)
-- of a visitor who joined, or the time until the client may take another
-- place (ms) and 0 for one refused by the client limit; then the arrival
-- counter and the line's length before them: those who joined took the
-- next arrival numbers and ranks, in order. One after the other, what the
-- same joins would get from as many calls at this moment, leaving the room
-- as those calls would. Numbers go to Redis as strings formatted once (Lua
-- formats a number argument with "%.14g", slowly).

-- The members of the two ZADDs, which a function library keeps between
-- calls: each call writes over the first ones, so the tables grow once, not
-- at every call (a growing table is resized at each doubling: 900
-- instructions a join 30 to a call).
local placed, seen = {}, {}

local function join_quickly(r, n)
  local answers, a = {}, 0
  local seq = tonumber(redis.call('GET', KEYS[1])) or 0
  local line = redis.call('ZCARD', KEYS[2])
  local seq_before, line_before, p = seq, line, 0
  local quiet = quiet_counter(r.abandon)
  local seen_at = string.format('%d', now)
  local limit, abandon, nobody = r.client_limit, r.abandon, BASE .. 'client:'
  -- Joins that take no checkpoint, counted in the analytics once a call.
  local joined_plainly = 0
  -- The arrival number of the next join that takes a checkpoint.
  local checkpoint_at = next_checkpoint(seq + 1)
  -- The places taken so far go into the line (a checkpoint reads it).
  local function place_them()
    local joined = p / 2
    if joined == 0 then return end
    redis.call('INCRBY', KEYS[1], joined)
    redis.call('ZADD', KEYS[2], unpack(placed, 1, p))
    redis.call('ZADD', KEYS[3], unpack(seen, 1, p))
    redis.call('HINCRBY', KEYS[5], 'joined', joined)
    p = 0
  end
  for i = 1, n do
    local id, key = ARGV[3 + i], KEYS[5 + i]
    if over_client_limit(limit, key ~= nobody and key) then
      answers[a + 1], answers[a + 2] = redis.call('PTTL', key), 0
    else
      seq = seq + 1
      placed[p + 1], placed[p + 2] = string.format('%d', seq), id
      seen[p + 1], seen[p + 2] = seen_at, id
      p = p + 2
      local rank = line
      line = line + 1
      local wait = quick_estimate(r, rank, line, quiet, 0)
      answers[a + 1], answers[a + 2] = wait, poll_after(wait, abandon)
      if seq == checkpoint_at then
        place_them()
        analytics_joined(seq, wait, function() return quick_estimate(r, rank, line, quiet, slope_step(r.method)) end)
        checkpoint_at = next_checkpoint(seq + 1)
      else
        joined_plainly = joined_plainly + 1
      end
    end
    a = a + 2
  end
  place_them()
  if joined_plainly > 0 then an_count('an_j', joined_plainly) end
  analytics_save(r.forget)
  if r.forget > 0 then
    for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], r.forget) end
  end
  return answers, seq_before, line_before
end
