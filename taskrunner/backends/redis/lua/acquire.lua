-- Take a lease or lock if nobody holds it.
-- KEYS[1] the key; ARGV[1] the owner/token; ARGV[2] the ttl in milliseconds.
-- Returns 1 when taken, 0 when the key is held.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return 1
end
return 0
