"""Progress (``ctx.progress``) and the event stream (``events=True``) on MemoryBackend,
under MockClock: the pure rules, coalescing counted in backend calls, every event kind,
the cap, readers that stop, and nothing written or sent while events are off."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest
import trio
import trio.testing
from _fleet import make_runner, serving, wait_until

from taskrunner import (
    Retry,
    TaskContext,
    TaskEvent,
    TaskProgress,
    TaskRunnerConfig,
    TaskState,
    _keys,
    admin,
)
from taskrunner._dispatch.events import check_after
from taskrunner._execution.progress import NOTE_CHARS, Reports, check_progress
from taskrunner.backends import EventBatch, EventLog, Outcome, ProgressUpdate
from taskrunner.backends._protocols.events import decode_events, encode_events
from taskrunner.backends.memory import MemoryBackend


class CountingBackend(MemoryBackend):
    """A MemoryBackend that counts its calls, and those that carried events."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.calls: Counter[str] = Counter()
        self.carried: Counter[str] = Counter()
        self.writes: list[tuple[int, int]] = []  # (progress updates, events) per write

    def _count(self, name: str, events: EventBatch | None) -> None:
        self.calls[name] += 1
        if events is not None:
            self.carried[name] += 1

    async def add(
        self,
        group: str,
        payloads: Sequence[bytes],
        *,
        queue: str | None = None,
        events: EventBatch | None = None,
    ) -> list[str]:
        self._count("add", events)
        return await super().add(group, payloads, queue=queue, events=events)

    async def ack(
        self,
        group: str,
        ids: Sequence[str],
        *,
        queue: str | None = None,
        events: EventBatch | None = None,
    ) -> int:
        self._count("ack", events)
        return await super().ack(group, ids, queue=queue, events=events)

    async def finish(
        self,
        group: str,
        ids: Sequence[str],
        outcomes: Sequence[Outcome],
        *,
        queue: str | None = None,
        events: EventBatch | None = None,
    ) -> int:
        self._count("finish", events)
        return await super().finish(group, ids, outcomes, queue=queue, events=events)

    async def write_events(
        self,
        group: str,
        events: EventBatch | None,
        progress: Sequence[ProgressUpdate] = (),
    ) -> None:
        self._count("write_events", events)
        self.writes.append((len(progress), 0 if events is None else len(events.events)))
        await super().write_events(group, events, progress)


async def all_events(backend: EventLog, group: str = "g") -> list[TaskEvent]:
    return await backend.read_events(group, "0-0", count=10_000, block=0)


# Pure rules ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fraction", "note", "expected"),
    [
        (0, None, (0.0, None)),
        (1, "done", (1.0, "done")),
        (0.25, "a quarter", (0.25, "a quarter")),
        (0.5, "x" * NOTE_CHARS, (0.5, "x" * NOTE_CHARS)),
    ],
)
def test_a_progress_report_is_checked(
    fraction: float, note: str | None, expected: tuple[float, str | None]
) -> None:
    assert check_progress(fraction, note) == expected


@pytest.mark.parametrize(
    ("fraction", "note", "error", "names"),
    [
        (1.5, None, ValueError, "1.5"),
        (-0.1, None, ValueError, "-0.1"),
        (float("nan"), None, ValueError, "nan"),
        ("0.5", None, TypeError, "'0.5'"),
        (True, None, TypeError, "True"),
        (None, None, TypeError, "None"),
        (0.5, 7, TypeError, "7"),
        (0.5, "two\nlines", ValueError, "'two\\nlines'"),
        (0.5, "x" * (NOTE_CHARS + 1), ValueError, str(NOTE_CHARS + 1)),
    ],
)
def test_a_bad_progress_report_is_refused_naming_its_value(
    fraction: Any, note: Any, error: type[Exception], names: str
) -> None:
    with pytest.raises(error) as caught:
        check_progress(fraction, note)
    assert names in str(caught.value)
    assert "\n" not in str(caught.value)


def test_events_survive_their_stream_entry() -> None:
    event = TaskEvent(
        kind="failed",
        task_id="t1",
        task_name="resize",
        queue="images",
        attempt=3,
        at=1733000000.25,
        message_id="1733000000000-0",
        detail="ValueError: no",
    )
    other = event._replace(kind="started", detail="", at=1733000001.0)
    raw = encode_events([event, other])
    assert decode_events("5-1", raw) == [event._replace(id="5-1/0"), other._replace(id="5-1/1")]
    broken = b'[["started","t","n","q","x",1.0,"",""],[1,2],"no",["a","b","c","d",1,2,"",""]]'
    assert decode_events("5-2", broken) == [
        TaskEvent("a", "b", "c", "d", 1, 2.0, "", "", "5-2/3")
    ], "rows that are no event's are left out"
    assert decode_events("5-3", b"not json") == []
    assert decode_events("5-4", None) == []


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        (None, None),
        ("0", "0-0"),
        ("0-0", "0-0"),
        ("1733000000000-7", "1733000000000-7"),
        ("1733000000000-7/12", "1733000000000-7/12"),
    ],
)
def test_where_a_reader_starts(after: str | None, expected: str | None) -> None:
    assert check_after(after) == expected


@pytest.mark.parametrize("after", ["$", "now", "12", "1-2-3", "", "1-2/", "1-2/x", "/3"])
def test_a_reader_refuses_a_start_that_is_no_id(after: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(after))):
        check_after(after)


def test_reports_coalesce_and_keep_the_last_events_for_the_acker() -> None:
    reports = Reports(clock=lambda: 7.0, own_queue=lambda: "tasks")
    for i in range(1000):
        reports.report("t1", i / 1000, f"step {i}")
    reports.report("t2", 0.5, None)
    started = reports.event("started", task_id="t1", task_name="n", queue=None, attempt=1,
                            message_id="1-0")  # fmt: skip
    done = reports.event("succeeded", task_id="t1", task_name="n", queue="q", attempt=1,
                         message_id="1-0")  # fmt: skip
    reports.record(started)
    reports.record_final(done)
    assert (started.queue, done.queue, started.at) == ("tasks", "q", 7.0)
    progress, events = reports.take_for_writer()
    assert progress == {
        "t1": TaskProgress(fraction=0.999, note="step 999", at=7.0),
        "t2": TaskProgress(fraction=0.5, note=None, at=7.0),
    }
    assert events == [started], "the writer never takes a run's last event"
    assert reports.take_for_ack() == ({}, [done])
    reports.report("t1", 1.0, None)
    reports.put_back(progress, events)
    assert reports.progress["t1"].fraction == 1.0, "a newer report wins over a put-back one"
    taken, events = reports.take_for_ack()
    assert (set(taken), events) == ({"t1", "t2"}, [started])
    assert not reports.holds_anything


def test_the_keys_are_the_groups_own_in_both_layouts() -> None:
    assert _keys.events("g") == "taskrunner:g:events"
    assert _keys.progress("g", "7-0") == "taskrunner:g:progress:7-0"
    assert _keys.events("g", "cluster") == "taskrunner:{g}:events"
    assert _keys.progress("g", "7-0", "cluster") == "taskrunner:{g}:progress:7-0"
    for layout in ("go", "cluster"):
        for queue in ("events", "progress:x"):
            with pytest.raises(ValueError, match="collide"):
                _keys.stream_keys(None, "g", queue, layout)


def test_the_config_checks_its_event_fields() -> None:
    assert TaskRunnerConfig(consumer_group="g").events is False
    with pytest.raises(TypeError, match="events must be True or False, got 1"):
        TaskRunnerConfig(consumer_group="g", events=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="events_maxlen"):
        TaskRunnerConfig(consumer_group="g", events_maxlen=0)


# Progress --------------------------------------------------------------------------


async def test_progress_reported_1000_times_costs_about_one_write_a_second(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = CountingBackend()
    runner = make_runner(backend)
    seen: list[TaskProgress | None] = []

    @runner.task(keep_result=60)
    async def crunch(steps: int, ctx: TaskContext) -> None:
        for i in range(steps):
            await ctx.progress((i + 1) / steps, f"{i + 1} of {steps}")
            await trio.sleep(0.005)  # 1,000 reports in 5 s

    handle = await runner.dispatch("crunch", 1000)
    async with serving(runner):
        await trio.sleep(2.5)
        info = await runner.get_task(handle)
        assert info is not None
        assert info.state is TaskState.RUNNING
        seen.append(info.progress)
        await handle.result(timeout=30)
        at_result = await runner.get_task(handle)
        await trio.sleep(2)
    writes = backend.calls["write_events"]
    assert 4 <= writes <= 7, f"{writes} writes for 1,000 reports over 5 s"
    assert all(events == 0 for _, events in backend.writes), "events are off"
    assert seen[0] is not None
    assert 0.2 < seen[0].fraction < 0.6
    assert at_result is not None
    assert at_result.progress is not None
    assert at_result.progress.fraction == 1.0, "the last report went with the ack"
    final = await runner.get_task(handle)
    assert final is not None
    assert final.state is TaskState.SUCCEEDED
    assert final.progress is not None
    assert (final.progress.fraction, final.progress.note) == (1.0, "1000 of 1000")
    assert final.progress.at == pytest.approx(backend.unix_time(trio.current_time()), abs=5)
    assert await admin.get_task(backend, "g", handle.id) == final


async def test_many_tasks_reporting_share_each_write(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = CountingBackend()
    runner = make_runner(backend, num_workers=20)

    @runner.task()
    async def crunch(payload: None, ctx: TaskContext) -> None:
        for i in range(100):
            await ctx.progress(i / 100)
            await trio.sleep(0.03)  # 3 s each

    await runner.dispatch_many("crunch", [None] * 20)
    async with serving(runner):
        await trio.sleep(10)
    assert backend.calls["write_events"] <= 5
    assert max(updates for updates, _ in backend.writes) == 20, "one write for all 20 tasks"


async def test_progress_expires_and_a_bare_context_only_checks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    update = ProgressUpdate(task_id="t", progress=TaskProgress(fraction=0.5, at=1.0))
    await backend.write_events("g", None, [update])
    assert await backend.read_progress("g", "t") == update.progress
    await trio.sleep(24 * 3600 + 1)
    assert await backend.read_progress("g", "t") is None, "a day after its last report"
    bare = TaskContext(
        message_id="1-0", task_id="1-0", task_name="n", attempt=1, max_attempts=1,
        deadline=None, dispatched_at=0.0,
    )  # fmt: skip
    await bare.progress(0.5)
    with pytest.raises(ValueError, match="2"):
        await bare.progress(2)


# Events ----------------------------------------------------------------------------


def kinds_by_task(events: list[TaskEvent]) -> dict[str, list[tuple[str, int]]]:
    """``queue/task id`` -> its events' kinds and attempts (stream ids, task ids of
    plain dispatches, are unique per stream only)."""
    found: dict[str, list[tuple[str, int]]] = {}
    for event in events:
        found.setdefault(f"{event.queue}/{event.task_id}", []).append((event.kind, event.attempt))
    return found


async def test_every_kind_of_event_with_its_ids_and_times(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = CountingBackend()
    runner = make_runner(backend, events=True, reclaim_delay=30.0, queues=("tasks", "work"))
    tries: Counter[str] = Counter()

    @runner.task(max_retry=3, queue="work")
    async def flaky(name: str) -> str:
        tries[name] += 1
        if name == "twice" and tries[name] == 1:
            raise Retry(delay=1.0)
        if name == "never":
            raise ValueError("no luck")
        return name

    @runner.task(keep_result=60)
    async def slow(payload: None) -> None:
        await trio.sleep(100)

    begun = backend.unix_time(trio.current_time())
    ok = await runner.dispatch("flaky", "ok")
    twice = await runner.dispatch("flaky", "twice")
    never = await runner.dispatch("flaky", "never")
    (many,) = await runner.dispatch_many("flaky", ["many"])
    later = await runner.dispatch_delayed("flaky", "later", delay=5)
    dropped = await runner.dispatch("slow")
    assert await runner.cancel(dropped)
    async with serving(runner):
        stopped = await runner.dispatch("slow")
        await wait_until(lambda: tries["later"] == 1 and tries["never"] == 3)
        await trio.sleep(2)
        assert await runner.cancel(stopped)
        await trio.sleep(3)
    events = await all_events(backend)
    got = kinds_by_task(events)
    assert got[f"work/{ok.id}"] == [("dispatched", 0), ("started", 1), ("succeeded", 1)]
    assert got[f"work/{many.id}"] == [("dispatched", 0), ("started", 1), ("succeeded", 1)]
    assert got[f"work/{twice.id}"] == [
        ("dispatched", 0), ("started", 1), ("retried", 1), ("started", 2), ("succeeded", 2),
    ]  # fmt: skip
    assert got[f"work/{never.id}"][-1] == ("failed", 3)
    assert [k for k, _ in got[f"work/{never.id}"]].count("retried") == 2
    assert got[f"work/{later.id}"] == [("dispatched", 0), ("started", 1), ("succeeded", 1)]
    assert got[f"tasks/{dropped.id}"] == [("dispatched", 0), ("cancelled", 0)]
    assert got[f"tasks/{stopped.id}"] == [("dispatched", 0), ("started", 1), ("cancelled", 1)]
    by_kind = {(e.task_id, e.kind): e for e in events if e.task_name == "flaky"}
    slow_by_kind = {(e.task_id, e.kind): e for e in events if e.task_name == "slow"}
    assert by_kind[never.id, "failed"].detail.startswith("TaskMaxRetryExceeded")
    assert slow_by_kind[dropped.id, "cancelled"].detail == "queued"
    assert slow_by_kind[stopped.id, "cancelled"].detail == "running"
    assert by_kind[ok.id, "started"].queue == "work"
    assert by_kind[ok.id, "succeeded"].message_id == ok.id
    assert by_kind[later.id, "dispatched"].message_id == ""  # not in a stream yet
    assert {e.task_name for e in events} == {"flaky", "slow"}
    assert by_kind[never.id, "failed"].queue == "work"
    ids = [e.id for e in events]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids, key=lambda i: tuple(map(int, i.replace("/", "-").split("-"))))
    assert all(begun <= e.at <= backend.unix_time(trio.current_time()) for e in events)
    assert backend.carried["add"] == backend.calls["add"], "every dispatch carried its event"
    assert backend.carried["ack"] + backend.carried["finish"] > 0


async def test_events_ride_in_the_calls_made_anyway(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def run(events: bool) -> CountingBackend:
        backend = CountingBackend()
        runner = make_runner(backend, events=events, num_workers=8)
        done: list[int] = []

        @runner.task()
        async def quick(n: int) -> None:
            done.append(n)

        for n in range(40):
            await runner.dispatch("quick", n)
        await runner.dispatch_many("quick", list(range(40, 100)))
        async with serving(runner):
            await wait_until(lambda: len(done) == 100)
            await trio.sleep(3)
        return backend

    off, on = await run(False), await run(True)
    calls_off = {k: v for k, v in off.calls.items() if k != "write_events"}
    calls_on = {k: v for k, v in on.calls.items() if k != "write_events"}
    assert calls_on == calls_off, "the same calls, no more"
    assert on.calls["write_events"] == 0, "quick runs' events all rode with their acks"
    assert not off.carried
    assert off.calls["write_events"] == 0
    assert await off.last_event_id("g") == "0-0", "nothing written while off"
    events = await all_events(on)
    assert Counter(e.kind for e in events) == {"dispatched": 100, "started": 100, "succeeded": 100}


async def test_a_long_run_has_its_start_written_within_a_second(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = CountingBackend()
    runner = make_runner(backend, events=True)

    @runner.task()
    async def long(payload: None) -> None:
        await trio.sleep(60)

    handle = await runner.dispatch("long")
    async with serving(runner):
        await trio.sleep(2)
        kinds = [(e.task_id, e.kind) for e in await all_events(backend)]
        assert kinds == [(handle.id, "dispatched"), (handle.id, "started")]
        assert backend.calls["write_events"] == 1


async def test_the_stream_is_capped(autojump_clock: trio.testing.MockClock) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, events=True, events_maxlen=20)

    @runner.task()
    async def quick(n: int) -> None:
        pass

    for n in range(100):  # one entry per dispatch
        await runner.dispatch("quick", n)
    async with serving(runner):
        await trio.sleep(5)
    events = await all_events(backend)
    entries = {e.id.partition("/")[0] for e in events}
    assert len(entries) == 20, "the last 20 entries"
    assert [e.kind for e in events[-3:]] == ["succeeded"] * 3, "the newest are kept"


async def test_a_reader_follows_from_now_resumes_and_stops_cleanly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, events=True)

    @runner.task()
    async def quick(n: int) -> None:
        pass

    before = await runner.dispatch("quick", 0)
    got: list[TaskEvent] = []
    reader = runner.events()

    async def follow() -> None:
        async for event in reader:
            got.append(event)
            if event.kind == "succeeded" and event.task_id != before.id:
                break

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follow)
        await trio.sleep(1)  # the reader waits, blocked, from now
        async with serving(runner):
            after = await runner.dispatch("quick", 1)
            await wait_until(
                lambda: bool(got) and (got[-1].kind, got[-1].task_id) == ("succeeded", after.id)
            )
    assert all(e.task_id != before.id or e.kind != "dispatched" for e in got), "from now"
    assert (got[0].task_id, got[0].kind) in {(after.id, "dispatched"), (before.id, "started")}
    assert reader.last_id in (got[-1].id, got[-1].id.partition("/")[0])
    resumed = admin.events(backend, "g", after=got[0].id)
    first = await resumed.__anext__()
    assert first == got[1], "resumes right after the id given"
    with pytest.raises(ValueError, match="event id"):
        runner.events(after="now")
    entry = got[-1].id.partition("/")[0]
    batch = [e for e in await all_events(backend) if e.id.startswith(entry + "/")]
    assert batch[-1] == got[-1]


async def test_events_need_an_event_log() -> None:
    inner = MemoryBackend()

    class NoLog:  # every Backend method, no EventLog one
        def __getattr__(self, name: str) -> Any:
            if name in ("write_events", "read_events", "last_event_id", "read_progress"):
                raise AttributeError(name)
            return getattr(inner, name)

    with pytest.raises(ValueError, match="events=True needs a backend with an event log"):
        make_runner(NoLog(), events=True)  # type: ignore[arg-type]
