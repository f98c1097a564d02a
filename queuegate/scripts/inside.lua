-- inside: the quick answer of enter for an anonymous visitor who is simply
-- inside (an unexpired session). That answer does not depend on the rest of
-- the room, so neither its state nor the line is touched: the next caller who
-- needs the line moved moves it. Runs before advance.lua; the KEYS and ARGV
-- are enter's (see advance.lua and enter.lua).
--
-- Only for calls from the app (ARGV[2], the defaults, given) without a user
-- (ARGV[6] empty); returns {'active', now, id, expiry_ms, 0, copyable} as
-- enter does.

local held_until -- per call: the visitor's session expiry, for quick.lua (nil: none)
-- per call {
if ARGV[2] ~= '' and ARGV[6] == '' then
  local expiry = tonumber(redis.call('ZSCORE', KEYS[4], ARGV[4]))
  held_until = expiry
  if expiry ~= nil and expiry > now then
    -- Only three settings matter here: run-time values, else the defaults.
    local set = redis.call('HMGET', KEYS[5], 'session', 'sliding', 'status')
    local session, sliding, status, forget = string.match(ARGV[2],
      '^[^,]*,[^,]*,[^,]*,([^,]*),([^,]*),[^,]*,[^,]*,([^,]*),[^,]*,[^,]*,[^,]*,([^,]*)')
    if (set[3] or status) ~= 'passthrough' then
      local slides = tonumber(set[2] or sliding) == 1
      if slides then
        expiry = now + tonumber(set[1] or session)
        redis.call('ZADD', KEYS[4], expiry, ARGV[4])
        if tonumber(forget) > 0 then
          -- A derived room kept busy only by sliding sessions stays alive.
          redis.call('PEXPIRE', KEYS[4], forget)
          redis.call('PEXPIRE', KEYS[5], forget)
        end
      end
      return {'active', now, ARGV[4], expiry, 0, slides and 0 or 1}
    end
  end
end
-- per call }
