-- analytics: how long people waited, and the line minute by minute, for
-- operators (queuegate/analytics.py reads it). Runs after clock, before
-- advance, whose rules call it. Memory is bounded whatever the size of the
-- line, and nothing is kept per visitor:
--
--   <base>waits     hash  histograms (buckets WAIT_BOUNDS, in ms; the last
--                         one: longer) of the waits of those admitted
--                         ('a1'.., 'a_sum'; straight in counts as 0) and of
--                         those who gave up ('g1'.., 'g_sum': how long they
--                         waited before they left or went silent); 'est_n':
--                         admitted from the line with an estimate at joining,
--                         'est_ok': those whose real wait was within
--                         ACCURATE of it.
--   <base>arrivals  zset  arrival checkpoints, score = arrival number, member
--                         "seq:ms:estimate_ms:slope": the first join of each
--                         CHECKPOINT_MS or CHECKPOINT_EVERY joins. A visitor
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
--                         estimate given at joining, -1 = none)
--   state hash fields 'an_minute' (the current minute's counters, as in a
--   `minutes` entry without waiting and active) and 'an_cp' (the last
--   checkpoint: "seq,ms").

local BASE = string.sub(KEYS[5], 1, -6) -- '<prefix>:{room}:'
local WAIT_BOUNDS = {5000, 15000, 30000, 60000, 120000, 300000, 600000, 900000, 1800000,
  3600000, 7200000, 14400000}
local MINUTE = 60000
local KEEP_MINUTES = 2880 -- two days of one-minute points
local CHECKPOINT_MS, CHECKPOINT_EVERY = 1000, 100
local ACCURATE = 0.2

local an_start, an_joined, an_admitted, an_gave_up, an_wait_sum, an_waits, an_eta
local cp_seq, cp_at
local an_dirty = false
local an_tally = {} -- field of <base>waits -> increment, written by analytics_save

local function an_add(field, n)
  an_tally[field] = (an_tally[field] or 0) + n
end

local function wait_bucket(ms)
  for i, bound in ipairs(WAIT_BOUNDS) do
    if ms <= bound then return i end
  end
  return #WAIT_BOUNDS + 1
end

-- This minute's counters; the first call of a new minute closes the last
-- one with the line as it stands (before this call changes it).
local function analytics_load()
  local got = redis.call('HMGET', KEYS[5], 'an_minute', 'an_cp')
  local start = now - now % MINUTE
  local m = {}
  if got[1] then
    for v in string.gmatch(got[1], '[^,]+') do m[#m + 1] = tonumber(v) end
  end
  if m[1] == start then
    an_start, an_joined, an_admitted, an_gave_up, an_wait_sum, an_waits, an_eta = unpack(m)
  else
    if m[1] then
      local line = redis.call('ZCARD', KEYS[2])
      local active = redis.call('ZCOUNT', KEYS[4], '(' .. now, '+inf')
      redis.call('RPUSH', BASE .. 'minutes', string.format('%.0f,%d,%d,%d,%.0f,%d,%d,%d,%.0f',
        m[1], m[2], m[3], m[4], m[5], m[6], line, active, m[7]))
      redis.call('LTRIM', BASE .. 'minutes', -KEEP_MINUTES, -1)
    end
    an_start, an_joined, an_admitted, an_gave_up, an_wait_sum, an_waits, an_eta = start, 0, 0, 0, 0, 0, -1
    an_dirty = true
  end
  if got[2] then
    local s, at = string.match(got[2], '^(%d+),(%d+)$')
    cp_seq, cp_at = tonumber(s), tonumber(at)
  end
end

-- When the visitor with arrival number `seq` joined (ms) and the estimate
-- they were given (ms, -1 = none), or nil when no checkpoint covers them.
local function joined_at(seq)
  local cp = redis.call('ZREVRANGEBYSCORE', BASE .. 'arrivals', seq, '-inf', 'LIMIT', 0, 1)
  if not cp[1] then return nil end
  local s, at, est, slope = string.match(cp[1], '^(%d+):(%d+):(%-?%d+):(%-?[%d.]+)$')
  est, slope = tonumber(est), tonumber(slope)
  if est >= 0 and slope >= 0 then
    est = est + (seq - tonumber(s)) * slope
  else
    est = -1
  end
  return tonumber(at), est
end

-- `n` visitors admitted; `seqs`: the arrival numbers of those who came from
-- the line (none when they went straight in: a wait of 0).
local function analytics_admitted(n, seqs)
  if n <= 0 then return end
  an_admitted = an_admitted + n
  an_dirty = true
  if not seqs then
    an_add('a1', n)
    an_waits = an_waits + n
    return
  end
  for _, seq in ipairs(seqs) do
    local at, est = joined_at(seq)
    if at then
      local waited = math.max(0, now - at)
      an_add('a' .. wait_bucket(waited), 1)
      an_add('a_sum', waited)
      an_wait_sum, an_waits = an_wait_sum + waited, an_waits + 1
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
  an_gave_up = an_gave_up + 1
  an_dirty = true
  local at = joined_at(seq)
  if at then
    local waited = math.max(0, last - at)
    an_add('g' .. wait_bucket(waited), 1)
    an_add('g_sum', waited)
  end
end

-- A visitor joined the line with arrival number `seq` and was told
-- `estimate` (ms, -1 = none); `later()` gives the estimate of one joining
-- CHECKPOINT_EVERY places behind them now (the slope between checkpoints).
local function analytics_joined(seq, estimate, later)
  an_joined = an_joined + 1
  if estimate > an_eta then an_eta = estimate end
  an_dirty = true
  if cp_seq ~= nil and now - cp_at < CHECKPOINT_MS and seq - cp_seq < CHECKPOINT_EVERY then return end
  local slope = -1
  if estimate >= 0 then
    local behind = later()
    if behind >= 0 then slope = math.max(0, (behind - estimate) / CHECKPOINT_EVERY) end
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
  cp_seq, cp_at = seq, now
end

local function analytics_save(forget)
  for field, n in pairs(an_tally) do
    redis.call('HINCRBY', BASE .. 'waits', field, n)
  end
  if an_dirty then
    redis.call('HSET', KEYS[5], 'an_minute', string.format('%.0f,%d,%d,%d,%.0f,%d,%.0f', an_start,
      an_joined, an_admitted, an_gave_up, an_wait_sum, an_waits, an_eta))
    if cp_seq then redis.call('HSET', KEYS[5], 'an_cp', string.format('%d,%.0f', cp_seq, cp_at)) end
  end
  if forget > 0 then
    for _, name in ipairs({'waits', 'arrivals', 'minutes'}) do
      redis.call('PEXPIRE', BASE .. name, forget)
    end
  end
end
