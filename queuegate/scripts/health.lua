-- health: one app process's report on the responses it forwarded for the
-- room since its previous report, and the room's admission controller. Runs
-- after advance. Every process reports about once a second while it serves
-- traffic; whichever report comes when a decision is due makes it, so there
-- is no leader, and a process that stops reporting only stops adding data.
--
-- KEYS[6] qg:{room}:health  hash: the room's measurements, faded over time
--         (n, err, e1..eB, f1..fB, at) and the controller's state
-- ARGV[4] responses, ARGV[5] errors among them (5xx, exceptions)
-- ARGV[6 .. 5+B]     responses per latency bucket, time to the response's end
-- ARGV[6+B .. 5+2B]  the same, time to the response's first byte
--                    (buckets: BOUNDS below, in ms; the last one: slower)
--
-- The law (the README explains the choice): the gradient of Netflix's
-- concurrency-limits (Gradient2) and Envoy's adaptive concurrency filter,
-- against a latency target instead of a measured baseline, applied the way
-- TCP applies its window: at most one decrease per round trip, increases
-- only after the last change has shown, fast while far from trouble (slow
-- start) and slowly near where the app last overloaded (as CUBIC plateaus
-- near its last maximum), and cuts that start from what the app actually
-- served while overloaded (BBR's delivery rate). The round trip is the
-- room's `settle`: a visitor admitted now makes requests for a while. The
-- measurements fade over TAU and start again at each change.
--
-- Every INTERVAL the figures are brought up to date; the value changes only
-- with enough responses measured (MIN_SAMPLES), the line moving (open or
-- queue_all) and the operator not pinning it:
--   g = clamp(target / p95, MIN_GRADIENT, 1), lowered further, to the same
--       floor, in proportion when the error rate is over its maximum;
--   g < 1, `settle` after the last cut, unless, within 3 x settle of it, the
--       p95 is still falling (by a twentieth since the last look) or the app
--       serves a tenth more than the value (either way what queued before is
--       draining):
--         value = g x min(value, served), where `served` is what the app
--         serves now, in visitors: its responses a second since the last
--         change over the responses per admitted visitor (both faded over
--         TAU_LONG) (BBR's delivery rate: the cut drains the queue);
--       at least 1 less, never under the floor; `served` is remembered;
--   g = 1, p95 under HEADROOM x target, visitors waiting (the value is what
--       holds them back), `settle` after the last change (half of it in slow
--       start):
--         below 0.9 x the remembered `served`: back there, at most doubling;
--         nothing remembered and p95 under half the target, or not an
--         eighth above where the last raise found it: x 1.5 (slow start,
--         HyStart's exit rule); nothing remembered: + sqrt(value); else + 1
--         (probing past the last overload); passing `served` forgets it
--         (the app got faster); never above the ceiling.
--   Otherwise the value holds: no evidence, no change.
-- The value is the room's rate (visitors per interval) or, in a room without
-- a rate, its capacity; it is written where `configure` writes it, so the
-- line, the estimates and every process follow it at their next call.
--
-- Returns {value, reason}: the controlled value now, and the last decision.

local BOUNDS = {5, 10, 20, 35, 50, 75, 100, 150, 200, 300, 500, 750, 1000, 2000, 5000}
local B = #BOUNDS + 1
local TAU = 2500        -- ms: measurements fade with this time constant
local TAU_LONG = 60000  -- ms: responses per admitted visitor fade with this one
local INTERVAL = 1000   -- ms between looks at the figures
local MIN_SAMPLES = 5   -- fewer (faded) responses than this is no evidence
local HEADROOM = 0.9    -- raise only while the p95 is under this share of the target
local MIN_GRADIENT = 0.25 -- the deepest single cut: to a quarter

advance()

local h = KEYS[6]
local fields = {'at', 'n', 'err'}
for i = 1, B do fields[#fields + 1] = 'e' .. i end
for i = 1, B do fields[#fields + 1] = 'f' .. i end
local got = redis.call('HMGET', h, unpack(fields))
local fade = 1
if got[1] then fade = math.exp(-math.max(0, now - tonumber(got[1])) / TAU) end
local value_of = {}
local write = {'at', now}
for i = 2, #fields do
  local v = (tonumber(got[i]) or 0) * fade + (tonumber(ARGV[i + 2]) or 0)
  value_of[i] = v
  write[#write + 1] = fields[i]
  write[#write + 1] = string.format('%.4f', v)
end
-- Responses per admitted visitor, from both counts faded over a minute
-- (long enough that the time between an admission and its requests
-- averages out): it turns the responses the app completes into the
-- visitors it serves.
local admitted = tonumber(redis.call('HGET', KEYS[5], 'admitted')) or 0
local long = redis.call('HMGET', h, 'n_long', 'adm_long', 'adm_seen', 'raw', 'since')
local fade_long = 1
if got[1] then fade_long = math.exp(-math.max(0, now - tonumber(got[1])) / TAU_LONG) end
local n_long = (tonumber(long[1]) or 0) * fade_long + (tonumber(ARGV[4]) or 0)
local adm_long = (tonumber(long[2]) or 0) * fade_long + math.max(0, admitted - (tonumber(long[3]) or admitted))
local rpv = nil
if adm_long >= 1 then rpv = n_long / adm_long end
-- Responses since the last change, not faded: the rate the app completes.
local raw = (tonumber(long[4]) or 0) + (tonumber(ARGV[4]) or 0)
local since = tonumber(long[5]) or now
for _, pair in ipairs({{'n_long', string.format('%.4f', n_long)}, {'adm_long', string.format('%.4f', adm_long)},
    {'adm_seen', admitted}, {'raw', raw}, {'since', since}}) do
  write[#write + 1] = pair[1]
  write[#write + 1] = pair[2]
end
redis.call('HSET', h, unpack(write))

-- The q-quantile of a faded histogram whose first bucket is value_of[first]:
-- linear within the bucket it falls in (the last bucket reads as 2x its start).
local function quantile(first, q)
  local total = 0
  for i = 0, B - 1 do total = total + value_of[first + i] end
  if total <= 0 then return 0 end
  local want, seen = q * total, 0
  for i = 1, B do
    local count = value_of[first + i - 1]
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
  'raise_p95')
local reason = control[3] or ''

if target_ms > 0 and now - (tonumber(control[1]) or 0) >= INTERVAL then
  local n = value_of[2]
  local p95 = quantile(4, 0.95)
  local first_p95 = quantile(4 + B, 0.95)
  local errors = 0
  if n > 0 then errors = value_of[3] / n end
  local new = value
  local pinned = redis.call('HGET', KEYS[5], 'pinned')
  if pinned then
    reason = 'hold: pinned by the operator'
  elseif not line_moves then
    reason = 'hold: the line is not moving (' .. status .. ')'
  elseif n < MIN_SAMPLES then
    reason = 'hold: too few responses to judge'
  else
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
    -- What the app completes now, in visitors (BBR's delivery rate): while
    -- a queue stands, this is what it can serve.
    local serving = nil
    if field == 'rate' and rpv and rpv > 0 then
      serving = raw / math.max(1, (now - since) / 1000) / rpv * (per / 1000)
    end
    local since_cut = now - (tonumber(control[4]) or 0)
    -- Only while the last change was that cut (a raise since ends it).
    local after_cut = control[4] and tonumber(control[4]) >= (tonumber(control[2]) or 0)
      and since_cut < 3 * settle
    local falling = after_cut and control[6] and p95 < 0.95 * tonumber(control[6])
    if g < 1 and falling then
      -- Still over, but falling since the last look: what was queued
      -- before the cut is draining. Another cut now would overshoot (TIMELY
      -- and Vegas read the latency's trend for the same reason).
      reason = 'hold: ' .. why .. ', and falling'
    elseif g < 1 and after_cut and serving and serving >= 1.1 * value then
      -- Admitting less than the app serves: the queue is draining.
      reason = 'hold: ' .. why .. ', draining (admitting less than the app serves)'
    elseif g < 1 then
      if since_cut >= settle then
        served = value
        if serving and serving < value then
          -- Admitting more than the app serves: a queue is growing. The cut
          -- starts from what it serves, not from the value that overloaded
          -- it, so the queue drains (BBR's drain).
          served = serving
        end
        new = math.max(adapt_floor, math.min(value - 1, math.floor(g * served)))
        reason = 'cut: ' .. why
        redis.call('HSET', h, 'cut_at', now, 'served', served)
        redis.call('HDEL', h, 'raise_p95')
      else
        reason = 'hold: ' .. why .. ', the last cut is still showing'
      end
    elseif p95 > target_ms * HEADROOM then
      reason = 'hold: near the target'
    elseif redis.call('ZCARD', KEYS[2]) == 0 then
      reason = 'hold: healthy, nobody waiting'
    elseif now - (tonumber(control[2]) or 0) < settle / 2
        or (now - (tonumber(control[2]) or 0) < settle and served) then
      -- Far under the target with nothing remembered, half the round
      -- trip shows enough; otherwise a whole one.
      reason = 'hold: healthy, the last change is still showing'
    else
      if served and value < math.floor(0.9 * served) then
        new = math.min(math.floor(0.9 * served), math.max(value + 1, 2 * value))
        reason = 'raise: back toward 0.9 x what the app served when overloaded'
      elseif not served and (p95 < target_ms / 2 or (control[7] and p95 <= 1.125 * tonumber(control[7]))) then
        -- Slow start while far under the target, or while raising has not
        -- moved the latency (HyStart leaves slow start when the round trip
        -- grows by an eighth).
        new = math.max(value + 1, math.floor(value * 1.5))
        reason = 'raise: far under the target, visitors waiting'
      else
        new = value + 1
        if not served then new = value + math.max(1, math.floor(math.sqrt(value))) end
        reason = 'raise: under the target, visitors waiting'
      end
      if adapt_ceiling > 0 then new = math.min(new, adapt_ceiling) end
      if new == value then reason = 'hold: at the ceiling' end
      redis.call('HSET', h, 'raise_p95', p95)
      -- Healthy past what it served when overloaded: the app got faster.
      if served and new > served then redis.call('HDEL', h, 'served') end
    end
  end
  if new ~= value then
    -- What comes next is judged on what the app does after the change: the
    -- measurements start again (a trickle after a cut would otherwise be
    -- read through the slow responses of before it).
    local fresh = {'n', 0, 'err', 0, 'raw', 0, 'since', now}
    for i = 1, B do
      fresh[#fresh + 1] = 'e' .. i
      fresh[#fresh + 1] = 0
      fresh[#fresh + 1] = 'f' .. i
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
