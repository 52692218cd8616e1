"""The pages and actions of features other issues bring (task lookup and cancel,
dead-letter replay and purge: 14; schedules: 15), on a MemoryBackend. Pauses and
several queues are in tests/test_dashboard_queues.py.

A test of issue 14's features runs once they are part of taskrunner
(``taskrunner.admin`` has their API) and is skipped before, saying so; the
dashboard's own behaviour without them ("not available", 501) is tested here.
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
        }
        for name, (path, message) in checks.items():
            if has_admin(name):
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


async def test_the_schedules_page_shows_next_and_last_fire_and_outcome(
    autojump_clock: Any,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, host="h1")

    @runner.task("tick")
    async def tick(value: Any) -> None:
        pass

    runner.add_schedule("every-10s", task="tick", every=10)
    async with serving(runner), client(create_app(backend)) as http:
        await trio.sleep(25)
        (row,) = (await http.get("/api/groups/g/schedules")).json()["schedules"]
        page = (await http.get("/groups/g/schedules")).text
    assert (row["name"], row["task"], row["spec"]) == ("every-10s", "tick", "every 10s")
    assert row["last_fired"] is not None
    assert row["next_fire"] == row["last_fired"] + 10
    assert row["last_outcome"] == "succeeded"
    assert row["last_outcome_tick"] == row["last_fired"]
    assert "every-10s" in page
    assert "No schedules" in page  # the note is there, hidden: live.js shows it when none
    assert 'data-show-not="schedules.length" hidden' in page


async def test_a_group_without_schedules_says_so(autojump_clock: Any) -> None:
    async with client(create_app(MemoryBackend())) as http:
        page = (await http.get("/groups/g/schedules")).text
        twin = (await http.get("/api/groups/g/schedules")).json()
    assert twin == {"group": "g", "schedules": []}
    assert 'data-show-not="schedules.length">No schedules' in page
