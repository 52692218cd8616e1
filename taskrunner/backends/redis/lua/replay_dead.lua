-- Dispatch dead letters again, each in one step: add, map, forget, delete.
--
-- KEYS[1]       the dead-letter stream (<prefix>:<queue>:dead)
-- KEYS[2]       the stream
-- KEYS[3]       the entry index (taskrunner:<group>:entry_ids, task id -> stream id)
-- KEYS[4..3+m]  one per replay, in order: its task's result key
-- KEYS[4+m..3+2m] one per replay, in order: its task's result notice
-- KEYS[4+2m..]  the unique locks of the replays that have one
-- ARGV          six values per replay, in order: dead-letter id, task id, message,
--               lock (index into KEYS, 0 = none), token, ttl (ms)
--
-- For each replay: 'gone' if the dead letter is no longer there (replayed or
-- purged already); 'locked' if it has a lock that is held; otherwise take the
-- lock, XADD the message as the entry's `payload` field, XDEL the dead letter,
-- map the task id to the new entry (unless they are the same), and DEL the task's
-- kept result and its notice (it runs again: its next result is the notice's only
-- element). An XADD that fails drops the lock just taken and
-- returns the server's error; the replays before it are complete. A dead-letter
-- stream left empty is deleted, as one never written is absent.
-- Returns one value per replay: the new stream id, 'gone' or 'locked'.
local out = {}
local m = #ARGV / 6
local j = 0
for i = 1, #ARGV, 6 do
    j = j + 1
    local dead, task_id = ARGV[i], ARGV[i + 1]
    local lock = tonumber(ARGV[i + 3])
    if #redis.call('XRANGE', KEYS[1], dead, dead) == 0 then
        out[j] = 'gone'
    elseif lock ~= 0 and not redis.call('SET', KEYS[lock], ARGV[i + 4], 'NX', 'PX', ARGV[i + 5]) then
        out[j] = 'locked'
    else
        local added = redis.pcall('XADD', KEYS[2], '*', 'payload', ARGV[i + 2])
        if type(added) == 'table' and added.err then
            if lock ~= 0 then
                redis.call('DEL', KEYS[lock])
            end
            return redis.error_reply(added.err)
        end
        redis.call('XDEL', KEYS[1], dead)
        if added ~= task_id then
            redis.call('HSET', KEYS[3], task_id, added)
        end
        redis.call('DEL', KEYS[3 + j], KEYS[3 + m + j])
        out[j] = added
    end
end
if redis.call('EXISTS', KEYS[1]) == 1 and redis.call('XLEN', KEYS[1]) == 0 then
    redis.call('DEL', KEYS[1])
end
return out
