"""A flush after a real run leaves no key of the group behind, on a real server, in both
key layouts: the scenario of tests/test_flush_run.py (events, progress, a workflow, and
in the cluster layout a sharded group), the store asked with ``SCAN`` for every name
that names the group."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from taskrunner import admin
from taskrunner.backends import EventBatch, ProgressUpdate, TaskEvent, TaskProgress
from taskrunner.backends.redis import RedisBackend
from taskrunner.backends.redis._state import scan
from taskrunner.cli import keys as keys_cli
from taskrunner.testing._workflow_checks import _started

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from test_flush_run import fresh_group, run_then_flush


@pytest.mark.parametrize("key_layout", ["go", "cluster"])
async def test_a_flush_after_a_run_leaves_no_key(redis_url: str, key_layout: str) -> None:
    group = fresh_group()
    async with RedisBackend.from_url(redis_url, key_layout=key_layout) as backend:  # type: ignore[arg-type]

        async def names() -> list[str]:
            return [raw.decode() for raw in await scan(backend._client, f"*{group}*")]

        await run_then_flush(backend, group, names)


async def test_taskrunner_keys_counts_them_with_their_bounds(redis_url: str) -> None:
    group = fresh_group()
    async with RedisBackend.from_url(redis_url, key_layout="cluster") as backend:
        progress = ProgressUpdate(task_id="1-0", progress=TaskProgress(fraction=0.5))
        event = TaskEvent("started", "1-0", "t", "tasks", 1, 1733000000.0, "1-0", "")
        await backend.write_events(group, EventBatch(events=(event,)), [progress])
        await _started(backend, group)
        await backend.record_shard_count(group, 4)

        doc = await keys_cli.collect(backend, group)
        counts = {c["category"]: (c["layout"], c["found"]) for c in doc["counts"]}
        rendered = keys_cli.render(doc)
        await admin.flush(backend, group, confirm=True)

    assert counts["event streams"] == ("<= G", 1)
    assert counts["progress hashes"] == ("P", 1)
    assert counts["workflow records"] == ("W", 1)
    assert counts["shard counts"] == ("<= G", 1)
    assert f"taskrunner:{{{group}}}:events" in rendered
    assert "a running task's last progress" in rendered
