-- Admit one start of a task under its concurrency and rate limits, or say why not.
--
-- KEYS[1] the task's concurrency slots (ZSET holder -> lease expiry, ms)
-- KEYS[2] the rate-limit log (ZSET holder -> start time, ms)
-- KEYS[3] the rate limit's pace (string: when the next refused run comes back, ms)
-- ARGV[1] the holder; ARGV[2] max concurrency (0: no limit); ARGV[3] the lease (ms);
-- ARGV[4] starts allowed per window (0: no rate limit); ARGV[5] the window (ms)
--
-- Time is the server's (TIME), so clients with skewed clocks share one limit.
-- Nothing is written unless every limit admits the run (a run refused by the
-- rate limit takes no slot, one refused a slot logs no start), but the pace.
-- The same rules as MemoryFlow.admit (taskrunner/backends/memory/_flow.py).
-- A run refused by the rate limit comes back when the oldest start leaves the
-- window if that is less than one interval (limit / window) away: its turn is
-- now, it came a hair early. Otherwise it takes the next place in the pace: the
-- first refused comes back when the oldest start leaves, each next one an
-- interval later, so a backlog flows at the rate instead of stampeding.
-- Returns {1, 0, 0} when admitted; {0, 1, 0} when no slot is free; {0, 2, wait}
-- when the rate limit refuses, wait in microseconds.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local holder = ARGV[1]
local limit, lease = tonumber(ARGV[2]), tonumber(ARGV[3])
local rate, per = tonumber(ARGV[4]), tonumber(ARGV[5])

if limit > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
    if not redis.call('ZSCORE', KEYS[1], holder) and redis.call('ZCARD', KEYS[1]) >= limit then
        return {0, 1, 0}
    end
end
if rate > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - per)
    if redis.call('ZCARD', KEYS[2]) >= rate then
        local frees_at = tonumber(redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')[2]) + per
        if frees_at - now < per / rate then
            -- its turn is now (it came back a hair early): when the oldest start leaves
            return {0, 2, math.ceil((frees_at - now) * 1000)}
        end
        local at = math.max(frees_at, tonumber(redis.call('GET', KEYS[3]) or '-1'))
        local following = at + per / rate
        redis.call('SET', KEYS[3], string.format('%.3f', following),
            'PX', math.ceil(following - now + per))
        return {0, 2, math.ceil((at - now) * 1000)}
    end
    redis.call('ZADD', KEYS[2], now, holder)
    redis.call('PEXPIRE', KEYS[2], math.ceil(per))
end
if limit > 0 then
    redis.call('ZADD', KEYS[1], now + lease, holder)
    if redis.call('PTTL', KEYS[1]) < lease then
        redis.call('PEXPIRE', KEYS[1], math.ceil(lease))
    end
end
return {1, 0, 0}
