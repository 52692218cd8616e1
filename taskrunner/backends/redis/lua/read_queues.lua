-- Read new entries from several streams of one consumer group, in one step.
--
-- KEYS      the streams, in order
-- ARGV[1]   the group; ARGV[2] the consumer; ARGV[3] the most entries in all
-- ARGV[4..] one quota per stream
--
-- First up to its quota from each stream, in order; then, while fewer than
-- ARGV[3] were read, more from each stream in order. A stream (or its group)
-- that does not exist yet gets the group, created at the stream's start
-- (XGROUP CREATE ... 0 MKSTREAM), as a plain read does on NOGROUP.
-- Returns three values per entry, in read order: the stream's index into
-- KEYS (1-based), the entry id, its fields.
local group, consumer = ARGV[1], ARGV[2]
local left = tonumber(ARGV[3])
local out = {}

local function read(i, count)
    local reply = redis.pcall('XREADGROUP', 'GROUP', group, consumer, 'COUNT', count,
        'STREAMS', KEYS[i], '>')
    if type(reply) == 'table' and reply.err then
        -- NOGROUP (or a missing stream): create the group, once, and read again.
        redis.pcall('XGROUP', 'CREATE', KEYS[i], group, '0', 'MKSTREAM')
        reply = redis.pcall('XREADGROUP', 'GROUP', group, consumer, 'COUNT', count,
            'STREAMS', KEYS[i], '>')
        if type(reply) == 'table' and reply.err then
            return tostring(reply.err)
        end
    end
    if reply then
        for _, entry in ipairs(reply[1][2]) do
            out[#out + 1] = i
            out[#out + 1] = entry[1]
            out[#out + 1] = entry[2]
            left = left - 1
        end
    end
    return nil
end

for i = 1, #KEYS do
    local quota = math.min(tonumber(ARGV[3 + i]), left)
    if quota > 0 then
        local err = read(i, quota)
        if err then
            return redis.error_reply(err)
        end
    end
end
for i = 1, #KEYS do
    if left <= 0 then
        break
    end
    local err = read(i, left)
    if err then
        return redis.error_reply(err)
    end
end
return out
