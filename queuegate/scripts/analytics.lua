-- analytics: how long people waited, and the line minute by minute, for
-- operators (queuegate/analytics.py reads it). Runs after clock, before
-- quick_join and advance, whose rules call it. Memory is bounded whatever the size of the
-- line, and nothing is kept per visitor:
--
--   <base>waits     hash  histograms (buckets WAIT_BOUNDS, in ms; the last
--                         one: longer) of the waits of those admitted
--                         ('a1'.., 'a_sum', 'a_max'; straight in counts as
--                         0) and of those who gave up ('g1'.., 'g_sum',
--                         'g_max': how long they waited before they left or
--                         went silent; the max bounds the quantiles read
--                         inside a bucket); 'est_n':
--                         admitted from the line with an estimate at joining,
--                         'est_ok': those whose real wait was within
--                         ACCURATE of it.
--   <base>arrivals  zset  arrival checkpoints, score = arrival number, member
--                         "seq:ms:estimate_ms:slope": every CHECKPOINT_EVERY-th
--                         arrival number, and the first join CHECKPOINT_MS
--                         after the last checkpoint. A visitor
--                         joined at most CHECKPOINT_MS after the checkpoint at
--                         or before their number; their estimate at joining
--                         was the checkpoint's plus slope (ms a place) times
--                         the places between. Checkpoints the line has passed
--                         are dropped.
--   <base>minutes   list  one entry per minute that saw a call, the last
--                         KEEP_MINUTES: "start_ms,joined,admitted,gave_up,
--                         wait_sum_ms,waits,waiting,active,eta_max_ms"
--                         (waits: admissions whose wait is known; waiting and
--                         active: at the minute's end; eta_max_ms: the longest
--                         estimate given at a checkpoint, -1 = none)
--   state hash fields: 'an_start' (the current minute's start, ms), its
--   counters 'an_j', 'an_a', 'an_g', 'an_ws', 'an_wn' (as in a `minutes`
--   entry) and 'an_eta' (the longest estimate given at a checkpoint), and
--   'an_cp_at' (the last checkpoint's time). Counters only ever get HINCRBY,
--   so a poll reads one number and a join writes one.

local BASE = string.sub(KEYS[5], 1, -6) -- per call: '<prefix>:{room}:'
local WAIT_BOUNDS = {5000, 15000, 30000, 60000, 120000, 300000, 600000, 900000, 1800000,
  3600000, 7200000, 14400000}
local MINUTE = 60000
local KEEP_MINUTES = 2880 -- two days of one-minute points
local CHECKPOINT_MS, CHECKPOINT_EVERY = 1000, 100
local ACCURATE = 0.2
local MINUTE_FIELDS = {'an_j', 'an_a', 'an_g', 'an_ws', 'an_wn', 'an_eta'}

local cp_at = nil -- per call
-- Increments to write by analytics_save: field of <base>waits -> n, and
-- field of the state hash (this minute's counters) -> n; and the longest
-- waits seen in this call: 'a_max'/'g_max' -> ms.
local an_tally, an_minute, an_top = {}, {}, {} -- per call

local function an_add(field, n)
  an_tally[field] = (an_tally[field] or 0) + n
end

local function an_count(field, n)
  an_minute[field] = (an_minute[field] or 0) + n
end

local function an_longest(field, ms)
  if ms > (an_top[field] or -1) then an_top[field] = ms end
end

local function wait_bucket(ms)
  for i, bound in ipairs(WAIT_BOUNDS) do
    if ms <= bound then return i end
  end
  return #WAIT_BOUNDS + 1
end

-- The state's 'an_start' and 'an_cp_at', read by advance with the rest of
-- the state. The first call of a new minute closes the last one with the
-- line as it stands (before this call changes it).
local function analytics_load(started, last_checkpoint)
  local start = now - now % MINUTE
  cp_at = tonumber(last_checkpoint)
  started = tonumber(started)
  if started == start then return end
  if started then
    local m = redis.call('HMGET', KEYS[5], unpack(MINUTE_FIELDS))
    local line = redis.call('ZCARD', KEYS[2])
    local active = redis.call('ZCOUNT', KEYS[4], '(' .. now, '+inf')
    redis.call('RPUSH', BASE .. 'minutes', string.format('%.0f,%d,%d,%d,%.0f,%d,%d,%d,%.0f', started,
      tonumber(m[1]) or 0, tonumber(m[2]) or 0, tonumber(m[3]) or 0, tonumber(m[4]) or 0,
      tonumber(m[5]) or 0, line, active, tonumber(m[6]) or -1))
    redis.call('LTRIM', BASE .. 'minutes', -KEEP_MINUTES, -1)
    redis.call('HDEL', KEYS[5], unpack(MINUTE_FIELDS))
  end
  redis.call('HSET', KEYS[5], 'an_start', start)
end

-- A checkpoint member: its arrival number, time (ms), estimate and slope.
local function checkpoint(member)
  local s, at, est, slope = string.match(member, '^(%d+):(%d+):(%-?%d+):(%-?[%d.]+)$')
  return tonumber(s), tonumber(at), tonumber(est), tonumber(slope)
end
-- When each visitor with an arrival number in `seqs` joined (ms) and the
-- estimate they were given (ms, -1 = none): two tables seq -> ms and seq ->
-- estimate, without those no checkpoint covers. Visitors admitted together are mostly
-- neighbours in the line, so their checkpoints come in one range read (two
-- calls, not one per visitor) unless they are spread far apart (a lottery).
local function joined_at(seqs)
  local key, joined, told = BASE .. 'arrivals', {}, {}
  local lo, hi = math.huge, -math.huge
  for _, seq in ipairs(seqs) do
    if seq < lo then lo = seq end
    if seq > hi then hi = seq end
  end
  local points = {}
  if #seqs > 0 and (hi - lo) / CHECKPOINT_EVERY <= 4 * #seqs then
    local first = redis.call('ZREVRANGEBYSCORE', key, lo, '-inf', 'LIMIT', 0, 1)
    if first[1] then points[1] = first[1] end
    for _, member in ipairs(redis.call('ZRANGEBYSCORE', key, '(' .. lo, hi)) do points[#points + 1] = member end
  else
    for _, seq in ipairs(seqs) do
      local cp = redis.call('ZREVRANGEBYSCORE', key, seq, '-inf', 'LIMIT', 0, 1)
      if cp[1] then points[#points + 1] = cp[1] end
    end
  end
  local parsed = {}
  for i, member in ipairs(points) do parsed[i] = {checkpoint(member)} end
  table.sort(parsed, function(a, b) return a[1] < b[1] end)
  for _, seq in ipairs(seqs) do
    -- The last checkpoint at or before seq (binary search).
    local low, high, best = 1, #parsed, nil
    while low <= high do
      local mid = math.floor((low + high) / 2)
      if parsed[mid][1] <= seq then best, low = parsed[mid], mid + 1 else high = mid - 1 end
    end
    if best then
      joined[seq] = best[2]
      told[seq] = (best[3] >= 0 and best[4] >= 0) and best[3] + (seq - best[1]) * best[4] or -1
    end
  end
  return joined, told
end

-- `n` visitors admitted; `seqs`: the arrival numbers of those who came from
-- the line (none when they went straight in: a wait of 0).
local function analytics_admitted(n, seqs)
  if n <= 0 then return end
  an_count('an_a', n)
  if not seqs then
    an_add('a1', n)
    an_longest('a_max', 0)
    an_count('an_wn', n)
    return
  end
  local joined, told = joined_at(seqs)
  for _, seq in ipairs(seqs) do
    local at, est = joined[seq], told[seq]
    if at then
      local waited = math.max(0, now - at)
      an_add('a' .. wait_bucket(waited), 1)
      an_add('a_sum', waited)
      an_longest('a_max', waited)
      an_count('an_ws', waited)
      an_count('an_wn', 1)
      if est >= 0 then
        an_add('est_n', 1)
        if math.abs(waited - est) <= ACCURATE * waited then an_add('est_ok', 1) end
      end
    end
  end
end

-- The visitor with arrival number `seq` gave up: left, or went silent at
-- `last` (ms) and was skipped at the front.
local function analytics_gave_up(seq, last)
  an_count('an_g', 1)
  local at = joined_at({seq})[seq]
  if at then
    local waited = math.max(0, last - at)
    an_add('g' .. wait_bucket(waited), 1)
    an_add('g_sum', waited)
    an_longest('g_max', waited)
  end
end

-- How many places behind a joining visitor the slope between checkpoints
-- is measured: a lottery shows half the line.
local function slope_step(method)
  return method == 'random' and CHECKPOINT_EVERY / 2 or CHECKPOINT_EVERY
end

-- The first arrival number from `seq` on whose join takes a checkpoint now
-- (until one is taken: then ask again): `seq` itself when none was taken
-- or the last is CHECKPOINT_MS old, else the next multiple of
-- CHECKPOINT_EVERY. A batch of joins asks once a checkpoint, not at every
-- join.
local function next_checkpoint(seq)
  if cp_at == nil or now - cp_at >= CHECKPOINT_MS then return seq end
  return seq + (CHECKPOINT_EVERY - seq % CHECKPOINT_EVERY) % CHECKPOINT_EVERY
end

-- A visitor joined the line with arrival number `seq` and was told
-- `estimate` (ms, -1 = none); `later()` gives the estimate of one joining
-- CHECKPOINT_EVERY places behind them now (the slope between checkpoints).
-- A checkpoint is taken at every CHECKPOINT_EVERY-th arrival number and at
-- the first join CHECKPOINT_MS after the last one.
local function analytics_joined(seq, estimate, later)
  an_count('an_j', 1)
  if next_checkpoint(seq) ~= seq then return end
  local slope = -1
  if estimate >= 0 then
    local behind = later()
    if behind >= 0 then slope = math.max(0, (behind - estimate) / CHECKPOINT_EVERY) end
    if estimate > (tonumber(redis.call('HGET', KEYS[5], 'an_eta')) or -1) then
      redis.call('HSET', KEYS[5], 'an_eta', estimate)
    end
  end
  local key = BASE .. 'arrivals'
  redis.call('ZADD', key, seq, string.format('%d:%.0f:%.0f:%.3f', seq, now, estimate, slope))
  -- Keep the checkpoint at or before the first visitor still waiting, and
  -- those after it.
  local head = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if head[2] then
    local keep = redis.call('ZREVRANGEBYSCORE', key, head[2], '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if keep[2] then redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. keep[2]) end
  end
  cp_at = now
  redis.call('HSET', KEYS[5], 'an_cp_at', now)
end

local function analytics_save(forget)
  for field, n in pairs(an_tally) do
    redis.call('HINCRBY', BASE .. 'waits', field, n)
  end
  for field, n in pairs(an_minute) do
    redis.call('HINCRBY', KEYS[5], field, n)
  end
  -- One read for a longest wait, only in calls that saw a wait end.
  for field, ms in pairs(an_top) do
    if ms > (tonumber(redis.call('HGET', BASE .. 'waits', field)) or -1) then
      redis.call('HSET', BASE .. 'waits', field, ms)
    end
  end
  an_tally, an_minute, an_top = {}, {}, {} -- written: a second save in one call adds only what is new
  if forget > 0 then
    for _, name in ipairs({'waits', 'arrivals', 'minutes'}) do
      redis.call('PEXPIRE', BASE .. name, forget)
    end
  end
end
