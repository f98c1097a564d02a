-- enter: one gated request or status poll of one visitor. Runs after advance.
--
-- KEYS[6] qg:{room}:client:<address>: new places this client took in the
--         current minute (for the room's client_limit; unused when it is 0)
-- KEYS[7] qg:{room}:user:<keyed hash of the user id> -> the visitor id that
--         holds that user's place (only used for an identified user)
-- ARGV[4] visitor id (random, from the signed cookie)
-- ARGV[5] 1 = a visitor with no place joins the line, 0 = only report
-- ARGV[6] how long (ms) the user -> visitor link lives; "" when anonymous
-- ARGV[7] 1 = KEYS[6] names a real client (count its new places), "" = none
-- KEYS[8] qg:{room}:proof:<challenge>: a proof of work already spent
-- ARGV[8] the proof's expiry (ms), checked and signed by the caller; absent
--         when the request brings no proof
-- ARGV[9] the proof's difficulty (its challenge's largest number)
--
-- A user holds one place per room: if the user's place belongs to another
-- visitor id (another tab, browser or device) that id is answered for, and
-- the caller adopts it.
--
-- Returns a flat list: outcome, Redis time (ms), the visitor id answered for,
-- then per outcome:
--   'active'   expiry_ms, joined, copyable       may pass (joined: just now);
--              copyable: 1 when the admission may be copied in the app's
--              process until expiry_ms (a fixed session, an anonymous
--              visitor): its early end is published on <base>revoked
--              (remove.lua, configure.lua; see queuegate/admissions.py)
--   'waiting'  rank (0-based), count, eta_ms (-1 = unknown, -2 = paused), poll_ms, joined,
--              method, arrival number (the visitor's place; see view.lua)
--   'prequeue' opens_at_ms, count, poll_ms, joined, seed_sha256
--   'closed'   in_line: 1 for a visitor who holds a place (kept), else 0;
--              poll_ms: when to ask again (room closed; nobody new joins)
--   'pass'     (gate switched off)
--   'none'     (no place, and ARGV[5] = 0)
--   'limited'  retry_after_ms: this client took client_limit new places in
--              the current minute; no place is given
--   'challenge' difficulty: the room asks a proof of work for a new place,
--              and the request brought none that is unspent, unexpired and
--              at least this hard; no place is given

local id = ARGV[4]
local user_key = ARGV[6] ~= '' and KEYS[7] or nil
local copyable = (user_key == nil and not sliding) and 1 or 0

-- A proof of work buys one place, once: spent here, it is remembered until
-- it expires (and a minute beyond, for clocks that differ a little).
local function proven()
  local expires = tonumber(ARGV[8] or '')
  if expires == nil or expires <= now or tonumber(ARGV[9]) < challenge then return false end
  return redis.call('SET', KEYS[8], '1', 'NX', 'PX', expires - now + 60000) ~= false
end

local function holds_place(visitor)
  return redis.call('ZSCORE', KEYS[4], visitor) or redis.call('ZSCORE', KEYS[2], visitor)
end

advance()

if user_key then
  local other = redis.call('GET', user_key)
  if other and other ~= id and holds_place(other) then id = other end
end

local result
if status == 'passthrough' then
  result = {'pass', now, id}
else
  local expiry = tonumber(redis.call('ZSCORE', KEYS[4], id))
  if expiry ~= nil then
    if sliding then
      expiry = now + session
      redis.call('ZADD', KEYS[4], expiry, id)
    end
    result = {'active', now, id, expiry, 0, copyable}
  elseif status == 'closed' then
    -- Sold out or over: nobody new joins, and those waiting are told so
    -- (their place is kept in case the operator opens the room again: 1
    -- after the id for one who holds a place, told it is kept).
    -- Their page asks again on its own while the room is closed: that
    -- keeps them present, as a poll does (skipped at the head for it, the
    -- visitors told to keep the page open lost their place on reopening).
    local in_line = redis.call('ZSCORE', KEYS[2], id)
    if in_line then seen_now(id) end
    result = {'closed', now, id, in_line and 1 or 0, closed_poll(in_line, abandon)}
  else
    local rank = redis.call('ZRANK', KEYS[2], id)
    local count = redis.call('ZCARD', KEYS[2])
    local joined, seq = 0, nil
    if rank then
      -- A reload or poll keeps the place and proves the visitor is still here.
      seen_now(id)
      seq = tonumber(redis.call('ZSCORE', KEYS[2], id))
    elseif ARGV[5] ~= '1' then
      result = {'none', now, id}
    elseif challenge > 0 and not proven() then
      result = {'challenge', now, id, challenge}
    elseif over_client_limit(client_limit, ARGV[7] == '1' and KEYS[6]) then
      result = {'limited', now, id, redis.call('PTTL', KEYS[6])}
    elseif count == 0 and status == 'open' and not prequeue and room_for(1) > 0 then
      -- Nobody waits and there is room: straight in.
      redis.call('ZADD', KEYS[4], now + session, id)
      note_admitted(1)
      result = {'active', now, id, now + session, 1, copyable}
    else
      -- A newcomer, or someone whose session ended or who left: the back.
      seq = redis.call('INCR', KEYS[1])
      redis.call('ZADD', KEYS[2], seq, id)
      redis.call('ZADD', KEYS[3], now, id)
      redis.call('HINCRBY', KEYS[5], 'joined', 1)
      rank, count, joined = count, count + 1, 1
    end
    if result == nil and prequeue then
      local wait = opens_at - now
      local hash = redis.call('HGET', KEYS[5], 'seed_sha256') or ''
      result = {'prequeue', now, id, opens_at, count, poll_after(wait, abandon), joined, hash}
      if joined == 1 then analytics_joined(seq, -1, nil) end
    elseif result == nil then
      local ahead = rank
      if method == 'random' then ahead = math.floor((count - 1) / 2) end
      local wait = eta(ahead)
      result = {'waiting', now, id, rank, count, wait, poll_after(wait, abandon), joined, method, seq}
      if joined == 1 then
        analytics_joined(seq, wait, function() return eta(ahead + slope_step(method)) end)
      end
    end
  end
end

if user_key and (result[1] == 'active' or result[1] == 'waiting' or result[1] == 'prequeue') then
  redis.call('SET', user_key, id, 'PX', ARGV[6])
end

settled = true
save_state()
return result
