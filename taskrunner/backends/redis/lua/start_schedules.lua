-- A leader's term begins: give new schedules their first watermark, fenced by the lease.
--
-- KEYS[1]   the group's leader lease
-- KEYS[2]   the group's schedule states (hash, fields <head>:<schedule name>)
-- ARGV[1]   the caller's instance id
-- ARGV[2]   the baseline watermark (text)
-- ARGV[3..] schedule names
--
-- Returns 0 (nothing changed) unless the lease holds ARGV[1]; otherwise sets
-- tick:<name> to the baseline for each name that has no watermark (HSETNX)
-- and returns the whole hash (HGETALL).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return 0
end
for i = 3, #ARGV do
    redis.call('HSETNX', KEYS[2], 'tick:' .. ARGV[i], ARGV[2])
end
return redis.call('HGETALL', KEYS[2])
