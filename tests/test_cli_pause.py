"""``taskrunner pause|resume`` on a real server, and what ``stats`` and ``top`` show of it."""

from __future__ import annotations

import json

import pytest
import trio

from taskrunner import admin
from taskrunner.backends import Paused
from taskrunner.backends.redis import RedisBackend
from taskrunner.cli import main

GROUP = "shop"


def _make_group(url: str) -> None:
    async def make() -> None:
        async with RedisBackend.from_url(url) as backend:
            await backend.add(GROUP, [b"{}"])
            await backend.read(GROUP, "c", 1, 0)

    trio.run(make)


def _paused(url: str) -> Paused:
    async def read() -> Paused:
        async with RedisBackend.from_url(url) as backend:
            return await admin.paused(backend, GROUP)

    return trio.run(read)


def test_pause_and_resume_from_the_shell(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _make_group(redis_url)
    at = ("--url", redis_url, "--group", GROUP)
    assert main(["pause", *at, "--queue", "low"]) == 0
    assert capsys.readouterr().out == ("queue low of group shop paused; paused now: queues low\n")
    assert main(["pause", *at, "--task", "charge"]) == 0
    assert capsys.readouterr().out.endswith("paused now: queues low; tasks charge\n")
    assert main(["pause", *at, "--task", "charge"]) == 0
    assert "task charge of group shop was paused already" in capsys.readouterr().out
    assert _paused(redis_url) == Paused(queues=frozenset({"low"}), tasks=frozenset({"charge"}))

    assert main(["stats", *at, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["paused"] == {"queues": ["low"], "tasks": ["charge"]}
    assert main(["stats", *at]) == 0
    assert "paused:    queues low; tasks charge\n" in capsys.readouterr().out
    assert main(["top", *at, "--once"]) == 0
    screen = capsys.readouterr().out
    assert "paused" in screen
    assert "queues low; tasks charge" in screen

    assert main(["resume", *at, "--queue", "low"]) == 0
    assert capsys.readouterr().out == (
        "queue low of group shop resumed; paused now: tasks charge\n"
    )
    assert main(["resume", *at, "--queue", "low"]) == 0
    assert "queue low of group shop was not paused" in capsys.readouterr().out
    assert main(["resume", *at, "--task", "charge"]) == 0
    assert capsys.readouterr().out.endswith("paused now: nothing\n")
    assert _paused(redis_url) == Paused()


@pytest.mark.parametrize("what", [[], ["--queue", "low", "--task", "charge"]])
def test_pause_takes_exactly_one_queue_or_task(
    what: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["pause", "--url", "redis://127.0.0.1:1", "--group", GROUP, *what])
    assert exit_.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_pause_of_an_unknown_group_is_one_line(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _make_group(redis_url)
    assert main(["pause", "--url", redis_url, "--group", "typo", "--queue", "low"]) == 1
    err = capsys.readouterr().err
    assert err == "taskrunner pause: error: no group 'typo' on this server; groups: shop\n"
