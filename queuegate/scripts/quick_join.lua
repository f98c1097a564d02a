-- quick_join: enter's quick answer for a newcomer joining a settled room
-- (see quick.lua, which found the snapshot and set quick_join), by
-- newcomers.lua's rule. Runs after newcomers.lua, before advance.lua.
-- Returns enter's 'waiting' answer (joined = 1) or {'limited', now, id,
-- retry_after_ms}.

-- per call {
if quick_join then
  cp_at = quick_join.cp_at
  local r, id = quick_join.r, ARGV[4]
  local got, seq, line = join_quickly(r, 1)
  if got[2] == 0 then return {'limited', now, id, got[1]} end
  return waiting_answer(r, id, line, line + 1, got[1], 1, seq + 1)
end
-- per call }
