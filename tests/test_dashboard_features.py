"""The pages and actions of features other issues bring (task lookup and cancel,
dead-letter replay and purge: 14; schedules: 15), on a MemoryBackend. Pauses and
several queues are in tests/test_dashboard_queues.py; the same in a real browser in
tests/test_dashboard_browser.py.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import trio
from _fleet import make_runner, serving

from taskrunner.backends.memory import MemoryBackend
from taskrunner.dashboard import create_app

TOKEN = "a-test-token-of-some-length"


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://dash")


async def logged_in(http: httpx.AsyncClient) -> str:
    page = await http.get("/login")
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found
    done = await http.post("/login", data={"csrf": found.group(1), "token": TOKEN})
    assert done.status_code == 303
    return found.group(1)


async def test_the_task_page_shows_a_task_and_cancels_it(autojump_clock: Any) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, host="h1")

    @runner.task("echo", keep_result=60)
    async def echo(value: Any) -> Any:
        return value

    queued = (await runner.dispatch("echo", "<b>queued</b>")).id
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
            ran = (await runner.dispatch("echo", 7)).id
            await trio.sleep(3)
            cancelled = (await http.get(f"/api/groups/g/tasks/{queued}")).json()
            succeeded = (await http.get(f"/api/groups/g/tasks/{ran}")).json()
    assert cancelled["state"] == "cancelled"
    assert (succeeded["state"], json.loads(succeeded["result"])) == ("succeeded", 7)
    assert succeeded["cancellable"] is False


async def test_an_unknown_task_is_a_404_saying_why_it_may_be(autojump_clock: Any) -> None:
    async with client(create_app(MemoryBackend())) as http:
        page = await http.get("/groups/g/tasks/1-0")
        twin = await http.get("/api/groups/g/tasks/1-0")
        cancel = await http.post("/groups/g/tasks/1-0/cancel")
    assert page.status_code == 404
    assert "No task 1-0 in group g: unknown, or done without a kept result" in page.text
    assert (twin.status_code, twin.json()) == (404, {"error": "not found"})
    assert cancel.status_code == 403  # read-only


async def test_cancelling_a_finished_task_says_there_is_nothing_to_cancel(
    autojump_clock: Any,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, host="h1")

    @runner.task("echo", keep_result=60)
    async def echo(value: Any) -> Any:
        return value

    async with (
        serving(runner),
        client(create_app(backend, allow_actions=True, token=TOKEN)) as http,
    ):
        done_id = (await runner.dispatch("echo", 1)).id
        await trio.sleep(2)
        csrf = await logged_in(http)
        page = (await http.get(f"/groups/g/tasks/{done_id}")).text
        assert 'data-show="cancellable" hidden' in page  # no cancel for a done task
        done = await http.post(f"/groups/g/tasks/{done_id}/cancel", data={"csrf": csrf})
    assert done.headers["location"] == f"/groups/g/tasks/{done_id}?done=not-cancelled"


async def test_dead_letters_are_replayed_and_purged(autojump_clock: Any) -> None:
    backend = MemoryBackend()
    message = json.dumps({"task_name": "echo", "payload": 1}).encode()
    for n in range(3):
        await backend.dead_letter("g", f"{n + 1}-0", message, "ValueError: boom")
    async with client(create_app(backend, allow_actions=True, token=TOKEN)) as http:
        csrf = await logged_in(http)
        letters = (await http.get("/api/groups/g/dead")).json()["letters"]
        assert [d["task_id"] for d in letters] == ["1-0", "2-0", "3-0"]
        first = letters[0]["id"]
        page = (await http.get("/groups/g/dead")).text
        assert "Replay selected" in page
        assert 'href="/groups/g/tasks/1-0"' in page  # each row links to its task
        done = await http.post("/groups/g/dead/replay", data={"csrf": csrf, "ids": first})
        assert done.headers["location"] == "/groups/g/dead?done=replayed"
        assert await backend.length("g") == 1
        left = (await http.get("/api/groups/g/dead")).json()["letters"]
        assert [d["id"] for d in left] == [d["id"] for d in letters[1:]]
        again = await http.post("/groups/g/dead/replay", data={"csrf": csrf, "ids": first})
        assert again.headers["location"] == "/groups/g/dead?done=none-replayed"
        assert await backend.length("g") == 1  # replayed once, however often asked
        done = await http.post("/groups/g/dead/purge", data={"csrf": csrf, "all": "1"})
        assert done.headers["location"] == "/groups/g/dead?done=purged"
        assert (await http.get("/api/groups/g/dead")).json()["letters"] == []
        done = await http.post("/groups/g/dead/purge", data={"csrf": csrf, "all": "1"})
        assert done.headers["location"] == "/groups/g/dead?done=none-purged"


async def test_replay_all_dispatches_every_dead_letter_again(autojump_clock: Any) -> None:
    backend = MemoryBackend()
    for n in range(3):
        message = json.dumps({"task_name": "echo", "payload": n}).encode()
        await backend.dead_letter("g", f"{n + 1}-0", message, "ValueError: boom")
    async with client(create_app(backend, allow_actions=True, token=TOKEN)) as http:
        csrf = await logged_in(http)
        done = await http.post("/groups/g/dead/replay", data={"csrf": csrf, "all": "1"})
        assert done.headers["location"] == "/groups/g/dead?done=replayed"
        assert (await http.get("/api/groups/g/dead")).json()["letters"] == []
    assert await backend.length("g") == 3


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
