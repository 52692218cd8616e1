-- Put a pending entry back through the delayed set: ack it and add its member, atomically.
--
-- KEYS[1] the stream; KEYS[2] the delayed-task ZSET
-- ARGV[1] the group; ARGV[2] the entry id; ARGV[3] the member; ARGV[4] its score;
-- ARGV[5] 1 to XDEL the entry after the ack (delete_on_ack), else 0
--
-- Nothing changes unless the entry is pending. The ZADD comes before the ack:
-- if it fails (OOM) the script stops with the entry still pending, nothing lost;
-- once it succeeded the XACK of a pending entry cannot fail.
-- Returns 1 when deferred, 0 when the entry was not pending (or its group is gone).
local pending = redis.pcall('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if type(pending) == 'table' and pending.err then
    if string.find(tostring(pending.err), 'NOGROUP', 1, true) then
        return 0
    end
    return redis.error_reply(tostring(pending.err))
end
if #pending == 0 then
    return 0
end
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[3])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if ARGV[5] == '1' then
    redis.call('XDEL', KEYS[1], ARGV[2])
end
return 1
