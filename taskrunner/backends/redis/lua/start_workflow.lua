-- Start a workflow: write its record and add its roots to their streams, as one step,
-- or, for a wide one, in chunks.
--
-- KEYS[1]   the workflow's record (taskrunner:<group>:workflow:<id>, a hash)
-- KEYS[2]   the running workflows' index (a ZSET of records' keys, by start time)
-- KEYS[3..] the streams its roots go to (of this call's roots, for 'go')
-- ARGV[1]   keep (ms, once it is over)   ARGV[2] now (unix seconds)
-- ARGV[3]   its name   ARGV[4] its on_failure step's id ('' for none)
-- ARGV[5]   its step ids (JSON list, declared order)   ARGV[6] its sinks (JSON list)
-- ARGV[7]   how many steps (the on_failure step left out)
-- ARGV[8]   the mode:
--   'all'   the whole workflow in this step: then six per step: id, its graph node
--           (JSON) and, after a NUL (which JSON text never holds), its finish field
--           (what finish.lua reads of it, f:<id>), its message, '1' for a root, how
--           many parents it waits for, its stream's key. A record that exists already
--           is left as it is (a repeated start).
--   'part'  one chunk of a wide workflow's steps, six per step as for 'all': the
--           record is written (once: by the first chunk) 'starting', expiring after
--           keep, and the chunk's steps (a step written already is left) all pending,
--           roots too. Nothing is queued: a start cut off here runs nothing, and its
--           record expires.
--   'go'    then step ids, roots: the workflow becomes 'running' (once: it joins the
--           index and its expiry ends), and each root still pending is queued. A
--           start cut off between two 'go' chunks leaves roots pending with no parent
--           to wait for: the leader's check (finish.lua's audit) queues them.
-- Returns the roots' (this call's, for 'go') step ids and task ids, flat.
local wf = KEYS[1]
local mode = ARGV[8]
local function header(state)
    redis.call('HSET', wf, 'state', state, 'keep', ARGV[1], 'created', ARGV[2],
        'name', ARGV[3], 'handler', ARGV[4], 'steps', ARGV[5], 'sinks', ARGV[6],
        'left', ARGV[7], 'failed', '')
end
-- A step's node and its finish field, from their ARGV value (see 'all').
local function node_fields(step, value)
    local cut = string.find(value, '\0', 1, true)
    return 'g:' .. step, string.sub(value, 1, cut - 1), 'f:' .. step, string.sub(value, cut + 1)
end
local roots = {}
if mode == 'go' then
    if redis.call('HGET', wf, 'state') == 'starting' then
        redis.call('HSET', wf, 'state', 'running')
        redis.call('PERSIST', wf)
        redis.call('ZADD', KEYS[2], ARGV[2], wf)
    end
    -- (one read per root of its state, stream, message and task id: a wide group's
    -- 'go' calls queue 2,000 roots each)
    local running = redis.call('HGET', wf, 'state') == 'running'
    for i = 9, #ARGV do
        local step = ARGV[i]
        local f = redis.call('HMGET', wf, 's:' .. step, 'q:' .. step, 'm:' .. step, 't:' .. step)
        local task_id = f[4]
        if running and f[1] == 'pending' and f[2] and f[3] then
            task_id = redis.call('XADD', f[2], '*', 'payload', f[3])
            redis.call('HSET', wf, 's:' .. step, 'queued', 't:' .. step, task_id)
            redis.call('HDEL', wf, 'm:' .. step)
        end
        roots[#roots + 1] = step
        roots[#roots + 1] = task_id
    end
    return roots
end
if mode == 'part' then
    if redis.call('EXISTS', wf) == 0 then
        header('starting')
        redis.call('PEXPIRE', wf, ARGV[1])
    end
    if redis.call('HGET', wf, 'state') ~= 'starting' then
        return roots  -- started already (a repeated chunk)
    end
    for i = 9, #ARGV, 6 do
        local step = ARGV[i]
        if redis.call('HEXISTS', wf, 'g:' .. step) == 0 then
            local g, node, f, finish = node_fields(step, ARGV[i + 1])
            redis.call('HSET', wf, g, node, f, finish, 'q:' .. step, ARGV[i + 5],
                'n:' .. step, ARGV[i + 4], 's:' .. step, 'pending', 'm:' .. step, ARGV[i + 2])
        end
    end
    return roots
end
if redis.call('EXISTS', wf) == 0 then
    header('running')
    redis.call('ZADD', KEYS[2], ARGV[2], wf)
    for i = 9, #ARGV, 6 do
        local step = ARGV[i]
        local g, node, f, finish = node_fields(step, ARGV[i + 1])
        -- (one write per step: a wide group's start writes 2,000 in one call)
        if ARGV[i + 3] == '1' then
            local id = redis.call('XADD', ARGV[i + 5], '*', 'payload', ARGV[i + 2])
            redis.call('HSET', wf, g, node, f, finish, 'q:' .. step, ARGV[i + 5],
                'n:' .. step, ARGV[i + 4], 's:' .. step, 'queued', 't:' .. step, id)
        else
            redis.call('HSET', wf, g, node, f, finish, 'q:' .. step, ARGV[i + 5],
                'n:' .. step, ARGV[i + 4], 's:' .. step, 'pending', 'm:' .. step, ARGV[i + 2])
        end
    end
end
for i = 9, #ARGV, 6 do
    if ARGV[i + 3] == '1' then
        roots[#roots + 1] = ARGV[i]
        roots[#roots + 1] = redis.call('HGET', wf, 't:' .. ARGV[i])
    end
end
return roots
