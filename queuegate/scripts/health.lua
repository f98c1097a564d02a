-- health: one app process's report on the responses it forwarded for the
-- room since its previous report, and the room's admission controller. Runs
-- after advance. Every process reports about once a second while it serves
-- traffic; whichever report comes when a look is due makes it, so there is
-- no leader, and a process that stops reporting only stops adding data.
--
-- KEYS[6] qg:{room}:health  hash: the measurements (two windows: n, err,
--         w, e1..eB, f1..fB, st; the window before p-prefixed), the visit's
--         profile and the controller's state; <KEYS[6]>:admits, a zset of
--         the room's admissions so far ("ms:count" by ms), the last few
--         minutes of it
-- ARGV[4] responses, ARGV[5] errors among them (5xx, exceptions)
-- ARGV[6 .. 5+B]     responses per latency bucket, time to the response's end
-- ARGV[6+B .. 5+2B]  the same, time to the response's first byte
-- ARGV[6+2B .. 5+3B] requests still in flight, by their age so far
--                    (buckets: BOUNDS below, in ms; the last one: slower)
-- ARGV[6+3B]         requests started (forwarded) since the last report
-- ARGV[7+3B ..]      by the visit's age when the request started (AGES,
--                    in s; then one more for older, then one for requests
--                    whose visit is unknown: the app's other pages, sliding
--                    sessions), three numbers each: requests started,
--                    successful responses, and their time summed (ms)
--
-- The law, in four parts (docs/guides/health-law.md says why):
--
-- 1. The visit. Per room, faded over PROFILE_S: by the visit's age, how
--    many requests an admitted visitor makes a second (started, over the
--    visitor-seconds spent at that age: the admissions' record that
--    advance.lua writes) and what one costs (the least mean time of a
--    report's successful responses at that age, creeping up over
--    PROFILE_S: a queue's wait is not work; an age first seen in a queue
--    is read against the report's slowdown). Their product is the visit's
--    work by age, in ms a second.
-- 2. Capacity from evidence. `cap`: the most work a second the app
--    completed with its p95 and errors within target (what was only seen
--    fades over CAP_S). A reading within target never lowers it, nor does
--    one of an app given less than it completed (a drain); an overload
--    judged beyond chance does, to DRAIN x the work the app completed well
--    in it (failed responses are no work); errors over their maximum but
--    not beyond chance lower it by steps (graded), and while they are over
--    it over JUDGE_S no reading raises it. `limit` then says the
--    capacity is where the app overloaded. Work of no known visit of the
--    room is the app's background, and the room plans with cap less that.
-- 3. The rate the model allows. The visitors inside will still bring
--    committed(t) ms a second, t from now; a rate r admitted from now on
--    adds r x (the work of a visit's first t seconds). The rate is the most
--    for which that sum stays under the usable capacity at every t: an
--    admission counts at once as the load it will bring. Never above twice
--    the most the app was seen to serve within target over a visit (as
--    long as the oldest visitors seen, up to three visits' lengths),
--    never below the floor (the line always moves), lowered only under a
--    `limit`, the operator's pin and bounds over everything; changes of
--    less than DEADBAND are not made. Over the target beyond chance with
--    more work in flight than the app gets through within the goal at the
--    pace it completes (Little's law), the next look's worth of it is
--    taken off the usable capacity (BBR's drain), and the rate comes back
--    at the first look within target, without waiting for the lowering
--    to show. After another lowering the model raises again once it has
--    shown (a visit), after a cut once a settle has (its queue gone: the
--    model counts what the visitors inside will still bring).
-- 4. Probing for more. Within target with room under it (p95 under
--    HEADROOM x target, errors under half their maximum), visitors waiting
--    and the load of the rate admitted come, once the last change has
--    shown (a visit's length, at least `settle`; and one settle more after a
--    cut): cap grows x2 before the first overload, then by 1/8, 1/4, 1/2,
--    x2 with each probe in a row (BBR's probing), a step for each settle
--    its change took to show; by x2 once a probe since the last cut has
--    held with the p95 under UNLOADED x the least seen and no error over
--    JUDGE_S (no queue, no refusal: the app has grown). Probes past the
--    last overload start once in PAST_PEAK at most, and after a fall (an
--    overload no probe past the last one led to) PAST_PEAK after its cut.
-- An app down is not small: at the floor for a visit's length, completing
-- no more than the floor's visitors bring, most requests failing or none
-- answered, it holds at the floor; once within target again, the capacity
-- and last overload known before the outage's cuts are set back (no more
-- than the rate admitted then brings, nor the last overload less DRAIN).
-- A pause is not small either: an overload read with the app completing
-- under DRAIN x what it completed at the last two looks within target
-- (the last alone when the rate was raised while its load still came: a
-- load does not do that, an app given too much completes what it can),
-- and within target again within a settle of the cut, before it has shown
-- (the visitors inside still coming), was a pause (a collector's, a
-- checkpoint's), not a fall: the same evidence is set back, and the cut
-- before it (probes past the last overload wait from that one); its return
-- is a change that shows before a probe.
-- A target no rate can meet is named: at the floor for a visit's length,
-- completing no more than the floor's visitors bring, and its answers
-- still over the target (beyond chance), its errors within their maximum.
-- The room says "target out of reach: p95 at
-- minimal load N ms" and holds the p95 under OUT_OF_REACH x N instead of
-- the target, climbing from the floor by probes (its capacity and what
-- was served within target start again from what the app does there),
-- until the p95 has been under the target, or a fifth under N, for a
-- visit's length.
--
-- Judged "over the target": the responses over target_ms are more than 5 %
-- of them beyond chance (a one-sided binomial bound at Z), in the windows
-- or in counts faded over JUDGE_S; the same for errors against
-- max_errors. Few responses widen the bound: no cut on noise.
--
-- The value is the room's rate (visitors per interval) or, in a room
-- without a rate, its capacity; it is written where `configure` writes it,
-- so the line, the estimates and every process follow it at their next call.
--
-- Returns {value, reason}: the controlled value now, and the last decision.

-- Steps of a fifth or less from 100 ms to 1 s, where targets are: the
-- quantile falls in a bucket this narrow (read linearly within it).
local BOUNDS = {5, 10, 20, 30, 40, 50, 65, 80, 100, 120, 140, 160, 180, 200, 240, 280, 320, 360, 400, 450,
  500, 550, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 2000, 2500, 3000, 4000, 5000, 7500, 10000}
local B = #BOUNDS + 1
-- The visit's age buckets' upper ends (s); one more for older visits.
local AGES = {1, 2, 4, 8, 15, 30, 45, 60, 90, 120, 180, 240, 480}
local A = #AGES + 1
local INTERVAL = 1000     -- ms between looks at the figures
local MIN_SAMPLES = 3     -- fewer responses than this in the window is no evidence
local WINDOW = 1000       -- ms: figures cover the last one to two of these
local MAX_WINDOW = 10000  -- ms: a window holding fewer than MIN_SAMPLES lasts up to this
local QUANTILE = 0.95     -- the target is on the p95: 5 % of responses may be over it
local Z = 3.5             -- one-sided, about one false alarm in 4,000 looks (an hour of them): "beyond chance"
local PROFILE_S = 300     -- s: the visit's profile fades over this
local CAP_S = 600         -- s: capacity seen fades over this
local BACKGROUND_S = 10   -- s: the background's work a second fades over this
local DEADBAND = 0.1      -- the rate changes by a tenth or more (and one visitor), or not
local HEADROOM = 0.8      -- latency under this share of the target shows room to grow
local MIN_EXPOSURE = 5    -- visitor-seconds at an age before its figures count
local DRAIN = 0.9         -- after an overload, plan with this share of what the app completed
local JUDGE_S = 5         -- s: counts faded over this judge a mild, lasting overload
local ERROR_STEP = 0.3    -- errors over their maximum, not beyond chance: the most a graded step lowers
local LOWER_STEP = 0.5    -- short of a cut, one look lowers the rate to this share at most (graded: its own)
local QUEUED = 1.5        -- a report this much slower than the costs known shows a queue
local OUT_OF_REACH = 1.5  -- a target out of reach: the p95 is held under this x the p95 at minimal load
local PAST_PEAK = 60      -- s: probes past the last overload start once in this at most
local UNLOADED = 1.2      -- a p95 under this x the least seen shows no queue: no knee near
local LEAST_N = 20        -- responses a look needs for its p95 to count as the least seen

advance()

-- In a function of its own: the scripts before it hold most of the locals
-- one Lua function may have.
local function report_and_look()
local h = KEYS[6]
local admits = h .. ':admits'

-- Windows: the current one and the one before it (a sliding window, as
-- Hystrix and Envoy keep theirs); a window lasts WINDOW, or longer while it
-- holds fewer than MIN_SAMPLES responses. n responses, err errors, w their
-- work (ms, successful ones, at the profile's costs), e and f the latency
-- buckets, st requests started, o their work (ms, at the same costs).
local fields = {'n', 'err', 'w'}
for i = 1, B do fields[#fields + 1] = 'e' .. i end
for i = 1, B do fields[#fields + 1] = 'f' .. i end
fields[#fields + 1] = 'st'
fields[#fields + 1] = 'o'
local F = #fields
local E0 = 3 -- the end buckets start after n, err, w

-- The visit's profile: per age bucket (A of them, then one for unknown
-- visits), faded sums of requests started (s) and of visitor-seconds spent
-- at that age (x), and what a request costs there (k, ms).
local pnames = {'pt', 'bw', 'bt', 'cap', 'cap_at', 'proven', 'probe_at', 'probes', 'cut_at', 'overloaded',
  'probe_done', 'peak', 'limit', 'floor_since', 'healthy_value', 'out_of_reach', 'changed_at', 'adapt_at', 'reason',
  'past_at', 'changed_from', 'reach_since', 'down', 'pre_at', 'pre_cap', 'pre_peak', 'pre_limit', 'pre_value',
  'slowed', 'within_done', 'within_done_before', 'least_p95', 'draining', 'pre_probed', 'changed', 'pre_cut',
  'resumed_at'}
local P = #pnames
local asked = {'at', 'since', 'since_before'}
for i = 1, F do asked[#asked + 1] = fields[i] end
for i = 1, F do asked[#asked + 1] = 'p' .. fields[i] end
for i = 1, P do asked[#asked + 1] = pnames[i] end
for b = 1, A + 1 do
  for _, p in ipairs({'s', 'k', 'x'}) do asked[#asked + 1] = p .. b end
end
local got = redis.call('HMGET', h, unpack(asked))
local since = tonumber(got[2]) or now
local since_before = tonumber(got[3]) or since
local current, before = {}, {}
for i = 1, F do
  current[i] = tonumber(got[3 + i]) or 0
  before[i] = tonumber(got[3 + F + i]) or 0
end
local st = {}
for i = 1, P do st[pnames[i]] = got[3 + 2 * F + i] end
-- The latency goal: the target, or while it is out of reach, OUT_OF_REACH
-- x the p95 the app had at minimal load (the law then keeps the app from
-- getting slower than that, instead of starving the line for no gain).
local goal = target_ms
if target_ms > 0 and tonumber(st.out_of_reach) then
  goal = math.max(target_ms, OUT_OF_REACH * tonumber(st.out_of_reach))
end
local prof = {s = {}, k = {}, x = {}}
do
  local at = 3 + 2 * F + P
  for b = 1, A + 1 do
    for _, p in ipairs({'s', 'k', 'x'}) do
      at = at + 1
      prof[p][b] = tonumber(got[at]) or 0
    end
  end
end
local write = {}
local function put(name, value)
  write[#write + 1] = name
  write[#write + 1] = value
end

-- Admissions so far, and at a past moment (the zset's last entry by then).
local admitted_now = tonumber(redis.call('HGET', KEYS[5], 'admitted')) or 0
local function entry(found)
  if not found[1] then return nil end
  return tonumber(found[2]), tonumber(string.match(found[1], ':(%d+)$'))
end
-- (An entry is written at each admission (advance.lua), a tenth of a
-- second apart at most; before the record, the count it started from.)
local admits_from = tonumber(redis.call('HGET', h, 'admits_from')) or admitted_now
local function admitted_at(ms)
  if ms >= now then return admitted_now end
  local _, count = entry(redis.call('ZREVRANGEBYSCORE', admits, ms, '-inf', 'WITHSCORES', 'LIMIT', 0, 1))
  return count or admits_from
end
local horizon_s = math.max(AGES[#AGES] * 2, math.min(session / 1000, 3600))
local function lo_of(b) return AGES[b - 1] or 0 end
local function hi_of(b) return AGES[b] or horizon_s end
-- The visitors now in each age bucket.
local inside = {}
for b = 1, A do
  inside[b] = math.max(0, admitted_at(now - lo_of(b) * 1000) - admitted_at(now - hi_of(b) * 1000))
end

-- Fold this report into the profile (faded over PROFILE_S).
local profile_at = tonumber(st.pt) or now
local dt = math.max(0, now - profile_at) / 1000
local fade = math.exp(-dt / PROFILE_S)
local base_arg = 6 + 3 * B
-- A report without the visits' figures (a process of an older version, a
-- caller of Store.report that has none): its requests are of unknown
-- visits, at the mean of its latency buckets.
if ARGV[base_arg + 1] == nil then
  local ok = (tonumber(ARGV[4]) or 0) - (tonumber(ARGV[5]) or 0)
  local total, count = 0, 0
  for i = 1, B do
    local n = tonumber(ARGV[5 + i]) or 0
    local low, high = BOUNDS[i - 1] or 0, BOUNDS[i] or 2 * BOUNDS[#BOUNDS]
    total, count = total + n * (low + high) / 2, count + n
  end
  for b = 1, 3 * A do ARGV[base_arg + b] = 0 end
  ARGV[base_arg + 3 * A + 1] = tonumber(ARGV[6 + 3 * B]) or 0
  ARGV[base_arg + 3 * A + 2] = math.max(0, ok)
  ARGV[base_arg + 3 * A + 3] = count > 0 and math.max(0, ok) * total / count or 0
end
for b = 1, A + 1 do
  prof.s[b] = prof.s[b] * fade + (tonumber(ARGV[base_arg + 3 * b - 2]) or 0)
  if b <= A then prof.x[b] = prof.x[b] * fade + inside[b] * dt end
end
put('pt', now)

-- What a request costs at each age (ms): the least mean time of a report's
-- successful responses at that age, allowed to creep up over PROFILE_S
-- (an app that got slower for good); as BBR keeps the least round trip,
-- so that time spent waiting in a queue is not taken for work. An age's
-- first cost is read against the report's slowdown (its responses at ages
-- whose cost is known, over those costs) when that shows a queue: an age
-- first seen in an overload (visits stretched by a queue) would otherwise
-- cost its wait, and the visit grow by the queue it met. Before any, the
-- least of all ages.
local knew = {}
local slow_time, slow_work = 0, 0
for b = 1, A + 1 do
  knew[b] = prof.k[b] > 0 and prof.k[b] * math.exp(dt / PROFILE_S) or nil
  local ok = tonumber(ARGV[base_arg + 3 * b - 1]) or 0
  if knew[b] and ok > 0 then
    slow_time = slow_time + (tonumber(ARGV[base_arg + 3 * b]) or 0)
    slow_work = slow_work + ok * knew[b]
  end
end
-- (Costs are least means: a report is a little slower than them by chance;
-- under QUEUED x, the mean is taken as it is.)
local slowdown = slow_work > 0 and slow_time / slow_work or 1
if slowdown < QUEUED then slowdown = 1 end
local cost, least = {}, nil
for b = 1, A + 1 do
  local ok = tonumber(ARGV[base_arg + 3 * b - 1]) or 0
  local was = knew[b]
  if ok > 0 then
    local mean = (tonumber(ARGV[base_arg + 3 * b]) or 0) / ok
    was = was and math.min(was, mean) or mean / slowdown
  end
  cost[b] = was
  if was then
    put('k' .. b, was)
    least = least and math.min(least, was) or was
  end
end
for b = 1, A + 1 do cost[b] = cost[b] or least or 1 end
-- The visit's work by age (ms a second a visitor), where seen enough; and
-- the oldest age visitors have been seen at (with requests or not: a
-- heavy request may come later than any yet seen).
local work, seen_to = {}, 0
for b = 1, A do
  if prof.x[b] >= MIN_EXPOSURE then
    work[b] = prof.s[b] / prof.x[b] * cost[b]
    seen_to = hi_of(b)
  else
    work[b] = 0
  end
end
-- The work of this report, at those costs.
local reported_work, background_work, offered_work = 0, 0, 0
for b = 1, A + 1 do
  local w = (tonumber(ARGV[base_arg + 3 * b - 1]) or 0) * cost[b]
  reported_work = reported_work + w
  offered_work = offered_work + (tonumber(ARGV[base_arg + 3 * b - 2]) or 0) * cost[b]
  if b == A + 1 then background_work = w end
end
-- The background (requests of no visit of this room), ms a second.
local bw = (tonumber(st.bw) or 0) * math.exp(-math.max(0, now - (tonumber(st.bt) or now)) / 1000 / BACKGROUND_S)
  + background_work
put('bw', bw)
put('bt', now)
local background = bw / BACKGROUND_S

-- The windows (see above), this report added. The window that was current
-- is kept as the one before only if it began within two windows' length
-- (it cannot have, after a quiet spell: nothing forwarded, no report):
-- the first responses after a lull were judged with slow ones from
-- minutes before it (a p95 of 892 ms over 4 new responses of 1 ms, and
-- the rate cut to the floor).
if now - since >= MAX_WINDOW or (now - since >= WINDOW and current[1] >= MIN_SAMPLES) then
  before, current, since_before, since = current, {}, since, now
  for i = 1, F do current[i] = 0 end
  if now - since_before >= 2 * MAX_WINDOW then
    -- (And the windows' span starts now: over the lull, the first reports'
    -- work a second read 20 times too low, an overload's capacity too.)
    before, since_before = {}, now
    for i = 1, F do before[i] = 0 end
  end
end
local incoming = {}
for i = 1, F do incoming[i] = 0 end
incoming[1], incoming[2], incoming[3] = tonumber(ARGV[4]) or 0, tonumber(ARGV[5]) or 0, reported_work
for i = 1, 2 * B do incoming[E0 + i] = tonumber(ARGV[5 + i]) or 0 end
incoming[F - 1] = tonumber(ARGV[6 + 3 * B]) or 0
incoming[F] = offered_work
local both = {}
put('at', now)
put('since', since)
put('since_before', since_before)
for i = 1, F do
  current[i] = current[i] + incoming[i]
  both[i] = current[i] + before[i]
  put(fields[i], current[i])
  put('p' .. fields[i], before[i])
end
for b = 1, A + 1 do
  put('s' .. b, prof.s[b])
  if b <= A then put('x' .. b, prof.x[b]) end
end

-- The same responses in counts faded over JUDGE_S (every report adds).
local jn, jo, je = 0, 0, 0
local judge_fields = {'jn', 'jo', 'je', 'jt'}
do
  local was = redis.call('HMGET', h, unpack(judge_fields))
  local keep = math.exp(-math.max(0, now - (tonumber(was[4]) or now)) / 1000 / JUDGE_S)
  jn = (tonumber(was[1]) or 0) * keep + incoming[1]
  jo = (tonumber(was[2]) or 0) * keep -- the responses over target: added below
  je = (tonumber(was[3]) or 0) * keep + incoming[2]
end

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
-- How many of a histogram's responses are over ms (linear within a bucket).
local function over(counts, first, ms)
  local total = 0
  for i = 1, B do
    local low = BOUNDS[i - 1] or 0
    local high = BOUNDS[i] or 2 * BOUNDS[#BOUNDS]
    local count = counts[first + i - 1]
    if low >= ms then
      total = total + count
    elseif high > ms then
      total = total + count * (high - ms) / (high - low)
    end
  end
  return total
end
jo = jo + over(incoming, E0 + 1, goal > 0 and goal or math.huge)
put('jn', jn)
put('jo', jo)
put('je', je)
put('jt', now)

-- k of n over a share p, beyond chance (normal bound, continuity corrected).
local function beyond(k, n, p)
  if n <= 0 then return false end
  p = math.max(p, 0.001)
  return k - 0.5 > n * p + Z * math.sqrt(n * p * (1 - p))
end

-- The integral of the visit's work from age a to b (s): ms a visitor.
local function work_between(a, b)
  local total = 0
  for i = 1, A do
    local lo, hi = math.max(a, lo_of(i)), math.min(b, hi_of(i))
    if hi > lo then total = total + work[i] * (hi - lo) end
  end
  return total
end
local visit_work = work_between(0, horizon_s)
-- The age by which 95 % of a visit's work has come (read linearly
-- within its bucket).
local visit_s = 0
if visit_work > 0 then
  local so_far = 0
  for b = 1, A do
    local here = work[b] * (hi_of(b) - lo_of(b))
    if so_far + here >= 0.95 * visit_work then
      visit_s = lo_of(b) + (hi_of(b) - lo_of(b)) * (0.95 * visit_work - so_far) / here
      break
    end
    so_far = so_far + here
  end
end
local show_s = math.max(settle / 1000, visit_s + 1)
-- Probes are paced in `settle`s, not in probes: a probe whose change
-- takes `paced` of them to show (a visit longer than settle, its heavy
-- request late) moves the probes' ramp paced - 1 steps further than one
-- that takes one (the step at the last overload included), and a cut is
-- followed by a cruise of one settle once it has shown. (With visits
-- shorter than settle, nothing changes: the ramp was made for them.)
local paced = math.max(1, math.floor(show_s * 1000 / settle))

local field = controlled_field()
local value = field == 'rate' and rate or capacity
local unit_s = rate > 0 and per / 1000 or 1 -- the value's interval (s)
local reason = st.reason or ''

-- The rate the model allows (visitors a second) under `usable` ms a second
-- of work: the least over the moments t ahead of (usable - committed(t))
-- / (the first t seconds of a visit's work), and usable / a visit's work
-- once everybody inside has gone.
local function allowed(usable)
  local best = visit_work > 0 and usable / visit_work or math.huge
  local ts = AGES
  for _, t in ipairs(ts) do
    if t > horizon_s then break end
    local committed = 0
    for b = 1, A do
      if inside[b] > 0 then
        local lo, hi = lo_of(b), hi_of(b)
        committed = committed + inside[b] * work_between(lo + t, hi + t) / (hi - lo)
      end
    end
    local first = work_between(0, t)
    if committed >= usable then return 0 end
    if first > 0 then best = math.min(best, (usable - committed) / first) end
  end
  return best
end

-- The admissions' mean rate over the last `s` seconds (visitors a second).
-- (Over the record's length at most: before it, nobody is known to have come.)
local admits_since = tonumber(redis.call('HGET', h, 'admits_since')) or now
local function admitting(s)
  s = math.max(1, math.min(s, (now - admits_since) / 1000))
  return (admitted_now - admitted_at(now - s * 1000)) / s
end

if target_ms > 0 and now - (tonumber(st.adapt_at) or 0) >= 0.9 * INTERVAL then
  -- Requests still in flight count at their age so far, which their
  -- latency is at least: a pile-up shows now, not when its slowest
  -- requests finish. They are this look's alone (never added to windows).
  local judged = {}
  for i = 1, B do judged[i] = both[E0 + i] + (tonumber(ARGV[5 + 2 * B + i]) or 0) end
  -- The evidence: the responses counted, and the requests in flight.
  local n = both[1]
  for i = 1, B do n = n + (tonumber(ARGV[5 + 2 * B + i]) or 0) end
  local p95 = quantile(judged, 1, QUANTILE)
  local completed = {}
  for i = 1, B do completed[i] = both[E0 + i] end
  local first_p95 = quantile(both, E0 + B + 1, QUANTILE)
  local responses, errors = both[1], both[2]
  local error_share = responses > 0 and errors / responses or 0
  -- The windows hold the reports made since since_before, each on the
  -- second or so before it was made.
  local span_s = (math.max(0, now - since_before) + INTERVAL) / 1000
  local done = both[3] / span_s -- work completed well, ms a second
  local offered = both[F] / span_s -- work of the requests started, ms a second
  -- The work in flight beyond what an app serving `done` within the goal
  -- holds (Little's law: done x goal): a queue, to be worked off before
  -- the rate admitted counts for anything. (The requests in flight of the
  -- reporting process, at the mean cost of the windows' responses.)
  local queued = 0
  do
    local count, ok = 0, responses - errors
    for i = 1, B do count = count + (tonumber(ARGV[5 + 2 * B + i]) or 0) end
    if ok > 0 then queued = math.max(0, count * both[3] / ok - done * goal / 1000) end
  end
  -- Judged on the windows and, for an overload too mild to show in a
  -- second or two, on counts faded over JUDGE_S: more responses, a
  -- tighter bound.
  local over_now = over(judged, 1, goal)
  -- (The faded counts remember an overload for a few seconds: they judge
  -- only while the windows still show more than the share allowed.)
  local slow = beyond(over_now, n, 1 - QUANTILE)
    or (beyond(jo, jn, 1 - QUANTILE) and over_now > (1 - QUANTILE) * n)
  local failing = beyond(errors, responses, max_errors)
    or (beyond(je, jn, max_errors) and errors > max_errors * responses)
  local within = n >= MIN_SAMPLES and p95 <= goal and error_share <= max_errors
  local cap = tonumber(st.cap)
  local cap_at = tonumber(st.cap_at) or now
  -- What was only seen fades (the app may have shrunk since); where it
  -- overloaded stays until the next overload or probe says otherwise (a
  -- room running just under it would otherwise walk itself down).
  if cap and st.limit ~= '1' then cap = cap * math.exp(-math.max(0, now - cap_at) / 1000 / CAP_S) end
  local proven = tonumber(st.proven)
  local least_p95 = tonumber(st.least_p95)
  local waiting = redis.call('ZCARD', KEYS[2]) > 0
  local floor_since = tonumber(st.floor_since)
  if value <= adapt_floor then floor_since = floor_since or now else floor_since = nil end
  -- At minimal load: at the floor for a visit's length, the app doing no
  -- more than the floor's visitors bring (its background aside; not
  -- finishing a queue built before).
  local minimal = floor_since and now - floor_since >= show_s * 1000
    and (visit_work <= 0 or done - background <= 2 * math.max(1, adapt_floor / unit_s) * visit_work)
  local new = value
  local pinned = redis.call('HGET', KEYS[5], 'pinned')
  local why = string.format('p95 %d ms over the %d ms target', p95, goal)
  if failing and error_share > max_errors then
    why = string.format('error rate %.1f%% over %.1f%%', error_share * 100, max_errors * 100)
  end

  if pinned then
    reason = 'hold: pinned by the operator'
  elseif not line_moves then
    reason = 'hold: the line is not moving (' .. status .. ')'
  elseif n < MIN_SAMPLES then
    reason = 'hold: too few responses to judge'
  elseif (slow or failing) and minimal and errors >= 0.5 * responses then
    -- Most requests fail, or none is answered, at minimal load: the app is
    -- down, not overloaded. Its failures at any load say nothing of where
    -- it overloads: the capacity the cuts into the outage wrote is set back
    -- at the first look that finds it within target again, and the rate
    -- comes back with it (it stayed cut a minute and more, the outage's
    -- cuts taken for the app's size). Meanwhile the line moves at the floor.
    reason = string.format('hold: down at minimal load, %d of %d responses failed', errors, responses)
    put('down', 1)
  elseif slow and minimal and error_share <= max_errors
      and beyond(over(completed, 1, goal), responses, 1 - QUANTILE) then
    -- At the floor for a visit's length and its answers still over, beyond
    -- chance, the app doing no more than the floor's visitors bring: no
    -- rate meets the target. Holding the floor against it would starve the
    -- line for nothing: the law starts again from here against the goal,
    -- its probes climbing as the app shows room under it. (Not back at
    -- once to the last rate within target: after a fall, the tail of the
    -- queue the fall built reads as a slow app at minimal load, and that
    -- rate, from before the fall, flooded the app again at 2.4-5x what it
    -- now serves: an auditor's held-out backends, 12 namings in 80 runs.)
    -- (Requests in flight alone, or failures, are no p95 at minimal load:
    -- an app that holds every request and answers none is down, not slow.)
    reason = string.format('target out of reach: p95 at minimal load %d ms', p95)
    put('out_of_reach', math.floor(p95))
    floor_since = nil
    -- What the app was seen to do before is no evidence against this goal
    -- (and, after a fall, of an app that was faster): the capacity and
    -- what was served within target start again from what the app does
    -- at minimal load. (Kept, a probe doubled the old capacity at the next
    -- look: 1 to 21 a second into an app now serving 12.)
    put('cap', done)
    put('cap_at', now)
    put('proven', admitting(show_s))
    -- The overloads seen were against a target no rate meets: no evidence
    -- of where the app overloads. The law starts again, against the goal.
    redis.call('HDEL', h, 'peak', 'overloaded', 'cut_at', 'probes', 'resumed_at')
    redis.call('HDEL', h, 'down', 'slowed', 'pre_at', 'pre_cap', 'pre_peak', 'pre_limit', 'pre_value',
      'pre_probed', 'pre_cut')
    put('limit', 0)
    put('probe_done', 0) -- in the slow app's costs
  else
    if st.out_of_reach then
      -- Within the target again for a visit's length (as it was named): it
      -- is in reach. (One look under it, with the slow requests of a
      -- moment before still in flight, cut the line to the floor.)
      -- Or faster than it was at minimal load by a fifth (the app has
      -- got faster: the name is stale, the target is tried again).
      local since_within = tonumber(st.reach_since)
      if p95 > target_ms and p95 > HEADROOM * tonumber(st.out_of_reach) then
        redis.call('HDEL', h, 'reach_since')
      elseif not since_within then
        put('reach_since', now)
      elseif now - since_within >= show_s * 1000 then
        redis.call('HDEL', h, 'out_of_reach', 'reach_since')
        put('probe_done', 0) -- in the slow app's costs
        st.out_of_reach = nil
        goal = target_ms
      end
    end
    -- 2. Capacity from evidence. `limit`: the capacity is where the app
    -- overloaded (else only what it was seen to do, or a probe's guess).
    local limit = st.limit == '1'
    local probe_gain = nil -- this look's probe, if any
    local resumed = nil -- the rate before a pause this look is back from
    local graded = nil -- this look's graded step, if any
    if slow or failing then
      -- Over beyond chance: the app completes `done` well (successful
      -- responses' work) and no more; a little under it, so that the queue
      -- it built drains (BBR's drain). Errors grade the cut as latency
      -- does: the more that fail, the less `done` is.
      -- A capacity that was only seen or guessed is no limit: the first
      -- overload beyond chance sets one, whichever is lower.
      local lower = DRAIN * done
      -- Under a limit, a lower one only from a reading of an app offered
      -- at least the work it completed: one finishing a queue built before
      -- (a drain, admissions cut) completes what it is given, not what it
      -- can; that low reading never walks the capacity down.
      if not cap or not limit or (lower < cap and offered >= done) then
        if not st.pre_at then
          -- The evidence before this episode of cuts, set back if it turns
          -- out to be an outage (above).
          put('pre_at', now)
          put('pre_cap', cap or -1)
          put('pre_peak', st.peak or -1)
          put('pre_limit', st.limit or 0)
          put('pre_value', value)
          -- Whether probes past the last overload led to it (else the app
          -- overloaded under a load it had served: a fall).
          put('pre_probed', (tonumber(st.past_at) or 0) > (tonumber(st.cut_at) or 0) and 1 or 0)
          -- The last cut (-1: none), set back after a pause.
          put('pre_cut', st.cut_at or -1)
          -- Completing far less than at the last look within target: the
          -- app slowed (a pause, or a fall); it was not overloaded by load
          -- (an app given too much completes what it can). Told apart at
          -- the first look within target again.
          local before = tonumber(st.within_done)
          -- Where the rate was not raised while its load was still coming,
          -- the load is what the app served: the last two looks within
          -- target count (a pause that began late in the last one lowered
          -- what it completed). After a raise, the last alone (an app
          -- sharing its CPU completes less, for a second or two, under a
          -- probe's load).
          local raised = (tonumber(st.changed_from) or math.huge) < value
            and now - (tonumber(st.changed_at) or 0) < show_s * 1000
          if before and not raised then before = math.max(before, tonumber(st.within_done_before) or 0) end
          -- (2: with errors over their maximum too, as a backend that
          -- sheds load answers an overload: not a pause of its work.)
          if before and done < DRAIN * before then put('slowed', failing and 2 or 1) end
        end
        cap = lower
        -- Where the app overloaded: what it completed in the overload.
        put('peak', done)
        put('probe_done', 0) -- the load a probe expected is gone with it
        put('cut_at', now)
        put('probes', 0)
        put('overloaded', 1)
        limit = true
        reason = 'cut: ' .. why
      else
        reason = 'hold: ' .. why .. ', the last cut is still showing'
      end
    elseif cap and done > 0 and offered >= done and error_share > max_errors and je > max_errors * jn then
      -- Errors over their maximum, in the windows and over the last
      -- JUDGE_S, not (yet) beyond chance, the app given at least what it
      -- completes (not finishing a queue from before): graded, as a
      -- gradient. The capacity comes down by the square root of the share
      -- allowed over the share seen (at most ERROR_STEP at a time), once
      -- the last change has shown: a backend that sheds load with fast
      -- 503s settles where its errors stay under their maximum, instead of
      -- swinging between cuts.
      local last = math.max(tonumber(st.cut_at) or 0, tonumber(st.probe_at) or 0, tonumber(st.resumed_at) or 0)
      if now - last >= show_s * 1000 then
        -- (The load it was given when the errors came, not only what it
        -- completed of it: a room still climbing completes less.)
        local seen = math.min(cap, math.max(done, offered))
        -- (A step of the deadband at least: one that moves nothing is none.)
        graded = math.min(1 - DEADBAND, math.max(1 - ERROR_STEP, math.sqrt(max_errors * jn / je)))
        -- Where the app overloads is this step's level, not the one above
        -- it (that had errors): a probe past it waits as past any overload.
        local peak = seen * graded / DRAIN
        cap = DRAIN * peak
        limit = true
        put('cut_at', now)
        put('peak', peak)
        put('probes', 0)
        put('overloaded', 1)
        reason = string.format('lower: error rate %.1f%% over %.1f%% (graded)', je / jn * 100, max_errors * 100)
      else
        reason = string.format('hold: error rate %.1f%% over %.1f%%, the last change is still showing',
          je / jn * 100, max_errors * 100)
      end
    elseif within then
      if st.pre_at or st.down then
        -- (Slowed, and within target again within a settle of the cut,
        -- before it has shown: the app serves the load it slowed under, the
        -- visitors inside still coming: a pause, not a fall. Not within a
        -- visit: with long visits a fall's queue, drained at the floor, was
        -- within target again 58 s after its cut.)
        local paused = st.slowed and st.pre_at and now - tonumber(st.pre_at) < math.min(show_s * 1000, settle)
        local set_back = st.pre_at and (st.down or paused) and (tonumber(st.pre_cap) or -1) >= 0
        if st.pre_at and not set_back and st.pre_probed == '0' and st.past_at then
          -- A fall (an overload no probe past the last one led to) is where
          -- the app overloads now, as much as a failed probe's: probes past
          -- it wait PAST_PEAK from its cut, not from probes made before it
          -- (they came half a minute after a fall, and failed: the app had
          -- not grown back). (Before any probe past, the minute runs from
          -- the last cut already.)
          st.past_at = st.cut_at
          put('past_at', st.cut_at)
        end
        if set_back then
          -- Back from an outage: the capacity and the overload known before
          -- it; no more than the rate admitted then brings, nor than where
          -- the app last overloaded, less the drain (a capacity a probe was
          -- still trying is no evidence of room), faded over the outage as
          -- a capacity seen fades.
          local was = tonumber(st.pre_cap)
          if st.pre_limit ~= '1' then
            was = was * math.exp(-math.max(0, now - tonumber(st.pre_at)) / 1000 / CAP_S)
          end
          if visit_work > 0 then was = math.min(was, (tonumber(st.pre_value) or 0) / unit_s * visit_work) end
          if (tonumber(st.pre_peak) or -1) >= 0 then was = math.min(was, DRAIN * tonumber(st.pre_peak)) end
          cap = math.max(cap or 0, was)
          limit = st.pre_limit == '1'
          st.peak = (tonumber(st.pre_peak) or -1) >= 0 and st.pre_peak or nil
          if st.peak then put('peak', st.peak) else redis.call('HDEL', h, 'peak') end
          -- A pause, not a fall: the app serves again what it served
          -- before it, within target, so the rate of the last look within
          -- target before it is no guess (a stall of a second every half
          -- minute cut the rate to the floor and the model took half a
          -- minute to climb back). Not a probe's rate made just before the
          -- pause, whose load had yet to show; nor after errors (a backend
          -- shedding load fails fast: its work did not stop).
          if paused and not st.down and st.slowed == '1' then
            resumed = math.min(tonumber(st.pre_value) or 0, tonumber(st.healthy_value) or 0)
            -- Nor was its cut one: probes past the last overload wait from
            -- the cut before it (a stall every 15-45 s restarted the minute
            -- they wait at each, and the room never probed past an overload
            -- read in a pause: 0.3 of the best fixed rate for two minutes).
            -- Its return is a change, though: it shows before a probe, and
            -- no probe made before it has held (one the pause cut short,
            -- taken for held, doubled the rate to 2.4x the best fixed).
            st.resumed_at = tostring(now)
            put('resumed_at', now)
            local cut = tonumber(st.pre_cut) or -1
            if cut >= 0 then
              st.cut_at = tostring(cut)
              put('cut_at', cut)
            else
              st.cut_at = nil
              redis.call('HDEL', h, 'cut_at')
            end
          end
        end
        -- Whether or not it was an outage, the episode is over: a down
        -- mark left behind would set back, at a later overload's first
        -- look within target, what that overload taught.
        redis.call('HDEL', h, 'down', 'slowed', 'pre_at', 'pre_cap', 'pre_peak', 'pre_limit', 'pre_value',
      'pre_probed', 'pre_cut')
      end
      -- A reading raises the capacity only with the errors within their
      -- maximum over the last JUDGE_S too: a second or two of a few dozen
      -- responses with no 503 in them is no evidence that a backend which
      -- sheds load serves that much (the reading just after a graded step,
      -- of the load before it, put the capacity back over the step, and
      -- the model raised the rate into the errors again: a saw-tooth).
      if not cap or je <= max_errors * jn then cap = math.max(cap or 0, done) end
      put('healthy_value', value)
      if st.within_done then put('within_done_before', st.within_done) end
      put('within_done', done)
      -- The least p95 seen within target (of enough responses): the app's
      -- p95 at minimal load, a queue's wait aside. (It never creeps up: an
      -- app that got slower for good only loses the doubling below.)
      if n >= LEAST_N and (not least_p95 or p95 < least_p95) then
        least_p95 = p95
        put('least_p95', p95)
      end
      -- What the app was seen to serve over a whole visit within target.
      -- Over the visit as the profile has it, and longer while older
      -- visitors are seen (a heavy request may come late), up to three.
      local served = admitting(math.max(show_s, math.min(seen_to, 3 * show_s)))
      proven = math.max((proven or 0) * math.exp(-1 / CAP_S), served)
      put('proven', proven)
      -- 4. Probing: visitors waiting, the app doing most of what the
      -- capacity says, the last change shown, the room old enough (its
      -- first admissions are a change too: their load has yet to come).
      local last = math.max(tonumber(st.cut_at) or 0, tonumber(st.probe_at) or 0, admits_since,
        tonumber(st.resumed_at) or 0)
      if not waiting then
        reason = 'hold: within target, nobody waiting'
      elseif done < 0.8 * (visit_work > 0 and math.min(cap, value / unit_s * visit_work)
          or (tonumber(st.probe_done) or 0)) then
        -- The load of the rate admitted has not all come yet.
        reason = 'hold: within target, the load of the rate admitted still coming'
      elseif now - last < show_s * 1000
          or now - (tonumber(st.cut_at) or 0) < show_s * 1000 + settle then
        reason = 'hold: within target, the last change is still showing'
      elseif tonumber(st.peak) and cap >= DRAIN * tonumber(st.peak)
          and (tonumber(st.past_at) or 0) <= (tonumber(st.cut_at) or 0)
          and now - (tonumber(st.past_at) or tonumber(st.cut_at) or 0) < PAST_PEAK * 1000
          then
        -- At where the app overloaded last: probes past it start once in
        -- PAST_PEAK at most, counted from the start of the last ones that
        -- ended in a cut (probes that overload are two turns of the rate),
        -- or from the last cut where none did (a fall: above).
        reason = 'hold: within target, at the last overload'
      elseif p95 > HEADROOM * goal or error_share > max_errors / 2
          or je > max_errors / 2 * jn then
        -- Within target, but with no room to show, in this look or over the
        -- last JUDGE_S (one quiet second of a backend that sheds load is no
        -- room): a probe would cross it.
        reason = 'hold: near the target'
      else
        local gain
        local peak = tonumber(st.peak)
        if peak and cap < DRAIN * peak then
          -- Towards where the app overloaded last, less the drain (it was
          -- seen to complete that much, but the app may have shrunk since):
          -- a quarter more at a time.
          gain = math.min(1.25, DRAIN * peak / cap)
        elseif peak and cap < peak then
          -- At the last overload: a small step, and no more in a row
          -- until past it (the app has grown). Paced, it is the ramp's
          -- first step, and the probe past it goes as many further.
          gain = 1.125
          if paced > 1 then put('probes', math.min(paced - 1, 3)) end
        elseif st.overloaded then
          local probes = tonumber(st.probes) or 0
          gain = 1 + 0.125 * 2 ^ probes
          -- A probe since the last cut held, and the app shows no sign of
          -- load: its p95 still where it is at minimal load (no queue), no
          -- error over the last JUDGE_S (no refusal). It has grown past its
          -- last overload (a pool whose capacity grew 3-5x: the ramp's 1/8,
          -- 1/8, 1/4, 1/2 took 4 settles to double the rate): the next step
          -- doubles. An overload read a little low shows a queue here (the
          -- app at 0.9 of its capacity), and the ramp goes on.
          if least_p95 and p95 <= UNLOADED * least_p95 and errors == 0 and je < 0.5
              and (tonumber(st.probe_at) or 0) > math.max(tonumber(st.cut_at) or 0, tonumber(st.resumed_at) or 0) then
            gain = 2
          end
          put('probes', math.min(probes + paced, 3))
        else
          gain = p95 < HEADROOM * goal / 2 and 2 or 1.25
        end
        gain = math.min(2, gain)
        if peak and cap >= DRAIN * peak and (tonumber(st.past_at) or 0) <= (tonumber(st.cut_at) or 0) then
          put('past_at', now) -- the first probe past the last overload since it
        end
        cap = math.max(cap, done) * gain
        probe_gain = gain
        limit = false -- a guess now, until an overload says otherwise
        put('probe_at', now)
        reason = string.format('raise: within target, visitors waiting (capacity x%.2f)', gain)
      end
    else
      reason = 'hold: ' .. (p95 > goal and why or 'near the target') .. ', not beyond chance'
    end
    -- 3. The rate the model allows.
    if cap then
      -- Work of no known visit is the app's background only beside the
      -- room's own visits; with none known, it is all the room's.
      local usable = math.max(0, cap - (visit_work > 0 and background or 0))
      -- Over the target with a queue in flight (BBR's drain): the queue is
      -- worked off within the next look, the admissions making room for
      -- it, and the rate comes back as soon as it is gone (below).
      local drain = limit and (slow or failing) and queued > 0
      if drain then usable = math.max(0, usable - queued * 1000 / INTERVAL) end
      local r
      if visit_work > 0 then
        r = allowed(usable)
      else
        -- No visit seen yet (or none the gate can tell: sliding sessions):
        -- in proportion, at the rate admitted over the last visit.
        -- Only an overload's capacity or a probe moves it: a load that
        -- does not follow the rate (a trickle) must not ratchet it up.
        -- (Lowered in proportion under a limit; raised by probes alone:
        -- a load that lags the rate would read as room to grow.)
        local at = value / unit_s
        if limit and done > 0 and usable < done then
          r = at * usable / done
        else
          r = at * (probe_gain or 1)
        end
      end
      local bound = proven and 2 * math.max(proven, adapt_floor / unit_s)
      if bound and r > bound then
        if math.floor(bound * unit_s) <= value and math.floor(r * unit_s) > value
            and string.sub(reason, 1, 4) == 'hold' then
          reason = 'hold: at twice the most the app was seen to serve within target'
        end
        r = bound
      end
      local want
      if rate > 0 then
        want = math.floor(r * unit_s)
      else
        -- A room of places: visitors inside (and leaving at the rate
        -- admitted) in proportion.
        local at = admitting(show_s)
        want = at > 0 and math.floor(value * r / at) or value
      end
      -- A drain worked off, the app within target: the rate the capacity
      -- allows comes back at once (the lowering was the queue's, not the
      -- capacity's: waiting for it to show would leave the app idle).
      local drained = st.draining and within and not drain
      -- After a lowering, the model raises again once it has shown (a
      -- visit), but after a drain worked off (above), and after a cut once
      -- a settle has: the model already counts the load the visitors
      -- inside will still bring, and what a settle shows is the overload's
      -- queue gone. (With long visits, a room cut at the end of a fall
      -- held the floor for a visit, 60-90 s, where the model allowed the
      -- capacity's rate 6 s after the cut. Asking room under the target
      -- too, as a probe does, was tried: a cold start's worst seed 0.76 ->
      -- 0.89 of the best fixed rate, the delayed visits' 1-2 points worse.)
      local since_change = now - (tonumber(st.changed_at) or 0)
      local lowered = (tonumber(st.changed_from) or 0) > value and since_change < show_s * 1000
        and not drained
        and not (want > value and string.sub(st.changed or '', 1, 4) == 'cut:' and since_change >= settle)
      if want < value and string.sub(reason, 1, 4) ~= 'cut:' and not drain then
        -- Short of an overload beyond chance, one look lowers the rate by
        -- what its evidence asks at most: a graded step's share, or half
        -- (the visitors inside); and a lowering shows before the next (the
        -- model alone sent the rate to the floor after each graded step,
        -- the visitors admitted a second before being more than the
        -- lowered capacity, and back a second later).
        want = lowered and value or math.max(want, math.floor(value * (graded or LOWER_STEP)))
      end
      want = math.max(adapt_floor, want)
      -- A probe moves the rate by a visitor at least, deadband or not.
      local probing = probe_gain and want >= value
      if probing then want = math.max(want, value + 1) end
      if adapt_ceiling > 0 then want = math.min(want, adapt_ceiling) end
      if want < value and not limit then
        -- The capacity is only what the app was seen to do: no evidence
        -- that the rate is too high.
        new = value
      elseif want < value and (want <= value * (1 - DEADBAND) or want == adapt_floor) then
        new = want
      elseif want > value and (probing or (within and want >= value * (1 + DEADBAND) and want >= value + 1
          and not lowered)) then
        -- Only a look that found the app within target raises (a cut, or a
        -- p95 over the target not yet beyond chance, never does); after the
        -- rate was lowered, once that has shown (the model alone lowered
        -- and raised it again a second later, turn after turn).
        new = want
      end
      if resumed and resumed > new then
        new = adapt_ceiling > 0 and math.min(resumed, adapt_ceiling) or resumed
        reason = 'raise: within target again after a pause, back to the rate before it'
      end
      if drain and new < value then
        put('draining', 1)
      elseif st.draining and (drained or not limit) then
        redis.call('HDEL', h, 'draining')
      end
      if probe_gain then
        -- Without a model of the visit, the load the probe's rate should
        -- bring: the next probe waits for it.
        put('probe_done', done * math.max(new, value) / value)
      end
      put('cap', cap)
      put('cap_at', now)
      put('limit', limit and 1 or 0)
    end
  end
  if not pinned then
    -- The bounds win over any evidence, the pin alone over them: a rate
    -- from code, or from before the operator moved a bound, comes within
    -- them at the next look (it stayed over a ceiling while nothing
    -- showed the app overloaded).
    local bounded = math.max(adapt_floor, new)
    if adapt_ceiling > 0 then bounded = math.min(bounded, adapt_ceiling) end
    if bounded < new then
      reason = string.format('lower: to the ceiling, %d', bounded)
    elseif bounded > new then
      reason = string.format('raise: to the floor, %d', bounded)
    end
    new = bounded
  end
  if floor_since then put('floor_since', floor_since) else redis.call('HDEL', h, 'floor_since') end
  if new ~= value then
    if new < value and string.sub(reason, 1, 4) ~= 'cut:' and string.sub(reason, 1, 6) ~= 'target'
        and string.sub(reason, 1, 5) ~= 'lower' then
      reason = 'lower: the visitors inside will bring more than the app can serve'
    elseif new > value and string.sub(reason, 1, 5) ~= 'raise' and string.sub(reason, 1, 6) ~= 'target' then
      reason = 'raise: what the visitors inside will bring leaves room'
    end
    -- (`held`: the value is the controller's, not an operator's; it goes
    -- with the target from code: advance.lua.)
    redis.call('HSET', KEYS[5], field, new, 'held', field)
    redis.call('HDEL', KEYS[5], 'view_at', 'view') -- built for the old value (view.lua)
    put('changed', reason)
    put('changed_at', now)
    put('changed_from', value)
    value = new
    moved() -- the estimates change with the value
  end
  if st.out_of_reach and string.sub(reason, 1, 6) ~= 'target' then
    -- Said first: `list` and the back office show it before the decision.
    reason = string.format('target out of reach: p95 at minimal load %s ms, held under %d ms; %s',
      st.out_of_reach, goal, reason)
  end
  put('adapt_at', now)
  put('reason', reason)
  put('p95_ms', math.floor(p95))
  put('first_byte_p95_ms', math.floor(first_p95))
  put('error_rate', string.format('%.4f', error_share))
  put('samples', math.floor(n))
  put('visit_s', visit_s)
  put('visit_work_ms', math.floor(visit_work))
  put('capacity_ms', math.floor(cap or 0))
  put('background_ms', math.floor(background))
  -- The admissions' record, as far back as visits go.
  redis.call('ZREMRANGEBYSCORE', admits, '-inf', now - horizon_s * 1000 - 2000)
end
redis.call('HSET', h, unpack(write))
if forget > 0 then
  redis.call('PEXPIRE', h, forget)
  redis.call('PEXPIRE', admits, forget)
end
return value, reason
end

local value, reason = report_and_look()
save_state()
return {value, reason}
