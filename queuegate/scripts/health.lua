-- health: one app process's report on the responses it forwarded for the
-- room since its previous report, and the room's admission controller. Runs
-- after advance. Every process reports about once a second while it serves
-- traffic; whichever report comes when a decision is due makes it, so there
-- is no leader, and a process that stops reporting only stops adding data.
--
-- KEYS[6] qg:{room}:health  hash: the room's measurements in two windows
--         (n, err, e1..eB, f1..fB, st; the window before: p-prefixed)
--         and the controller's state
-- ARGV[4] responses, ARGV[5] errors among them (5xx, exceptions)
-- ARGV[6 .. 5+B]     responses per latency bucket, time to the response's end
-- ARGV[6+B .. 5+2B]  the same, time to the response's first byte
-- ARGV[6+2B .. 5+3B] requests still in flight, by their age so far
--                    (buckets: BOUNDS below, in ms; the last one: slower)
-- ARGV[6+3B]         requests started (forwarded) since the last report
--
-- The law (the README explains the choice): the gradient of Netflix's
-- concurrency-limits (Gradient2) and Envoy's adaptive concurrency filter,
-- against a latency target instead of a measured baseline, applied the way
-- TCP applies its window: a multiplicative cut at most once per round trip,
-- increases only after the last change has shown, sized by the load the
-- latency shows against its base (Envoy's gradient against its minimum
-- round trip, clamped to 2: TCP's slow start far from trouble, up to where
-- the app last overloaded; probes near the target), and cuts that start
-- from what the app actually keeps up with (BBR's delivery rate). The
-- round trip is the room's `settle`: a visitor admitted now makes requests
-- for a while.
--
-- Measurements: the last one to two windows of WINDOW (a sliding window;
-- a window holding too few responses to judge lasts longer, MAX_WINDOW at
-- most);
-- requests still in flight count at their age so far for the look they are
-- reported in; every window starts again at a change.
--
-- About every INTERVAL a report finds a look due; the value changes only
-- with enough responses measured (MIN_SAMPLES), the line moving (open or
-- queue_all) and the operator not pinning it:
--   g = clamp(target / p95, MIN_GRADIENT, 1), lowered further, to the same
--       floor, in proportion when the error rate is over its maximum;
--   `serving` = admitted x successful responses / requests started, in
--       the windows: what the app keeps up with, in the value's units;
--       `admitted` is the value's mean over the last round trip (the rate
--       the requests of the moment were admitted at), or the value now if
--       that is lower;
--   g < 1 and the p95 falling, within 3 x settle of a cut: by a twentieth
--       since the last look, or under the target in the current window
--       alone (the figures lag a draining queue by a second): hold (what
--       queued before the cut drains);
--   g < 1, `settle` after the last cut:
--         value = min(g, BETA) x min(value, serving), at least 1 less,
--         never under the floor; `served` (where the app overloaded) is
--         that base, the most of one episode of cuts;
--   g < 1, inside the round trip, the p95 still rising by a tenth a look
--       a third of it after the cut: down to 0.9 x serving, if above it
--       (the round trip still counts from the cut);
--   g = 1, a queue forming: the app completes under DRAIN x what it is
--       given (by more than the square root of the requests started), the
--       p95 past halfway from its base to HEADROOM x target, settle / 3
--       after the last raise, settle after a cut or an ease: down to 0.9 x
--       serving (Vegas's sign of a queue, BBR's drain), before the target
--       is crossed;
--   g = 1, p95 over HEADROOM x target and above the last look's, settle
--       after the last change: one less (Vegas's decrease: a queue growing
--       too slowly for the shortfall to tell), `served` that value; an
--       ease, not a cut: a crossing of the target after it is cut at the
--       next look (a queue forming still waits a round trip);
--   g = 1, p95 under HEADROOM x target, visitors waiting (the value is what
--       holds them back), `settle` after the last change (half of it while
--       the p95 is under half the target):
--         value x clamp(load at HEADROOM x target / load now, 1,
--         MAX_RAISE), the loads read from the p95 against the base latency
--         (see raise_by), at least 1 more; from under 0.9 x `served`, only
--         up to there (slow start to its threshold, left on the latency as
--         HyStart leaves it); from there on, while the p95 is under halfway
--         from its base to HEADROOM x target (past it the app is busy at
--         this rate already: hold, as CUBIC holds near its last maximum),
--         probes: +1, +2, +4 ... with each probe in a row (Vegas's
--         additive step, growing as BBRv2 grows its probing up; a cut, a
--         p95 near the target or a busy look starts the count again; a new
--         overload sets a new `served`); never above the ceiling.
--   Otherwise the value holds: no evidence, no change.
-- The value is the room's rate (visitors per interval) or, in a room without
-- a rate, its capacity; it is written where `configure` writes it, so the
-- line, the estimates and every process follow it at their next call.
--
-- Returns {value, reason}: the controlled value now, and the last decision.

-- Steps of a fifth or less from 100 ms to 1 s, where targets are: the
-- quantile falls in a bucket this narrow (read linearly within it).
local BOUNDS = {5, 10, 20, 30, 40, 50, 65, 80, 100, 120, 140, 160, 180, 200, 240, 280, 320, 360, 400, 450,
  500, 550, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 2000, 2500, 3000, 4000, 5000, 7500, 10000}
local B = #BOUNDS + 1
local INTERVAL = 1000   -- ms between looks at the figures
local MIN_SAMPLES = 3   -- fewer responses than this in the window is no evidence
local HEADROOM = 0.8    -- raise only while the p95 is under this share of the target
local BETA = 0.7        -- a cut is at least to this share (CUBIC's)
local MIN_GRADIENT = 0.25 -- the deepest single cut: to a quarter
local MAX_RAISE = 2      -- the biggest single raise: to twice
local DRAIN = 0.9       -- completing under this share of what it is given is a queue forming
local BASE_WINDOW = 30000 -- ms: the base latency is the least p95 of the last one to two
local WINDOW = 1000     -- ms: figures cover the last one to two of these
local MAX_WINDOW = 10000 -- ms: a window holding fewer than MIN_SAMPLES lasts up to this

advance()

local h = KEYS[6]
-- The measurements are counted in windows of WINDOW: the current one and
-- the one before it, so every figure covers the last one to two windows (a
-- sliding window, as Hystrix and Envoy keep theirs). A window weighs what
-- happened in it, not how many responses it had: after a drop in traffic
-- the slow responses of before it do not outvote the fast ones after.
-- n responses, err errors, e and f the latency buckets, st requests
-- started: the app keeps up while n - err ~ st.
local fields = {'n', 'err'}
for i = 1, B do fields[#fields + 1] = 'e' .. i end
for i = 1, B do fields[#fields + 1] = 'f' .. i end
fields[#fields + 1] = 'st'
local F = #fields
local incoming = {}
for i = 1, F - 1 do incoming[i] = tonumber(ARGV[3 + i]) or 0 end
incoming[F] = tonumber(ARGV[6 + 3 * B]) or 0
local asked = {'at', 'since', 'since_before'}
for i = 1, F do asked[#asked + 1] = fields[i] end
for i = 1, F do asked[#asked + 1] = 'p' .. fields[i] end
local got = redis.call('HMGET', h, unpack(asked))
local since = tonumber(got[2]) or now
local since_before = tonumber(got[3]) or since
local current, before = {}, {}
for i = 1, F do
  current[i] = tonumber(got[3 + i]) or 0
  before[i] = tonumber(got[3 + F + i]) or 0
end
-- A window lasts WINDOW, or longer while it holds fewer than MIN_SAMPLES
-- responses (up to MAX_WINDOW): at a floor of one visitor a second, with a
-- request each, a second holds one response, and windows of a second would
-- never hold evidence enough to raise the rate again.
if now - since >= MAX_WINDOW or (now - since >= WINDOW and current[1] >= MIN_SAMPLES) then
  before, current, since_before, since = current, {}, since, now
  for i = 1, F do current[i] = 0 end
end
-- value_of[2] responses, [3] errors, [4 ..] end buckets, [4 + B ..] first
-- byte buckets, [F + 1] started: both windows together.
local value_of = {}
local write = {'at', now, 'since', since, 'since_before', since_before}
for i = 1, F do
  current[i] = current[i] + incoming[i]
  value_of[1 + i] = current[i] + before[i]
  write[#write + 1] = fields[i]
  write[#write + 1] = current[i]
  write[#write + 1] = 'p' .. fields[i]
  write[#write + 1] = before[i]
end
redis.call('HSET', h, unpack(write))

-- The q-quantile of a histogram whose first bucket is counts[first]:
-- linear within the bucket it falls in (the last bucket reads as 2x its start).
local function quantile(counts, first, q)
  local total = 0
  for i = 0, B - 1 do total = total + counts[first + i] end
  if total <= 0 then return 0 end
  local want, seen = q * total, 0
  for i = 1, B do
    local count = counts[first + i - 1]
    if count > 0 and seen + count >= want then
      local low = BOUNDS[i - 1] or 0
      local high = BOUNDS[i] or 2 * BOUNDS[#BOUNDS]
      return low + (high - low) * (want - seen) / count
    end
    seen = seen + count
  end
  return BOUNDS[#BOUNDS]
end

local field, value = 'capacity', capacity
if rate > 0 then field, value = 'rate', rate end
local control = redis.call('HMGET', h, 'adapt_at', 'changed_at', 'reason', 'cut_at', 'served', 'p95_ms',
  'changed', 'base', 'base_p', 'base_since', 'probes', 'admitted', 'admitted_at', 'eased_at')
local reason = control[3] or ''

-- How much more the app takes, from its latency: a queue's latency is its
-- base (unloaded) latency over 1 - load, so the load now is 1 - base / p95
-- and the load at HEADROOM x target is 1 - base / (HEADROOM x target); the
-- value may grow by their ratio, MAX_RAISE at most (Envoy's gradient
-- against its minimum round trip, clamped to 2, read as a queue's load so
-- that steps shrink near the knee, where latency climbs fastest).
local function raise_by(p95, base)
  local room_at = 1 - base / (HEADROOM * target_ms)
  if room_at <= 0 then return 1 end
  local load = math.max(0.05, 1 - base / math.max(p95, 1))
  return math.max(1, math.min(MAX_RAISE, room_at / load))
end

-- Processes report about every INTERVAL; a look is due a little before,
-- so that report timing's jitter does not skip every other one.
if target_ms > 0 and now - (tonumber(control[1]) or 0) >= 0.9 * INTERVAL then
  -- Requests still in flight count at their age so far, which their
  -- latency is at least (censored samples): a pile-up shows now, not when
  -- its slowest requests finish. They are this look's alone: the reporting
  -- process's snapshot, never added to the windows.
  local completed, latest = {}, {}
  for i = 1, B do
    local flying = tonumber(ARGV[5 + 2 * B + i]) or 0
    completed[i] = value_of[3 + i]
    value_of[3 + i] = completed[i] + flying
    latest[i] = current[2 + i] + flying
  end
  local n = value_of[2]
  local p95 = quantile(value_of, 4, 0.95)
  for i = 1, B do value_of[3 + i] = completed[i] end
  local first_p95 = quantile(value_of, 4 + B, 0.95)
  -- The same of the current window alone: the last second or so.
  local latest_p95 = quantile(latest, 1, 0.95)
  local errors = 0
  if n > 0 then errors = value_of[3] / n end
  -- The base latency: the lowest p95 of the last one to two BASE_WINDOWs
  -- (Envoy re-measures its minimum round trip now and then for the same
  -- reason: an app that got slower for good has a new base).
  local base_now, base_before = tonumber(control[8]), tonumber(control[9])
  if n >= MIN_SAMPLES and p95 > 0 then
    if now - (tonumber(control[10]) or 0) >= BASE_WINDOW then
      base_before, base_now = base_now, nil
      redis.call('HSET', h, 'base_since', now)
    end
    base_now = math.min(base_now or p95, p95)
    redis.call('HSET', h, 'base', base_now, 'base_p', base_before or base_now)
  end
  local base = math.min(base_now or p95, base_before or p95)
  -- The rate the requests of now were admitted at: the requests started in
  -- the windows come from visitors admitted over the last round trip, not
  -- at the value of this moment (after a raise, the load of the lower value
  -- still shows for a while). Its mean over the round trip, kept as an
  -- exponential mean whose weights are a round trip's on average (a time
  -- constant of half of it, the mean age of a request's admission).
  local admitted = tonumber(control[12])
  local admitted_at = tonumber(control[13]) or now
  if admitted then
    admitted = admitted + (value - admitted) * (1 - math.exp(-math.max(0, now - admitted_at) / (settle / 2)))
  else
    admitted = value
  end
  redis.call('HSET', h, 'admitted', admitted, 'admitted_at', now)
  local new = value
  local pinned = redis.call('HGET', KEYS[5], 'pinned')
  if pinned then
    reason = 'hold: pinned by the operator'
  elseif not line_moves then
    reason = 'hold: the line is not moving (' .. status .. ')'
  elseif n < MIN_SAMPLES then
    reason = 'hold: too few responses to judge'
  else
    -- Half the way from the base latency to the headroom: past it, a
    -- queue is forming (the app is busy at this rate).
    local queueing = (base + HEADROOM * target_ms) / 2
    local g = math.min(1, target_ms / math.max(p95, 1))
    local why = string.format('p95 %d ms over the %d ms target', p95, target_ms)
    if errors > max_errors then
      local e = 0
      if errors > 0 then e = max_errors / errors end
      if e < g then
        g = e
        why = string.format('error rate %.1f%% over %.1f%%', errors * 100, max_errors * 100)
      end
    end
    g = math.max(MIN_GRADIENT, g)
    -- `served`: what the app serves when it is overloaded (in the room's
    -- units: visitors per interval), remembered from the last cut.
    local served = tonumber(control[5])
    -- What the app keeps up with now, in the value's units (BBR's
    -- delivery rate): the rate its requests were admitted at in the
    -- proportion of the requests started that it completed, successfully,
    -- in the same windows. While a queue grows, this is less than the
    -- value. The rate they were admitted at is the round trip's mean, or
    -- the value now if that is lower: after a raise the load of the lower
    -- value still shows (taken at the value, a doubling into an overload
    -- read the app as half again as big as it was); after a cut, the
    -- lower reading drains (taken at the mean, a second cut after a pool
    -- fell to a third still gave it more than it served).
    local serving, keeping = nil, 1
    local shortfall = value_of[F + 1] - (value_of[2] - value_of[3]) -- started, less completed well
    if value_of[F + 1] >= MIN_SAMPLES then
      keeping = math.min(1, (value_of[2] - value_of[3]) / value_of[F + 1])
      serving = math.min(admitted, value) * keeping
    end
    local since_cut = now - (tonumber(control[4]) or 0)
    local since_eased = now - (tonumber(control[14]) or 0)
    -- Only while the last change was a cut (a raise since ends it).
    local after_cut = control[4] and string.sub(control[7] or '', 1, 4) == 'cut:'
      and since_cut < 3 * settle
    -- Falling: since the last look, or over the target in the window
    -- before but no longer in the current one (the last second's
    -- responses, those in flight counted at their age, enough of them and
    -- few enough errors): the figures lag a draining queue by a second.
    local falling = after_cut and ((control[6] and p95 < 0.95 * tonumber(control[6]))
      or (current[1] >= MIN_SAMPLES and latest_p95 <= target_ms
        and current[2] <= max_errors * current[1]))
    if g < 1 and falling then
      -- Still over, but falling: what was queued before the cut is
      -- draining. Another cut now would overshoot (TIMELY and Vegas read
      -- the latency's trend for the same reason).
      reason = 'hold: ' .. why .. ', and falling'
    elseif g < 1 then
      -- A second cut inside the round trip only while the p95 still rises
      -- by a tenth a look a third of it after the last one (the queue still
      -- grows: TIMELY's rule, a rising delay means too much is sent).
      local rising = control[6] and p95 > 1.1 * tonumber(control[6]) and since_cut >= settle / 3
      if rising and not (since_cut >= settle) then
        -- Inside the round trip the gradient would count the backlog
        -- twice: the second cut only brings admissions down to what the
        -- app completes (BBR's drain), if they are above it.
        if serving and value > math.max(adapt_floor, math.floor(0.9 * serving)) then
          new = math.max(adapt_floor, math.floor(0.9 * serving))
          -- The round trip still counts from the cut.
          reason = 'cut: ' .. why .. ', to what the app completes'
        else
          reason = 'hold: ' .. why .. ', the last cut is still showing'
        end
      elseif since_cut >= settle then
        local was = served
        served = value
        if serving and serving < value then
          -- Admitting more than the app serves: a queue is growing. The cut
          -- starts from what it serves, not from the value that overloaded
          -- it, so the queue drains (BBR's drain).
          served = serving
        end
        -- At least by BETA, as CUBIC cuts its window: a cut to where the
        -- app just keeps up leaves the queue it built standing.
        new = math.max(adapt_floor, math.min(value - 1, math.floor(math.min(g, BETA) * served)))
        if new == value then
          -- At the floor already: nothing to cut, and no new episode.
          reason = 'hold: ' .. why .. ', at the floor'
        else
          -- What it served stays the most measured in one episode of
          -- overload (BBR keeps the maximum delivery rate over a few round
          -- trips): a later cut, made while the backlog drains, measures
          -- the cut's low rate, not what the app can do.
          if after_cut and was then served = math.max(served, was) end
          reason = 'cut: ' .. why
          redis.call('HSET', h, 'cut_at', now, 'served', served, 'probes', 0)
        end
      else
        reason = 'hold: ' .. why .. ', the last cut is still showing'
      end
    elseif serving and keeping < DRAIN and shortfall >= math.sqrt(value_of[F + 1])
        and p95 > queueing
        and now - (tonumber(control[2]) or 0) >= settle / 3 and (since_cut >= settle or not after_cut)
        and since_eased >= settle and value > adapt_floor then
      -- A queue is forming: the app completes less than it is given (the
      -- expected throughput against the actual one: Vegas's sign of a
      -- queue, before its delay crosses a threshold), by more than chance
      -- makes of a few dozen requests (the spread of Poisson arrivals, the
      -- square root of their count), and the latency has used half the
      -- room between its base and the headroom. Come down to a little
      -- under what it completes before the target is crossed (BBR's drain,
      -- as a second cut does), once the last change has had a third of a
      -- round trip to show; after a cut or an ease, a whole one: inside
      -- it, the visitors admitted before it still come, and the queue is
      -- the one it was made for (the one-visitor ease of a creeping
      -- latency followed by this drain two seconds later went 17 -> 16 ->
      -- 12 in the simulated benchmark).
      new = math.max(adapt_floor, math.min(value - 1, math.floor(0.9 * serving)))
      reason = 'cut: a queue is forming (the app completes less than it is given)'
      -- Where it overloaded: what it completes (a raise stops under it).
      redis.call('HSET', h, 'cut_at', now, 'served', serving, 'probes', 0)
    elseif p95 > target_ms * HEADROOM and control[6] and p95 > tonumber(control[6])
        and now - (tonumber(control[2]) or 0) >= settle and value > adapt_floor then
      -- Near the target and still rising a round trip after the last
      -- change: a queue grows, slowly (a few percent too much fills a pool
      -- in tens of seconds, too little a shortfall to tell from chance).
      -- One visitor less, as Vegas takes one packet off when its queue
      -- estimate passes its bound, before the target is crossed and a
      -- whole cut is due; the app overloads here. An ease, not a cut: if
      -- the target is crossed next (the app's capacity fell), the cut
      -- comes whole and at once, as TCP's cut on a loss comes whatever
      -- Vegas did before (counted as a cut, a crossing right after it got
      -- a hold, then only the drain to what the app completes).
      new = value - 1
      reason = 'ease: near the target, a queue growing'
      redis.call('HSET', h, 'eased_at', now, 'served', value, 'probes', 0)
    elseif p95 > target_ms * HEADROOM then
      reason = 'hold: near the target'
      -- The knee is near: probes start small again.
      redis.call('HSET', h, 'probes', 0)
    elseif redis.call('ZCARD', KEYS[2]) == 0 then
      reason = 'hold: healthy, nobody waiting'
    elseif now - (tonumber(control[2]) or 0) < settle / 2
        or (now - (tonumber(control[2]) or 0) < settle and p95 >= target_ms / 2) then
      -- Far under the target, half the round trip shows enough; otherwise
      -- a whole one.
      reason = 'hold: healthy, the last change is still showing'
    elseif served and value >= math.floor(0.9 * served) and p95 > queueing then
      -- At or past where the app last overloaded, a probe is a bet that
      -- it has grown; a latency past halfway from its base to the headroom
      -- says it is busy at this rate already (a queue's latency), so the
      -- bet would lose: hold, as CUBIC holds near its last maximum.
      reason = 'hold: near where the app last overloaded, and busy'
      -- The knee is near: probes start small again.
      redis.call('HSET', h, 'probes', 0)
    else
      -- The step the latency leaves room for, x2 at most (TCP's slow
      -- start), +1 at least; near the target a step is a probe. From under
      -- 0.9 of where the app last overloaded, only up to there (slow start
      -- to its threshold, left on the latency as HyStart leaves it).
      new = math.max(value + 1, math.floor(value * raise_by(p95, base)))
      local threshold = served and math.floor(0.9 * served)
      if threshold and value < threshold then
        new = math.min(new, threshold)
      elseif served then
        -- From there on, a probe: a latency that stays flat until the knee
        -- (a pool of workers) says nothing of the room left. One visitor
        -- more (Vegas's additive step), then 2, 4, 8 ... with each probe
        -- in a row that did not overload (BBRv2 grows its probing up so:
        -- the app may have grown by far more than the last overload point,
        -- and a visitor at a time would take minutes to find it). A first
        -- probe of a quarter more (BBR's gain) went two or three visitors
        -- past a pool's knee at 10-16 a second. A cut, a p95 near the
        -- target or a look at a busy app starts the count again.
        local probes = tonumber(control[11]) or 0
        local step = 2 ^ probes
        new = math.min(new, value + step)
        redis.call('HSET', h, 'probes', math.min(probes + 1, 30)) -- at the ceiling, probes go on
      end
      if p95 < target_ms / 2 then
        reason = 'raise: far under the target, visitors waiting'
      else
        reason = 'raise: under the target, visitors waiting'
      end
      if adapt_ceiling > 0 then new = math.min(new, adapt_ceiling) end
      if new == value then reason = 'hold: at the ceiling' end
    end
  end
  if new ~= value then
    -- What comes next is judged on what the app does after the change: the
    -- measurements start again (a trickle after a cut would otherwise be
    -- read through the slow responses of before it).
    local fresh = {}
    for i = 1, F do
      fresh[#fresh + 1] = fields[i]
      fresh[#fresh + 1] = 0
      fresh[#fresh + 1] = 'p' .. fields[i]
      fresh[#fresh + 1] = 0
    end
    redis.call('HSET', h, unpack(fresh))
    redis.call('HSET', KEYS[5], field, new)
    redis.call('HDEL', KEYS[5], 'view_at', 'view') -- built for the old value (view.lua)
    redis.call('HSET', h, 'changed', reason, 'changed_at', now, 'changed_from', value)
    value = new
    moved() -- the estimates change with the value
  end
  redis.call('HSET', h, 'adapt_at', now, 'reason', reason, 'p95_ms', math.floor(p95),
    'first_byte_p95_ms', math.floor(first_p95), 'error_rate', string.format('%.4f', errors),
    'samples', math.floor(n))
end

save_state()
if forget > 0 then redis.call('PEXPIRE', h, forget) end
return {value, reason}
