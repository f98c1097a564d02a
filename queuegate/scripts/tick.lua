-- tick: the room moves on time without waiting for a visitor to ask
-- (queuegate/ticker.py). One app process a room holds a short lease and
-- calls this at each moment the room could change by itself; the others
-- ask now and then whether the lease is free. Runs after advance.
--
-- KEYS[6] qg:{room}:ticker  the lease: the holder's id, expiring (PX)
-- ARGV[4] this process's ticker id
-- ARGV[5] the lease's length (ms)
-- ARGV[6] the room's incarnation as this process last heard it, "" = none
--
-- A room whose incarnation is no longer the one the caller heard (its data
-- lost: FLUSHALL, a restart or failover to an empty server, its keys
-- expired) cannot vouch for any copy of it: every process is told to drop
-- them (a revocation of '*', queuegate/admissions.py), by whichever process
-- ticks first, holder or not.
--
-- The lease saves calls; it is not what keeps admissions right. Two
-- processes ticking together (a lease taken over while its old holder's
-- call was in flight) are two calls of advance: the scripts run one at a
-- time and admit nobody twice, and the bucket never holds more than N.
--
-- Returns {held, now, due, waiting, incarnation}:
--   held     1 when this process holds the lease (and the room was moved),
--            0 when another does (nothing was touched)
--   due      the Redis time (ms) at which the room next changes without a
--            call: its next refill, the first session's end in a room with
--            a capacity, its scheduled opening; -1 = none (paused, closed,
--            passed through: `configure` moves it itself). With held = 0:
--            when the lease ends, unless renewed.
--   waiting  the line's length: a room nobody waits in needs no ticking
--   incarnation  the room's now ("" = it has no state)

local function lost(current)
  if ARGV[6] ~= '' and current ~= ARGV[6] then
    redis.call('PUBLISH', BASE .. 'revoked', '*:' .. now)
  end
end

local lease, holder, length = KEYS[6], ARGV[4], tonumber(ARGV[5])
if not redis.call('SET', lease, holder, 'NX', 'PX', length) then
  if redis.call('GET', lease) ~= holder then
    local current = redis.call('HGET', KEYS[5], 'inc') or ''
    lost(current)
    return {0, now, now + math.max(redis.call('PTTL', lease), 0), redis.call('ZCARD', KEYS[2]), current}
  end
  redis.call('PEXPIRE', lease, length)
end

advance()
lost(incarnation)
settled = true
save_state()

local waiting = redis.call('ZCARD', KEYS[2])
local due = -1
if prequeue then
  due = opens_at
elseif line_moves and waiting > 0 then
  if room_for(1) > 0 then
    due = now -- max_step held some back: go on at once
  else
    if rate > 0 and tokens <= 0 then due = refill_at + step end
    if capacity > 0 and active_n >= capacity then
      local first = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
      if first[2] and (due < 0 or tonumber(first[2]) < due) then due = tonumber(first[2]) end
    end
  end
end
return {1, now, due, waiting, incarnation}
