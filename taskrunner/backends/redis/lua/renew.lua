-- Extend a lease only if its value is still ours (compare-and-PEXPIRE).
-- KEYS[1] the key; ARGV[1] the owner; ARGV[2] the new ttl in milliseconds.
-- Returns 1 when renewed, 0 when the key is gone or held by someone else.
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
