-- quick_join: enter's quick answer for a newcomer joining a settled room
-- (see quick.lua, which found the snapshot and set quick_join), by
-- newcomers.lua's rule. Runs after newcomers.lua, before advance.lua.
-- Returns enter's 'waiting' answer (joined = 1) or {'limited', now, id,
-- retry_after_ms}.

if quick_join then
  cp_at = quick_join.cp_at
  return join_quickly(quick_join.r, {{ARGV[4], KEYS[6], ARGV[7]}})[1]
end
