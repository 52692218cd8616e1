-- Resume a paused task: drop it from the paused set and make its parked runs due.
--
-- KEYS[1] the group's paused SET; KEYS[2] the task's parked index; KEYS[3] the
-- delayed-task ZSET
-- ARGV[1] the task's paused member (`task:<name>`); ARGV[2] the score "now"
--
-- A parked member no longer in the delayed set (moved or deleted since) is
-- skipped (ZADD XX). Returns 1 if the task was paused, else 0.
local was = redis.call('SREM', KEYS[1], ARGV[1])
for _, member in ipairs(redis.call('SMEMBERS', KEYS[2])) do
    redis.call('ZADD', KEYS[3], 'XX', ARGV[2], member)
end
redis.call('DEL', KEYS[2])
return was
