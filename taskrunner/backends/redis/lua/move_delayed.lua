-- Move due members of a delayed-task ZSET to their streams, atomically per batch.
--
-- KEYS[1]   the delayed-task ZSET
-- KEYS[2]   the delayed id index (task id -> member)
-- KEYS[3]   the entry index (task id -> stream id)
-- KEYS[4..] the streams the moves go to, then the unique locks of the moves that have one
-- ARGV      seven values per move, in move order:
--           member, message, lock (index into KEYS, 0 = no lock), token, ttl (ms),
--           task id ('' = none), stream (index into KEYS)
--
-- For each move: skip it if the member is no longer in the ZSET (another pass
-- moved it); skip it if it has a lock that another token holds (the member
-- stays and is tried again on a later pass); otherwise take the lock (a lock
-- already held with the move's own token, a retry keeping its lock, gets its
-- ttl again), XADD the message as the entry's `payload` field to its stream
-- and ZREM the member. A member the delayed id index holds (added by
-- taskrunner, with its task id) leaves that index for the entry index, which
-- maps its task id to the new stream id; a member added without it (by the Go
-- library) is in neither.
--
-- A failing command stops a script without undoing what it already did, so
-- the XADD comes first and is guarded: if it fails (a wrong type, OOM) the
-- lock this move just took is dropped, the member stays in the set, and the
-- error is returned as the server gave it; the moves before it in the batch
-- are complete. ZREM of a member ZSCORE just found cannot fail.
-- Returns how many members were moved.
local moved = 0
for i = 1, #ARGV, 7 do
    local member = ARGV[i]
    if redis.call('ZSCORE', KEYS[1], member) then
        local lock = tonumber(ARGV[i + 2])
        local free = lock == 0
        if not free then
            free = redis.call('SET', KEYS[lock], ARGV[i + 3], 'NX', 'PX', ARGV[i + 4])
            if not free and redis.call('GET', KEYS[lock]) == ARGV[i + 3] then
                free = redis.call('PEXPIRE', KEYS[lock], ARGV[i + 4]) == 1
            end
        end
        if free then
            local stream = KEYS[tonumber(ARGV[i + 6])]
            local added = redis.pcall('XADD', stream, '*', 'payload', ARGV[i + 1])
            if type(added) == 'table' and added.err then
                if lock ~= 0 then
                    redis.call('DEL', KEYS[lock])
                end
                return redis.error_reply(added.err)
            end
            redis.call('ZREM', KEYS[1], member)
            local task_id = ARGV[i + 5]
            if task_id ~= '' and redis.call('HDEL', KEYS[2], task_id) == 1 then
                redis.call('HSET', KEYS[3], task_id, added)
            end
            moved = moved + 1
        end
    end
end
return moved
