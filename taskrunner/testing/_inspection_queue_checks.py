"""Contract checks of the :class:`~taskrunner.backends.Inspection` protocol on a group of
several queues (issue 24): every queue's keys listed, counted and flushed, and no other
group's touched; and on the keys of the features over the queues (events, progress,
workflows, the shard count). Part of :data:`~taskrunner.testing.INSPECTION_CHECKS`."""

from __future__ import annotations

from taskrunner import _keys
from taskrunner._shards import shard_count_key
from taskrunner._workflows.keys import workflow_key
from taskrunner.backends._protocols import Backend
from taskrunner.backends._protocols.events import (
    PROGRESS_TTL,
    EventBatch,
    EventLog,
    ProgressUpdate,
    TaskEvent,
    TaskProgress,
)
from taskrunner.backends._protocols.inspection import KeyKind
from taskrunner.backends._protocols.workflows import WorkflowStore
from taskrunner.testing._harness import _contract_check, _fresh_group, _name, _shares_stream
from taskrunner.testing._inspection_checks import _inspection
from taskrunner.testing._workflow_checks import _started

_QUEUE_KINDS = (KeyKind.STREAM, KeyKind.DEAD_LETTER, KeyKind.CLAIM_DELAY_RING)


@_contract_check
async def check_every_queue_in_keys_and_flush(backend: Backend) -> None:
    """``list_queues`` finds every queue the group reads, by its stream or its dead
    letters;
    ``list_keys`` lists every queue's stream and dead-letter stream, the paused set
    and the flow-control keys; ``flush_group`` deletes them all (and destroys the
    group on every queue) and touches no key of another group."""
    inspection = _inspection(backend)
    group, other = _name("group"), _name("other")
    qa, qb = _name("qa"), _name("qb")
    for g in (group, other):
        await backend.add(g, [b"a1"], queue=qa)
        read = await backend.read_many(g, _name("c"), [qa, qb], [0, 0], 10, 0)  # reads both
        await backend.ack(g, [e.id for e in read], queue=qa)  # its claim delay: qa's ring
        await backend.dead_letter(g, "1700000000000-0", b"x", "boom", queue=qb)
        await backend.pause(g, task="t")
        await backend.admit(g, "t", "h1", max_concurrency=1, lease=30.0)
    queues = await inspection.list_queues(group)
    own = backend.stream_keys(group).queue
    assert queues[0] == own, f"the backend's own queue comes first: {queues!r}"
    assert {qa, qb} <= set(queues), f"{qa!r} (a stream) and {qb!r} (dead letters): {queues!r}"
    names = {k.name: k.kind for k in await inspection.list_keys(group)}
    wanted = {
        backend.stream_keys(group, qa).stream: KeyKind.STREAM,
        backend.stream_keys(group, qb).dead_letter: KeyKind.DEAD_LETTER,
        backend.stream_keys(group, qa).claim_delay_ring: KeyKind.CLAIM_DELAY_RING,
        _keys.paused(group, backend.key_layout): KeyKind.PAUSED,
        _keys.concurrency(group, "t", backend.key_layout): KeyKind.CONCURRENCY,
    }
    missing = {n: k for n, k in wanted.items() if names.get(n) is not k}
    assert not missing, f"list_keys must list every queue's and flow key: missing {missing!r}"
    counts = await inspection.count_keys(group)
    assert counts.paused == 1, f"count_keys counts the paused set: {counts!r}"
    assert counts.concurrency == 1, f"count_keys counts the slots: {counts!r}"
    others = sorted(k.name for k in await inspection.list_keys(other) if other in k.name)
    deleted = await inspection.flush_group(group, heartbeats=False)
    shared = _shares_stream(backend, group, other)  # its streams are kept for the other
    doomed = {n for n, kind in wanted.items() if not (shared and kind in _QUEUE_KINDS)}
    assert doomed <= set(deleted), f"flush must delete {sorted(doomed)!r}: {deleted!r}"
    left = [k.name for k in await inspection.list_keys(group) if group in k.name]
    assert left == [], f"flush left keys of the group: {left!r}"
    assert (await backend.group_info(group, queue=qa)).pending == 0, "destroyed on every queue"
    after = sorted(k.name for k in await inspection.list_keys(other) if other in k.name)
    assert after == others, f"flush touched another group's keys: {others!r} -> {after!r}"
    await inspection.flush_group(other, heartbeats=False)


@_contract_check
async def check_events_progress_and_workflows_in_keys_and_flush(backend: Backend) -> None:
    """``list_keys`` lists the group's event stream, each task's progress hash, each
    workflow's record and (cluster layout) its shard count, with their type, size and
    expiry; ``count_keys`` counts them; ``flush_group`` deletes them all and leaves
    another group's."""
    log, store = backend, backend
    if not isinstance(log, EventLog) or not isinstance(store, WorkflowStore):
        return  # a backend of one's own may keep neither (as the events and workflow checks)
    inspection = _inspection(backend)
    group, other = await _fresh_group(backend), await _fresh_group(backend)
    layout, task_id = backend.key_layout, _name("task").replace(":", "")
    progress = ProgressUpdate(task_id=task_id, progress=TaskProgress(fraction=0.5, note="half"))
    event = TaskEvent(
        kind="started", task_id=task_id, task_name="t", queue="tasks", attempt=1,
        at=1733000000.0, message_id=task_id, detail="",
    )  # fmt: skip
    flows = {}
    for g in (group, other):
        await log.write_events(g, EventBatch(events=(event,)), [progress])
        flows[g], _ = await _started(backend, g)
    sharded = layout == "cluster"  # a go-layout group is never sharded
    if sharded:
        await backend.record_shard_count(group, 4)
    by_name = {key.name: key for key in await inspection.list_keys(group)}
    expected = {
        _keys.events(group, layout): (KeyKind.EVENTS, "stream", 1),
        _keys.progress(group, task_id, layout): (KeyKind.PROGRESS, "hash", 3),
    }
    if sharded:
        expected[shard_count_key(group)] = (KeyKind.SHARD_COUNT, "string", len("4"))
    for name, want in expected.items():
        key = by_name.get(name)
        got = None if key is None else (key.kind, key.type, key.size)
        assert got == want, f"{name}: (kind, type, size) is {got!r}, not {want!r}"
    left = by_name[_keys.progress(group, task_id, layout)].ttl
    assert left is not None, "a progress hash expires"
    assert 0 < left <= PROGRESS_TTL, f"progress expires within PROGRESS_TTL: ttl {left!r}"
    record = by_name.get(workflow_key(group, flows[group], layout))
    assert record is not None, f"the workflow's record is not listed: {sorted(by_name)!r}"
    assert (record.kind, record.type) == (KeyKind.WORKFLOW, "hash"), record
    assert record.size >= 1, f"a workflow's record holds its fields: {record!r}"
    assert record.ttl is None, f"a running workflow's record does not expire: {record!r}"
    counts = await inspection.count_keys(group)
    new = (counts.events, counts.progress, counts.workflow, counts.shard_count)
    assert new == (1, 1, 1, int(sharded)), f"(events, progress, workflow, shards): {new!r}"

    deleted = await inspection.flush_group(group, heartbeats=False)
    missed = (set(expected) | {record.name}) - set(deleted)
    assert not missed, f"flush_group left {sorted(missed)!r} behind; it deleted {deleted!r}"
    gone = (
        await log.read_progress(group, task_id),
        await store.read_workflow(group, flows[group]),
        await log.read_events(group, "0-0", count=10, block=0),
        await backend.read_shard_count(group),
    )
    assert gone == (None, None, [], None), f"flush left progress, workflow, events: {gone!r}"
    kinds = {KeyKind.EVENTS, KeyKind.PROGRESS, KeyKind.WORKFLOW, KeyKind.SHARD_COUNT}
    still = [key.name for key in await inspection.list_keys(group) if key.kind in kinds]
    assert not still, f"listed after the flush: {still!r}"
    kept = (
        await log.read_progress(other, task_id) is not None,
        await store.read_workflow(other, flows[other]) is not None,
        len(await log.read_events(other, "0-0", count=10, block=0)),
    )
    assert kept == (True, True, 1), f"flush touched another group's keys: {kept!r}"
    await inspection.flush_group(other, heartbeats=False)


@_contract_check
async def check_count_messages(backend: Backend) -> None:
    """``count_messages`` counts, in one call, the entries of the streams and the
    dead-letter streams of the queues it is given (each once, ``None`` the backend's
    own) and the members of the group's delayed set; another group's count nothing.
    Counted as what the adds added: a shared stream may hold other entries already."""
    inspection = _inspection(backend)
    group, other, queue = _name("group"), _name("other"), _name("q")
    shared = _shares_stream(backend, group, other)  # an explicit prefix: one stream
    own_before = await inspection.count_messages(group, [None])
    both_before = await inspection.count_messages(group, [None, queue])
    await backend.add(group, [b"a1", b"a2"])
    await backend.add(group, [b"b1"], queue=queue)
    await backend.add_delayed(group, b'{"id":"d1"}', backend.now() + 60, task_id="d1")
    await backend.dead_letter(group, "1-0", b"x", "failed", queue=queue)
    await backend.add(other, [b"o1"], queue=queue)
    await backend.add_delayed(other, b'{"id":"d2"}', backend.now() + 60, task_id="d2")
    own = await inspection.count_messages(group, [None])
    added = (
        own.queued - own_before.queued,
        own.delayed - own_before.delayed,
        own.dead - own_before.dead,
    )
    assert added == (2, 1, 0), f"the backend's queue: {own_before!r} then {own!r}"
    both = await inspection.count_messages(group, [None, queue, queue])
    added = (
        both.queued - both_before.queued,
        both.delayed - both_before.delayed,
        both.dead - both_before.dead,
    )
    queued = 3 + (1 if shared else 0)  # on a shared stream, the other group's entry too
    assert added == (queued, 1, 1), f"two queues: {both_before!r} then {both!r}"
    empty = await inspection.count_messages(_name("empty"), [None, queue])
    assert empty.delayed == 0, f"another group's delayed set: {empty!r}"
    if not shared:
        assert (empty.queued, empty.dead) == (0, 0), f"another group's streams: {empty!r}"
