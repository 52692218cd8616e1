"""The task catalog: its document's bytes, and serving runners publishing what they serve
(three runners on one MemoryBackend, MockClock)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing
from _fleet import Partition, make_runner, start_each, wait_until

from taskrunner import InvalidTaskPayload
from taskrunner._serve.catalog import CATALOG_TTL, PUBLISH_INTERVAL, catalog_document
from taskrunner._wire import CatalogDocument, CatalogTask, decode_catalog, encode_catalog
from taskrunner.backends.memory import MemoryBackend

DOCS = Path(__file__).resolve().parent.parent / "docs"

DOCUMENT = CatalogDocument(
    host="web-1",
    instance="6f1d0c2a9b8e4f3a8c7d6e5f4a3b2c1d",
    expires=1796108068.5,
    tasks=(
        CatalogTask(name="resize", stream="taskrunner:shop:tasks", reservation_timeout=100.0),
        CatalogTask(
            name="sync_account",
            stream="taskrunner:shop:tasks",
            reservation_timeout=100.0,
            unique=True,
            unique_for=60.0,
            keyed=True,
        ),
    ),
)
BYTES = (
    b'{"host":"web-1","instance":"6f1d0c2a9b8e4f3a8c7d6e5f4a3b2c1d","expires":1796108068.5,'
    b'"tasks":[{"name":"resize","stream":"taskrunner:shop:tasks","reservation_timeout":100.0,'
    b'"unique":false,"unique_for":0.0,"keyed":false},{"name":"sync_account",'
    b'"stream":"taskrunner:shop:tasks","reservation_timeout":100.0,"unique":true,'
    b'"unique_for":60.0,"keyed":true}]}'
)


def test_the_document_bytes() -> None:
    assert encode_catalog(DOCUMENT) == BYTES
    assert decode_catalog(BYTES) == DOCUMENT
    assert BYTES.decode() in (DOCS / "redis-key-layout.md").read_text()


def test_keep_result_is_written_only_for_tasks_that_keep_results() -> None:
    task = CatalogTask(name="report", stream="s", keep_result=3600.0)
    raw = encode_catalog(CatalogDocument(host="h", instance="i", expires=1.0, tasks=(task,)))
    assert b'"keep_result":3600.0' in raw
    assert decode_catalog(raw).tasks == (task,)
    assert b"keep_result" not in BYTES


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (b"[]", "expected a JSON object"),
        (b"{", "not valid JSON"),
        (b'{"tasks":{}}', "field 'tasks' should be a list"),
        (b'{"tasks":[1]}', "a catalog task should be an object"),
        (b'{"tasks":[{"name":""}]}', "field 'name' should be a non-empty string"),
        (b'{"tasks":[{"name":"a","unique":"yes"}]}', "field 'unique' should be bool"),
        (b'{"expires":"soon","tasks":[]}', "field 'expires' should be seconds"),
        (b'{"tasks":[{"name":"a","unique_for":NaN}]}', "field 'unique_for' should be seconds"),
    ],
)
def test_what_is_not_a_document(raw: bytes, match: str) -> None:
    with pytest.raises(InvalidTaskPayload, match=match):
        decode_catalog(raw)


def test_what_a_runner_publishes() -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, host="web-1")

    @runner.task(unique=True, unique_for=60, unique_key=lambda p: p["id"])
    async def sync_account(payload: dict[str, str]) -> None:
        pass

    @runner.task(name="resize", keep_result=600)
    async def resize(payload: object) -> None:
        pass

    @runner.task(unique=True, unique_for=5)
    async def nightly(payload: object) -> None:
        pass

    doc = catalog_document("web-1", "i", runner.tasks, "taskrunner:g:tasks", now=100.0)
    assert doc.expires == 100.0 + CATALOG_TTL
    reservation = runner.config.reclaim_delay / 3
    assert doc.tasks == (
        CatalogTask(
            name="nightly",
            stream="taskrunner:g:tasks",
            reservation_timeout=reservation,
            unique=True,
            unique_for=5,
        ),
        CatalogTask(
            name="resize",
            stream="taskrunner:g:tasks",
            reservation_timeout=reservation,
            keep_result=600,
        ),
        CatalogTask(
            name="sync_account",
            stream="taskrunner:g:tasks",
            reservation_timeout=reservation,
            unique=True,
            unique_for=60,
            keyed=True,
        ),
    )


def test_each_task_is_published_with_its_queues_stream() -> None:
    runner = make_runner(MemoryBackend(), queues=("critical", "low"))

    @runner.task(name="charge", queue="critical")
    async def charge(payload: object) -> None:
        pass

    @runner.task(name="plain")
    async def plain(payload: object) -> None:
        pass

    streams = {"critical": "taskrunner:g:critical", "low": "taskrunner:g:low"}
    doc = catalog_document("web-1", "i", runner.tasks, "taskrunner:g:tasks", 1.0, streams)
    assert {task.name: task.stream for task in doc.tasks} == {
        "charge": "taskrunner:g:critical",
        "plain": "taskrunner:g:tasks",
    }


async def test_serving_runners_publish_what_they_serve(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Published before serve reports started, refreshed every interval (with tasks
    registered meanwhile), removed when serve stops; a crashed runner's document stops
    counting after CATALOG_TTL and goes with the next publish."""
    backend = MemoryBackend()
    links = [Partition(backend) for _ in range(3)]
    runners = [make_runner(link, host=f"h{i}") for i, link in enumerate(links)]
    for runner in runners:

        @runner.task(name="resize")
        async def resize(payload: object) -> None:
            pass

    assert await backend.read_catalog("g") == []
    async with trio.open_nursery() as nursery:
        await nursery.start(runners[0].serve)
        (first,) = await backend.read_catalog("g")
        assert (first.host, first.instance) == ("h0", runners[0].instance_id)
        assert [t.name for t in first.tasks] == ["resize"]

        @runners[0].task(name="late")
        async def late(payload: object) -> None:
            pass

        await trio.sleep(PUBLISH_INTERVAL + 0.1)
        (again,) = await backend.read_catalog("g")
        assert [t.name for t in again.tasks] == ["late", "resize"]
        assert again.expires == pytest.approx(first.expires + PUBLISH_INTERVAL, abs=0.2)

        scopes = start_each(nursery, runners[1:])
        await wait_until(lambda: all(r.statistics().serving for r in runners))
        await trio.sleep(0.1)
        assert [d.host for d in await backend.read_catalog("g")] == ["h0", "h1", "h2"]

        scopes[0].cancel()  # h1 stops: its document goes at once
        await wait_until(lambda: not runners[1].statistics().serving)
        assert [d.host for d in await backend.read_catalog("g")] == ["h0", "h2"]

        links[2].cut = True  # h2 crashes: nothing removes its document
        scopes[1].cancel()
        await wait_until(lambda: not runners[2].statistics().serving)
        assert [d.host for d in await backend.read_catalog("g")] == ["h0", "h2"]
        await trio.sleep(CATALOG_TTL)
        assert [d.host for d in await backend.read_catalog("g")] == ["h0"]
        await trio.sleep(PUBLISH_INTERVAL)
        (catalog,) = [k for k in await backend.list_keys("g") if k.name == "taskrunner:g:catalog"]
        assert catalog.size == 1, "h0's next publish deleted h2's document"
        nursery.cancel_scope.cancel()
    assert await backend.read_catalog("g") == []
    assert "taskrunner:g:catalog" not in [k.name for k in await backend.list_keys("g")]
