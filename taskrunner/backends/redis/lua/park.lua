-- Park a run of a paused task: ack its entry, add its member far ahead, index it.
--
-- KEYS[1] the stream; KEYS[2] the delayed-task ZSET; KEYS[3] the group's paused SET;
-- KEYS[4] the task's parked index (a SET of members); KEYS[5] the delayed id index
-- (task id -> member); KEYS[6] the entry index (task id -> stream id)
-- ARGV[1] the group; ARGV[2] the entry id; ARGV[3] the member; ARGV[4] its score;
-- ARGV[5] 1 to XDEL the entry after the ack, else 0; ARGV[6] the task's paused
-- member (`task:<name>`); ARGV[7] the task id ('' = none): the member is indexed
-- under it, so lookup and cancel find the parked run, and the entry index forgets
-- it if it named this entry (as in defer.lua)
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
if ARGV[7] ~= '' then
    redis.call('HSET', KEYS[5], ARGV[7], ARGV[3])
    if redis.call('HGET', KEYS[6], ARGV[7]) == ARGV[2] then
        redis.call('HDEL', KEYS[6], ARGV[7])
    end
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if ARGV[5] == '1' then
    redis.call('XDEL', KEYS[1], ARGV[2])
end
return 1
