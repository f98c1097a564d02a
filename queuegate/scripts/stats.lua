-- stats: the room's live numbers and effective settings. Runs after advance,
-- so the figures are current even when no visitor has asked for a while.
--
-- Returns a flat list of field, value pairs (values as strings):
--   now, waiting, active, tokens (-1 = no rate limit) and the bucket's
--   step (step_n more each step ms: advance.lua), per_minute and
--   ended_per_minute (measured admissions and session ends), eta_back_ms
--   (the wait at the back of the line, -1 = unknown; in a lottery, the
--   median wait),
--   the counters admitted, joined, abandoned, expired, released, left,
--   drained, limited (new places refused by the client limit), the settings
--   (see advance.lua), unlimited (1: an open room whose rate and capacity are
--   both 0, no limit, lets everyone in; configure.lua refuses to make one,
--   a deploy under a run-time value can), prequeue (1 before a scheduled
--   opening), draws (the lottery's draws so far: a room that drew has a
--   seed to publish, whatever its method is now), seed_sha256 (the
--   published hash of the lottery's seed), and
--   the admission controller's figures (KEYS[6], see health.lua): pinned,
--   p95_ms and first_byte_p95_ms (-1 = none yet), error_rate, samples,
--   health_at (when they were read: the last look, made while responses are
--   reported; 0 = never), health_reason (its last decision), health_changed and _at (why and when
--   it last changed the value), target_in_code (1: the room has a target in
--   code, so one set at run time acts; target_ms 0 then means switched off),
--   and where the settings come from: run_time (the settings an operator set
--   at run time, comma-separated in advance.lua's order, "" = none),
--   controlled (the setting the admission controller holds at run time, "" =
--   none: the rate, or the capacity of a room without one, unless pinned),
--   and code_<setting> for each of those: the code's value, as its app
--   processes last sent it (ARGV[2], kept as `defaults`; none when unknown).

advance()
settled = true
save_state()
local waiting = redis.call('ZCARD', KEYS[2])
local back = waiting
if method == 'random' then back = math.floor(waiting / 2) end
local counters = redis.call('HMGET', KEYS[5], 'admitted', 'joined', 'abandoned',
  'expired', 'released', 'left', 'drained', 'limited', 'seed_sha256')
local out = {
  'now', now, 'waiting', waiting, 'active', active_n,
  'tokens', rate > 0 and tokens or -1, 'step_n', step_n, 'step', step,
  'per_minute', string.format('%.3f', per_minute(win_count, win_prev, win_start)),
  'ended_per_minute', string.format('%.3f', per_minute(end_count, end_prev, win_start)),
  'eta_back_ms', eta(back),
  'rate', rate, 'per', per, 'capacity', capacity, 'session', session,
  'sliding', sliding and 1 or 0, 'abandon', abandon, 'max_step', max_step,
  'status', status, 'method', method, 'opens_at', opens_at, 'challenge', challenge,
  'draws', draws,
  'client_limit', client_limit, 'forget', forget,
  'unlimited', (rate == 0 and capacity == 0 and status == 'open') and 1 or 0,
  'prequeue', prequeue and 1 or 0,
}
local names = {'admitted', 'joined', 'abandoned', 'expired', 'released', 'left',
  'drained', 'limited', 'seed_sha256'}
for i, name in ipairs(names) do
  out[#out + 1] = name
  out[#out + 1] = counters[i] or (name == 'seed_sha256' and '' or 0)
end
local pinned = redis.call('HGET', KEYS[5], 'pinned')
-- A setting is set at run time when its field is in the state hash (read by
-- advance.lua into `conf`, after the defaults; nothing since has written
-- one): it wins over the code's (read_settings).
local controlled = ''
if target_ms > 0 and not pinned then controlled = controlled_field() end
-- (The one the controller holds is its from the start, written or not yet.)
local run_time, code = {}, {}
-- The code's value of each, and of the one the controller holds before it
-- first moves it (`show` said the code's value was not known).
for i, name in ipairs(SETTINGS) do
  if conf[i + 1] and name ~= controlled then run_time[#run_time + 1] = name end
  if (conf[i + 1] or name == controlled) and default[i] and default[i] ~= '' then
    code[#code + 1] = 'code_' .. name
    -- (A floor left to its default in code, stored as 0: the default it
    -- makes with the code's own pair and ceiling.)
    code[#code + 1] = (name == 'floor' and (tonumber(default[i]) or 0) <= 0)
      and default_floor(tonumber(default[1]) or 0, tonumber(default[2]) or 0, tonumber(default[17]) or 0)
      or default[i]
  end
end
-- (`held`: the setting whose value the controller wrote last, its still;
-- with the controller off, a value it left.)
for _, v in ipairs({'run_time', table.concat(run_time, ','), 'controlled', controlled, 'held', held or ''}) do
  out[#out + 1] = v
end
for _, v in ipairs(code) do out[#out + 1] = v end
-- The admission controller (health.lua), when the room has a target.
local health = redis.call('HMGET', KEYS[6], 'p95_ms', 'first_byte_p95_ms', 'error_rate',
  'samples', 'reason', 'changed', 'changed_at', 'out_of_reach', 'adapt_at')
-- The p95 at minimal load while the controller says no rate meets the target.
local out_of_reach = -1
if health[8] and string.sub(health[5] or '', 1, 19) == 'target out of reach' then
  out_of_reach = health[8]
end
local more = {
  'target_ms', target_ms, 'max_errors', max_errors, 'floor', adapt_floor, 'ceiling', adapt_ceiling,
  'settle', settle,
  -- (What a pin holds: the rate, or the capacity of a room without one.)
  'pinned', pinned and 1 or 0, 'pinned_setting', pinned and controlled_field() or '',
  'p95_ms', health[1] or -1, 'first_byte_p95_ms', health[2] or -1,
  'error_rate', health[3] or 0, 'samples', health[4] or 0, 'health_reason', health[5] or '',
  'health_changed', health[6] or '', 'health_changed_at', health[7] or 0, 'health_at', health[9] or 0,
  'out_of_reach_ms', out_of_reach,
  'target_in_code', (tonumber(default[14]) or 0) > 0 and 1 or 0,
}
for _, v in ipairs(more) do out[#out + 1] = v end
for i = 1, #out do out[i] = tostring(out[i]) end
return out
