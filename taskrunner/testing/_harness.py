"""Registration, hang guard, stall retry and helpers shared by the contract checks."""

from __future__ import annotations

import contextlib
import functools
import re
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeAlias

import trio

from taskrunner import _keys
from taskrunner.backends._protocols import Backend
from taskrunner.backends._protocols.queue import GroupInfo, QueueEntry

ContractCheck: TypeAlias = Callable[[Backend], Awaitable[None]]
"""One contract check: takes a backend, raises :class:`AssertionError` on a breach."""

CHECK_TIMEOUT = 10.0
"""Seconds (trio's clock) a single check may take before it fails as hung."""

_SLACK = 0.02
"""Real-time tolerance for lower bounds: servers count idle time in whole milliseconds."""
_LATE = 1.0
"""Generous real-time tolerance for upper bounds (scheduling, network round trips)."""
_ID_CLOCK_TOLERANCE = 30.0
"""How far an id's millisecond part may be from :meth:`SharedState.now` (clock skew)."""

_ID_RE = re.compile(r"[0-9]+-[0-9]+")
_registry: list[ContractCheck] = []


class _MissedWindow(Exception):
    """The run was too slow to decide a "not yet" assertion; the check is retried."""


_ATTEMPTS = 6
"""Tries of a check whose timing windows a stall made inconclusive. Three were not
enough at load 19 on two cores: check_locks missed its 0.3 s window three times
running (0.31, 0.35, 0.31 s) on fakeredis."""
_RETRY_PAUSE = 1.0
"""Longer than any ttl a check leaves behind, so a retry starts from a quiet store.
Keys that live longer and that other checks count (heartbeats: ``count_heartbeats``
is global in the go layout) are written with :func:`_heartbeat`, which deletes them
however the attempt ends."""


def _within(start: float, limit: float) -> None:
    """Raise :class:`_MissedWindow` unless less than ``limit`` seconds passed since
    ``start`` (trio's clock, taken before the call that started the interval).

    A "not yet" assertion (the lease is still held, the entry is not claimable
    yet) is only decided by the contract while the server-side interval is
    surely below its limit; call this after the observing call returns and
    before asserting. Under ``MockClock`` it never fires.
    """
    elapsed = trio.current_time() - start
    if elapsed >= limit:
        raise _MissedWindow(f"{elapsed:.3f} s passed where the check needed < {limit} s")


def _contract_check(fn: ContractCheck) -> ContractCheck:
    """Register ``fn`` in :data:`CONTRACT_CHECKS`, wrapped in the hang guard and
    retried (with fresh names) when a stall made a timing window inconclusive."""

    @functools.wraps(fn)
    async def check(backend: Backend) -> None:
        missed: list[str] = []
        for _ in range(_ATTEMPTS):
            try:
                with trio.fail_after(CHECK_TIMEOUT):
                    await fn(backend)
            except trio.TooSlowError:
                raise AssertionError(
                    f"{fn.__name__} did not finish within {CHECK_TIMEOUT} s: a backend call hung"
                ) from None
            except _MissedWindow as exc:
                missed.append(str(exc))
                await trio.sleep(_RETRY_PAUSE)
            else:
                return
        raise AssertionError(
            f"{fn.__name__} missed its timing windows {_ATTEMPTS} times ({'; '.join(missed)}): "
            "the backend or machine is too slow for the suite's 0.1 s margins"
        )

    _registry.append(check)
    return check


# Helpers ------------------------------------------------------------------


def _name(kind: str) -> str:
    return f"contract-{kind}-{secrets.token_hex(4)}"


def _lock_key(backend: Backend, group: str, suffix: str) -> str:
    """A unique lock key of ``group`` in the backend's key layout (``taskrunner:unique:``
    + ``suffix`` in the go layout, where locks are every group's)."""
    return _keys.unique_prefix(group, backend.key_layout) + suffix


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq)


def _ids(entries: Sequence[QueueEntry]) -> list[str]:
    return [e.id for e in entries]


def _shares_stream(backend: Backend, group: str, other: str) -> bool:
    """Whether the backend gives both groups one stream (an explicit shared prefix)."""
    return backend.stream_keys(group) == backend.stream_keys(other)


def _delete_on_ack(backend: Backend) -> bool:
    return bool(getattr(backend, "delete_on_ack", False))


async def _fresh_group(backend: Backend) -> str:
    """A new group whose cursor is at the end of the stream, with nothing pending."""
    group, primer = _name("group"), _name("primer")
    while await backend.read(group, primer, 1000, 0):
        pass
    await backend.delete_consumer(group, primer)
    return group


@contextlib.asynccontextmanager
async def _heartbeat(backend: Backend, host: str, *, group: str) -> AsyncIterator[None]:
    """A 30 s heartbeat of ``host`` (instance ``"instance"``) for the block, removed
    when it exits, also by a missed window's retry or a failed assertion."""
    await backend.heartbeat(host, "instance", 30.0, group=group)
    try:
        yield
    finally:
        await backend.remove_heartbeat(host, "instance", group=group)


async def _drain(backend: Backend, group: str, consumer: str) -> list[QueueEntry]:
    """Everything the group has not delivered yet (no waiting)."""
    out: list[QueueEntry] = []
    while batch := await backend.read(group, consumer, 1000, 0):
        out.extend(batch)
    return out


def _consumers(info: GroupInfo) -> dict[str, tuple[int, float]]:
    return {c.name: (c.pending, c.idle) for c in info.consumers}
