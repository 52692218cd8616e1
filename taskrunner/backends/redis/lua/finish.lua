-- Acknowledge finished entries together with what their runs leave, as one step.
--
-- KEYS[1]   the stream
-- KEYS[2]   the entry index (taskrunner:<group>:entry_ids, task id -> stream id)
-- KEYS[3]   the stop requests (taskrunner:<group>:cancelled, a ZSET of stream ids)
-- KEYS[4..] two per outcome, in outcome order: its result key
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
-- Each outcome first: the document is SET with its keep time and pushed as the
-- notice's element (RPUSH, PEXPIRE: waiters BLMOVE the notice onto itself, so
-- every one of them sees the document and it stays until it expires). A task has
-- one final outcome, so the notice holds one element: a replay, which runs a task
-- again, deletes the previous one first (replay_dead.lua); the entry index forgets the task if it still names this entry (a
-- retry may have moved the task on); the stop request ends. Then XACK (and XDEL)
-- of every id, in chunks (Lua's unpack is bounded).
-- Returns how many ids XACK acknowledged.
local n = tonumber(ARGV[3])
local k = 4
for i = 4 + n, #ARGV, 7 do
    local task_id, entry, document = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    if document ~= '' then
        redis.call('SET', KEYS[k], document, 'PX', ARGV[i + 3])
        redis.call('RPUSH', KEYS[k + 1], document)
        redis.call('PEXPIRE', KEYS[k + 1], ARGV[i + 4])
    end
    if ARGV[i + 5] == '1' and redis.call('HGET', KEYS[2], task_id) == entry then
        redis.call('HDEL', KEYS[2], task_id)
    end
    if ARGV[i + 6] == '1' then
        redis.call('ZREM', KEYS[3], entry)
    end
    k = k + 2
end
local acked = 0
local chunk = 1000
for first = 4, 3 + n, chunk do
    local last = math.min(first + chunk - 1, 3 + n)
    acked = acked + redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, first, last))
    if ARGV[2] == '1' then
        redis.call('XDEL', KEYS[1], unpack(ARGV, first, last))
    end
end
return acked
