-- Find a task by its id, and with ARGV[4] = 'cancel' cancel it, as one step.
--
-- KEYS[1] its result key (taskrunner:<group>:result:<task id>)
-- KEYS[2] the delayed-task ZSET (taskrunner:<group>:delayed_tasks)
-- KEYS[3] the delayed id index (taskrunner:<group>:delayed_ids, task id -> member)
-- KEYS[4] the entry index (taskrunner:<group>:entry_ids, task id -> stream id)
-- KEYS[5] the stream (of the group's first queue)
-- KEYS[6] the stop requests (taskrunner:<group>:cancelled, stream id -> time)
-- KEYS[7] its result notice (taskrunner:<group>:notify:<task id>)
-- KEYS[8] the task catalog (taskrunner:<group>:catalog, host -> document)
-- KEYS[9] cancel only: the unique lock the caller expects the task to hold (any
--         key of the group's slot, e.g. KEYS[1], when it expects none)
-- KEYS[10..] optional: the streams of the group's other queues, looked in after
--          KEYS[5], in order (a group reading several queues; the first stream
--          holding the entry wins)
-- ARGV[1] the task id
-- ARGV[2] the consumer group
-- ARGV[3] '1' when the task id has the shape of a stream id (<ms>-<seq>), else '0'
-- ARGV[4] 'lookup' or 'cancel'
-- cancel only:
-- ARGV[5] now (seconds, the caller's clock): the stop request's score
-- ARGV[6] seconds a stop request is remembered (older ones are dropped)
-- ARGV[7] the cancelled result document up to its task name (the script appends
--         the name as a JSON string and '}')
-- ARGV[8] the longest a result notice lives, in seconds
-- ARGV[9] the unique-lock key prefix (taskrunner:unique: or taskrunner:{<group>}:unique:)
-- ARGV[10] optional: 'steps' to leave a queued or delayed workflow step alone and name
--         it, {'step', payload or member, workflow id, step id}: the caller cancels it
--         through lua/finish.lua, which counts it in its workflow's record (its key is
--         not known here)
--
-- Where the task is, first match wins: its kept result; its member of the delayed
-- set (through the id index); its stream entry (the id index's, else the task id
-- itself when it is a stream id): pending in the group = running; not pending
-- and not yet delivered to the group = queued; delivered and acknowledged (kept
-- in the stream) = done, nothing kept.
--
-- lookup returns one of
--   {'result', document}
--   {'delayed', member, score}
--   {'entry', stream id, payload or false, pending (1/0), delivery count,
--    consumer or false, asked to stop (1/0)}
--   false: not found
-- cancel returns {'none'} (done or not found), or, with the member or the
-- entry's payload (false if it has none):
--   {'scheduled', member}: ZREM of the member and HDEL of its index entry
--   {'queued', payload}:   XDEL of the entry (no group reads it after) and HDEL
--                          of its entry-index mapping
--   {'running', payload}:  ZADD of the stream id to the stop requests
--   {'lock', key}:         nothing done: the member or entry holds unique lock
--                          key, not KEYS[9]; call again with it as KEYS[9]
-- A removed member or entry has its unique lock released (compare-and-delete
-- with its token: a non-empty unique_lock_value, and unique not false; the key is
-- the prefix and its unique_key, or its task's name when that is empty) and, if
-- it has a keep_result > 0, is recorded as cancelled for that long (result
-- document and notice), as taskrunner._wire.removal_of reads it. Without one (a
-- producer that is not strict does not know it), the longest keep_result the
-- catalog's live documents give its task (taskrunner._wire.served_keep_result).
local task_id, group = ARGV[1], ARGV[2]

local function id_parts(id)
    local ms, seq = string.match(id, '^(%d+)-(%d+)$')
    return ms or '', seq or ''
end

local function number_less_or_equal(a, b) -- decimal strings, exactly
    if #a ~= #b then
        return #a < #b
    end
    return a <= b
end

local function id_less_or_equal(a, b)
    local ams, aseq = id_parts(a)
    local bms, bseq = id_parts(b)
    if ams ~= bms then
        return number_less_or_equal(ams, bms)
    end
    return number_less_or_equal(aseq, bseq)
end

local streams = {KEYS[5]}
for i = 10, #KEYS do
    streams[#streams + 1] = KEYS[i]
end
local stream = KEYS[5] -- the stream the entry was found on

local function delivered(entry)
    local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', stream)
    if not ok then
        return false
    end
    for _, row in ipairs(groups) do
        local fields = {}
        for i = 1, #row, 2 do
            fields[row[i]] = row[i + 1]
        end
        if fields['name'] == group then
            return id_less_or_equal(entry, fields['last-delivered-id'])
        end
    end
    return false
end

local function find()
    local document = redis.call('GET', KEYS[1])
    if document then
        return {'result', document}
    end
    local member = redis.call('HGET', KEYS[3], task_id)
    if member then
        local score = redis.call('ZSCORE', KEYS[2], member)
        if score then
            return {'delayed', member, score}
        end
    end
    local entry = redis.call('HGET', KEYS[4], task_id)
    if not entry and ARGV[3] == '1' then
        entry = task_id
    end
    if not entry then
        return false
    end
    for _, key in ipairs(streams) do
        stream = key
        local payload = false
        local ok, rows = pcall(redis.call, 'XRANGE', stream, entry, entry)
        if not ok then
            rows = {} -- not a valid stream id, or not a stream: no such entry here
        end
        if #rows > 0 then
            local fields = rows[1][2]
            for i = 1, #fields, 2 do
                if fields[i] == 'payload' then
                    payload = fields[i + 1]
                end
            end
        end
        local got, pending = pcall(redis.call, 'XPENDING', stream, group, entry, entry, 1)
        if got and #pending > 0 then
            local stopping = redis.call('ZSCORE', KEYS[6], entry) and 1 or 0
            return {'entry', entry, payload, 1, pending[1][4], pending[1][2], stopping}
        end
        if #rows > 0 and not delivered(entry) then
            return {'entry', entry, payload, 0, 0, false, 0}
        end
    end
    return false
end

local found = find()
if ARGV[4] ~= 'cancel' then
    return found
end

local function served_keep(name)
    local now = tonumber(ARGV[5])
    local entries = redis.call('HGETALL', KEYS[8])
    local keep = nil
    for i = 2, #entries, 2 do
        local ok, doc = pcall(cjson.decode, entries[i])
        if ok and type(doc) == 'table' and type(doc.expires) == 'number'
                and doc.expires > now and type(doc.tasks) == 'table' then
            for _, task in ipairs(doc.tasks) do
                if type(task) == 'table' and task.name == name
                        and type(task.keep_result) == 'number' and task.keep_result > 0
                        and (keep == nil or task.keep_result > keep) then
                    keep = task.keep_result
                end
            end
        end
    end
    return keep
end

local function parse(raw)
    if not raw then
        return nil
    end
    local ok, doc = pcall(cjson.decode, raw)
    if not ok or type(doc) ~= 'table' then
        return nil
    end
    return doc
end

local function name_of(doc)
    local name = doc['task_name']
    if type(name) ~= 'string' then
        name = doc['task']
    end
    if type(name) ~= 'string' then
        name = ''
    end
    return name
end

-- The unique lock a removed document holds, and its token, or nil: the key is
-- compared with KEYS[9], never used, so the script touches only keys it was given.
local function lock_of(doc)
    if not doc then
        return nil
    end
    local token = doc['unique_lock_value']
    if type(token) == 'string' and token ~= '' and doc['unique'] ~= false then
        local key = doc['unique_key']
        if type(key) ~= 'string' or key == '' then
            key = name_of(doc)
        end
        return ARGV[9] .. key, token
    end
    return nil
end

local function undo(doc, token)
    if not doc then
        return
    end
    if token and redis.call('GET', KEYS[9]) == token then
        redis.call('DEL', KEYS[9])
    end
    local keep = doc['keep_result']
    if type(keep) ~= 'number' or keep <= 0 then
        keep = served_keep(name_of(doc))
    end
    if type(keep) == 'number' and keep > 0 then
        local document = ARGV[7] .. cjson.encode(name_of(doc)) .. '}'
        redis.call('SET', KEYS[1], document, 'PX', math.ceil(keep * 1000))
        redis.call('DEL', KEYS[7])
        redis.call('RPUSH', KEYS[7], document)
        redis.call('PEXPIRE', KEYS[7], math.ceil(math.min(keep, tonumber(ARGV[8])) * 1000))
    end
end

if not found or found[1] == 'result' then
    return {'none'}
end
-- A removal releases a lock: refuse it, writing nothing, unless the caller gave
-- that lock as KEYS[9] (it calls again with the one named here).
local function lock_given(doc)
    local lock, token = lock_of(doc)
    if lock and lock ~= KEYS[9] then
        return false, {'lock', lock}
    end
    return true, token
end
-- A step of a workflow, for a caller that counts steps (ARGV[10]): named, not touched.
local function step_of(doc, raw)
    if ARGV[10] == 'steps' and doc and type(doc['workflow']) == 'string'
            and type(doc['step']) == 'string' then
        return {'step', raw, doc['workflow'], doc['step']}
    end
    return nil
end
if found[1] == 'delayed' then
    local doc = parse(found[2])
    local step = step_of(doc, found[2])
    if step then
        return step
    end
    local given, token = lock_given(doc)
    if not given then
        return token
    end
    redis.call('ZREM', KEYS[2], found[2])
    redis.call('HDEL', KEYS[3], task_id)
    undo(doc, token)
    return {'scheduled', found[2]}
end
local entry, payload = found[2], found[3]
if found[4] == 1 then
    local now = tonumber(ARGV[5])
    redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', '(' .. (now - tonumber(ARGV[6])))
    redis.call('ZADD', KEYS[6], ARGV[5], entry)
    return {'running', payload}
end
local doc = parse(payload)
local step = step_of(doc, payload)
if step then
    return step
end
local given, token = lock_given(doc)
if not given then
    return token
end
redis.call('XDEL', stream, entry)
redis.call('HDEL', KEYS[4], task_id)
undo(doc, token)
return {'queued', payload}
