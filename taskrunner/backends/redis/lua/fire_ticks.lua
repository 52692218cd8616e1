-- Fire periodic ticks, fenced by the leader lease: all of a batch or none of it.
--
-- KEYS[1]   the group's leader lease
-- KEYS[2]   the group's schedule states (hash, fields <head>:<schedule name>)
-- KEYS[3]   the group's stream
-- ARGV[1]   the caller's instance id (the lease's value when it holds the lease)
-- ARGV[2]   now, in the caller's clock (unix seconds, as text)
-- ARGV[3..] six values per fire, in order:
--           schedule name, tick (text), message, exclusive ('1' or '0'),
--           when an exclusive run's in-flight mark lapses (text),
--           '' to add the message here, or '+' and the id it was added under
--           already (a sharded group's fire, added in a shard by add_tick.lua;
--           '+' alone: the id is not known, and the recorded id stays)
--
-- Nothing happens unless the lease holds ARGV[1]: a deposed or partitioned
-- leader's late call is refused whole (returns 0). Otherwise, for each fire:
-- a tick not newer than the schedule's watermark is stale (nothing changes);
-- an exclusive tick while a run is in flight is skipped (the watermark moves,
-- nothing is added); any other tick is fired: its message is added (XADD) and
-- the watermark, the fired tick, its time and the entry's id are recorded
-- together. Numbers are stored as the caller's text and compared with
-- tonumber, so a tick is never rounded on the way.
--
-- The XADD comes first and is guarded: if it fails (a wrong type, OOM) the
-- error is returned as the server gave it, with this fire unrecorded and the
-- fires before it in the batch complete (a failing command stops a script
-- without undoing what it did).
-- Returns 0, or two values per fire: status ('fired', 'skipped', 'stale'),
-- then the entry id (fired), the in-flight id (skipped) or the watermark (stale).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return 0
end
local now = tonumber(ARGV[2])
local out = {}
for i = 3, #ARGV, 6 do
    local name, tick = ARGV[i], ARGV[i + 1]
    local exclusive = ARGV[i + 3] == '1'
    local mark = redis.call('HGET', KEYS[2], 'tick:' .. name)
    if mark and tonumber(tick) <= tonumber(mark) then
        out[#out + 1] = 'stale'
        out[#out + 1] = mark
    else
        local running = false
        if exclusive then
            running = redis.call('HGET', KEYS[2], 'running:' .. name)
            local lapses = redis.call('HGET', KEYS[2], 'running_until:' .. name)
            if not (lapses and tonumber(lapses) and tonumber(lapses) > now) then
                running = false
            end
        end
        if running then
            redis.call('HSET', KEYS[2], 'tick:' .. name, tick)
            out[#out + 1] = 'skipped'
            out[#out + 1] = running
        else
            local added, id = ARGV[i + 5], nil
            if added == '' then
                id = redis.pcall('XADD', KEYS[3], '*', 'payload', ARGV[i + 2])
                if type(id) == 'table' and id.err then
                    return redis.error_reply(id.err)
                end
            else
                id = string.sub(added, 2)
            end
            redis.call('HSET', KEYS[2], 'tick:' .. name, tick, 'fired:' .. name, tick,
                'fired_at:' .. name, ARGV[2])
            if id ~= '' then
                redis.call('HSET', KEYS[2], 'id:' .. name, id)
            end
            if exclusive and id ~= '' then
                redis.call('HSET', KEYS[2], 'running:' .. name, id,
                    'running_until:' .. name, ARGV[i + 4])
            end
            out[#out + 1] = 'fired'
            out[#out + 1] = id
        end
    end
end
return out
