"""A group's queues on the dashboard: how they are found (pure, with tables), each
listed with its length, lag, pending and paused state, and paused and resumed per
queue and per task, on a MemoryBackend with a running runner (MockClock).

The browser tests of the same (a real server, live updates) are in
tests/test_dashboard_browser.py.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
import trio
from _fleet import make_runner, serving

from taskrunner import TaskRunner, admin
from taskrunner._wire import CatalogDocument, CatalogTask
from taskrunner.backends.memory import MemoryBackend
from taskrunner.dashboard import create_app
from taskrunner.dashboard._queues import queue_of_stream, queues_of, task_queues

TOKEN = "a-test-token-of-some-length"

# How a stream is named back ------------------------------------------------------

DEFAULT = MemoryBackend()
SHARED = MemoryBackend(prefix="taskrunner", queue="jobs")


def stream_of(backend: MemoryBackend) -> Any:
    return lambda name: backend.stream_keys("g", name).stream


@pytest.mark.parametrize(
    ("backend", "stream", "queue"),
    [
        (DEFAULT, "taskrunner:g:tasks", "tasks"),  # the backend's own
        (DEFAULT, "taskrunner:g:critical", "critical"),
        (DEFAULT, "taskrunner:g:low-prio_2", "low-prio_2"),
        (DEFAULT, "taskrunner:other:critical", None),  # another group's
        (DEFAULT, "taskrunner:g:", None),  # no name
        (DEFAULT, "taskrunner:g:tasks:dead", None),  # not a queue name (':')
        (DEFAULT, "taskrunner:g:catalog", None),  # the layout refuses the name
        (DEFAULT, "elsewhere:critical", None),  # another layout
        (SHARED, "taskrunner:jobs", "jobs"),  # an explicit prefix: <prefix>:<queue>
        (SHARED, "taskrunner:critical", "critical"),
        (SHARED, "taskrunner:g:critical", None),
    ],
)
def test_a_catalog_stream_names_its_queue(
    backend: MemoryBackend, stream: str, queue: str | None
) -> None:
    default = backend.stream_keys("g")
    assert queue_of_stream(stream, default, stream_of(backend)) == queue


@pytest.mark.parametrize(
    ("streams", "paused", "queues"),
    [
        ([], [], ["tasks"]),
        (["taskrunner:g:tasks", "taskrunner:g:tasks"], [], ["tasks"]),
        (["taskrunner:g:low", "taskrunner:g:critical"], [], ["tasks", "critical", "low"]),
        (["taskrunner:g:low"], ["bulk"], ["tasks", "bulk", "low"]),  # a paused one stays
        (["taskrunner:g:low"], ["low", "tasks"], ["tasks", "low"]),
        (["taskrunner:x:low", "taskrunner:g:a:b"], [], ["tasks"]),
    ],
)
def test_the_queues_of_a_group_are_its_own_the_catalogs_and_the_paused(
    streams: list[str], paused: list[str], queues: list[str]
) -> None:
    default = DEFAULT.stream_keys("g")
    assert queues_of(default, streams, paused, stream_of(DEFAULT)) == queues


def doc(host: str, expires: float, **tasks: str) -> CatalogDocument:
    return CatalogDocument(
        host=host,
        instance=host,
        expires=expires,
        tasks=tuple(
            CatalogTask(name=name, stream=stream, reservation_timeout=60.0)
            for name, stream in tasks.items()
        ),
    )


def test_each_task_has_its_queue_and_the_newest_document_wins() -> None:
    catalog = [
        doc("b", 20.0, echo="taskrunner:g:fast"),
        doc("a", 10.0, echo="taskrunner:g:tasks", batch="taskrunner:g:bulk", odd="x:y"),
    ]
    assert task_queues(catalog, DEFAULT.stream_keys("g"), stream_of(DEFAULT)) == {
        "echo": "fast",
        "batch": "bulk",
        "odd": None,
    }


# The group page and its twin -------------------------------------------------------


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://dash")


async def logged_in(http: httpx.AsyncClient) -> str:
    page = await http.get("/login")
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found
    done = await http.post("/login", data={"csrf": found.group(1), "token": TOKEN})
    assert done.status_code == 303
    return found.group(1)


def three_queue_runner(backend: MemoryBackend, ran: list[str]) -> TaskRunner:
    runner = make_runner(backend, host="h1", queues=("critical", "tasks", "bulk"))

    @runner.task("urgent", queue="critical")
    async def urgent(value: Any) -> None:
        ran.append(f"urgent {value}")

    @runner.task("echo")
    async def echo(value: Any) -> None:
        ran.append(f"echo {value}")

    @runner.task("batch", queue="bulk")
    async def batch(value: Any) -> None:
        ran.append(f"batch {value}")

    return runner


def by_name(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in rows}


async def test_every_queue_is_listed_and_pausing_one_stops_its_work(
    autojump_clock: Any,
) -> None:
    backend = MemoryBackend()
    ran: list[str] = []
    runner = three_queue_runner(backend, ran)
    app = create_app(backend, allow_actions=True, token=TOKEN)
    async with serving(runner), client(app) as http:
        await trio.sleep(1)
        doc = (await http.get("/api/groups/g")).json()
        assert [q["name"] for q in doc["queues"]] == ["tasks", "bulk", "critical"]
        assert [q["stream"] for q in doc["queues"]] == [
            backend.stream_keys("g", q).stream for q in ("tasks", "bulk", "critical")
        ]
        assert {t["name"]: t["queue"] for t in doc["timing"]["tasks"]} == {
            "batch": "bulk",
            "echo": "tasks",
            "urgent": "critical",
        }
        csrf = await logged_in(http)
        page = (await http.get("/groups/g")).text
        assert 'action="/groups/g/queues/bulk/pause"' in page
        done = await http.post("/groups/g/queues/bulk/pause", data={"csrf": csrf})
        assert (done.status_code, done.headers["location"]) == (303, "/groups/g?done=paused")
        assert (await admin.paused(backend, "g")).queues == {"bulk"}
        await trio.sleep(2)  # the runners notice within about a second
        for n in range(3):
            await runner.dispatch("batch", n)
            await runner.dispatch("echo", n)
            await runner.dispatch("urgent", n)
        await trio.sleep(3)
        doc = (await http.get("/api/groups/g")).json()
        queues = by_name(doc["queues"])
        assert {name: q["paused"] for name, q in queues.items()} == {
            "tasks": False,
            "bulk": True,
            "critical": False,
        }
        assert (queues["bulk"]["length"], queues["bulk"]["lag"]) == (3, 3)
        assert queues["tasks"]["lag"] == queues["critical"]["lag"] == 0
        assert doc["queue"] == {"length": 3, "pending": 0, "lag": 3}
        assert doc["paused_queues"] == ["bulk"]
        assert sorted(ran) == [f"{t} {n}" for t in ("echo", "urgent") for n in range(3)]
        fleet = (await http.get("/api/")).json()
        assert [(g["queues"], g["paused"]) for g in fleet["groups"]] == [(3, ["bulk"])]
        page = (await http.get("/groups/g")).text
        assert 'action="/groups/g/queues/bulk/resume"' in page
        sample = await app.state.sampler.sample("g")
        assert (sample.queue_length, sample.lag) == (3, 3)

        done = await http.post("/groups/g/queues/bulk/resume", data={"csrf": csrf})
        assert (done.status_code, done.headers["location"]) == (303, "/groups/g?done=resumed")
        await trio.sleep(3)
        doc = (await http.get("/api/groups/g")).json()
    assert not by_name(doc["queues"])["bulk"]["paused"]
    assert by_name(doc["queues"])["bulk"]["lag"] == 0
    assert sorted(r for r in ran if r.startswith("batch")) == [f"batch {n}" for n in range(3)]


async def test_a_paused_queue_no_runner_names_stays_listed(autojump_clock: Any) -> None:
    backend = MemoryBackend()
    await admin.pause(backend, "g", queue="gone")
    await backend.add("g", [b"{}"])
    async with client(create_app(backend)) as http:
        doc = (await http.get("/api/groups/g")).json()
        page = (await http.get("/groups/g")).text
    assert [(q["name"], q["paused"]) for q in doc["queues"]] == [
        ("tasks", False),
        ("gone", True),
    ]
    assert '<td data-bind="name">gone</td>' in page
    assert "Pause</button>" not in page  # read-only: no forms at all


async def test_a_task_is_paused_and_resumed_from_the_group_page(autojump_clock: Any) -> None:
    backend = MemoryBackend()
    ran: list[str] = []
    runner = three_queue_runner(backend, ran)
    async with (
        serving(runner),
        client(create_app(backend, allow_actions=True, token=TOKEN)) as http,
    ):
        await trio.sleep(1)
        csrf = await logged_in(http)
        assert 'action="/groups/g/task-names/echo/pause"' in (await http.get("/groups/g")).text
        done = await http.post("/groups/g/task-names/echo/pause", data={"csrf": csrf})
        assert (done.status_code, done.headers["location"]) == (
            303,
            "/groups/g?done=task-paused",
        )
        assert (await admin.paused(backend, "g")).tasks == {"echo"}
        await trio.sleep(2)
        await runner.dispatch("echo", 1)
        await runner.dispatch("urgent", 1)
        await trio.sleep(3)
        doc = (await http.get("/api/groups/g")).json()
        tasks = by_name(doc["timing"]["tasks"])
        assert (tasks["echo"]["paused"], tasks["urgent"]["paused"]) == (True, False)
        assert doc["paused_tasks"] == ["echo"]
        assert ran == ["urgent 1"]  # echo's run is parked, not run
        page = (await http.get("/groups/g")).text
        assert 'action="/groups/g/task-names/echo/resume"' in page
        assert (
            "Task paused: runners park its runs"
            in (await http.get("/groups/g?done=task-paused")).text
        )
        done = await http.post("/groups/g/task-names/echo/resume", data={"csrf": csrf})
        assert done.status_code == 303
        await trio.sleep(3)
        doc = (await http.get("/api/groups/g")).json()
    assert not by_name(doc["timing"]["tasks"])["echo"]["paused"]
    assert sorted(ran) == ["echo 1", "urgent 1"]


async def test_a_pause_of_a_name_that_is_no_queue_is_refused(autojump_clock: Any) -> None:
    backend = MemoryBackend()
    async with client(create_app(backend, allow_actions=True, token=TOKEN)) as http:
        csrf = await logged_in(http)
        refused = await http.post("/groups/g/queues/a%20b/pause", data={"csrf": csrf})
    assert refused.status_code == 400
    assert "queue &#39;a b&#39; must have no spaces and no &#39;:&#39;" in refused.text
    assert not await admin.paused(backend, "g")


# Every queue (issue 24) --------------------------------------------------------------


async def test_a_queue_with_messages_is_listed_before_any_runner_serves_it(
    autojump_clock: Any,
) -> None:
    backend = MemoryBackend()
    await backend.add("g", [b"{}"], queue="imports")  # a producer's queue nobody serves
    await backend.dead_letter("g", "1-0", b"{}", "boom", queue="exports")
    app = create_app(backend, allow_actions=True, token=TOKEN)
    async with client(app) as http:
        csrf = await logged_in(http)
        doc = (await http.get("/api/groups/g")).json()
        queues = by_name(doc["queues"])
        assert set(queues) == {"tasks", "imports", "exports"}
        assert queues["imports"]["length"] == 1
        dead = (await http.get("/groups/g/dead")).text
        assert "exports" in dead, "every queue's dead letters are listed, with their queue"
        assert 'value="exports:' in dead, "replay and purge name the letter's queue"
        (letter,) = await admin.dead_letters(backend, "g")
        done = await http.post(
            "/groups/g/dead/purge", data={"csrf": csrf, "ids": f"exports:{letter.id}"}
        )
        assert done.status_code == 303
        assert await admin.dead_letters(backend, "g") == [], "purged from its queue"


async def test_the_first_render_knows_the_sampler_runs_and_labels_both_throughputs(
    autojump_clock: Any,
) -> None:
    backend = MemoryBackend()
    await backend.add("g", [b"{}"])
    app = create_app(backend, sample_interval=1.0)
    async with trio.open_nursery() as nursery, client(app) as http:
        nursery.start_soon(app.state.sampler.run)
        await trio.sleep(0.5)
        page = (await http.get("/groups/g")).text
        notice = re.search(r'<p class="small" id="not-sampling"[^>]*>', page)
        assert notice is not None
        assert "hidden" in notice.group(0), "the sampler runs: its absence is not claimed"
        assert "Throughput (measured)" in page
        assert "capacity estimate" in page
        doc = (await http.get("/api/groups/g")).json()
        assert "measured_tps" in doc["timing"]
        nursery.cancel_scope.cancel()
    page = (await client(app).get("/groups/g")).text
    notice = re.search(r'<p class="small" id="not-sampling"[^>]*>', page)
    assert notice is not None
    assert "hidden" not in notice.group(0), "stopped: the page says so"
