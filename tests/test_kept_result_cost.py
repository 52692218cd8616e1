"""A kept success's outcome, built the short way (issue 29): the same document and the
same outcome as the general way."""

from __future__ import annotations

import pytest

from taskrunner import TaskRunner, TaskRunnerConfig, _wire
from taskrunner._config import ConfigHolder
from taskrunner._execution.outcomes import outcome
from taskrunner._serve.acker import Acker
from taskrunner._serve.finishing import Finishing
from taskrunner._wire import (
    decode_message,
    encode_message,
    keeps_result_alone,
    new_message,
)
from taskrunner.backends import QueueEntry
from taskrunner.backends.memory import MemoryBackend

NOW = 1796108038.3314567
"""The backend's clock in these tests (unix seconds)."""


def test_a_message_that_keeps_results_alone_is_told_apart_from_one_saying_more() -> None:
    runner = TaskRunner(TaskRunnerConfig(consumer_group="g"), MemoryBackend())

    @runner.task(keep_result=60.0)
    async def t(payload: object) -> None:
        pass

    task = runner.tasks["t"]
    alone = decode_message(encode_message(new_message(task, None)))
    assert alone.keep_result == 60.0
    assert keeps_result_alone(alone.extras)
    assert keeps_result_alone(None)  # a plain message (its task's keep_result applies)
    for more in (
        new_message(task, None, id="x"),
        new_message(task, None, attempts=1),
        new_message(task, None, dispatched_at=5.0),
        new_message(task, None, schedule="s", tick=5.0),
    ):
        decoded = decode_message(encode_message(more))
        assert not keeps_result_alone(decoded.extras)


class ClockedBackend(MemoryBackend):
    def now(self) -> float:
        return NOW


@pytest.mark.parametrize("events", [False, True])  # the short way, then the general one
def test_a_kept_success_is_acknowledged_with_the_document_the_general_way_writes(
    events: bool,
) -> None:
    backend = ClockedBackend()
    config = TaskRunnerConfig(consumer_group="g", events=events)
    runner = TaskRunner(config, backend)

    @runner.task(keep_result=60.0)
    async def t(payload: object) -> None:
        pass

    task = runner.tasks["t"]
    acker = Acker(backend, ConfigHolder(config))
    finishing = Finishing(ConfigHolder(config), backend, acker, runner.tasks)
    raw = encode_message(new_message(task, None))
    message = decode_message(raw)
    entry = QueueEntry(id="1796108038123-0", payload=raw, delivery_count=2)

    finishing.succeeded(entry, task, message, 60.0, 1796108038.1254567, {"w": 1}, ended=True)

    [(_, kept)] = acker._tracked
    expected_document = _wire.encode_result(
        _wire.succeeded(
            "t",
            {"w": 1},
            attempts=2,
            enqueued_at=1796108038.123,
            started_at=1796108038.1254567,
            finished_at=NOW,
        )
    )
    assert kept.document == expected_document
    assert kept == outcome(entry.id, message, 60.0, expected_document, state="succeeded")
