-- revoke: every process drops its copy of a visitor's admission, in a room
-- Redis has no state for (its data lost: FLUSHALL, a restart or failover to
-- an empty server) and that the caller knows only by name (the console, the
-- back office): remove.lua cannot run there (advance needs the room's
-- settings), and copies of the admission would otherwise live until the
-- room's next tick (queuegate/admissions.py, queuegate/ticker.py). Changes
-- nothing in Redis.
--
-- ARGV[4] visitor id
--
-- Returns 0.

redis.call('PUBLISH', string.sub(KEYS[5], 1, -6) .. 'revoked', ARGV[4] .. ':' .. now)
return 0
