"""The dashboard's routes, JSON twins and safety, on a MemoryBackend through httpx's
ASGI transport (the browser tests are in tests/test_dashboard_browser.py)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import markupsafe
import pytest
import trio
from _fleet import make_runner, serving

from taskrunner import TaskRunner
from taskrunner.backends.memory import MemoryBackend
from taskrunner.dashboard import create_app, redact_url
from taskrunner.dashboard._safety import CSRF_COOKIE, SESSION_COOKIE, origin_matches

TOKEN = "a-test-token-of-some-length"
XSS = ["<script>window.__xss = 1</script>", '"><img src=x onerror="window.__xss=1">']

ACTIONS = [
    "/groups/g/tasks/1-0/cancel",
    "/groups/g/dead/replay",
    "/groups/g/dead/purge",
    "/groups/g/queues/tasks/pause",
    "/groups/g/queues/tasks/resume",
]


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://dash")


def runner_with_tasks(backend: MemoryBackend, host: str = "h1") -> TaskRunner:
    runner = make_runner(backend, host=host)

    @runner.task("echo")
    async def echo(value: Any) -> Any:
        return value

    return runner


@pytest.fixture
async def served() -> AsyncIterator[tuple[MemoryBackend, TaskRunner]]:
    backend = MemoryBackend()
    runner = runner_with_tasks(backend)
    async with serving(runner):
        for n in range(5):
            await runner.dispatch("echo", n)
        await trio.sleep(3)  # run them, and let the bulk writer flush the timings
        yield backend, runner


async def test_every_page_and_its_api_twin_answer(served: Any, autojump_clock: Any) -> None:
    backend, _ = served
    async with client(create_app(backend)) as http:
        for path in ("/", "/groups/g", "/groups/g/dead", "/groups/g/schedules"):
            page = await http.get(path)
            assert page.status_code == 200, path
            assert page.headers["content-type"].startswith("text/html")
            assert "script-src 'self'" in page.headers["content-security-policy"]
            twin = await http.get("/api" + path)
            assert twin.status_code == 200, path
            assert twin.headers["content-type"] == "application/json"


async def test_the_fleet_lists_the_groups_and_the_live_instances(
    served: Any, autojump_clock: Any
) -> None:
    backend, runner = served
    async with client(create_app(backend)) as http:
        fleet = (await http.get("/api/")).json()
        page = (await http.get("/")).text
    assert [g["name"] for g in fleet["groups"]] == ["g"]
    assert fleet["groups"][0]["leader"] == runner.instance_id
    assert fleet["groups"][0]["leader_host"] == "h1"
    assert [(i["host"], i["instance_id"]) for i in fleet["instances"]] == [
        ("h1", runner.instance_id)
    ]
    assert 'href="/groups/g"' in page


async def test_the_group_shows_leader_instances_queue_and_timing(
    served: Any, autojump_clock: Any
) -> None:
    backend, runner = served
    async with client(create_app(backend)) as http:
        doc = (await http.get("/api/groups/g")).json()
        page = (await http.get("/groups/g")).text
    assert doc["leader"]["owner"] == runner.instance_id
    assert doc["leader"]["host"] == "h1"
    assert doc["leader"]["ttl"] > 0
    (instance,) = doc["instances"]
    assert instance["host"] == "h1"
    assert instance["alive"]
    assert instance["leader"]
    assert instance["consumers"] == len(doc["consumers"]) >= 1
    assert {c["host"] for c in doc["consumers"]} == {"h1"}
    (queue,) = doc["queues"]
    assert (queue["name"], queue["stream"]) == ("tasks", backend.stream_keys("g").stream)
    assert (queue["length"], queue["paused"]) == (0, False)
    assert doc["queue"] == {"length": 0, "pending": 0, "lag": 0}
    (echo,) = doc["timing"]["tasks"]
    assert echo["name"] == "echo"
    assert echo["runs"] == 5
    assert doc["pool_source"] in ("published", "assumed")
    # The lookup form leads to the task route.
    assert 'action="/groups/g/tasks"' in page
    assert 'name="id"' in page


async def test_the_task_lookup_form_redirects_to_the_task_route(
    served: Any, autojump_clock: Any
) -> None:
    backend, _ = served
    async with client(create_app(backend)) as http:
        found = await http.get("/groups/g/tasks", params={"id": "17-0 /x"})
    assert found.status_code == 303
    assert found.headers["location"] == "/groups/g/tasks/17-0%20%2Fx"


async def test_an_unknown_group_is_a_404_naming_it(served: Any, autojump_clock: Any) -> None:
    backend, _ = served
    async with client(create_app(backend)) as http:
        page = await http.get("/groups/nope")
    assert page.status_code == 404
    assert "no group &#39;nope&#39; on this server" in page.text


async def test_pending_per_consumer_counts_what_is_running(autojump_clock: Any) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, host="h1")
    release = trio.Event()

    @runner.task("slow")
    async def slow(value: Any) -> None:
        await release.wait()

    async with serving(runner):
        for n in range(3):
            await runner.dispatch("slow", n)
        await trio.sleep(1)
        async with client(create_app(backend)) as http:
            doc = (await http.get("/api/groups/g")).json()
        release.set()
    assert doc["instances"][0]["running"] == 3
    assert sum(c["pending"] for c in doc["consumers"]) == 3
    assert doc["queue"]["pending"] == 3


# Dead letters and escaping ------------------------------------------------------


async def dead_letters_with_xss(backend: MemoryBackend) -> None:
    for n, bad in enumerate(XSS):
        raw = json.dumps({"task_name": "echo", "payload": bad}).encode()
        await backend.dead_letter("g", f"{n + 1}-0", raw, f"ValueError: {bad}")
    await backend.dead_letter("g", "9-0", XSS[0].encode(), "not a message: " + XSS[1])


async def test_dead_letters_are_listed_with_payload_and_error_escaped(autojump_clock: Any) -> None:
    backend = MemoryBackend()
    await dead_letters_with_xss(backend)
    async with client(create_app(backend)) as http:
        doc = (await http.get("/api/groups/g/dead")).json()
        page = (await http.get("/groups/g/dead")).text
    assert [d["message_id"] for d in doc["letters"]] == ["1-0", "2-0", "9-0"]
    assert [d["task_name"] for d in doc["letters"]] == ["echo", "echo", None]
    assert doc["letters"][0]["error"] == f"ValueError: {XSS[0]}"
    assert doc["letters"][2]["payload"] == XSS[0]  # not a message: the raw entry
    for bad in XSS:
        assert bad not in page
        assert str(markupsafe.escape(bad)) in page
    assert "<img" not in page
    assert "<script>window" not in page


async def test_a_task_name_or_group_with_markup_is_escaped(autojump_clock: Any) -> None:
    backend = MemoryBackend()
    group = '<b id="x">'
    await backend.dead_letter(group, "1-0", b"{}", XSS[1])
    async with client(create_app(backend)) as http:
        page = (await http.get("/groups/" + group.replace('"', "%22") + "/dead")).text
    assert '<b id="x">' not in page
    assert "&lt;b id=&#34;x&#34;&gt;" in page


# Safety --------------------------------------------------------------------------


def csrf_of(page: httpx.Response) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, "no CSRF field on the page"
    return found.group(1)


async def logged_in(http: httpx.AsyncClient) -> str:
    login = await http.get("/login")
    csrf = csrf_of(login)
    done = await http.post("/login", data={"csrf": csrf, "token": TOKEN})
    assert done.status_code == 303, done.text
    assert http.cookies.get(SESSION_COOKIE)
    return csrf


async def test_read_only_by_default_every_action_is_refused(
    served: Any, autojump_clock: Any
) -> None:
    backend, _ = served
    async with client(create_app(backend)) as http:
        page = await http.get("/groups/g")
        assert "read-only" in page.text
        assert 'method="post"' not in page.text
        for path in ACTIONS:
            refused = await http.post(path, data={"csrf": http.cookies[CSRF_COOKIE]})
            assert refused.status_code == 403, path
            assert "actions are disabled" in refused.text
        assert (await http.get("/login")).status_code == 403


async def test_actions_are_posts_only(served: Any, autojump_clock: Any) -> None:
    backend, _ = served
    async with client(create_app(backend, allow_actions=True, token=TOKEN)) as http:
        for path in ACTIONS:
            assert (await http.get(path)).status_code in (404, 405), path


async def test_an_action_needs_the_csrf_field_and_a_session(
    served: Any, autojump_clock: Any
) -> None:
    backend, _ = served
    async with client(create_app(backend, allow_actions=True, token=TOKEN)) as http:
        page = await http.get("/login")
        csrf = csrf_of(page)
        cookie = page.cookies[CSRF_COOKIE]
        assert cookie == csrf
        assert "samesite=strict" in page.headers["set-cookie"].lower()
        # No field, a wrong field: refused before anything else.
        for data in ({}, {"csrf": "x" * len(csrf)}):
            refused = await http.post("/groups/g/queues/tasks/pause", data=data)
            assert refused.status_code == 403
            assert "CSRF" in refused.text
        # The right field but not logged in.
        refused = await http.post("/groups/g/queues/tasks/pause", data={"csrf": csrf})
        assert refused.status_code == 403
        assert "log in" in refused.text
        # Another site's origin, even with the field.
        refused = await http.post(
            "/groups/g/queues/tasks/pause",
            data={"csrf": csrf},
            headers={"origin": "http://evil.example"},
        )
        assert refused.status_code == 403


async def test_the_token_opens_a_session_and_a_wrong_one_does_not(
    served: Any, autojump_clock: Any
) -> None:
    backend, _ = served
    async with client(create_app(backend, allow_actions=True, token=TOKEN)) as http:
        login = await http.get("/login")
        wrong = await http.post("/login", data={"csrf": csrf_of(login), "token": TOKEN + "x"})
        assert wrong.status_code == 403
        assert SESSION_COOKIE not in http.cookies
        csrf = await logged_in(http)
        assert "login" not in (await http.get("/")).headers.get("location", "")
        session_cookie = [
            c
            for c in (
                await http.post("/login", data={"csrf": csrf, "token": TOKEN})
            ).headers.get_list("set-cookie")
            if c.startswith(SESSION_COOKIE)
        ]
        assert session_cookie
        assert "httponly" in session_cookie[0].lower()
        assert "samesite=strict" in session_cookie[0].lower()
        # Logged in, with the field, from another site: still refused.
        evil = await http.post(
            "/groups/g/queues/tasks/pause",
            data={"csrf": csrf},
            headers={"origin": "http://evil.example"},
        )
        assert evil.status_code == 403
        assert "another site" in evil.text
        # Logged in, an action passes the checks.
        done = await http.post("/groups/g/queues/tasks/pause", data={"csrf": csrf})
        assert done.status_code == 303, done.text
        out = await http.post("/logout", data={"csrf": csrf})
        assert out.status_code == 303
        again = await http.post("/groups/g/queues/tasks/pause", data={"csrf": csrf})
        assert again.status_code == 403


async def test_a_token_is_generated_and_logged_once_when_none_is_given(
    served: Any, autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    backend, _ = served
    with caplog.at_level("WARNING", logger="taskrunner.dashboard"):
        create_app(backend, allow_actions=True)
    (record,) = [r for r in caplog.records if "token" in r.getMessage()]
    token = record.getMessage().rsplit(" ", 1)[1]
    assert len(token) >= 32
    with caplog.at_level("WARNING", logger="taskrunner.dashboard"):
        create_app(backend, allow_actions=False)
        create_app(backend, allow_actions=True, token=TOKEN)
    assert len([r for r in caplog.records if "token" in r.getMessage()]) == 1


async def test_the_server_is_shown_as_given_and_no_secret_travels_in_a_url(
    served: Any, autojump_clock: Any
) -> None:
    backend, _ = served
    app = create_app(backend, server=redact_url("redis://:hunter2@db:6379/0"))
    async with client(app) as http:
        page = (await http.get("/")).text
    assert "redis://db:6379/0" in page
    assert "hunter2" not in page


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:secret@host:6379/0", "redis://host:6379/0"),
        ("redis://user:secret@host:6379/0", "redis://host:6379/0"),
        ("rediss://user@host/1", "rediss://host/1"),
        ("redis://host", "redis://host"),
        ("redis://[::1]:6380/2", "redis://[::1]:6380/2"),
        ("unix:///tmp/redis.sock?db=3&password=secret", "unix:///tmp/redis.sock?db=3"),
        ("redis://host:notaport/0", "redis://..."),
        (
            "redis+sentinel://u:pw@s1:26379,s2:26379/mymaster/0?sentinel_password=spw&failover_hold=5",
            "redis+sentinel://s1:26379,s2:26379/mymaster/0?failover_hold=5",
        ),
        ("rediss+sentinel://s1/m?sentinel_username=a", "rediss+sentinel://s1/m"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    ("origin", "host", "same"),
    [
        (None, "dash:8000", True),
        ("http://dash:8000", "dash:8000", True),
        ("http://DASH:8000", "dash:8000", True),
        ("http://evil:8000", "dash:8000", False),
        ("null", "dash:8000", False),
        ("http://dash:8000", None, False),
    ],
)
def test_origin_matches(origin: str | None, host: str | None, same: bool) -> None:
    assert origin_matches(origin, host) is same


def test_create_app_refuses_bad_settings() -> None:
    backend = MemoryBackend()
    with pytest.raises(ValueError, match=r"^refresh must be .* got 0$"):
        create_app(backend, refresh=0)
    with pytest.raises(ValueError, match=r"^token must be at least 8 characters, got 3$"):
        create_app(backend, allow_actions=True, token="abc")
    with pytest.raises(ValueError, match=r"^sample interval must be .* got -1$"):
        create_app(backend, sample_interval=-1)
    with pytest.raises(TypeError, match="Inspection"):
        create_app(object())  # type: ignore[arg-type]
