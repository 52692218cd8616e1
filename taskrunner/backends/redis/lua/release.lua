-- Delete a key only if its value is still ours (compare-and-delete).
-- Used to resign a lease, release a unique lock and remove a heartbeat.
-- KEYS[1] the key; ARGV[1] the owner/token/instance id.
-- Returns 1 when deleted, 0 when the key is gone or holds another value.
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
