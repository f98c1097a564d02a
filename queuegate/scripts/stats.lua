-- stats: the room's live numbers and effective settings. Runs after advance,
-- so the figures are current even when no visitor has asked for a while.
--
-- Returns a flat list of field, value pairs (values as strings):
--   now, waiting, active, tokens (-1 = no rate limit), per_minute and
--   ended_per_minute (measured admissions and session ends), eta_back_ms
--   (the wait at the back of the line, -1 = unknown; in a lottery, the
--   median wait),
--   the counters admitted, joined, abandoned, expired, released, left,
--   drained, the settings (see advance.lua), prequeue (1 before a scheduled
--   opening) and seed_sha256 (the published hash of the lottery's seed).

advance()
save_state()
local waiting = redis.call('ZCARD', KEYS[2])
local back = waiting
if method == 'random' then back = math.floor(waiting / 2) end
local counters = redis.call('HMGET', KEYS[5], 'admitted', 'joined', 'abandoned',
  'expired', 'released', 'left', 'drained', 'seed_sha256')
local out = {
  'now', now, 'waiting', waiting, 'active', active_n,
  'tokens', rate > 0 and tokens or -1,
  'per_minute', string.format('%.3f', per_minute(win_count, win_prev)),
  'ended_per_minute', string.format('%.3f', per_minute(end_count, end_prev)),
  'eta_back_ms', eta(back),
  'rate', rate, 'per', per, 'capacity', capacity, 'session', session,
  'sliding', sliding and 1 or 0, 'abandon', abandon, 'max_step', max_step,
  'status', status, 'method', method, 'opens_at', opens_at, 'challenge', challenge,
  'prequeue', prequeue and 1 or 0,
}
local names = {'admitted', 'joined', 'abandoned', 'expired', 'released', 'left',
  'drained', 'seed_sha256'}
for i, name in ipairs(names) do
  out[#out + 1] = name
  out[#out + 1] = counters[i] or (name == 'seed_sha256' and '' or 0)
end
for i = 1, #out do out[i] = tostring(out[i]) end
return out
