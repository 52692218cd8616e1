-- Add entries to a stream and one entry holding their 'dispatched' events to the
-- group's event stream, as one step (a dispatch with TaskRunnerConfig(events=True)).
--
-- KEYS[1] the stream
-- KEYS[2] the event stream (taskrunner:<group>:events)
-- ARGV[1] the event stream's cap (XADD ... MAXLEN ~ ARGV[1])
-- ARGV[2] the events: a JSON array of one row per entry (taskrunner.backends._protocols
--         .events.encode_events), whose task id (2nd) and message id (7th) are empty:
--         the script sets both to the entry's id
-- ARGV[3..] the entries' payloads, in order
-- Returns the new entries' ids, in order.
local rows = cjson.decode(ARGV[2])
local ids = {}
for i = 3, #ARGV do
    local id = redis.call('XADD', KEYS[1], '*', 'payload', ARGV[i])
    ids[#ids + 1] = id
    local row = rows[i - 2]
    if row then
        row[2] = id
        row[7] = id
    end
end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[1], '*', 'events', cjson.encode(rows))
return ids
