-- liveness: when each waiting visitor last proved they are still here. A
-- poll through enter records it in the `seen` sorted set (KEYS[3]); a
-- far-back visitor's check-in (checkin.lua) in the hash <base>alive
-- instead, where an update costs O(1) (in a sorted set the member moves:
-- about 5 us at ten million), with <base>alive_n counting the hash's
-- entries per second of their time, so that the quiet ones can be counted.
-- A waiting visitor is in one of the two at most, never both. Runs right
-- after clock.lua.

local ALIVE = string.sub(KEYS[5], 1, -6) .. 'alive' -- per call
local ALIVE_N = ALIVE .. '_n' -- per call
local SECOND = 1000
-- alive_n also holds `swept`, the last second whose entries are summed in
-- `quiet` (read once a call; nil until asked).
local swept = nil -- per call

local function read_swept()
  if swept == nil then swept = tonumber(redis.call('HGET', ALIVE_N, 'swept')) or -1 end
  return swept
end

-- Entries with these times (ms) were added (+1 each) or removed (-1 each).
local function count_alive(times, delta)
  local per_second = {}
  for _, t in ipairs(times) do
    local s = math.floor(t / SECOND)
    per_second[s] = (per_second[s] or 0) + delta
  end
  local quiet = 0
  for s, n in pairs(per_second) do
    redis.call('HINCRBY', ALIVE_N, s, n)
    if s <= read_swept() then quiet = quiet + n end
  end
  if quiet ~= 0 then redis.call('HINCRBY', ALIVE_N, 'quiet', quiet) end
end

-- Take `ids` out of the hash (they left the line, or polled in full);
-- returns their times there (false for those not in it).
local function take_alive(ids)
  if #ids == 0 or redis.call('EXISTS', ALIVE) == 0 then return {} end
  local times = redis.call('HMGET', ALIVE, unpack(ids))
  local found, gone = {}, {}
  for i, t in ipairs(times) do
    if t then
      found[#found + 1] = tonumber(t)
      gone[#gone + 1] = ids[i]
    end
  end
  if #gone > 0 then
    redis.call('HDEL', ALIVE, unpack(gone))
    count_alive(found, -1)
  end
  return times
end

-- A poll in full: the visitor is here now.
local function seen_now(id)
  redis.call('ZADD', KEYS[3], now, id)
  take_alive({id})
end

-- A check-in: `ids` are here now, if still in the line. Returns those who
-- are not. One in the hash is in the line (it leaves the hash when it
-- leaves the line: the head, remove.lua, drain.lua); the others are looked
-- up, and their liveness moves here from `seen`.
local function alive_now(ids)
  local times = redis.call('HMGET', ALIVE, unpack(ids))
  local before, others, entries = {}, {}, {}
  for i, t in ipairs(times) do
    if t then
      before[#before + 1] = tonumber(t)
      entries[#entries + 1] = ids[i]
      entries[#entries + 1] = now
    else
      others[#others + 1] = ids[i]
    end
  end
  local gone, fresh = {}, {}
  if #others > 0 then
    local places = redis.call('ZMSCORE', KEYS[2], unpack(others))
    for i, id in ipairs(others) do
      if places[i] then
        fresh[#fresh + 1] = id
        entries[#entries + 1] = id
        entries[#entries + 1] = now
      else
        gone[#gone + 1] = id
      end
    end
  end
  if #fresh > 0 then redis.call('ZREM', KEYS[3], unpack(fresh)) end
  if #entries > 0 then
    redis.call('HSET', ALIVE, unpack(entries))
    count_alive(before, -1)
    local added = {}
    for i = 1, #entries / 2 do added[i] = now end
    count_alive(added, 1)
  end
  return gone
end

-- How many waiting visitors have been silent since `before` (ms): in the
-- sorted set exactly, in the hash to the second (the seconds that began by
-- then).
local function quiet_since(before)
  local quiet = redis.call('ZCOUNT', KEYS[3], '-inf', before)
  if redis.call('EXISTS', ALIVE_N) == 0 then return quiet end
  local upto = math.ceil(before / SECOND) - 1
  local from = read_swept()
  local got = tonumber(redis.call('HGET', ALIVE_N, 'quiet')) or 0
  if from < 0 or upto < from or upto - from > 600 then
    -- First time, time went back, or long idle: sum them all again (and
    -- drop the seconds nobody is in any more).
    got = 0
    local all = redis.call('HGETALL', ALIVE_N)
    local empty = {}
    for i = 1, #all, 2 do
      local s, n = tonumber(all[i]), tonumber(all[i + 1])
      if s ~= nil and n <= 0 then
        empty[#empty + 1] = all[i]
      elseif s ~= nil and s <= upto then
        got = got + n
      end
    end
    if #empty > 0 then redis.call('HDEL', ALIVE_N, unpack(empty)) end
  elseif upto > from then
    local seconds = {}
    for s = from + 1, upto do seconds[#seconds + 1] = s end
    for _, n in ipairs(redis.call('HMGET', ALIVE_N, unpack(seconds))) do got = got + (tonumber(n) or 0) end
  end
  if upto ~= from then
    redis.call('HSET', ALIVE_N, 'swept', upto, 'quiet', got)
    swept = upto
  end
  return quiet + got
end
