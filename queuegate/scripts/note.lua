-- note: an entry in the room's activity log for what an operator did that
-- changes nothing in the line (revealing the lottery's seed). Moves nothing.
--
-- ARGV[4] who, ARGV[5] action, ARGV[6] details (a JSON object)
--
-- Returns 1.

note_activity(ARGV[4], ARGV[5], ARGV[6])
return 1
