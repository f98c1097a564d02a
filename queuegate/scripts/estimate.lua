-- estimate: the estimated wait and the poll interval, from a room's figures.
-- One rule for both paths: advance.lua (every full call: its eta() passes
-- the figures it has just brought up to date) and quick.lua and
-- quick_join.lua (quick polls and joins: the figures the last full call
-- left in the room's snapshot).
--
-- r (a table):
--   status, prequeue (boolean), opens_at, abandon, rate, tokens, per,
--   refill_at, capacity, active_n, end_count, end_prev, win_start,
--   sliding (boolean), session: as in advance.lua (rate and per: the
--   token bucket's step, step_n visitors each step ms)
-- crowd(): the share of those reaching the front lately who were still
--   there to take their turn (1 while nobody was skipped), the line's
--   length, and how many waiting visitors have been silent for a third of
--   `abandon`; asked only when it matters (it costs calls)

local WINDOW = 60000 -- ms; measured rates cover the last one to two minutes
local floor, ceil = math.floor, math.ceil -- per call

-- Events per minute from a window counter and its previous window.
local function per_minute(current, previous, win_start)
  return previous * (1 - (now - win_start) / WINDOW) + current
end

-- Estimated wait (ms) for a visitor with `ahead` people in front, PAUSED in a
-- paused room (the page says so: the operator holds the line, their place
-- is kept), or -1 when nothing else bounds it (closed, or a capacity room
-- with sliding sessions and no session ended yet). A capacity room waits
-- for sessions to end: at the rate they were measured to end, and with
-- fixed sessions never longer than the rounds of full sessions it takes.
-- In a lottery, `ahead` is half the line.
local PAUSED = -2
local function estimate(ahead, r, crowd)
  if r.status == 'paused' then return PAUSED end
  if r.status == 'closed' then return -1 end
  local start = 0
  if r.prequeue then start = r.opens_at - now end
  if ahead > 0 and r.abandon > 0 then
    -- Only those still polling count: of the people ahead, take away those
    -- expected to be skipped (the share skipped at the head lately) or, when
    -- more, those silent now for a third of `abandon` (a page polls at least
    -- that often), spread evenly along the line.
    local staying, line, quiet = crowd()
    local skips, silent = ahead * (1 - staying), quiet * ahead / (1 > line and 1 or line)
    if silent > skips then skips = silent end -- max(): a comparison costs less than a call of C
    ahead = floor(ahead - skips)
  end
  local wait = 0
  if r.rate > 0 then
    local bucket = r.tokens
    if r.prequeue then bucket = r.rate end
    local need = ahead + 1 - bucket
    if need > 0 then
      -- Admitted at the refill that brings the bucket to its turn.
      local next_refill = r.refill_at + r.per - now
      if r.prequeue then next_refill = r.per end
      wait = next_refill + (ceil(need / r.rate) - 1) * r.per
    end
  end
  if r.capacity > 0 then
    local need = ahead + 1 - (r.capacity - r.active_n)
    if need > 0 then
      local ending = per_minute(r.end_count, r.end_prev, r.win_start)
      local by_capacity = -1
      if ending > 0 then
        by_capacity = ceil(need / ending * WINDOW)
      end
      if not r.sliding then
        -- Fixed sessions end by themselves: a hard upper bound.
        local bound = ceil(need / r.capacity) * r.session
        if by_capacity < 0 or bound < by_capacity then by_capacity = bound end
      end
      if by_capacity < 0 then return -1 end
      if by_capacity > wait then wait = by_capacity end
    end
  end
  return start + wait
end

-- How long a waiting client should sleep before it asks again (ms): often
-- near its turn, rarely when far back, and always well inside `abandon`.
-- An unknown wait (a paused room, which the operator may open at any
-- moment) is asked about every UNKNOWN_POLL: a stream hears the opening at
-- once, a poller within that.
local UNKNOWN_POLL = 5000
-- (Bounds by comparison, not math.min and math.max: a call of a C function
-- costs as much as the rest; on every join and poll.)
local function poll_after(wait, abandon)
  local p = UNKNOWN_POLL
  if wait >= 0 then
    p = floor(wait / 3)
    if p < 1000 then p = 1000 elseif p > 20000 then p = 20000 end
  end
  if abandon > 0 then
    local most = floor(abandon / 3)
    if most < p then p = most end
  end
  if p < 250 then p = 250 end
  return p
end

-- How long the page of a visitor in line should wait before it asks again
-- while the room is closed (ms): the closing may be long, so rarely, yet
-- well inside `abandon`, as poll_after, so that asking keeps the place.
-- One with no place is told to come back in CLOSED_POLL.
local CLOSED_POLL = 60000
local function closed_poll(in_line, abandon)
  local p = CLOSED_POLL
  if in_line and abandon > 0 then
    local most = floor(abandon / 3)
    if most < p then p = most end
    if p < 250 then p = 250 end
  end
  return p
end
