-- advance: the prelude of every queuegate script. store.py puts this text in
-- front of each operation's own script, so the rules of the line live here once
-- and every call brings the room up to date before it answers. There is no
-- scheduler: whoever asks next moves the line.
--
-- KEYS (one room; all share the {room} hash tag so one call is one cluster slot)
--   KEYS[1] seq      string  arrival counter (INCR): strict FIFO, no time ties
--   KEYS[2] waiting  zset    visitor id -> arrival number
--   KEYS[3] seen     zset    waiting visitor id -> last poll time (ms)
--   KEYS[4] active   zset    visitor id -> session expiry (ms)
--   KEYS[5] state    hash    bucket, counters and run-time settings
--
-- ARGV (the room's defaults from code; fields set in the state hash by
-- `configure` take precedence, so operators change a room without a restart)
--   ARGV[1] now in ms, or "" to use Redis TIME (tests pass explicit times)
--   ARGV[2] rate        visitors admitted per interval, 0 = no rate limit
--   ARGV[3] per         interval length (ms)
--   ARGV[4] capacity    most active sessions at once, 0 = no limit
--   ARGV[5] session     session length of an admitted visitor (ms)
--   ARGV[6] sliding     1 = each request renews the session, 0 = fixed
--   ARGV[7] abandon     a waiting visitor silent this long (ms) is dropped
--                       instead of admitted, 0 = never
--   ARGV[8] max_step    most visitors one call moves out of the line, so no
--                       call blocks Redis for long; the rest move next call
--   ARGV[9] status      open | paused | queue_all | passthrough | closed
-- The operation's own arguments start at ARGV[10].

local WINDOW = 60000 -- ms; the admission rate is measured over a sliding minute

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local conf = redis.call('HMGET', KEYS[5], 'rate', 'per', 'capacity', 'session',
  'sliding', 'abandon', 'max_step', 'status', 'tokens', 'refill_at',
  'win_start', 'win_count', 'win_prev', 'end_count', 'end_prev')
local rate = tonumber(conf[1] or ARGV[2])
local per = tonumber(conf[2] or ARGV[3])
local capacity = tonumber(conf[3] or ARGV[4])
local session = tonumber(conf[4] or ARGV[5])
local sliding = tonumber(conf[5] or ARGV[6]) == 1
local abandon = tonumber(conf[6] or ARGV[7])
local max_step = tonumber(conf[7] or ARGV[8])
local status = conf[8] or ARGV[9]
local tokens = tonumber(conf[9])
local refill_at = tonumber(conf[10])
local win_start = tonumber(conf[11]) or now
local win_count = tonumber(conf[12]) or 0
local win_prev = tonumber(conf[13]) or 0
local end_count = tonumber(conf[14]) or 0
local end_prev = tonumber(conf[15]) or 0
local dirty = conf[11] == false or (rate > 0 and conf[9] == false)

-- Sliding-window counters of admissions and of sessions ending, behind the
-- measured rates: the current minute's count plus the previous minute's.
if now - win_start >= WINDOW then
  if now - win_start >= 2 * WINDOW then
    win_prev, end_prev = 0, 0
  else
    win_prev, end_prev = win_count, end_count
  end
  win_count, end_count, win_start = 0, 0, now
  dirty = true
end

local function note_ended(n)
  if n <= 0 then return end
  end_count = end_count + n
  dirty = true
end

-- Sessions whose expiry has passed no longer count (a score <= now is expired).
local expired = redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
note_ended(expired)
local active_n = redis.call('ZCARD', KEYS[4])

-- Token bucket: N more per whole interval elapsed since the last refill.
-- Nobody joined or left the line since the previous call (every join is a
-- call), so spending all k refills on it now admits exactly whom k calls at
-- each refill would have admitted. What is left is then capped at N, below.
if rate > 0 then
  if tokens == nil or refill_at == nil then
    tokens, refill_at = rate, now
  elseif now - refill_at >= per then
    local k = math.floor((now - refill_at) / per)
    tokens = tokens + k * rate
    refill_at = refill_at + k * per
    dirty = true
  end
end


local function note_admitted(n)
  if n <= 0 then return end
  active_n = active_n + n
  if rate > 0 then tokens = tokens - n end
  win_count = win_count + n
  dirty = true
  redis.call('HINCRBY', KEYS[5], 'admitted', n)
end

-- How many may enter now: limited by tokens, free capacity and `limit`.
local function room_for(limit)
  local free = limit
  if rate > 0 then free = math.min(free, tokens) end
  if capacity > 0 then free = math.min(free, capacity - active_n) end
  return free
end

-- Move the head of the line into the active set while tokens and capacity
-- last; visitors who stopped polling are dropped instead of taking a slot.
-- Called once below, and again by scripts that free a slot.
local function move_line()
  if status ~= 'open' and status ~= 'queue_all' then return end
  local budget = max_step
  local abandoned = 0
  while budget > 0 do
    local free = room_for(budget)
    if free <= 0 then break end
    local heads = redis.call('ZPOPMIN', KEYS[2], free)
    if #heads == 0 then break end
    local ids = {}
    for i = 1, #heads, 2 do ids[#ids + 1] = heads[i] end
    local seen = redis.call('ZMSCORE', KEYS[3], unpack(ids))
    redis.call('ZREM', KEYS[3], unpack(ids))
    local entries = {}
    for i, id in ipairs(ids) do
      local last = tonumber(seen[i])
      if abandon > 0 and last ~= nil and last <= now - abandon then
        abandoned = abandoned + 1
      else
        entries[#entries + 1] = now + session
        entries[#entries + 1] = id
      end
    end
    budget = budget - #ids
    local n = #entries / 2
    if n > 0 then redis.call('ZADD', KEYS[4], unpack(entries)) end
    note_admitted(n)
  end
  if abandoned > 0 then redis.call('HINCRBY', KEYS[5], 'abandoned', abandoned) end
end

move_line()
-- The bucket never holds more than N (also after an operator lowers N).
if rate > 0 and tokens > rate then
  tokens = rate
  dirty = true
end
if expired > 0 then redis.call('HINCRBY', KEYS[5], 'expired', expired) end

-- Events per minute from a window counter and its previous window.
local function per_minute(current, previous)
  return previous * (1 - (now - win_start) / WINDOW) + current
end

-- Estimated wait (ms) for a visitor with `ahead` people in front, or -1 when
-- nothing bounds it (paused, or a capacity room with sliding sessions and no
-- session ended yet). A capacity room waits for sessions to end: at the rate
-- they were measured to end, and with fixed sessions never longer than the
-- rounds of full sessions it takes.
local function eta(ahead)
  if status == 'paused' or status == 'closed' then return -1 end
  local wait = 0
  if rate > 0 then
    local need = ahead + 1 - tokens
    if need > 0 then
      -- Admitted at the refill that brings the bucket to its turn.
      wait = refill_at + math.ceil(need / rate) * per - now
    end
  end
  if capacity > 0 then
    local need = ahead + 1 - (capacity - active_n)
    if need > 0 then
      local ending = per_minute(end_count, end_prev)
      local by_capacity = -1
      if ending > 0 then
        by_capacity = math.ceil(need / ending * WINDOW)
      end
      if not sliding then
        -- Fixed sessions end by themselves: a hard upper bound.
        local bound = math.ceil(need / capacity) * session
        if by_capacity < 0 or bound < by_capacity then by_capacity = bound end
      end
      if by_capacity < 0 then return -1 end
      wait = math.max(wait, by_capacity)
    end
  end
  return wait
end

-- How long a waiting client should sleep before it asks again (ms): often
-- near its turn, rarely when far back, and always well inside `abandon`.
local function poll_after(wait)
  local p = 20000
  if wait >= 0 then p = math.max(1000, math.min(20000, math.floor(wait / 3))) end
  if abandon > 0 then p = math.min(p, math.floor(abandon / 3)) end
  return math.max(p, 250)
end

local function save_state()
  if dirty then
    if rate > 0 then
      redis.call('HSET', KEYS[5], 'tokens', tokens, 'refill_at', refill_at)
    end
    redis.call('HSET', KEYS[5], 'win_start', win_start, 'win_count', win_count,
      'win_prev', win_prev, 'end_count', end_count, 'end_prev', end_prev)
  end
end
