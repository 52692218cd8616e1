-- Ack a pending stream entry and add a member to the delayed-task ZSET, atomically.
--
-- KEYS[1]  the stream
-- KEYS[2]  the delayed-task ZSET
-- KEYS[3]  the delayed id index (taskrunner:<group>:delayed_ids, task id -> member)
-- KEYS[4]  the entry index (taskrunner:<group>:entry_ids, task id -> stream id)
-- ARGV[1]  the consumer group
-- ARGV[2]  the entry id
-- ARGV[3]  the member
-- ARGV[4]  its score (run-at unix seconds)
-- ARGV[5]  "1" to XDEL the entry too (the backend deletes on ack)
-- ARGV[6]  the task id ('' = none): the member is indexed under it, and the entry
--          index forgets it if it named this entry
--
-- XACK answers how many entries it acked: 0 means the entry was no longer
-- pending (acked already, or its consumer deleted), and then nothing is added.
-- A group that does not exist is an error reply of XACK, returned as is.
-- Returns 1 if the entry was acked and the member added, else 0.
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then
    return 0
end
if ARGV[5] == '1' then
    redis.call('XDEL', KEYS[1], ARGV[2])
end
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[3])
if ARGV[6] ~= '' then
    redis.call('HSET', KEYS[3], ARGV[6], ARGV[3])
    if redis.call('HGET', KEYS[4], ARGV[6]) == ARGV[2] then
        redis.call('HDEL', KEYS[4], ARGV[6])
    end
end
return 1
