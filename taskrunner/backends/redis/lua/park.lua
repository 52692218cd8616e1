-- Park a run of a paused task: ack its entry, add its member far ahead, index it.
--
-- KEYS[1] the stream; KEYS[2] the delayed-task ZSET; KEYS[3] the group's paused SET;
-- KEYS[4] the task's parked index (a SET of members)
-- ARGV[1] the group; ARGV[2] the entry id; ARGV[3] the member; ARGV[4] its score;
-- ARGV[5] 1 to XDEL the entry after the ack, else 0; ARGV[6] the task's paused
-- member (`task:<name>`)
--
-- Checked and done in one step with resume_task.lua, so a run is never parked
-- after its task was resumed (it would wait for a resume that already happened).
-- Writes come before the ack, as in defer.lua.
-- Returns 1 when parked, 2 when the task is not paused, 0 when the entry is not pending.
if redis.call('SISMEMBER', KEYS[3], ARGV[6]) == 0 then
    return 2
end
local pending = redis.pcall('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if type(pending) == 'table' and pending.err then
    if string.find(tostring(pending.err), 'NOGROUP', 1, true) then
        return 0
    end
    return redis.error_reply(tostring(pending.err))
end
if #pending == 0 then
    return 0
end
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[3])
redis.call('SADD', KEYS[4], ARGV[3])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if ARGV[5] == '1' then
    redis.call('XDEL', KEYS[1], ARGV[2])
end
return 1
