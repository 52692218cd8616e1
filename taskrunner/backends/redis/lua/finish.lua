-- Acknowledge finished entries together with what their runs leave, as one step.
--
-- KEYS[1]   the stream
-- KEYS[2]   the entry index (taskrunner:<group>:entry_ids, task id -> stream id)
-- KEYS[3]   the stop requests (taskrunner:<group>:cancelled, a ZSET of stream ids)
-- KEYS[4]   the result waiters (taskrunner:<group>:result_waiters, a ZSET of task ids
--           scored by the server time in ms until which a waiter waits: lua/wait.lua)
-- KEYS[5..] two per outcome, in outcome order: its result key
--           (taskrunner:<group>:result:<task id>) and its notice
--           (taskrunner:<group>:notify:<task id>)
-- ARGV[1]   the consumer group
-- ARGV[2]   '1' to XDEL the acknowledged entries (delete on ack), else '0'
-- ARGV[3]   n, how many entry ids follow
-- ARGV[4 .. 3+n] the entry ids to acknowledge
-- then seven values per outcome: task id, entry id, result document ('' = none),
--           keep (ms), notice lifetime (ms), '1' if the entry index may map the task
--           id to this entry, '1' if the entry was asked to stop
--
-- Each outcome first: the document is SET with its keep time: the one write a kept
-- result costs while nobody waits for it. Only a task someone waits for (a live
-- member of the result waiters) also gets its notice: the document pushed as its
-- element (RPUSH, PEXPIRE: waiters BLMOVE the notice onto itself, so every one of
-- them sees the document and it stays until it expires), and its waiters' member
-- ends. No waiter can miss the result: one registers and reads the result key in
-- one step (lua/wait.lua) before it blocks, so either it read the document or this
-- script saw it waiting. Looking for waiters costs one EXISTS per batch while
-- nobody waits at all. A task has one final outcome, so the notice holds one
-- element: a replay, which runs a task again, deletes the previous one first
-- (replay_dead.lua); the entry index forgets the task if it still names this entry (a
-- retry may have moved the task on); the stop request ends. Then XACK (and XDEL)
-- of every id, in chunks (Lua's unpack is bounded).
-- Returns how many ids XACK acknowledged. With n = 0 it only writes outcomes: a finish
-- written as a MULTI/EXEC block (backends/redis/_kept_results.py) calls it so for the
-- tasks that block found waited for, to push their notices.
--
-- Workflow steps (a self-contained block; absent for plain tasks, which pay nothing):
-- when ARGV holds the marker '\0workflows' where an outcome would start, what follows
-- it counts steps' finishes in their workflows' records (taskrunner:<group>:workflow:<id>,
-- a hash; see backends/_protocols/workflows.py), before the acks:
--   ARGV: the marker, now (unix seconds), s (how many streams), then four per
--         operation: 'finish' or 'cancel', step id, final state, the ARGV index of the
--         step's result document ('0': none)
--   KEYS from after the outcomes' keys: the delayed set, the delayed id index, the
--         group's workflow ends (taskrunner:<group>:workflow_ends, a hash counting
--         each workflow's end by outcome), the running workflows' index
--         (taskrunner:<group>:workflows, a ZSET of records' keys: an ending workflow
--         leaves it), the paused set, the s streams any of these workflows' steps go
--         to, then three per operation: the workflow's record, its result key and its
--         notice (the workflow id's)
-- A finish of a step already final is a duplicate and changes nothing; it reads the
-- step's finish field (f:<step>: its policy and children, see wf_tokens), not its
-- node, so it decodes no JSON; a dependent whose last parent this was is XADDed onto
-- its stream here (its message taken from the record; when this step is its one
-- parent, as in a chain, from this step's finish field, with this step's result
-- document in two more fields, step_parent and step_result, which a worker that knows
-- them uses instead of reading the record); a failure under on_failure='fail' ends the workflow and cancels the
-- rest (pending steps dropped, queued entries XDELed, delayed members removed,
-- running entries added to the stop requests), then queues the workflow's on_failure
-- step; 'cancel' ends a running workflow the same way (wf.cancel()); 'cancel_step'
-- (its third value the step's task id, not a state) is runner.cancel of a queued or
-- delayed step: its task is taken off its queue and counted cancelled under its
-- policy, or, running, asked to stop; the script then returns 'scheduled', 'queued',
-- 'running', 'gone' (its entry is no more: acked uncounted) or 'none' (not queued);
-- 'audit' (its third value the grace in seconds) is the leader's check for steps
-- acked without being counted (taskrunner/_workflows/audit.py): a queued step found
-- neither delayed, parked, pending nor undelivered in its stream is marked suspect,
-- and fails the workflow (a reason saying so) when still nowhere grace seconds later;
-- the script then returns 'failed' or 'none'.
local function wf_final(state)
    return state == 'succeeded' or state == 'failed' or state == 'cancelled'
end
local function wf_queue(wf, step)
    local fields = redis.call('HMGET', wf, 'q:' .. step, 'm:' .. step)
    local stream, message = fields[1], fields[2]
    if not stream or not message then
        return  -- queued already
    end
    local id = redis.call('XADD', stream, '*', 'payload', message)
    redis.call('HSET', wf, 's:' .. step, 'queued', 't:' .. step, id)
    redis.call('HDEL', wf, 'm:' .. step)
end
local wf_ends = nil  -- the group's workflow ends (KEYS, set by wf_steps)
local wf_index = nil  -- the running workflows' index (a ZSET of their records' keys)
local wf_paused = nil  -- the group's paused set
local function wf_end(wf, result_key, notice, state, failed, now, reason)
    local keep = tonumber(redis.call('HGET', wf, 'keep'))
    redis.call('HINCRBY', wf_ends, state, 1)  -- once: a workflow ends once
    redis.call('HSET', wf, 'state', state, 'failed', failed, 'ended', now)
    redis.call('ZREM', wf_index, wf)
    if reason then
        redis.call('HSET', wf, 'reason', reason)
    end
    local doc = '{"state":"' .. state .. '","task":"workflow","attempts":1,"finished_at":'
        .. now .. '}'
    if state == 'failed' then
        doc = '{"state":"failed","task":"workflow","attempts":1,"error":{"type":'
            .. '"WorkflowFailed","message":' .. cjson.encode(reason or failed) .. '},"finished_at":'
            .. now .. '}'
    end
    redis.call('SET', result_key, doc, 'PX', keep)
    redis.call('RPUSH', notice, doc)
    redis.call('PEXPIRE', notice, math.min(keep, 60000))
    redis.call('PEXPIRE', wf, keep)
end
-- A cancelled step's document, what its dependents read (a StepFailed under
-- "continue"), as taskrunner._wire.cancelled_head and track.lua write a cancelled task's.
local function wf_cancelled_doc(wf, step, now)
    local node = cjson.decode(redis.call('HGET', wf, 'g:' .. step))
    return '{"state":"cancelled","finished_at":' .. now .. ',"task":'
        .. cjson.encode(node.task) .. '}'
end
-- Take one queued step's task off its queue: 'scheduled' (removed from the delayed
-- set), 'running' (pending in the group: asked to stop, its finish counts it),
-- 'queued' (its entry deleted) or 'gone' (no entry left: acked without being counted).
local function wf_cancel_one(wf, step, delayed, delayed_ids, now)
    local task_id = redis.call('HGET', wf, 't:' .. step)
    local stream = redis.call('HGET', wf, 'q:' .. step)
    local member = redis.call('HGET', delayed_ids, task_id)
    if member and redis.call('ZREM', delayed, member) == 1 then
        redis.call('HDEL', delayed_ids, task_id)
        return 'scheduled'
    end
    local entry = redis.call('HGET', KEYS[2], task_id) or task_id
    -- (no group yet: nothing was ever delivered, so nothing is running)
    local pending = redis.pcall('XPENDING', stream, ARGV[1], entry, entry, 1)
    if pending.err == nil and #pending > 0 then
        redis.call('ZADD', KEYS[3], now, entry)  -- running: asked to stop
        return 'running'
    end
    local deleted = redis.call('XDEL', stream, entry)
    redis.call('HDEL', KEYS[2], task_id)
    if deleted == 0 then
        return 'gone'
    end
    return 'queued'
end
local function wf_cancel_rest(wf, except, delayed, delayed_ids, now)
    local steps = cjson.decode(redis.call('HGET', wf, 'steps'))
    for _, step in ipairs(steps) do
        local state = redis.call('HGET', wf, 's:' .. step)
        if state == 'pending' then
            redis.call('HSET', wf, 's:' .. step, 'cancelled')
        elseif state == 'queued' and step ~= except then
            if wf_cancel_one(wf, step, delayed, delayed_ids, now) ~= 'running' then
                redis.call('HSET', wf, 's:' .. step, 'cancelled')
            end
        end
    end
end
-- A failure under 'fail' (or an uncounted step, with its reason): the workflow ends
-- FAILED, the rest is cancelled and the workflow's on_failure step queued.
local function wf_fail(wf, result_key, notice, step, now, delayed, ids, reason)
    wf_end(wf, result_key, notice, 'failed', step, now, reason)
    wf_cancel_rest(wf, step, delayed, ids, now)
    local handler = redis.call('HGET', wf, 'handler')
    if handler and handler ~= '' and redis.call('HGET', wf, 's:' .. handler) == 'pending' then
        wf_queue(wf, handler)
    end
end
-- Whether a stream entry was delivered to the group (then, not pending, it was acked).
local function wf_id_less_or_equal(a, b)
    local ams, aseq = string.match(a, '^(%d+)-(%d+)$')
    local bms, bseq = string.match(b, '^(%d+)-(%d+)$')
    if not ams or not bms then
        return false
    end
    if ams ~= bms then
        return #ams < #bms or (#ams == #bms and ams < bms)
    end
    return #aseq < #bseq or (#aseq == #bseq and aseq <= bseq)
end
local function wf_delivered(stream, entry)
    local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', stream)
    if not ok then
        return false
    end
    for _, row in ipairs(groups) do
        local fields = {}
        for i = 1, #row, 2 do
            fields[row[i]] = row[i + 1]
        end
        if fields['name'] == ARGV[1] then
            return wf_id_less_or_equal(entry, fields['last-delivered-id'])
        end
    end
    return false
end
-- Whether a queued step is anywhere a taskrunner worker leaves it: delayed, parked
-- (its task paused), pending in the group, or in its stream undelivered.
local function wf_present(wf, step, delayed, delayed_ids, paused)
    local task_id = redis.call('HGET', wf, 't:' .. step)
    if not task_id then
        return false
    end
    local member = redis.call('HGET', delayed_ids, task_id)
    if member and redis.call('ZSCORE', delayed, member) then
        return true
    end
    local node = cjson.decode(redis.call('HGET', wf, 'g:' .. step))
    if redis.call('SISMEMBER', paused, 'task:' .. node.task) == 1 then
        return true
    end
    local stream = redis.call('HGET', wf, 'q:' .. step)
    local entry = redis.call('HGET', KEYS[2], task_id) or task_id
    local pending = redis.pcall('XPENDING', stream, ARGV[1], entry, entry, 1)
    if pending.err == nil and #pending > 0 then
        return true
    end
    local ok, rows = pcall(redis.call, 'XRANGE', stream, entry, entry)
    if not ok or #rows == 0 then
        return false
    end
    return not wf_delivered(stream, entry)
end
-- The leader's check (taskrunner/_workflows/audit.py's audit_step, the same table):
-- a queued step found nowhere is marked suspect (u:<step>, the time), one marked
-- grace seconds ago fails the workflow, saying why, one found again is cleared; a
-- pending step waiting for no parent (a root a chunked start did not get to) is queued.
local function wf_audit(wf, result_key, notice, grace, now, delayed, ids, paused)
    if redis.call('HGET', wf, 'state') ~= 'running' then
        redis.call('ZREM', wf_index, wf)  -- over (or gone): nothing to look at
        return 'none'
    end
    for _, step in ipairs(cjson.decode(redis.call('HGET', wf, 'steps'))) do
        local current = redis.call('HGET', wf, 's:' .. step)
        if current == 'pending' and tonumber(redis.call('HGET', wf, 'n:' .. step)) <= 0 then
            -- a root a chunked start was cut off before queueing (start_workflow.lua)
            wf_queue(wf, step)
        elseif current == 'queued' then
            local since = tonumber(redis.call('HGET', wf, 'u:' .. step))
            if wf_present(wf, step, delayed, ids, paused) then
                if since then
                    redis.call('HDEL', wf, 'u:' .. step)
                end
            elseif not since then
                redis.call('HSET', wf, 'u:' .. step, now)
            elseif tonumber(now) - since >= grace then
                redis.call('HSET', wf, 's:' .. step, 'failed')
                wf_fail(wf, result_key, notice, step, now, delayed, ids,
                    "step '" .. step .. "' was acked without being counted (its entry left "
                    .. "its stream and its group's pending list uncounted: a worker that "
                    .. 'knows no workflows, such as a Go worker, ran it)')
                return 'failed'
            end
        end
    end
    return 'none'
end
local wf_cancelled = nil  -- what a 'cancel_step' or 'audit' did, the script's reply
-- The largest parent result carried in its child's entry (bytes); a larger one is read
-- by the worker (lua/step_inputs.lua), as every step's inputs but a lone parent's are.
local WF_INLINE = 65536
-- A finish field's tokens (f:<step>, written by start_workflow.lua): each is its length
-- in bytes, ':' and its bytes. The first is the step's policy, then per child either 'n'
-- and its id (a child that counts its parents down) or 's', its id, its stream, the
-- header its entry carries (step_parent) and its message (a child whose one parent
-- this step is).
local function wf_tokens(field)
    local out, at, size = {}, 1, #field
    while at <= size do
        local colon = string.find(field, ':', at, true)
        local stop = colon + tonumber(string.sub(field, at, colon - 1))
        out[#out + 1] = string.sub(field, colon + 1, stop)
        at = stop + 1
    end
    return out
end
-- A step's finish in a record written before finish fields (f:<step>) existed, by
-- its node: every step counted in 'left', each sole child's message in m:<child>.
local function wf_finish_node(wf, result_key, notice, step, state, document, now, delayed,
        ids, mine)
    local node = cjson.decode(redis.call('HGET', wf, 'g:' .. step))
    local left = redis.call('HINCRBY', wf, 'left', -1)
    if state == 'succeeded' or node.policy ~= 'fail' then
        -- this step's fields and its queued children's in one HSET (a chain's step: one
        -- call), in chunks for a wide fan-out (Lua's unpack is bounded)
        local writes = mine
        for _, child in ipairs(node.children) do
            local own = node.sole and node.sole[child]
            -- a child whose one parent this is (a chain's next step) waits for no other:
            -- its count is left as it is (only a pending step's is read)
            local waiting = 0
            if own == nil then
                waiting = redis.call('HINCRBY', wf, 'n:' .. child, -1)
            end
            if waiting <= 0 then
                -- queued from pending only (its message is there until then)
                local fields = redis.call('HMGET', wf, 's:' .. child, 'q:' .. child,
                    'm:' .. child)
                if fields[1] == 'pending' and fields[2] and fields[3] then
                    local id
                    if own ~= nil and document and #document <= WF_INLINE then
                        -- this step is the child's one parent (a chain): its result rides
                        -- in the entry, so the worker reads nothing before the run
                        local header = '{"step":' .. cjson.encode(step) .. ',"policy":'
                            .. cjson.encode(node.policy) .. ',"own":' .. tostring(own) .. '}'
                        id = redis.call('XADD', fields[2], '*', 'payload', fields[3],
                            'step_parent', header, 'step_result', document)
                    else
                        id = redis.call('XADD', fields[2], '*', 'payload', fields[3])
                    end
                    writes[#writes + 1] = 's:' .. child
                    writes[#writes + 1] = 'queued'
                    writes[#writes + 1] = 't:' .. child
                    writes[#writes + 1] = id
                    redis.call('HDEL', wf, 'm:' .. child)
                    if #writes >= 2000 then
                        redis.call('HSET', wf, unpack(writes))
                        writes = {}
                    end
                end
            end
        end
        if #writes > 0 then
            redis.call('HSET', wf, unpack(writes))
        end
        if left <= 0 then
            wf_end(wf, result_key, notice, 'succeeded', '', now)
        end
    else
        redis.call('HSET', wf, unpack(mine))
        wf_fail(wf, result_key, notice, step, now, delayed, ids, nil)
    end
end
local function wf_step(op, wf, result_key, notice, step, state, document, now, delayed, ids)
    if op ~= 'finish' and redis.call('HGET', wf, 'state') == false then
        return  -- no such workflow (expired): nothing to count (a finish sees no step)
    end
    if op == 'audit' then  -- state holds the grace (seconds)
        wf_cancelled = wf_audit(wf, result_key, notice, tonumber(state), now, delayed, ids,
            wf_paused)
        return
    end
    if op == 'cancel' then
        if redis.call('HGET', wf, 'state') == 'running' then
            wf_end(wf, result_key, notice, 'cancelled', '', now)
            wf_cancel_rest(wf, '', delayed, ids, now)
        end
        return
    end
    if op == 'cancel_step' then
        -- runner.cancel of a step's task (state holds its task id): off its queue here,
        -- and counted cancelled below, in this same step, when it is not running.
        if redis.call('HGET', wf, 's:' .. step) ~= 'queued'
            or redis.call('HGET', wf, 't:' .. step) ~= state then
            wf_cancelled = 'none'
            return
        end
        wf_cancelled = wf_cancel_one(wf, step, delayed, ids, now)
        if wf_cancelled ~= 'scheduled' and wf_cancelled ~= 'queued' then
            return
        end
        state = 'cancelled'
        document = wf_cancelled_doc(wf, step, now)
    end
    -- One read of what a finish looks at (a finish is the hot path: a chain's step,
    -- each of a wide chord's children).
    local seen = redis.call('HMGET', wf, 's:' .. step, 'state', 'handler', 'f:' .. step)
    local current = seen[1]
    if not current or wf_final(current) then
        return  -- a duplicate finish (or no such step): counted once already
    end
    local mine = {'s:' .. step, state}  -- this step's fields, written below
    if document then
        mine[3], mine[4] = 'r:' .. step, document
    end
    if seen[2] ~= 'running' or step == seen[3] then
        redis.call('HSET', wf, unpack(mine))
        return
    end
    if not seen[4] then
        -- a record written before finish fields (f:<step>) existed: its node decoded
        wf_finish_node(wf, result_key, notice, step, state, document, now, delayed, ids, mine)
        return
    end
    local t = wf_tokens(seen[4])
    local left = redis.call('HINCRBY', wf, 'left', -1)
    if state ~= 'succeeded' and t[1] == 'fail' then
        redis.call('HSET', wf, unpack(mine))
        wf_fail(wf, result_key, notice, step, now, delayed, ids, nil)
        return
    end
    -- this step's fields and its queued children's in one HSET (a chain's step: one
    -- call), in chunks for a wide fan-out (Lua's unpack is bounded)
    local writes = mine
    local carried = nil  -- the messages of the sole children queued (m:<child>)
    local i = 2
    while i <= #t do
        local child = t[i + 1]
        local id = nil
        if t[i] == 's' then
            -- this step is the child's one parent (a chain's next step): the child waits
            -- for no other (its count is left as it is: only a pending step's is read),
            -- and its stream, parent header and message are in this field; this step's
            -- result rides in the entry, so the worker reads nothing before the run
            if document and #document <= WF_INLINE then
                id = redis.call('XADD', t[i + 2], '*', 'payload', t[i + 4], 'step_parent',
                    t[i + 3], 'step_result', document)
            else
                id = redis.call('XADD', t[i + 2], '*', 'payload', t[i + 4])
            end
            carried = carried or {}
            carried[#carried + 1] = 'm:' .. child
            i = i + 5
        else
            i = i + 2
            if redis.call('HINCRBY', wf, 'n:' .. child, -1) <= 0 then
                -- queued from pending only (its message is there until then)
                local fields = redis.call('HMGET', wf, 's:' .. child, 'q:' .. child,
                    'm:' .. child)
                if fields[1] == 'pending' and fields[2] and fields[3] then
                    id = redis.call('XADD', fields[2], '*', 'payload', fields[3])
                    redis.call('HDEL', wf, 'm:' .. child)
                end
            end
        end
        if id then
            writes[#writes + 1] = 's:' .. child
            writes[#writes + 1] = 'queued'
            writes[#writes + 1] = 't:' .. child
            writes[#writes + 1] = id
            if #writes >= 2000 then
                redis.call('HSET', wf, unpack(writes))
                writes = {}
            end
        end
    end
    if carried then
        -- this field's copies of the messages are no longer needed either
        writes[#writes + 1] = 'f:' .. step
        writes[#writes + 1] = ''
        for first = 1, #carried, 1000 do
            redis.call('HDEL', wf, unpack(carried, first, math.min(first + 999, #carried)))
        end
    end
    if #writes > 0 then
        redis.call('HSET', wf, unpack(writes))
    end
    if left <= 0 then
        wf_end(wf, result_key, notice, 'succeeded', '', now)
    end
end
local function wf_steps(at, k)
    local now = ARGV[at + 1]
    local s = tonumber(ARGV[at + 2])
    local delayed, ids = KEYS[k], KEYS[k + 1]
    wf_ends, wf_index, wf_paused = KEYS[k + 2], KEYS[k + 3], KEYS[k + 4]
    local key = k + 5 + s
    for i = at + 3, #ARGV, 4 do
        local index = tonumber(ARGV[i + 3])
        local document = nil
        if index > 0 and ARGV[index] ~= '' then
            document = ARGV[index]
        end
        wf_step(ARGV[i], KEYS[key], KEYS[key + 1], KEYS[key + 2], ARGV[i + 1], ARGV[i + 2],
            document, now, delayed, ids)
        key = key + 3
    end
end
-- (end of the workflow steps' block)

local n = tonumber(ARGV[3])
local chunk = 1000
-- waited[o]: whether the o-th outcome's task has a live waiter (nil: nobody waits)
local waited = nil
if redis.call('EXISTS', KEYS[4]) == 1 then
    local now = redis.call('TIME')
    local now_ms = now[1] * 1000 + math.floor(now[2] / 1000)
    redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. now_ms)
    if redis.call('EXISTS', KEYS[4]) == 1 then
        local ids = {}
        for i = 4 + n, #ARGV, 7 do
            if ARGV[i] == '\0workflows' then
                break  -- the workflow steps' block: no more outcomes
            end
            ids[#ids + 1] = ARGV[i]
        end
        waited = {}
        for first = 1, #ids, chunk do
            local scores = redis.call('ZMSCORE', KEYS[4], unpack(ids, first, math.min(first + chunk - 1, #ids)))
            for j = 1, #scores do
                waited[first + j - 1] = scores[j]
            end
        end
    end
end
local k = 5
local o = 1
local steps_at = nil
for i = 4 + n, #ARGV, 7 do
    if ARGV[i] == '\0workflows' then
        steps_at = i
        break
    end
    local task_id, entry, document = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    if document ~= '' then
        redis.call('SET', KEYS[k], document, 'PX', ARGV[i + 3])
        if waited and waited[o] then
            redis.call('RPUSH', KEYS[k + 1], document)
            redis.call('PEXPIRE', KEYS[k + 1], ARGV[i + 4])
            redis.call('ZREM', KEYS[4], task_id)
        end
    end
    if ARGV[i + 5] == '1' and redis.call('HGET', KEYS[2], task_id) == entry then
        redis.call('HDEL', KEYS[2], task_id)
    end
    if ARGV[i + 6] == '1' then
        redis.call('ZREM', KEYS[3], entry)
    end
    k = k + 2
    o = o + 1
end
if steps_at then
    wf_steps(steps_at, k)
end
local acked = 0
for first = 4, 3 + n, chunk do
    local last = math.min(first + chunk - 1, 3 + n)
    acked = acked + redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, first, last))
    if ARGV[2] == '1' then
        redis.call('XDEL', KEYS[1], unpack(ARGV, first, last))
    end
end
if wf_cancelled then
    return wf_cancelled
end
return acked
