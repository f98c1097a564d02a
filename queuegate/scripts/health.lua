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
-- start) and slowly near the value that last hurt (as CUBIC plateaus near
-- its last maximum). The round trip is the room's `settle`: a visitor
-- admitted now makes requests for a while, and the measurements fade over
-- TAU. Every INTERVAL the figures are brought up to date; the value changes
-- only with enough responses measured (MIN_SAMPLES), the line moving (open
-- or queue_all) and the operator not pinning it:
--   g = clamp(target / p95, 0.5, 1), lowered further, to the same floor, in
--       proportion when the error rate is over its maximum;
--   g < 1, `settle` after the last decrease: value = max(floor, value * g),
--       and the value before it is remembered as the one that hurt;
--   g = 1, `settle` after the last change, visitors waiting (the value is
--       what holds them back) and p95 under HEADROOM x target:
--         p95 under half the target, and 1.5 x value below 0.9 x the value
--         that hurt (if any): value = 1.5 x value               (slow start)
--         else value + sqrt(value), or + 1 from 0.8 x the value that hurt;
--         passing the value that hurt without harm forgets it;
--       never above the ceiling.
--   Otherwise the value holds: no evidence, no change.
-- The value is the room's rate (visitors per interval) or, in a room without
-- a rate, its capacity; it is written where `configure` writes it, so the
-- line, the estimates and every process follow it at their next call.
--
-- Returns {value, reason}: the controlled value now, and the last decision.

local BOUNDS = {5, 10, 20, 35, 50, 75, 100, 150, 200, 300, 500, 750, 1000, 2000, 5000}
local B = #BOUNDS + 1
local TAU = 2500        -- ms: measurements fade with this time constant
local INTERVAL = 1000   -- ms between looks at the figures
local MIN_SAMPLES = 20  -- fewer (faded) responses than this is no evidence
local HEADROOM = 0.9    -- raise only while the p95 is under this share of the target

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
local control = redis.call('HMGET', h, 'adapt_at', 'changed_at', 'reason', 'cut_at', 'hurt')
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
    g = math.max(0.5, g)
    local hurt = tonumber(control[5])
    if g < 1 then
      if now - (tonumber(control[4]) or 0) >= settle then
        new = math.max(adapt_floor, math.floor(value * g))
        reason = 'cut: ' .. why
        redis.call('HSET', h, 'cut_at', now, 'hurt', value)
      else
        reason = 'hold: ' .. why .. ', the last cut is still showing'
      end
    elseif p95 > target_ms * HEADROOM then
      reason = 'hold: near the target'
    elseif redis.call('ZCARD', KEYS[2]) == 0 then
      reason = 'hold: healthy, nobody waiting'
    elseif now - (tonumber(control[2]) or 0) < settle then
      reason = 'hold: healthy, the last change is still showing'
    else
      local fast = math.max(value + 1, math.floor(value * 1.5))
      if p95 < target_ms / 2 and (not hurt or fast < 0.9 * hurt) then
        new = fast
        reason = 'raise: far under the target, visitors waiting'
      else
        local step = math.max(1, math.floor(math.sqrt(value)))
        if hurt and value >= 0.8 * hurt then step = 1 end
        new = value + step
        reason = 'raise: under the target, visitors waiting'
      end
      if adapt_ceiling > 0 then new = math.min(new, adapt_ceiling) end
      if new == value then reason = 'hold: at the ceiling' end
      if hurt and new > hurt then redis.call('HDEL', h, 'hurt') end
    end
  end
  if new ~= value then
    redis.call('HSET', KEYS[5], field, new)
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
