-- Ack a pending stream entry and add a member to the delayed-task ZSET, atomically.
--
-- KEYS[1]  the stream
-- KEYS[2]  the delayed-task ZSET
-- ARGV[1]  the consumer group
-- ARGV[2]  the entry id
-- ARGV[3]  the member
-- ARGV[4]  its score (run-at unix seconds)
-- ARGV[5]  "1" to XDEL the entry too (the backend deletes on ack)
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
return 1
