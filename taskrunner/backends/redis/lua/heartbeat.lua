-- Set an instance's heartbeat key, unless another instance holds it.
-- KEYS[1] taskrunner:replication:<host>; ARGV[1] the instance id; ARGV[2] the ttl (ms).
-- Returns nil when set (or renewed), else the id the key holds (left alone),
-- so two live processes with one host cannot both hold it.
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
    return holder
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
