-- Add a sharded group's periodic tick to a shard, once: the first step of its fire.
--
-- KEYS[1]   the shard's own schedule states (hash, fields <head>:<schedule name>)
-- KEYS[2]   the shard's stream of the task's queue
-- ARGV[1]   the schedule's name
-- ARGV[2]   the tick (the caller's text, as fire_ticks.lua records it)
-- ARGV[3]   the message
--
-- Every key is in the shard's slot (a script never spans slots), so the lease is not
-- checked here: the group's fire_ticks.lua records the fire, fenced, as the second
-- step. The add is idempotent instead: the shard records the newest tick it added per
-- schedule and that entry's id, and adds nothing for a tick at or before it. A leader
-- adds one schedule's ticks in order, each to the shard its routing names, so a tick
-- at or before the shard's newest was added: a leader re-firing a tick whose record
-- was lost (it died between the steps) gets the entry's id back, or nil when a later
-- tick was added since (its id is not kept).
-- Returns the entry id, or nil.
local mark = redis.call('HGET', KEYS[1], 'tick:' .. ARGV[1])
if mark and tonumber(ARGV[2]) <= tonumber(mark) then
    if tonumber(ARGV[2]) == tonumber(mark) then
        return redis.call('HGET', KEYS[1], 'id:' .. ARGV[1])
    end
    return false
end
local id = redis.call('XADD', KEYS[2], '*', 'payload', ARGV[3])
redis.call('HSET', KEYS[1], 'tick:' .. ARGV[1], ARGV[2], 'id:' .. ARGV[1], id)
return id
