-- waiting: the answers the quick paths give (quick.lua, newcomers.lua), and
-- the limit on new places per client that every join obeys (enter.lua
-- too). Runs after estimate.lua.

-- A new place costs the client one of its `limit` places a minute, so one
-- client cannot fill the line. `key` counts the client's tries in the
-- minute from its first place (refused ones too; they take no place); false
-- when there is no real client to count. A refusal counts in the room's
-- `limited` (stats.lua): operators see newcomers turned away (a proxy the
-- gate does not know makes every visitor one client).
local function over_client_limit(limit, key)
  if limit <= 0 or not key then return false end
  -- A client's first place this minute is one call (most newcomers in a
  -- flood are), the count and its expiry together; later ones count on (a
  -- script sees the time it started at: the key cannot expire in between).
  -- (SET ... NX GET would spare Lua the OK's table, about 550 instructions
  -- a join, but Redis before 7.0 refuses NX with GET: every join would fail.)
  if redis.call('SET', key, '1', 'PX', '60000', 'NX') then return false end
  if redis.call('INCR', key) <= limit then return false end
  redis.call('HINCRBY', KEYS[5], 'limited', 1)
  return true
end

-- The estimated wait of a visitor at `rank` in a line of `line`, with
-- `step` more people ahead of them (0: their own), from the snapshot's
-- figures `r`; quiet() counts the waiting visitors silent for a third of
-- `abandon` (asked only when the estimate needs it).
-- (The crowd it passes is made once, not a closure at every estimate: a
-- quick join makes one for each newcomer.)
local crowd_r, crowd_line, crowd_quiet
local function quick_crowd() return crowd_r.staying, crowd_line, crowd_quiet() end
local function quick_estimate(r, rank, line, quiet, step)
  local ahead = rank
  if r.method == 'random' then ahead = floor((line - 1) / 2) end
  crowd_r, crowd_line, crowd_quiet = r, line, quiet
  return estimate(ahead + step, r, quick_crowd)
end

-- enter's answer for visitor `id` waiting at `rank` in a line of `line`,
-- told `wait` (quick_estimate's), by the snapshot's figures `r`.
local function waiting_answer(r, id, rank, line, wait, joined, place)
  return {'waiting', now, id, rank, line, wait, poll_after(wait, r.abandon), joined, r.method, place}
end

-- quiet() for quick_estimate, asked of Redis at most once a call.
local function quiet_counter(abandon)
  local quiet
  return function()
    if quiet == nil then quiet = quiet_since(now - abandon / 3) end
    return quiet
  end
end

-- The figures of the snapshot `packed` (a room's 'quick' field): a function
-- library (queuegate.scripts: library) keeps the last between calls, so a
-- snapshot is unpacked once, not at every call that reads it (a tenth of a
-- join call's own cost). Nobody changes the figures once unpacked. Read by
-- quick.lua and join.lua.
local packed_last, figures_last
local function snapshot_figures(packed)
  if packed ~= packed_last then
    figures_last, packed_last = cmsgpack.unpack(packed), packed
  end
  return figures_last
end
