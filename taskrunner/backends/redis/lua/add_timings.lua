-- Add timing batches to a metrics hash, keeping every field an integer Go can read.
--
-- KEYS[1]  the metrics hash
-- ARGV     five values per batch: the _sum field, the _sum_us field, the
--          _count field, microseconds to add, runs to add
--
-- <name>_sum holds whole milliseconds (Go reads it with Int64 and adds to it
-- with HINCRBY); <name>_sum_us the same total in microseconds, so that
-- _sum == floor(_sum_us / 1000). If that does not hold, someone else changed
-- _sum since our last write (a Go worker added whole milliseconds, a Go
-- leader's reset zeroed _sum and _count only) and _sum_us is re-based on _sum
-- first. A float _sum (left by taskrunner 0.1.0) is cut to whole
-- milliseconds, and one that is not a number at all is zeroed: HINCRBY, ours
-- and Go's, would fail on either forever. taskrunner._wire.add_timing is the
-- same rule.
--
-- Numbers go back to Redis as '%d' strings: Lua would print a large double
-- such as 1e15 in exponent form, which HSET would store as is.
local key = KEYS[1]
for i = 1, #ARGV, 5 do
    local sum_field, us_field, count_field = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    local raw = redis.call('HGET', key, sum_field)
    local ms = tonumber(raw)
    if not ms then
        ms = 0
        if raw then
            redis.call('HSET', key, sum_field, '0')
        end
    elseif ms ~= math.floor(ms) then
        ms = math.floor(ms)
        redis.call('HSET', key, sum_field, string.format('%d', ms))
    end
    local us = tonumber(redis.call('HGET', key, us_field))
    if not us or us ~= math.floor(us) or math.floor(us / 1000) ~= ms then
        redis.call('HSET', key, us_field, string.format('%d', ms * 1000))
    end
    local total_us = redis.call('HINCRBY', key, us_field, ARGV[i + 3])
    -- Even by 0, so that _sum exists beside _sum_us.
    redis.call('HINCRBY', key, sum_field, string.format('%d', math.floor(total_us / 1000) - ms))
    redis.call('HINCRBY', key, count_field, ARGV[i + 4])
end
return #ARGV / 5
