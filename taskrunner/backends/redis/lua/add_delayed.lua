-- Add a member to the delayed set and index it under its task id, as one step.
--
-- KEYS[1] the delayed-task ZSET (taskrunner:<group>:delayed_tasks)
-- KEYS[2] the delayed id index (taskrunner:<group>:delayed_ids, a hash task id -> member)
-- ARGV[1] the run-at score, ARGV[2] the member, ARGV[3] the task id (the member's id)
--
-- Lookup and cancel find the member through the index (HGET, then ZSCORE), so the
-- two are written together. Returns 1.
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[3], ARGV[2])
return 1
