"""The MULTI/EXEC block of a finish with no script (``_kept_results``): its commands
and the reading of its reply, as tables (pure; the server's side is
tests/redis/test_redis_kept_transaction.py)."""

from __future__ import annotations

import pytest

from taskrunner.backends import Outcome
from taskrunner.backends.redis._kept_results import (
    Keys,
    plainly_written,
    transaction,
    waited_outcomes,
)

KEYS = Keys("g", "s", "r:", "stops", "waiters")
DOC = b"{}"


def kept(entry_id: str, keep: float = 60.0) -> Outcome:
    return Outcome(entry_id=entry_id, task_id=entry_id, document=DOC, keep=keep, notify=60.0)


@pytest.mark.parametrize(
    ("outcomes", "plain"),
    [
        ([], True),
        ([kept("1-0")], True),
        ([Outcome(entry_id="1-0", task_id="1-0", cancelled=True)], True),
        ([kept("1-0"), Outcome(entry_id="2-0", task_id="t", indexed=True)], False),
        ([Outcome(entry_id="1-0", task_id="1-0", workflow="w", step="a")], False),
    ],
)
def test_only_outcomes_with_nothing_to_check_are_written_plainly(
    outcomes: list[Outcome], plain: bool
) -> None:
    assert plainly_written(outcomes) is plain


def test_the_documents_come_before_the_waiters_read_and_the_acks() -> None:
    outcomes = [kept("1-0"), Outcome(entry_id="2-0", task_id="2-0", cancelled=True), kept("3-0", 5)]
    commands = transaction(KEYS, ["1-0", "2-0", "3-0"], outcomes, {60.0: 60000, 5: 5000},
                           delete=True)  # fmt: skip
    assert commands == [
        ("MULTI",),
        ("SET", "r:1-0", DOC, "PX", 60000),
        ("SET", "r:3-0", DOC, "PX", 5000),
        ("ZREM", "stops", "2-0"),
        ("ZMSCORE", "waiters", "1-0", "3-0"),
        ("XACK", "s", "g", "1-0", "2-0", "3-0"),
        ("XDEL", "s", "1-0", "2-0", "3-0"),
        ("EXEC",),
    ]


def test_without_delete_on_ack_or_ids_there_is_less_to_send() -> None:
    assert transaction(KEYS, ["1-0"], [], {}, delete=False) == [
        ("MULTI",),
        ("XACK", "s", "g", "1-0"),
        ("EXEC",),
    ]
    assert transaction(KEYS, [], [kept("1-0")], {60.0: 60000}, delete=True) == [
        ("MULTI",),
        ("SET", "r:1-0", DOC, "PX", 60000),
        ("ZMSCORE", "waiters", "1-0"),
        ("EXEC",),
    ]


def test_the_reply_names_the_acks_and_the_waited_tasks() -> None:
    outcomes = [kept("1-0"), Outcome(entry_id="2-0", task_id="2-0", cancelled=True), kept("3-0")]
    executed = [b"OK", b"OK", 1, [None, b"1764651234123"], 3, 3]
    acked, waited = waited_outcomes(["1-0", "2-0", "3-0"], outcomes, executed)
    assert acked == 3
    assert waited == [outcomes[2]]
    assert waited_outcomes(["1-0"], [], [1, 1]) == (1, [])
    assert waited_outcomes([], [kept("1-0")], [b"OK", [None]]) == (0, [])
