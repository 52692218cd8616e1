"""The pages and actions of features other issues bring (task lookup and cancel,
dead-letter replay and purge: 14; schedules: 15; pauses: 18), on a MemoryBackend.

Each test runs once its feature is part of taskrunner (``taskrunner.admin`` has its
API, or the backend reads schedules) and is skipped before, saying which issue brings
it; the dashboard's own behaviour without them ("not available", 501) is tested in
tests/test_dashboard.py and here.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
import trio
from _fleet import make_runner, serving

from taskrunner.backends.memory import MemoryBackend
from taskrunner.dashboard import create_app
from taskrunner.dashboard._features import has_admin

TOKEN = "a-test-token-of-some-length"

needs_results = pytest.mark.skipif(
    not has_admin("get_task"), reason="task lookup comes with issue 14 (results)"
)
needs_replay = pytest.mark.skipif(
    not has_admin("replay_dead_letters"), reason="dead-letter replay comes with issue 14"
)
needs_flow = pytest.mark.skipif(
    not (has_admin("pause") or hasattr(MemoryBackend, "pause")),
    reason="pause and resume come with issue 18 (flow)",
)
needs_schedules = pytest.mark.skipif(
    not hasattr(MemoryBackend, "read_schedules"), reason="schedules come with issue 15"
)


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://dash")


async def logged_in(http: httpx.AsyncClient) -> str:
    page = await http.get("/login")
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found
    done = await http.post("/login", data={"csrf": found.group(1), "token": TOKEN})
    assert done.status_code == 303
    return found.group(1)


async def test_without_the_features_the_pages_say_so_and_actions_are_501(
    autojump_clock: Any,
) -> None:
    backend = MemoryBackend()
    async with client(create_app(backend, allow_actions=True, token=TOKEN)) as http:
        csrf = await logged_in(http)
        checks = {
            "get_task": ("/groups/g/tasks/1-0/cancel", "cancel is not available"),
            "replay_dead_letters": ("/groups/g/dead/replay", "dead-letter replay is not"),
            "purge_dead_letters": ("/groups/g/dead/purge", "dead-letter purge is not"),
            "pause": ("/groups/g/queues/tasks/pause", "pause and resume is not available"),
        }
        for name, (path, message) in checks.items():
            if has_admin(name) or hasattr(backend, name):
                continue
            answer = await http.post(path, data={"csrf": csrf, "all": "1"})
            assert answer.status_code == 501, path
            assert message in answer.text
        if not has_admin("get_task"):
            twin = (await http.get("/api/groups/g/tasks/1-0")).json()
            assert twin == {
                "available": False,
                "reason": "task lookup is not available: taskrunner.admin has no get_task()",
            }
        if not hasattr(backend, "read_schedules"):
            page = await http.get("/groups/g/schedules")
            assert "schedules are not available" in page.text


@needs_results
async def test_the_task_page_shows_a_task_and_cancels_it(autojump_clock: Any) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, host="h1")

    @runner.task("echo", keep_result=60)
    async def echo(value: Any) -> Any:
        return value

    queued = str(getattr(await runner.dispatch("echo", "<b>queued</b>"), "id", ""))
    async with client(create_app(backend, allow_actions=True, token=TOKEN)) as http:
        doc = (await http.get(f"/api/groups/g/tasks/{queued}")).json()
        assert (doc["state"], doc["task_name"], doc["cancellable"]) == ("queued", "echo", True)
        assert json.loads(doc["payload"]) == "<b>queued</b>"
        page = (await http.get(f"/groups/g/tasks/{queued}")).text
        assert "&lt;b&gt;queued&lt;/b&gt;" in page
        csrf = await logged_in(http)
        assert 'id="cancel"' in (await http.get(f"/groups/g/tasks/{queued}")).text
        done = await http.post(f"/groups/g/tasks/{queued}/cancel", data={"csrf": csrf})
        assert done.status_code == 303
        assert done.headers["location"].endswith("?done=cancelled")
        async with serving(runner):
            ran = str(getattr(await runner.dispatch("echo", 7), "id", ""))
            await trio.sleep(3)
            cancelled = (await http.get(f"/api/groups/g/tasks/{queued}")).json()
            succeeded = (await http.get(f"/api/groups/g/tasks/{ran}")).json()
    assert cancelled["state"] == "cancelled"
    assert (succeeded["state"], json.loads(succeeded["result"])) == ("succeeded", 7)
    assert succeeded["cancellable"] is False


@needs_replay
async def test_dead_letters_are_replayed_and_purged(autojump_clock: Any) -> None:
    backend = MemoryBackend()
    message = json.dumps({"task_name": "echo", "payload": 1}).encode()
    for n in range(3):
        await backend.dead_letter("g", f"{n + 1}-0", message, "ValueError: boom")
    async with client(create_app(backend, allow_actions=True, token=TOKEN)) as http:
        csrf = await logged_in(http)
        letters = (await http.get("/api/groups/g/dead")).json()["letters"]
        first = letters[0]["id"]
        page = (await http.get("/groups/g/dead")).text
        assert "Replay selected" in page
        done = await http.post("/groups/g/dead/replay", data={"csrf": csrf, "ids": first})
        assert done.status_code == 303
        assert await backend.length("g") == 1
        left = (await http.get("/api/groups/g/dead")).json()["letters"]
        assert [d["id"] for d in left] == [d["id"] for d in letters[1:]]
        done = await http.post("/groups/g/dead/purge", data={"csrf": csrf, "all": "1"})
        assert done.status_code == 303
        assert (await http.get("/api/groups/g/dead")).json()["letters"] == []


@needs_flow
async def test_a_queue_is_paused_and_resumed(autojump_clock: Any) -> None:
    backend: Any = MemoryBackend()
    runner = make_runner(backend, host="h1")

    @runner.task("echo")
    async def echo(value: Any) -> None:
        pass

    async with (
        serving(runner),
        client(create_app(backend, allow_actions=True, token=TOKEN)) as http,
    ):
        await trio.sleep(1)
        csrf = await logged_in(http)
        queue = (await http.get("/api/groups/g")).json()["queue"]["name"]
        assert "Pause</button>" in (await http.get("/groups/g")).text
        done = await http.post(f"/groups/g/queues/{queue}/pause", data={"csrf": csrf})
        assert done.status_code == 303
        assert queue in (await backend.paused("g")).queues
        assert "Resume</button>" in (await http.get("/groups/g")).text
        done = await http.post(f"/groups/g/queues/{queue}/resume", data={"csrf": csrf})
        assert done.status_code == 303
        assert not (await backend.paused("g")).queues


@needs_schedules
async def test_the_schedules_page_shows_next_and_last_fire_and_outcome(
    autojump_clock: Any,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, host="h1")

    @runner.task("tick")
    async def tick(value: Any) -> None:
        pass

    runner.add_schedule("every-10s", task="tick", every=10)  # type: ignore[attr-defined]
    async with serving(runner), client(create_app(backend)) as http:
        await trio.sleep(25)
        (row,) = (await http.get("/api/groups/g/schedules")).json()["schedules"]
        page = (await http.get("/groups/g/schedules")).text
    assert (row["name"], row["task"], row["spec"]) == ("every-10s", "tick", "every 10s")
    assert row["last_fire"] is not None
    assert row["next_fire"] > row["last_fire"]
    assert row["next_fire"] % 10 == 0
    assert row["last_outcome"] == "succeeded"
    assert "every-10s" in page
