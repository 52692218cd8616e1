-- Delete dead letters: the ones named, or all of them.
--
-- KEYS[1] the dead-letter stream (<prefix>:<queue>:dead)
-- ARGV    the dead-letter ids to delete; none means all of them
--
-- A dead-letter stream left empty is deleted, as one never written is absent.
-- Returns how many were deleted.
local deleted
if #ARGV == 0 then
    deleted = 0
    if redis.call('EXISTS', KEYS[1]) == 1 then
        deleted = redis.call('XLEN', KEYS[1])
    end
else
    deleted = 0
    local chunk = 1000
    for first = 1, #ARGV, chunk do
        deleted = deleted + redis.call('XDEL', KEYS[1], unpack(ARGV, first, math.min(first + chunk - 1, #ARGV)))
    end
    if redis.call('EXISTS', KEYS[1]) == 1 and redis.call('XLEN', KEYS[1]) > 0 then
        return deleted
    end
end
redis.call('DEL', KEYS[1])
return deleted
