-- Delete a consumer only while it has nothing pending and has been idle long
-- enough, as one atomic step: a read by that consumer cannot fall between the
-- check and XGROUP DELCONSUMER (which would drop what it read).
--
-- KEYS[1] the stream; ARGV[1] the group, ARGV[2] the consumer,
-- ARGV[3] the least idle time, in milliseconds.
-- Returns 1 when deleted; 0 when the stream, group or consumer does not exist,
-- the consumer has pending entries, or it was active more recently.
local ok, consumers = pcall(redis.call, 'XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
if not ok then
    return 0 -- no such stream or group
end
for _, row in ipairs(consumers) do
    local fields = {}
    for i = 1, #row, 2 do
        fields[row[i]] = row[i + 1]
    end
    if fields['name'] == ARGV[2] then
        -- XPENDING's count for this consumer, not XINFO's cached figure alone.
        local mine = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
        if #mine > 0 or tonumber(fields['idle']) < tonumber(ARGV[3]) then
            return 0
        end
        redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
        return 1
    end
end
return 0
