"""Contract checks of :class:`~taskrunner.backends.EventLog` (progress and the event
stream) and of the calls that carry events. A backend without an event log passes
them without being asked anything (the log is optional)."""

from __future__ import annotations

import trio

from taskrunner.backends._protocols import Backend
from taskrunner.backends._protocols.events import (
    EventBatch,
    EventLog,
    ProgressUpdate,
    TaskEvent,
    TaskProgress,
)
from taskrunner.backends._protocols.tracking import Outcome
from taskrunner.testing._harness import _contract_check, _fresh_group, _ids, _name


def _event(kind: str, task_id: str = "", attempt: int = 0, detail: str = "") -> TaskEvent:
    return TaskEvent(
        kind=kind,
        task_id=task_id,
        task_name="resize",
        queue="tasks",
        attempt=attempt,
        at=1733000000.125,
        message_id=task_id,
        detail=detail,
    )


def _batch(*events: TaskEvent, maxlen: int = 1000) -> EventBatch:
    return EventBatch(events=events, maxlen=maxlen)


def _bare(event: TaskEvent) -> TaskEvent:
    """``event`` without its stream id (what was written)."""
    return event._replace(id="")


@_contract_check
async def check_events_ride_with_their_calls(backend: Backend) -> None:
    """``add``, ``add_delayed``, ``ack`` and ``finish`` given events do what they always
    do and write the events, in order, once; ``add`` fills in each entry's id."""
    if not isinstance(backend, EventLog):
        return
    group, consumer = await _fresh_group(backend), _name("c")
    assert await backend.last_event_id(group) == "0-0", "no event yet"
    twice = _batch(_event("dispatched"), _event("dispatched"))
    ids = await backend.add(group, [b"one", b"two"], events=twice)
    more = await backend.add(group, [b"three"], events=_batch(_event("dispatched")))
    run_at = backend.now() + 100.0
    await backend.add_delayed(
        group, b'{"id":"d1"}', run_at, task_id="d1", events=_batch(_event("dispatched", "d1"))
    )
    assert await backend.due_delayed(group, run_at, 10) == [b'{"id":"d1"}'], "the member too"
    read = _ids(await backend.read(group, consumer, 10, 0))
    assert read == ids + more
    acked = await backend.ack(group, [ids[0]], events=_batch(_event("succeeded", ids[0], 1)))
    assert acked == 1, "ack with events acks as ack does"
    outcome = Outcome(entry_id=ids[1], task_id=ids[1])
    finished = await backend.finish(
        group, [ids[1]], [outcome], events=_batch(_event("failed", ids[1], 1, "ValueError: x"))
    )
    assert finished == 1, "finish with events acks as finish does"
    events = await backend.read_events(group, "0-0", count=100, block=0)
    expected = [
        _event("dispatched", ids[0]),
        _event("dispatched", ids[1]),
        _event("dispatched", more[0]),
        _event("dispatched", "d1"),
        _event("succeeded", ids[0], 1),
        _event("failed", ids[1], 1, "ValueError: x"),
    ]
    assert [_bare(e) for e in events] == expected, events
    assert all(e.id for e in events), "each read event has its stream id"
    assert all(e.id.partition("/")[2].isdigit() for e in events), "<entry id>/<n>"
    assert await backend.last_event_id(group) == events[-1].id.partition("/")[0]
    assert await backend.read_events(group, events[-1].id, count=100, block=0) == []
    assert await backend.read_events(group, events[-1].id[:-2], count=100, block=0) == []
    two = await backend.read_events(group, events[1].id, count=2, block=0)
    assert two == events[2:4], "count bounds a read; it starts after the id given"


@_contract_check
async def check_progress(backend: Backend) -> None:
    """``write_events`` keeps each task's latest progress, read back by
    ``read_progress``; a task that reported none has none."""
    if not isinstance(backend, EventLog):
        return
    group = await _fresh_group(backend)
    first = TaskProgress(fraction=0.25, note="a quarter", at=1733000000.5)
    other = TaskProgress(fraction=1.0, at=1733000001.0)
    await backend.write_events(
        group,
        None,
        [
            ProgressUpdate(task_id="t1", progress=first),
            ProgressUpdate(task_id="t2", progress=other),
        ],
    )
    assert await backend.read_progress(group, "t1") == first
    assert await backend.read_progress(group, "t2") == other
    assert await backend.read_progress(group, "t3") is None
    later = TaskProgress(fraction=0.5, at=1733000002.0)
    await backend.write_events(group, None, [ProgressUpdate(task_id="t1", progress=later)])
    assert await backend.read_progress(group, "t1") == later, "the note went with its report"
    assert await backend.last_event_id(group) == "0-0", "progress alone writes no event"


@_contract_check
async def check_event_stream_is_capped(backend: Backend) -> None:
    """The stream keeps about the last ``maxlen`` entries (``MAXLEN ~``: a backend may
    keep more, never fewer, and always the newest); an entry holds one call's events,
    and an event's id resumes a read right after it."""
    if not isinstance(backend, EventLog):
        return
    group = await _fresh_group(backend)
    for i in range(300):
        await backend.write_events(group, _batch(_event("started", f"t{i}"), maxlen=10))
    kept = await backend.read_events(group, "0-0", count=1000, block=0)
    assert 10 <= len(kept) < 300, f"{len(kept)} of 300 entries kept with maxlen=10"
    assert kept[-1].task_id == "t299", "the newest are kept"
    await backend.write_events(group, _batch(*(_event("started", f"u{i}") for i in range(3))))
    (entry,) = {e.id.partition("/")[0] for e in await backend.read_events(
        group, kept[-1].id, count=10, block=0
    )}  # fmt: skip
    batch = await backend.read_events(group, kept[-1].id, count=10, block=0)
    assert [e.id for e in batch] == [f"{entry}/{n}" for n in range(3)], "one entry per call"
    rest = await backend.read_events(group, batch[0].id, count=10, block=0)
    assert [e.task_id for e in rest] == ["u1", "u2"], "after an event: the rest of its entry"
    assert await backend.read_events(group, batch[2].id, count=10, block=0) == []
    assert await backend.last_event_id(group) == entry


@_contract_check
async def check_read_events_blocks_until_one_comes(backend: Backend) -> None:
    """A blocking ``read_events`` returns as soon as an event is written after its id,
    and an empty list when none comes within ``block``."""
    if not isinstance(backend, EventLog):
        return
    group = await _fresh_group(backend)
    start = trio.current_time()
    assert await backend.read_events(group, "0-0", count=10, block=0.2) == []
    assert trio.current_time() - start >= 0.15, "it waited"
    got: list[TaskEvent] = []

    async def read() -> None:
        got.extend(await backend.read_events(group, "0-0", count=10, block=5.0))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        await trio.sleep(0.2)
        start = trio.current_time()
        await backend.write_events(group, _batch(_event("started", "t1")))
    assert trio.current_time() - start < 4.0, "woken by the write, not by its timeout"
    assert [e.task_id for e in got] == ["t1"]
