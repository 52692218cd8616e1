"""A result's wait and a cancel as plans of steps, driven by both producers.

Theory of operation. Waiting for a result and cancelling a task take several round
trips whose order and stopping rules are the same on either client: the producers
differ only in whether a round trip is awaited. So each is a generator here (h11's
way): it yields the :class:`Step` to run, is sent the reply, and returns the outcome.
:class:`~taskrunner.producer.Producer` runs each step with redis-py,
:class:`~taskrunner.producer.AsyncProducer` with redis.asyncio; neither decides
anything of its own. A plan does no I/O: it reads the clock (a wait's deadline) and
its arguments only.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Sequence
from typing import Any, Literal

import attrs

from taskrunner.backends._protocols.tracking import CANCEL_TRIES, lock_to_give
from taskrunner.backends.redis._step_cancel import step_cancellation
from taskrunner.errors import BackendError
from taskrunner.producer._core import (
    ProducerCore,
    raw_bytes,
    registration_ms,
    wait_slice,
    was_cancelled,
)
from taskrunner.producer._workflows import step_cancel_call

Kind = Literal["wait", "track", "finish", "command", "get"]
"""What a step runs: one of the producer's scripts (``lua/wait.lua``, ``lua/track.lua``,
``lua/finish.lua``) with ``keys`` and ``args``, a command (``args`` itself, sent as
``execute_command``), or a ``GET`` of the key ``args[0]``."""


@attrs.frozen
class Step:
    """One round trip of a plan (see :data:`Kind`)."""

    kind: Kind
    args: Sequence[Any]
    keys: Sequence[Any] = ()


Plan = Generator[Step, Any, Any]
"""A plan: it yields steps, is sent each step's reply, and returns its outcome."""


def result_wait(
    core: ProducerCore, task_id: str, limit: float, socket_timeout: float | None
) -> Generator[Step, Any, bytes | None]:
    """The result document kept under ``task_id``, waited for up to ``limit`` seconds
    (``None``: none came), on a client whose socket timeout is ``socket_timeout``.

    In slices the socket timeout allows: one call of ``lua/wait.lua`` (the result, else
    this waiter registered for it in the same step: a runner that finishes the task
    after this pushes its notice), then a blocking ``BLMOVE`` of the one-element notice
    onto itself (the document, left in place for every other waiter; sub-second
    timeouts need Redis 6); at the deadline, one last ``GET``.
    """
    key, notice, waiters, inner = core.result_keys(task_id)
    deadline = time.monotonic() + limit
    while (left := deadline - time.monotonic()) > 0:
        wait = min(left, wait_slice(socket_timeout))
        raw = raw_bytes((yield Step("wait", [inner, registration_ms(wait)], [key, waiters])))
        if raw is not None:
            return raw
        blmove = ("BLMOVE", notice, notice, "RIGHT", "LEFT", f"{max(wait, 0.001):.3f}")
        raw = raw_bytes((yield Step("command", blmove)))
        if raw is not None:
            return raw
    # One last look: a notice can expire before a slow waiter blocks.
    return raw_bytes((yield Step("get", (key,))))


def cancellation(core: ProducerCore, task_id: str) -> Generator[Step, Any, bool]:
    """Cancel task ``task_id``, as ``TaskRunner.cancel`` does: ``lua/track.lua`` on the
    producer's streams, again while a unique task's lock is named (then given), and
    ``lua/finish.lua`` for a queued or delayed step of a workflow (removed and counted
    in its workflow). Returns ``False`` when the task is finished or unknown.

    Raises:
        BackendError: the unique lock changed on every one of ``CANCEL_TRIES`` tries.
    """
    lock: str | None = None
    for _ in range(CANCEL_TRIES):  # a unique task's lock is named, then given
        call = core.cancel_call(task_id, lock)
        if call is None:  # an id naming no shard of the group
            return False
        keys, args = call
        reply = yield Step("track", args, keys)
        lock = lock_to_give(reply)
        if lock is None:
            step = step_cancel_call(core, task_id, reply)
            if step is None:
                return was_cancelled(reply)
            # A queued or delayed step: removed and counted in its workflow.
            done = yield Step("finish", step[1], step[0])
            return step_cancellation(done, None).state is not None
    raise BackendError(
        f"cancel of task {task_id!r} gave up: its unique lock changed on every try",
        maybe_applied=False,
    )
