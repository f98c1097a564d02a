-- advance: the prelude of every queuegate script. store.py puts this text
-- (after clock.lua and analytics.lua) in front of each operation's own
-- script, so the rules of the line live here once and every call brings the
-- room up to date before it answers. Whoever asks next moves the line, and
-- between asks the room's ticker does (tick.lua, queuegate/ticker.py).
--
-- KEYS (one room; all share the {room} hash tag so one call is one cluster slot)
--   KEYS[1] seq      string  arrival counter (INCR): strict FIFO, no time ties
--   KEYS[2] waiting  zset    visitor id -> arrival number
--   KEYS[3] seen     zset    waiting visitor id -> last poll time (ms); a
--                            far-back visitor's is in <base>alive instead
--                            (see liveness.lua)
--   KEYS[4] active   zset    visitor id -> session expiry (ms)
--   KEYS[5] state    hash    settings, bucket, counters, fairness seed
--
-- ARGV
--   ARGV[1] now in ms, or "" to use Redis TIME (read by clock.lua)
--   ARGV[2] the room's defaults from code, comma-separated in this order:
--           rate, per (ms), capacity, session (ms), sliding (0/1),
--           abandon (ms), max_step, status, method, opens_at (ms, 0 = none),
--           client_limit, forget (ms, 0 = never), challenge, target_ms,
--           max_errors, floor, ceiling, settle (ms).
--           Stored in the state hash when they change; "" (the console)
--           uses the stored ones. Fields set by `configure` override them.
--   ARGV[3] "seed:sha256" a fresh secret the room adopts if it has none, or ""
-- The operation's own arguments start at ARGV[4].
--
-- Meaning of the settings:
--   rate      visitors admitted per interval (token bucket), 0 = no limit
--   per       interval length (ms)
--   capacity  most active sessions at once, 0 = no limit
--   session   how long an admitted visitor may pass (ms)
--   sliding   1 = each request renews the session
--   abandon   a waiting visitor silent this long (ms) is dropped, not admitted
--   max_step  most visitors one call moves out of the line
--   status    open | paused | queue_all | passthrough | closed
--   method    fifo (arrival order) | random (a lottery among those waiting)
--   opens_at  before this time visitors wait in a pre-queue; at the opening
--             the pre-queue is shuffled once, reproducibly from the seed
--   client_limit  most new places one client address may take a minute, 0 = no limit
--   forget    a room nobody calls for this long expires with all its keys (ms;
--             0 = never). Set for rooms made from a template, so that every
--             value someone puts in a URL does not leave keys forever.
--   challenge the proof of work a new place costs (the largest number the
--             browser may have to try; 0 = none): see enter.lua
--   target_ms the p95 latency (ms) the admission controller keeps the app's
--             responses under, 0 = no controller (as in a room without a
--             target in code, whatever is set at run time): see health.lua
--   max_errors the share of error responses it tolerates (0.02 = 2 %)
--   floor, ceiling  the bounds of what it sets (the rate, or the capacity
--             of a room without a rate); ceiling 0 = none
--   settle    ms between two of its changes: how long the app takes to show
--             the effect of the last one

local HEAD_MEMORY = 10000 -- ms; how fast the skipped share at the head forgets
local HELD_KEPT = 30000 -- ms: a value the health controller set stays this long after its last look, once the code has no target
local EVEN_STEP = 1000 -- ms: a room that follows health refills its bucket in steps this long (or as long as one visitor takes)
local ADMITS_KEPT = 3610000 -- ms of admissions the health controller's record keeps (health.lua)
local SETTINGS = {'rate', 'per', 'capacity', 'session', 'sliding', 'abandon',
  'max_step', 'status', 'method', 'opens_at', 'client_limit', 'forget', 'challenge',
  'target_ms', 'max_errors', 'floor', 'ceiling', 'settle'}

-- (And last, `held`: below.)
local CONF = {'defaults'}
for i = 1, #SETTINGS do CONF[i + 1] = SETTINGS[i] end
CONF[#CONF + 1] = 'held'
local conf = redis.call('HMGET', KEYS[5], unpack(CONF)) -- per call
local held = conf[#CONF] -- per call

local defaults = ARGV[2] -- per call
local new_defaults = false -- per call
-- per call {
if defaults == '' then
  if not conf[1] then return redis.error_reply('UNKNOWN_ROOM no such room') end
  defaults = conf[1]
elseif defaults ~= conf[1] then
  redis.call('HSET', KEYS[5], 'defaults', defaults)
  new_defaults = true
end
-- per call }
-- Split, not matched field by field: defaults stored by an older version
-- have fewer fields, and those missing fall back below.
local default = {} -- per call
for value in string.gmatch(defaults .. ',', '([^,]*),') do default[#default + 1] = value end -- per call

local rate, per, capacity, session, sliding, abandon, max_step, status, method
-- The token bucket's step: `step_n` visitors more each `step` ms (see
-- read_settings).
local step_n, step
local opens_at, client_limit, forget, challenge, target_ms, max_errors
local adapt_floor, adapt_ceiling, settle
local floor_set -- the floor setting in force: 0 = none given, the default below
-- Before a scheduled opening the room only gathers its pre-queue.
local prequeue, line_moves

-- The controller's floor when none was given (Health's floor None, stored
-- as 0): a visitor a second in the units of `per_now`, not over the rate
-- from code in those units (the operator chose it as safe) nor the
-- ceiling; 1 for a capacity (rate 0). Made from the pair in force, not the
-- code's: a floor fixed at 60 (a visitor a second per 60 s) read as 60 a
-- second once an operator set `--rate 5 --per 1`, and the controller,
-- given the rate back, held 60 a second into an app serving 23 at most.
local function default_floor(rate_now, per_now, ceiling_now)
  local floor = 1
  local code_rate, code_per = tonumber(default[1]) or 0, tonumber(default[2]) or 0
  if rate_now > 0 and code_rate > 0 and code_per > 0 then
    floor = math.max(1, math.min(math.ceil(per_now / 1000), math.floor(code_rate * per_now / code_per)))
  end
  if ceiling_now > 0 then floor = math.min(floor, ceiling_now) end
  return floor
end

-- The settings in force: run-time fields over the defaults from code. Read
-- again by configure.lua once it has written new ones, so that the room
-- moves under them in the same call.
local function read_settings(fields)
  local setting = {}
  for i, name in ipairs(SETTINGS) do setting[name] = fields[i] or default[i] end
  rate = tonumber(setting.rate)
  per = tonumber(setting.per)
  capacity = tonumber(setting.capacity)
  session = tonumber(setting.session)
  sliding = tonumber(setting.sliding) == 1
  abandon = tonumber(setting.abandon)
  max_step = tonumber(setting.max_step)
  status = setting.status
  method = setting.method
  opens_at = tonumber(setting.opens_at)
  client_limit = tonumber(setting.client_limit)
  forget = tonumber(setting.forget)
  challenge = tonumber(setting.challenge) or 0
  -- The controller runs only for a room with a target in code (only its
  -- app processes measure it): a target left at run time by a deploy that
  -- had one is none here, for every script that asks whether it runs.
  target_ms = tonumber(setting.target_ms) or 0
  if (tonumber(default[14]) or 0) <= 0 then target_ms = 0 end
  max_errors = tonumber(setting.max_errors) or 0
  adapt_ceiling = tonumber(setting.ceiling) or 0
  floor_set = tonumber(setting.floor) or 0
  adapt_floor = floor_set > 0 and floor_set or default_floor(rate, per, adapt_ceiling)
  settle = tonumber(setting.settle) or 10000
  prequeue = opens_at > 0 and now < opens_at
  line_moves = (status == 'open' or status == 'queue_all') and not prequeue
  -- N more each `per`, all at once at the window's start. A room that
  -- follows health (health.lua) admits evenly instead: a second's share of
  -- N at a time (a visitor at least), N over `per` as before. Its
  -- controller looks each second and counts an admission as load from then
  -- on: a minute's N let in together was a burst that its first look read
  -- as an overload of the rate's own making (300 a minute, cut to its floor
  -- at once, the burst's queue then named a target out of reach).
  step_n, step = rate, per
  if target_ms > 0 and rate > 0 and per > EVEN_STEP then
    step_n = math.ceil(rate * EVEN_STEP / per)
    step = math.ceil(per * step_n / rate)
  end
end
read_settings({unpack(conf, 2, 1 + #SETTINGS)}) -- per call
-- per call {
-- A rate (or capacity) the health controller set is its, not an
-- operator's (`held`, health.lua): a deploy whose code has no target any
-- more takes it away with the controller, and the code's is in force. (It
-- stayed as one set at run time: a room rehearsed with a target, then
-- deployed at a fixed 2 a second, admitted at the controller's last 6.)
-- Not while a controller still looks (a rolling deploy: a process with
-- the target reports, and would write it again): once none has for
-- HELD_KEPT. A rate goes with its pair's `per` (one pair: configure.lua),
-- or an operator's per would make a pair nobody chose with the code's rate.
if held and (tonumber(default[14]) or 0) == 0 then
  local looked = tonumber(redis.call('HGET', string.sub(KEYS[5], 1, -6) .. 'health', 'adapt_at')) or 0
  if now - looked >= HELD_KEPT then
    local gone = {held, held == 'rate' and 'per' or held}
    redis.call('HDEL', KEYS[5], gone[1], gone[2], 'held')
    for i, name in ipairs(SETTINGS) do
      if name == gone[1] or name == gone[2] then conf[i + 1] = false end
    end
    read_settings({unpack(conf, 2, 1 + #SETTINGS)})
  end
end
-- per call }

-- The setting a health target's controller holds (health.lua), unless
-- pinned: the rate, or the capacity of a room without one.
local function controlled_field()
  return rate > 0 and 'rate' or 'capacity'
end

-- The room's running state, read by advance() (a visitor who is simply
-- inside never needs it).
local tokens, refill_at, win_start, win_count, win_prev, end_count, end_prev -- per call
local seed, draws, shuffled -- per call
local quick_until -- per call: the end of the snapshot this call found (see snapshot())
-- The Redis time (us) at which the room's state was made: what copies of
-- it in the app's processes are checked against (tick.lua).
local incarnation -- per call
local dirty = false -- per call
local active_n = 0 -- per call

local function note_ended(n)
  if n <= 0 then return end
  end_count = end_count + n
  dirty = true
end

-- A number in [0, 1) from the room's secret seed and a draw counter: the same
-- seed always gives the same draws, so a lottery can be replayed and checked.
local function draw()
  draws = draws + 1
  dirty = true
  local h = redis.sha1hex((seed or '') .. ':' .. draws)
  return tonumber(string.sub(h, 1, 13), 16) / 4503599627370496 -- 16^13
end

-- `seqs`: the arrival numbers of those admitted from the line (nil when
-- they went straight in).
local function note_admitted(n, seqs)
  if n <= 0 then return end
  active_n = active_n + n
  if rate > 0 then tokens = tokens - n end
  win_count = win_count + n
  dirty = true
  local total = redis.call('HINCRBY', KEYS[5], 'admitted', n)
  analytics_admitted(n, seqs)
  if target_ms > 0 then
    -- The admissions' record the health controller reads the visits'
    -- ages from (health.lua): the count so far, one entry each 100 ms.
    local admits = string.sub(KEYS[5], 1, -6) .. 'health:admits'
    local at = now - now % 100
    -- (Kept to the controller's horizon, an hour, even if no report
    -- ever comes to trim it, and forgotten with the room.)
    redis.call('ZREMRANGEBYSCORE', admits, '-inf', now - ADMITS_KEPT)
    redis.call('ZREMRANGEBYSCORE', admits, at, at)
    redis.call('ZADD', admits, at, at .. ':' .. total)
    local health = string.sub(KEYS[5], 1, -6) .. 'health'
    if redis.call('HSETNX', health, 'admits_from', total - n) == 1 then
      redis.call('HSET', health, 'admits_since', now)
    end
    if forget > 0 then
      redis.call('PEXPIRE', admits, forget)
      redis.call('PEXPIRE', health, forget)
    end
  end
end

-- How many may enter now: limited by tokens, free capacity and `limit`.
local function room_for(limit)
  local free = limit
  if rate > 0 then free = math.min(free, tokens) end
  if capacity > 0 then free = math.min(free, capacity - active_n) end
  return free
end

-- Take `n` visitors out of the line: the head (fifo) or random ones.
-- Returns their ids and arrival numbers.
local function take(n)
  local ids, seqs = {}, {}
  if method ~= 'random' then
    local heads = redis.call('ZPOPMIN', KEYS[2], n)
    for i = 1, #heads, 2 do
      ids[#ids + 1] = heads[i]
      seqs[#seqs + 1] = tonumber(heads[i + 1])
    end
    return ids, seqs
  end
  local left = redis.call('ZCARD', KEYS[2])
  for _ = 1, math.min(n, left) do
    local index = math.floor(draw() * left)
    local pick = redis.call('ZRANGE', KEYS[2], index, index, 'WITHSCORES')
    ids[#ids + 1] = pick[1]
    seqs[#seqs + 1] = tonumber(pick[2])
    redis.call('ZREM', KEYS[2], pick[1])
    left = left - 1
  end
  return ids, seqs
end

-- The pushed room: what a call changed in the line, published once at its
-- end (save_state) on <prefix>:{room}:moved, which every app process hears
-- (queuegate/invalidations.py) and feeds its open streams from
-- (queuegate/feeds.py). moved() says the line or the room's settings
-- changed; the lists say who left the line and how.
local published = false -- per call
local push_taken = 0 -- per call: taken from the head of the line (admitted or skipped)
local push_admitted, push_gone, push_gone_seqs = {}, {}, {} -- per call
local push_reset = false -- per call: ranks changed other than by leaving (a shuffle): read them again
local push_drained = false -- per call: everyone waiting lost their place (drain.lua)
local function moved()
  published = true
end
-- `seq`: the arrival number of a visitor who left the line, 0 for one who
-- was not in it (an admitted visitor removed).
local function went(id, seq)
  push_gone[#push_gone + 1] = id
  push_gone_seqs[#push_gone_seqs + 1] = seq or 0
  moved()
end

-- Move visitors from the line into the active set while tokens and capacity
-- last; visitors who stopped polling are dropped instead of taking a slot.
-- Called once below, and again by scripts that free a slot.
local function move_line()
  if not line_moves then return end
  local budget = max_step
  local abandoned = 0
  while budget > 0 do
    local free = room_for(budget)
    if free <= 0 then break end
    local ids, seqs = take(free)
    if #ids == 0 then break end
    local seen = redis.call('ZMSCORE', KEYS[3], unpack(ids))
    redis.call('ZREM', KEYS[3], unpack(ids))
    local alive = take_alive(ids) -- far-back visitors' check-ins (liveness.lua)
    local entries, admitted = {}, {}
    for i, id in ipairs(ids) do
      local last = tonumber(seen[i]) or tonumber(alive[i])
      if abandon > 0 and last ~= nil and last <= now - abandon then
        abandoned = abandoned + 1
        analytics_gave_up(seqs[i], last)
        went(id, 0) -- counted in push_taken below
      else
        entries[#entries + 1] = now + session
        entries[#entries + 1] = id
        admitted[#admitted + 1] = seqs[i]
        push_admitted[#push_admitted + 1] = id
      end
    end
    push_taken = push_taken + #ids
    budget = budget - #ids
    local n = #entries / 2
    -- Recent history of the head of the line: exponentially fading counts
    -- of visitors admitted and skipped there (time constant HEAD_MEMORY).
    local got = redis.call('HMGET', KEYS[5], 'head_at', 'head_took', 'head_skipped')
    local fade = math.exp(-(now - (tonumber(got[1]) or now)) / HEAD_MEMORY)
    redis.call('HSET', KEYS[5], 'head_at', now,
      'head_took', (tonumber(got[2]) or 0) * fade + n,
      'head_skipped', (tonumber(got[3]) or 0) * fade + (#ids - n))
    if n > 0 then redis.call('ZADD', KEYS[4], unpack(entries)) end
    note_admitted(n, admitted)
    moved()
  end
  if abandoned > 0 then redis.call('HINCRBY', KEYS[5], 'abandoned', abandoned) end
end


-- Bring the room up to date: adopt a seed, roll the rate windows, expire
-- sessions, refill the bucket, shuffle a pre-queue at its opening, and move
-- the line. Every script calls it first (enter does not need it for a
-- visitor who is simply inside: see inside.lua).
local function advance()
  local state = redis.call('HMGET', KEYS[5], 'tokens', 'refill_at', 'win_start', 'win_count',
    'win_prev', 'end_count', 'end_prev', 'seed', 'draws', 'shuffled', 'an_start', 'an_cp_at',
    'quick_until', 'inc')
  if not state[8] and ARGV[3] == '' and (method == 'random' or opens_at > 0) then
    -- A room that draws (a lottery, a pre-queue's shuffle) needs its secret
    -- seed, and this one has none: it was made anew (forgotten, its data
    -- lost) after the caller saw it stored, so the caller offered none. Its
    -- draws must not come from the empty seed, which anyone can compute:
    -- the caller asks again with an offer (queuegate.calls). Before anything
    -- advance() writes; a script's own writes before it are made again by
    -- the call with the offer (new defaults are written once: the seed's
    -- adoption, below, marks the room changed for them).
    error(redis.error_reply('NO_SEED this room has no lottery seed: call again with one'))
  end
  analytics_load(state[11], state[12])
  tokens, refill_at = tonumber(state[1]), tonumber(state[2])
  win_start = tonumber(state[3]) or now
  win_count, win_prev = tonumber(state[4]) or 0, tonumber(state[5]) or 0
  end_count, end_prev = tonumber(state[6]) or 0, tonumber(state[7]) or 0
  seed, draws, shuffled = state[8], tonumber(state[9]) or 0, tonumber(state[10])
  quick_until = tonumber(state[13])
  incarnation = state[14]
  if not incarnation then
    -- A room's state made anew (its first call, or its data lost): a new
    -- incarnation, so that copies of the old one are known for what they are.
    local t = redis.call('TIME')
    incarnation = t[1] .. string.format('%06d', tonumber(t[2]))
    redis.call('HSET', KEYS[5], 'inc', incarnation)
  end
  dirty = state[3] == false or (rate > 0 and state[1] == false)
  if rate > 0 and tokens ~= nil and tokens > step_n then
    -- N was lowered since the last call, or the room now admits in steps:
    -- the bucket shrinks with it
    tokens = step_n
    dirty = true
  end

  if not seed and ARGV[3] ~= '' then
    local colon = string.find(ARGV[3], ':', 1, true)
    seed = string.sub(ARGV[3], 1, colon - 1)
    redis.call('HSET', KEYS[5], 'seed', seed, 'seed_sha256', string.sub(ARGV[3], colon + 1))
    dirty = true
  end

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

  -- Sessions whose expiry has passed no longer count (a score <= now is expired).
  local expired = redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  note_ended(expired)
  if expired > 0 then redis.call('HINCRBY', KEYS[5], 'expired', expired) end
  active_n = redis.call('ZCARD', KEYS[4])

  -- Token bucket: a step's visitors more per whole step elapsed since the
  -- last refill (N per interval, or evenly: read_settings), capped at a
  -- step's before anything is spent: a silence never buys a burst, so no
  -- interval ever lets more than N in (a room in steps: its steps that may
  -- start within an interval, a step more where N is not a whole number of
  -- them), whoever calls and whenever. (The
  -- line does not wait for a caller to move: queuegate/ticker.py advances
  -- every room at its refill boundaries.)
  if rate > 0 then
    if tokens == nil or refill_at == nil then
      tokens, refill_at = step_n, now
    elseif now - refill_at >= step then
      local k = math.floor((now - refill_at) / step)
      tokens = math.min(tokens + k * step_n, step_n)
      refill_at = refill_at + k * step
      dirty = true
    end
  end

  -- The opening of a scheduled room: everyone in the pre-queue came early, so
  -- they get a random order, once. A visitor's place is the rank of
  -- SHA1(seed ":" id) among them; they keep the same set of arrival numbers,
  -- so everyone who arrives after the opening still queues behind them.
  -- (queuegate.fairness.prequeue_order recomputes it from the published seed.)
  if opens_at > 0 and not prequeue and shuffled ~= opens_at then
    local entries = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
    local ids, scores, key = {}, {}, {}
    for i = 1, #entries, 2 do
      local id = entries[i]
      ids[#ids + 1] = id
      scores[#scores + 1] = entries[i + 1]
      key[id] = redis.sha1hex((seed or '') .. ':' .. id)
    end
    table.sort(ids, function(a, b)
      if key[a] == key[b] then return a < b end
      return key[a] < key[b]
    end)
    for first = 1, #ids, 500 do
      local batch = {}
      for i = first, math.min(first + 499, #ids) do
        batch[#batch + 1] = scores[i]
        batch[#batch + 1] = ids[i]
      end
      redis.call('ZADD', KEYS[2], unpack(batch))
    end
    redis.call('HSET', KEYS[5], 'shuffled', opens_at, 'prequeue_size', #ids)
    push_reset = true
    moved()
  end

  move_line()
end

-- Of those who lately reached the front of the line, the share still there
-- to take their turn (1 while nobody was skipped).
local function staying_share()
  local got = redis.call('HMGET', KEYS[5], 'head_took', 'head_skipped')
  local took, skipped = tonumber(got[1]) or 0, tonumber(got[2]) or 0
  if took + skipped <= 0 then return 1 end
  return took / (took + skipped)
end

-- The room's figures as estimate.lua takes them, brought up to date (its
-- rate and per: the bucket's step).
local function figures()
  return {status = status, prequeue = prequeue, opens_at = opens_at, abandon = abandon,
    rate = step_n, tokens = tokens, per = step, refill_at = refill_at, capacity = capacity,
    active_n = active_n, end_count = end_count, end_prev = end_prev, win_start = win_start,
    sliding = sliding, session = session, method = method}
end

local function crowd()
  return staying_share(), redis.call('ZCARD', KEYS[2]),
    quiet_since(now - abandon / 3)
end

-- Estimated wait (ms) with `ahead` people in front (see estimate.lua).
local function eta(ahead)
  return estimate(ahead, figures(), crowd)
end

-- Quick polls and joins (quick.lua, quick_join.lua) answer from a snapshot
-- of the room's figures, left by the last call that settled the room
-- (enter, remove, drain, stats: they set `settled`, as they change nothing
-- after save_state), until the first moment at which the room could change
-- without anyone calling: a refill, a session's end that frees capacity, the
-- end of a rate window or of an analytics minute, or half of `forget`. None
-- while the line could take someone now (a step's max_step left some, or a
-- join in queue_all would wait with room free), before an opening, or in a
-- room closed or passed through. Every other call drops it: configure and
-- health change settings after their save_state. The line's length is not
-- in it (joins change it): a quick answer counts the line itself.
local settled = false -- per call
local function snapshot()
  if prequeue or not (status == 'open' or status == 'queue_all' or status == 'paused') then
    return nil
  end
  if line_moves and room_for(1) > 0 then return nil end
  local r = figures()
  local settled_until = math.min(now - now % MINUTE + MINUTE, win_start + WINDOW)
  if line_moves and rate > 0 then settled_until = math.min(settled_until, refill_at + step) end
  if line_moves and capacity > 0 then
    local first = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
    if first[2] then settled_until = math.min(settled_until, tonumber(first[2])) end
  end
  -- A forgetting room's keys live `forget` past the last full call, which
  -- renews them: one comes at least every half of it while anyone polls.
  if forget > 0 then settled_until = math.min(settled_until, now + math.floor(forget / 2)) end
  if abandon > 0 then r.staying = staying_share() end
  r.client_limit, r.challenge, r.forget = client_limit, challenge, forget
  return cmsgpack.pack(r), settled_until
end

-- The snapshot this call found stays while it still holds: this call
-- changed none of its figures and its time has not run out.
local function keep_snapshot()
  if not settled then
    if quick_until then redis.call('HDEL', KEYS[5], 'quick', 'quick_until') end
    return
  end
  if quick_until and now < quick_until and not (dirty or published or new_defaults) then return end
  local snap, settled_until = snapshot()
  if snap then
    redis.call('HSET', KEYS[5], 'quick', snap, 'quick_until', settled_until)
  elseif quick_until then
    redis.call('HDEL', KEYS[5], 'quick', 'quick_until')
  end
end

-- Estimates by rank for the push: every rank up to PUSH_FRONT, then ranks
-- PUSH_SPACING apart to the line's last (a process puts a stream's estimate
-- between its two neighbours'; in a lottery everyone's is the median's).
local PUSH_FRONT, PUSH_SPACING = 20, 1.05
local function push_samples(line)
  local r = figures()
  local staying, count, quiet = crowd()
  local function known() return staying, count, quiet end
  local samples = {}
  local function sample(rank, ahead)
    local wait = estimate(ahead, r, known)
    samples[#samples + 1] = rank
    samples[#samples + 1] = wait
    samples[#samples + 1] = poll_after(wait, abandon)
  end
  if method == 'random' then
    sample(0, math.floor((line - 1) / 2))
    return samples
  end
  local rank = 0
  while rank < line do
    sample(rank, rank)
    if rank == line - 1 then break end
    if rank < PUSH_FRONT then rank = rank + 1 else rank = math.floor(rank * PUSH_SPACING) end
    rank = math.min(rank, line - 1)
  end
  return samples
end

local function push()
  local line = redis.call('ZCARD', KEYS[2])
  local shown = status
  if prequeue then shown = 'prequeue' end
  redis.call('PUBLISH', BASE .. 'moved', cjson.encode({
    i = incarnation, t = now, n = push_taken, a = push_admitted, g = push_gone, s = push_gone_seqs,
    r = push_reset and 1 or 0, d = push_drained and 1 or 0, st = shown, m = method, l = line, se = session, ab = abandon,
    e = push_samples(line),
  }))
  push_taken, push_admitted, push_gone, push_gone_seqs = 0, {}, {}, {}
  push_reset, push_drained = false, false
end

local function save_state()
  if forget > 0 then
    for i = 1, 5 do redis.call('PEXPIRE', KEYS[i], forget) end
    redis.call('PEXPIRE', ALIVE, forget)
    redis.call('PEXPIRE', ALIVE_N, forget)
  end
  analytics_save(forget)
  if dirty then
    if rate > 0 then
      redis.call('HSET', KEYS[5], 'tokens', tokens, 'refill_at', refill_at)
    end
    redis.call('HSET', KEYS[5], 'win_start', win_start, 'win_count', win_count,
      'win_prev', win_prev, 'end_count', end_count, 'end_prev', end_prev, 'draws', draws)
  end
  keep_snapshot()
  if published then
    push()
    published = false
  end
end
