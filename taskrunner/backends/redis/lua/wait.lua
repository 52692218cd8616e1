-- Read a task's kept result, and register its waiter if there is none yet, as one step.
--
-- KEYS[1]   the result key (taskrunner:<group>:result:<task id>)
-- KEYS[2]   the result waiters (taskrunner:<group>:result_waiters, a ZSET of task ids
--           scored by the server time in ms until which someone waits for them)
-- ARGV[1]   the task id
-- ARGV[2]   how long the waiter will wait from now, in ms (its next blocking wait and
--           a margin)
--
-- Returns the document if there is one. Else the task id is registered (ZADD GT: a
-- member keeps the latest end of all its waiters) and nil returned; the caller then
-- blocks on the task's notice, which lua/finish.lua pushes for a registered task
-- only. Registering and reading in one step is what makes that safe: a finish
-- either came before (the document is returned) or sees the registration.
-- Registrations whose time is over are dropped here and by finish.lua, so the set
-- holds about the tasks waited for now.
local document = redis.call('GET', KEYS[1])
if document then
    return document
end
local now = redis.call('TIME')
local now_ms = now[1] * 1000 + math.floor(now[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. now_ms)
redis.call('ZADD', KEYS[2], 'GT', now_ms + tonumber(ARGV[2]), ARGV[1])
return false
