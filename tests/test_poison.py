"""The delivery limit of a redelivered entry, decided without decoding it (pure)."""

from __future__ import annotations

import pytest

from taskrunner import Task
from taskrunner._execution.poison import (
    DeliveryLimit,
    ScheduledRun,
    delivery_limit,
    scheduled_run_in,
    task_names_in,
)
from taskrunner.errors import TaskMaxRetryExceeded


async def _noop(payload: object) -> None:
    return None


TASKS = {
    "once": Task(name="once", action=_noop),  # max_retry 1: one attempt
    "thrice": Task(name="thrice", action=_noop, max_retry=3),
    "zero": Task(name="zero", action=_noop, max_retry=0),  # 0 means 1
    "envoyé<b>": Task(name="envoyé<b>", action=_noop, max_retry=2),
}


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        (b'{"task_name":"once","payload":null}', ["once"]),
        # Go orders the fields differently and may indent: position and spacing are free
        (b'{"payload": {"a": 1}, "unique": false, "task_name" : "once"}', ["once"]),
        (b'{\n  "task_name":\t"thrice"\n}', ["thrice"]),
        # escapes are decoded: Go writes < as \u003c, Python's default writes e-acute escaped
        (b'{"task_name":"envoy\\u00e9\\u003cb>"}', ["envoy\u00e9<b>"]),
        ('{"task_name":"envoyé<b>"}'.encode(), ["envoy\u00e9<b>"]),
        (b'{"task_name":"a\\"b"}', ['a"b']),
        # one inside the payload is found too (the limit takes the most generous)
        (b'{"task_name":"once","payload":{"task_name":"thrice"}}', ["once", "thrice"]),
        # inside a JSON string the quotes are escaped, so nothing matches there
        (b'{"task_name":"once","payload":"{\\"task_name\\":\\"thrice\\"}"}', ["once"]),
        # not a string value, bad escapes, invalid UTF-8, unterminated: skipped
        (b'{"task_name":42}', []),
        (b'{"task_name":"bad\\x"}', []),
        (b'{"task_name":"\xff\xfe"}', []),
        (b'{"task_name":"once', []),
        (b"[" * 100_000, []),
        (b"", []),
    ],
)
def test_task_names_in(raw: bytes, names: list[str]) -> None:
    assert task_names_in(raw) == names


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b'{"task_name":"once"}', DeliveryLimit(limit=1, task_name="once")),
        (b'{"task_name":"thrice"}', DeliveryLimit(limit=3, task_name="thrice")),
        (b'{"task_name":"zero"}', DeliveryLimit(limit=1, task_name="zero")),
        (b'{"task_name":"envoy\\u00e9\\u003cb>"}', DeliveryLimit(limit=2, task_name="envoyé<b>")),
        # several registered names: the most generous, so a real task is never cut short
        (
            b'{"task_name":"once","payload":{"task_name":"thrice"}}',
            DeliveryLimit(limit=3, task_name="thrice"),
        ),
        (
            b'{"payload":{"task_name":"thrice"},"task_name":"once"}',
            DeliveryLimit(limit=3, task_name="thrice"),
        ),
        # names no registered task, or nothing readable: the fixed limit
        (b'{"task_name":"someone_elses"}', DeliveryLimit(limit=3, task_name=None)),
        (
            b'{"task_name":"someone_elses","payload":{"task_name":"once"}}',
            DeliveryLimit(limit=1, task_name="once"),
        ),
        (b"[" * 100_000, DeliveryLimit(limit=3, task_name=None)),
        (b"\x00\xff garbage", DeliveryLimit(limit=3, task_name=None)),
        (None, DeliveryLimit(limit=3, task_name=None)),
    ],
)
def test_delivery_limit(raw: bytes | None, expected: DeliveryLimit) -> None:
    assert delivery_limit(raw, TASKS) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, None),
        (b'{"task_name": "t", "payload": null}', None),
        (b'{"task_name": "t", "schedule": "s"}', None),  # no tick: not a periodic run
        (
            b'{"task_name": "t", "payload": null, "schedule": "nightly", "tick": 1748851260.0}',
            ScheduledRun(schedule="nightly", tick=1748851260.0, task_id=None),
        ),
        (
            b'{"task_name":"t","payload":{"schedule":"fake","tick":1,"id":"x"},'
            b'"id":"17-0","schedule":"real","tick":2.5e3}',
            ScheduledRun(schedule="real", tick=2500.0, task_id="17-0"),
        ),  # the payload's keys come first: the last of each is the message's
        (b'{"schedule": "bad \\q escape", "tick": 5}', None),
        (b'{"schedule": "s", "tick": "5"}', None),  # a tick must be a number
    ],
)
def test_scheduled_run_in_finds_the_messages_own_fields(
    raw: bytes | None, expected: ScheduledRun | None
) -> None:
    assert scheduled_run_in(raw) == expected


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        # a last attempt that raised: it failed, and says with what
        (
            TaskMaxRetryExceeded("job", "1-0", 2, ValueError("no")),
            "task 'job' (message 1-0) failed after 2 attempt(s): ValueError: no",
        ),
        (
            TaskMaxRetryExceeded("job", "1-0", 1),
            "task 'job' (message 1-0) failed after 1 attempt(s)",
        ),
        # given up on its delivery count: its worker died mid-run, or the run finished and
        # its ack died with the master; the count cannot tell, so the reason says neither
        (
            TaskMaxRetryExceeded("record", "7-1", 1, deliveries=2),
            "task 'record' (message 7-1) delivered 2 times without an outcome, past its "
            "1 attempt(s): not run again",
        ),
        (
            TaskMaxRetryExceeded("resize", "7-2", 2, deliveries=3),
            "task 'resize' (message 7-2) delivered 3 times without an outcome, past its "
            "2 attempt(s): not run again",
        ),
    ],
)
def test_the_reason_a_message_is_given_up_names_what_is_known(
    error: TaskMaxRetryExceeded, reason: str
) -> None:
    assert str(error) == reason
    assert "failed" not in reason or error.deliveries is None
