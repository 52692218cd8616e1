"""``taskrunner inspect``, ``cancel`` and ``dead``: subprocesses against a real server.

The application is ``tests/apps/cli_app.py``, as for tests/test_cli.py (whose
helpers these tests share); each test gets its own queue on an emptied server.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio
from test_cli import GROUP, app_env, cli, ok, wait_for, workers

from taskrunner import _wire
from taskrunner.backends.redis import RedisBackend
from taskrunner.testing import ServerProcess, sync_command


@pytest.fixture
def queue() -> str:
    return f"q{uuid.uuid4().hex[:8]}"


@pytest.fixture
def env(redis_url: str, queue: str) -> dict[str, str]:
    return app_env(redis_url, queue)


def _redis(url: str, queue: str) -> list[str]:
    return ["--url", url, "--group", GROUP, "--queue", queue]


def inspect(env: dict[str, str], url: str, queue: str, task_id: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(
        ok(cli(env, "inspect", task_id, *_redis(url, queue), "--json"))
    )
    return doc


def _one_line_failure(result: Any, code: int = 1) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert len(result.stderr.splitlines()) == 1, result.stderr
    text: str = result.stderr
    return text


def test_inspect_and_cancel_a_queued_and_a_scheduled_task(
    env: dict[str, str], redis_url: str, queue: str, redis_server: ServerProcess
) -> None:
    redis = _redis(redis_url, queue)
    queued = ok(cli(env, "dispatch", "cli_app:runner", "record", "--payload", '{"n": 1}')).strip()
    doc = inspect(env, redis_url, queue, queued)
    assert doc["state"] == "queued"
    assert doc["task"] == "record"
    assert doc["payload"] == {"n": 1}
    assert doc["entry_id"] == queued
    human = ok(cli(env, "inspect", queued, *redis))
    assert "state:" in human
    assert "queued" in human
    assert '{"n": 1}' in human

    assert ok(cli(env, "cancel", queued, *redis)).strip() == f"cancelled task {queued}"
    assert sync_command(redis_server.port, "XLEN", f"taskrunner:{GROUP}:{queue}") == 0
    assert "no task" in _one_line_failure(cli(env, "inspect", queued, *redis))
    assert "not cancelled" in _one_line_failure(cli(env, "cancel", queued, *redis))

    later = ok(
        cli(env, "dispatch", "cli_app:runner", "record", "--payload", '{"n": 2}', "--delay", "3600")
    ).strip()
    doc = inspect(env, redis_url, queue, later)
    assert doc["state"] == "scheduled"
    assert doc["run_at"] == pytest.approx(time.time() + 3600, abs=60)
    assert ok(cli(env, "cancel", later, *redis)).strip() == f"cancelled task {later}"
    assert sync_command(redis_server.port, "ZCARD", f"taskrunner:{GROUP}:delayed_tasks") == 0
    _one_line_failure(cli(env, "inspect", later, *redis))


def test_inspect_shows_a_kept_result_and_a_kept_failure(
    env: dict[str, str], redis_url: str, queue: str, tmp_path: Path
) -> None:
    redis = _redis(redis_url, queue)
    with workers(env, tmp_path) as (worker,):
        worker.wait_serving()
        good = ok(cli(env, "dispatch", "cli_app:runner", "kept", "--payload", '{"n": 21}')).strip()
        bad = ok(
            cli(env, "dispatch", "cli_app:runner", "kept", "--payload", '{"n": 1, "fail": "no"}')
        ).strip()

        def finished(task_id: str) -> dict[str, Any] | None:
            doc = inspect(env, redis_url, queue, task_id)
            return doc if doc["state"] in ("succeeded", "failed") else None

        doc = wait_for(lambda: finished(good), "the kept result")
        assert doc["state"] == "succeeded"
        assert doc["result"] == {"doubled": 42}
        assert doc["attempts"] == 1
        assert doc["started_at"] <= doc["finished_at"]
        assert '{"doubled": 42}' in ok(cli(env, "inspect", good, *redis))
        doc = wait_for(lambda: finished(bad), "the kept failure")
        assert doc["state"] == "failed"
        assert doc["error"] == {"type": "ValueError", "message": "asked to fail: no"}
        assert worker.stop() == 0


def _dead_letters(url: str, queue: str, count: int) -> None:
    async def main() -> None:
        async with RedisBackend.from_url(url, queue=queue) as backend:
            for n in range(count):
                message = _wire.encode_message(_wire.TaskMessage(task_name="record", payload=n))
                await backend.dead_letter(GROUP, f"{n + 1}-0", message, f"ValueError: boom {n}")

    trio.run(main)


def test_dead_list_show_replay_and_purge(
    env: dict[str, str], redis_url: str, queue: str, redis_server: ServerProcess
) -> None:
    redis = _redis(redis_url, queue)
    stream = f"taskrunner:{GROUP}:{queue}"
    _dead_letters(redis_url, queue, 3)
    listed = json.loads(ok(cli(env, "dead", "list", *redis, "--json")))
    assert [(d["task"], d["payload"], d["reason"], d["task_id"]) for d in listed] == [
        ("record", 0, "ValueError: boom 0", "1-0"),
        ("record", 1, "ValueError: boom 1", "2-0"),
        ("record", 2, "ValueError: boom 2", "3-0"),
    ]
    first, second, third = (d["id"] for d in listed)
    assert "ValueError: boom 1" in ok(cli(env, "dead", "list", *redis, "--after", first))
    shown = ok(cli(env, "dead", "show", second, *redis))
    assert "boom 1" in shown
    assert '"task_name":"record"' in shown
    assert "no dead letter" in _one_line_failure(cli(env, "dead", "show", "9-9", *redis))

    replayed = ok(cli(env, "dead", "replay", first, *redis))
    assert "replayed 1 of 1" in replayed
    assert sync_command(redis_server.port, "XLEN", stream) == 1
    again = cli(env, "dead", "replay", first, *redis)
    assert again.returncode == 1
    assert "not replayed (gone)" in again.stdout

    assert "--yes" in _one_line_failure(cli(env, "dead", "replay", "--all", *redis), 2)
    assert "--yes" in _one_line_failure(cli(env, "dead", "purge", third, *redis), 2)
    assert "--yes" in _one_line_failure(cli(env, "dead", "purge", "--all", *redis), 2)
    assert len(json.loads(ok(cli(env, "dead", "list", *redis, "--json")))) == 2, "nothing gone"

    assert ok(cli(env, "dead", "purge", third, *redis, "--yes")).startswith("deleted 1 ")
    doc = json.loads(ok(cli(env, "dead", "replay", "--all", "--yes", *redis, "--json")))
    assert [(d["id"], d["task_id"]) for d in doc] == [(second, "2-0")]
    assert doc[0]["entry_id"] is not None
    assert sync_command(redis_server.port, "XLEN", stream) == 2
    assert "no dead letters" in ok(cli(env, "dead", "list", *redis))
    assert json.loads(ok(cli(env, "dead", "purge", "--all", "--yes", *redis, "--json"))) == {
        "deleted": 0
    }


def test_inspect_cancel_and_dead_on_every_queue(
    env: dict[str, str], redis_url: str, redis_server: ServerProcess
) -> None:
    """Issue 24: without --queue, inspect, cancel and dead act on every queue of the
    group (found on the server); with it, on that queue alone."""
    orders, emails = f"o{uuid.uuid4().hex[:6]}", f"e{uuid.uuid4().hex[:6]}"
    _dead_letters(redis_url, orders, 1)
    _dead_letters(redis_url, emails, 2)

    async def queued() -> str:
        async with RedisBackend.from_url(redis_url) as backend:
            message = _wire.encode_message(_wire.TaskMessage(task_name="record", payload=1))
            (entry,) = await backend.add(GROUP, [message], queue=emails)
            return entry

    entry = trio.run(queued)
    base = ["--url", redis_url, "--group", GROUP]
    listed = json.loads(ok(cli(env, "dead", "list", *base, "--json")))
    assert sorted(d["queue"] for d in listed) == sorted([orders, emails, emails])
    only = json.loads(ok(cli(env, "dead", "list", *base, "--queue", orders, "--json")))
    assert [d["queue"] for d in only] == [orders]
    assert f"  {emails}  " in ok(cli(env, "dead", "list", *base)), "each line names its queue"
    doc = json.loads(ok(cli(env, "inspect", entry, *base, "--json")))
    assert doc["state"] == "queued"
    assert "no task" in _one_line_failure(cli(env, "inspect", entry, *base, "--queue", orders))
    assert "cancelled" in ok(cli(env, "cancel", entry, *base))
    assert sync_command(redis_server.port, "XLEN", f"taskrunner:{GROUP}:{emails}") == 0
    purged = json.loads(
        ok(cli(env, "dead", "purge", "--all", "--yes", *base, "--queue", emails, "--json"))
    )
    assert purged == {"deleted": 2}
    assert [d["queue"] for d in json.loads(ok(cli(env, "dead", "list", *base, "--json")))] == [
        orders
    ]
