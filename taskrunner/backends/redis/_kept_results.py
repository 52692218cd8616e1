"""A finish written as one transaction, with no script: the common case of kept results.

Theory of operation. A finish whose outcomes need nothing conditional (no workflow
step, and no entry-index mapping to end: the task was dispatched without an ``id``)
is one ``MULTI``/``EXEC`` block in the ack's pipeline (:func:`transaction`)::

    MULTI
    SET <result key> <document> PX <keep>     one per outcome with a document
    ZREM <stop requests> <entry id>...         the cancelled runs' (if any)
    ZMSCORE <result waiters> <task id>...      the kept results' tasks (if any)
    XACK <stream> <group> <id>...
    XDEL <stream> <id>...                      (delete on ack)
    EXEC

It is as atomic as ``lua/finish.lua``: nothing runs between a transaction's
commands, and one whose ``EXEC`` never arrived (the connection broke in the middle
of the write) runs none of them. So a result is never visible while its entry is
still pending, and never for a run that is then delivered again. It costs Redis
less than the script: the same commands without turning each argument into a Lua
string and each call's reply into a Lua value.

Waiters. A waiter reads the result key and, when there is no document, registers
its task among the result waiters, in one step (``lua/wait.lua``), before it
blocks on the task's notice. The transaction reads the waiters' scores after its
``SET``s, in the same atomic step, so every waiter is on one side of it:

- one that registered before the transaction is in the ``ZMSCORE`` reply
  (:func:`waited_outcomes`): for those tasks only, a second call,
  ``lua/finish.lua`` with those outcomes and no id to acknowledge, pushes the
  notice to every live registration (it writes the same document again, and drops
  registrations whose time is over), which wakes the blocked waiter;
- one that registers after the transaction reads the document in that same
  step, and never blocks.

So a kept result nobody waits for costs its one ``SET`` and its task id in the
``ZMSCORE``, and no script runs at all. If the runner dies between the two calls,
a waiter found in the reply is not woken by a notice: its blocking wait ends at
its slice's end (``WAIT_SLICE``, or its own timeout), and the ``lua/wait.lua``
that starts its next slice (or the look that ends its wait) reads the document.
A second call that fails fails the finish, which the acker repeats whole (the
acks are idempotent, the documents the same). A registration whose time is over
ends at the next wait of the group (``lua/wait.lua`` drops those) or at its
task's finish.

Only a client that sends a pipeline in one write on one connection can carry a
transaction (the native client, alone or behind Sentinel); a cluster refuses
``MULTI``, and a redis-py client's pipeline is not that: theirs is the script.

Pure: the commands and the reading of their replies; the I/O is the caller's.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

from taskrunner.backends._protocols.tracking import Outcome
from taskrunner.backends.redis._connection import CommandArg

__all__ = ["Keys", "plainly_written", "transaction", "waited_outcomes"]

Command = tuple[CommandArg, ...]


def plainly_written(outcomes: Sequence[Outcome]) -> bool:
    """Whether every outcome can be written by :func:`transaction`: none is a workflow's
    step, and none ends an entry-index mapping (which must check what the index holds)."""
    for outcome in outcomes:
        if outcome.indexed or outcome.workflow is not None:
            return False
    return True


class Keys:
    """The keys a transaction names, for one group and stream."""

    __slots__ = ("cancelled", "group", "result_head", "stream", "waiters")

    def __init__(
        self, group: str, stream: str, result_head: str, cancelled: str, waiters: str
    ) -> None:
        self.group = group
        self.stream = stream
        self.result_head = result_head
        """The head of the result keys: the task id follows."""
        self.cancelled = cancelled
        self.waiters = waiters


def transaction(
    keys: Keys,
    ids: Sequence[str],
    outcomes: Sequence[Outcome],
    keep_ms: dict[float, int],
    *,
    delete: bool,
) -> list[Command]:
    """The ``MULTI``/``EXEC`` block that acknowledges ``ids`` and writes ``outcomes``
    (all :func:`plainly_written`); ``keep_ms`` maps each outcome's ``keep`` to its
    ``PX`` argument."""
    head = keys.result_head
    commands: list[Command] = [("MULTI",)]
    kept: list[str] = []
    stopped: list[str] = []
    for outcome in outcomes:
        document = outcome.document
        if document is not None:
            task_id = outcome.task_id
            commands.append(("SET", head + task_id, document, "PX", keep_ms[outcome.keep]))
            kept.append(task_id)
        if outcome.cancelled:
            stopped.append(outcome.entry_id)
    if stopped:
        commands.append(("ZREM", keys.cancelled, *stopped))
    if kept:
        commands.append(("ZMSCORE", keys.waiters, *kept))
    if ids:
        commands.append(("XACK", keys.stream, keys.group, *ids))
        if delete:
            commands.append(("XDEL", keys.stream, *ids))
    commands.append(("EXEC",))
    return commands


def waited_outcomes(
    ids: Sequence[str], outcomes: Sequence[Outcome], executed: Sequence[Any]
) -> tuple[int, list[Outcome]]:
    """From the ``EXEC`` reply of :func:`transaction`'s block for ``ids`` and
    ``outcomes``: how many ids ``XACK`` acknowledged, and the outcomes whose task had
    a waiter registered (their notices are still to push)."""
    # Counted in C (map, count, any): this runs once per batch, over every outcome.
    documents = list(map(_document_of, outcomes))
    kept = len(documents) - documents.count(None)
    at = kept + (1 if any(map(_cancelled_of, outcomes)) else 0)
    waited: list[Outcome] = []
    if kept:
        scores = executed[at]
        if scores.count(None) != len(scores):  # someone waits (seldom)
            with_documents = [outcome for outcome in outcomes if outcome.document is not None]
            waited = [
                outcome
                for outcome, score in zip(with_documents, scores, strict=True)
                if score is not None
            ]
        at += 1
    return (int(executed[at]) if ids else 0), waited


_document_of = operator.attrgetter("document")
_cancelled_of = operator.attrgetter("cancelled")
