-- view: the line as visitors far from its front see it, so that the app's
-- processes can answer their polls without a call each (see
-- queuegate/farback.py). Runs after advance.
--
-- ARGV[4] the rank from which a visitor counts as far back, at least
-- ARGV[5] how long (ms) a process may answer from this view
--
-- A far-back visitor's place is their arrival number (in their cookie); the
-- view holds the arrival numbers at ranks 0.5 % apart, so a place between
-- two of them has a rank between theirs: within 0.5 % of the true rank. The
-- line moves meanwhile: the view starts at the rank the line cannot cover
-- in ARGV[5] 200 times over, so that costs at most another 0.5 %. Together:
-- within 1 % of the true rank, while the view is in use. With each sample,
-- the estimate and poll interval for that rank, from estimate.lua.
--
-- All processes share one view a room: one call builds it and stores it in
-- the state hash (`view`, `view_at`, and `view_for`: ARGV[4] and ARGV[5]);
-- calls within half of ARGV[5] with the same ARGV get the stored one.
-- configure, drain and the health controller's changes drop it.
--
-- Nearer the front than the first far rank, a poll learns the visitor's
-- exact rank from Redis (ZRANK, no script) while the room's snapshot holds
-- (see snapshot() in advance.lua: until then nothing would move the line
-- without a call), as quick.lua does; its estimate and poll interval come
-- from front samples: every rank up to 200, then ranks 0.5 % apart, each
-- with estimate.lua's figures for that rank (within 0.5 % between two).
--
-- Returns a flat list: Redis time when built, the line's length, the first
-- far rank (-1: no far or front path in this room now), how long (ms) a
-- polling visitor's liveness may go unrecorded, the number of front
-- samples, then rank, eta_ms, poll_ms of each front sample, then rank,
-- arrival number, eta_ms, poll_ms of each far sample, front to back (the
-- last is the line's last).

local SPACING = 1.005
local STALENESS = 200 -- the line's movement during the view is under 1/STALENESS of a far rank

local far_from, max_age = tonumber(ARGV[4]), tonumber(ARGV[5])
local asked = ARGV[4] .. ',' .. ARGV[5]
local stored = redis.call('HMGET', KEYS[5], 'view_at', 'view', 'defaults', 'view_for')
local built = tonumber(stored[1])
if built and now >= built and now - built < max_age / 2 and stored[2] and stored[4] == asked
    and (ARGV[2] == '' or ARGV[2] == stored[3]) then
  return cmsgpack.unpack(stored[2])
end

advance()
local line = redis.call('ZCARD', KEYS[2])

-- How far the head may move within max_age: the bucket's tokens and its
-- refills, and free capacity plus every session (any may end early); and
-- the silent visitors skipped on the way, at the share of those reaching
-- the front lately who were gone.
local function moves()
  local most = -1
  if rate > 0 then most = tokens + step_n * (math.floor(max_age / step) + (max_age > 0 and 1 or 0)) end
  if capacity > 0 then
    local by_capacity = capacity - active_n + (max_age > 0 and active_n or 0)
    if most < 0 or by_capacity < most then most = by_capacity end
  end
  if most > 0 and abandon > 0 then most = math.ceil(most / math.max(staying_share(), 0.05)) end
  return most
end

local view = {now, line, -1, 0, 0}
local most = moves()
if method == 'fifo' and not prequeue and most >= 0 and status ~= 'closed' and status ~= 'passthrough' then
  local far = math.max(far_from, STALENESS * most)
  view[3] = far
  -- Liveness is what a poll proves: recorded often enough that a visitor
  -- polling at its interval is never silent for a third of `abandon`, when
  -- estimates count them as gone (quick.lua and advance.lua's crowd()), and
  -- no more often.
  local r = figures()
  local every = poll_after(estimate(line, r, crowd), abandon)
  if abandon > 0 then view[4] = math.max(0, math.floor(abandon / 3) - every - max_age) end
  local staying, count, quiet = crowd()
  local function known() return staying, count, quiet end
  local function next_rank(rank, last) return math.min(last, math.floor(rank * SPACING) + 1) end
  local last_front = math.min(far, line) - 1
  local rank = 0
  while rank <= last_front do
    local wait = estimate(rank, r, known)
    view[#view + 1] = rank
    view[#view + 1] = wait
    view[#view + 1] = poll_after(wait, abandon)
    view[5] = view[5] + 1
    if rank == last_front then break end
    rank = next_rank(rank, last_front)
  end
  rank = far
  while rank < line do
    local at = redis.call('ZRANGE', KEYS[2], rank, rank, 'WITHSCORES')
    local wait = estimate(rank, r, known)
    view[#view + 1] = rank
    view[#view + 1] = tonumber(at[2])
    view[#view + 1] = wait
    view[#view + 1] = poll_after(wait, abandon)
    if rank == line - 1 then break end
    rank = next_rank(rank, line - 1)
  end
end

settled = true
save_state()
redis.call('HSET', KEYS[5], 'view_at', now, 'view', cmsgpack.pack(view), 'view_for', asked)
return view
