-- Extend concurrency-slot leases, each only while its holder is still in the set.
--
-- KEYS      the tasks' concurrency slots (ZSETs), one per hold
-- ARGV      two values per hold: the holder, the lease (ms)
--
-- A holder still in the set was counted all along (even if its lease ran out
-- and nobody dropped it yet), so extending it never exceeds the limit; one
-- that was dropped is not put back.
-- Returns the 1-based indices of the holds no longer held.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local lost = {}
for i = 1, #KEYS do
    local holder, lease = ARGV[2 * i - 1], tonumber(ARGV[2 * i])
    if redis.call('ZSCORE', KEYS[i], holder) then
        redis.call('ZADD', KEYS[i], now + lease, holder)
        if redis.call('PTTL', KEYS[i]) < lease then
            redis.call('PEXPIRE', KEYS[i], math.ceil(lease))
        end
    else
        lost[#lost + 1] = i
    end
end
return lost
