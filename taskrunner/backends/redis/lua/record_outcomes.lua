-- Record the outcomes of finished scheduled runs.
--
-- KEYS[1]   the group's schedule states (hash, fields <head>:<schedule name>)
-- ARGV      five values per run, in order:
--           schedule name, tick (text), stream id, outcome, when (text)
--
-- For each run: keep its outcome unless a newer tick's outcome is recorded
-- already; drop the schedule's in-flight mark if it is this run's.
for i = 1, #ARGV, 5 do
    local name = ARGV[i]
    local newest = redis.call('HGET', KEYS[1], 'outcome_tick:' .. name)
    if not (newest and tonumber(newest) and tonumber(ARGV[i + 1]) < tonumber(newest)) then
        redis.call('HSET', KEYS[1], 'outcome:' .. name, ARGV[i + 3],
            'outcome_tick:' .. name, ARGV[i + 1], 'outcome_at:' .. name, ARGV[i + 4])
    end
    if redis.call('HGET', KEYS[1], 'running:' .. name) == ARGV[i + 2] then
        redis.call('HDEL', KEYS[1], 'running:' .. name, 'running_until:' .. name)
    end
end
return 0
