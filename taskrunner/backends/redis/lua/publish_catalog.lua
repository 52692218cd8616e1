-- Publish one host's document in a group's task catalog, and drop the documents
-- that no longer count.
--
-- KEYS[1]  taskrunner:<group>:catalog, a hash: host -> document (JSON)
-- ARGV[1]  the host
-- ARGV[2]  its document, whose "expires" is when it stops counting (unix seconds)
-- ARGV[3]  now, in the same clock (unix seconds)
-- ARGV[4]  how long the hash must live at least from now (ms)
--
-- Every other host's document whose "expires" is not after now, or that is not a
-- document at all, is deleted: a crashed instance's entry goes with the next
-- publish by anyone. The hash's own expiry is only ever pushed out, so a short
-- ttl never cuts another host's entry short; it goes when every instance stopped
-- publishing. Returns how many entries were deleted.
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local now = tonumber(ARGV[3])
local entries = redis.call('HGETALL', KEYS[1])
local dropped = 0
for i = 1, #entries, 2 do
    local host = entries[i]
    if host ~= ARGV[1] then
        local ok, doc = pcall(cjson.decode, entries[i + 1])
        if not ok or type(doc) ~= 'table' or type(doc.expires) ~= 'number' or doc.expires <= now then
            redis.call('HDEL', KEYS[1], host)
            dropped = dropped + 1
        end
    end
end
local ttl = tonumber(ARGV[4])
if redis.call('PTTL', KEYS[1]) < ttl then
    redis.call('PEXPIRE', KEYS[1], ttl)
end
return dropped
