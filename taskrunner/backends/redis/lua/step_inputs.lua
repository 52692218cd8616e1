-- What a workflow step receives, read in one step.
--
-- KEYS[1]   the workflow's record
-- ARGV[1]   the step's id
--
-- Returns false for no such step (or workflow); else its graph node (JSON), the step
-- whose failure ended the workflow ('' for none) and that step's result document, then
-- the result document of each of its parents in declared order (false where none).
local wf = KEYS[1]
local node = redis.call('HGET', wf, 'g:' .. ARGV[1])
if not node then
    return false
end
local failed = redis.call('HGET', wf, 'failed') or ''
local out = {node, failed, false}
if failed ~= '' then
    out[3] = redis.call('HGET', wf, 'r:' .. failed)
end
for _, parent in ipairs(cjson.decode(node).parents) do
    out[#out + 1] = redis.call('HGET', wf, 'r:' .. parent)
end
return out
