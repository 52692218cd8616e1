"""PartitionedBackend: a Backend written out method by method, that delegates while the
link holds and raises the error a lost connection would once it is cut."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import trio
import trio.testing

from taskrunner._dispatch.guards import BACKEND_METHODS
from taskrunner._wire import CatalogDocument, TimingIncrement, task_fields
from taskrunner.backends import (
    Backend,
    DelayedMove,
    Outcome,
    Replay,
    RunOutcome,
    SlotHold,
    TickFire,
)
from taskrunner.backends.memory import MemoryBackend
from taskrunner.errors import BackendError
from taskrunner.testing import ContractCheck, PartitionedBackend, contract_parametrize

ARGUMENTS: dict[str, tuple[Any, ...]] = {
    "add": ("g", [b"x"]),
    "read": ("g", "c", 1, 0.0),
    "ack": ("g", ["1-1"]),
    "claim_stale": ("g", "c", 1.0, 1),
    "refresh": ("g", "c", ["1-1"]),
    "length": ("g",),
    "stream_groups": ("g",),
    "group_info": ("g",),
    "delete_consumer": ("g", "c"),
    "delete_idle_consumer": ("g", "c", 1.0),
    "get_metrics": ("g",),
    "dead_letter": ("g", "1-1", b"x", "why"),
    "dead_letters": ("g",),
    "acquire_lease": ("g", "me", 5.0),
    "renew_lease": ("g", "me", 5.0),
    "resign_lease": ("g", "me"),
    "lease_owner": ("g",),
    "add_delayed": ("g", b"m", 1.0),
    "due_delayed": ("g", 10.0, 5),
    "next_delayed_at": ("g",),
    "move_delayed": ("g", [DelayedMove(member=b"m", message=b"{}")]),
    "increment_metrics": ("g", [TimingIncrement(fields=task_fields("t"), micros=1, count=1)]),
    "read_metrics": ("g",),
    "reset_metrics": ("g", ["t_sum"]),
    "heartbeat": ("h", "me", 15.0),
    "heartbeat_holder": ("h",),
    "remove_heartbeat": ("h", "me"),
    "count_heartbeats": (),
    "acquire_lock": ("k", "t", 5.0),
    "release_lock": ("k", "t"),
    "publish_tuning": ("g", 4, 20.0),
    "read_tuning": ("g",),
    "publish_desired_instances": ("g", 3, 20.0),
    "read_desired_instances": ("g",),
    "read_shard_count": ("g",),
    "record_shard_count": ("g", 16),
    "read_many": ("g", "c", ["q"], [0], 1, 0.0),
    "defer": ("g", "1-1", b"m", 1.0),
    "admit": ("g", "t", "h"),
    "renew_slots": ("g", [SlotHold(task="t", holder="h", lease=1.0)]),
    "release_slots": ("g", [SlotHold(task="t", holder="h", lease=1.0)]),
    "paused": ("g",),
    "pause": ("g",),
    "resume": ("g",),
    "park": ("g", "1-1", b"m", 1.0, "t"),
    "publish_catalog": ("g", CatalogDocument(host="h", instance="me", expires=30.0), 30.0),
    "remove_catalog": ("g", "h"),
    "read_catalog": ("g",),
    "finish": ("g", ["1-1"], [Outcome(entry_id="1-1", task_id="1-1", cancelled=True)]),
    "wait_result": ("g", "1-1", 0.0),
    "lookup": ("g", "1-1"),
    "cancel": ("g", "1-1"),
    "cancel_requested": ("g", ["1-1"]),
    "find_dead_letters": ("g", ["1-1"]),
    "replay_dead_letters": ("g", [Replay(dead_id="1-1", task_id="1-1", message=b"{}")]),
    "purge_dead_letters": ("g",),
    "publish_schedule_specs": ("g", {"s": b"{}"}),
    "start_schedules": ("g", "me", ["s"], 1.0),
    "fire_ticks": ("g", "me", [TickFire(schedule="s", tick=1.0, message=b"{}")]),
    "add_tick": ("g", TickFire(schedule="s", tick=1.0, message=b"{}")),
    "record_run_outcomes": (
        "g",
        [RunOutcome(schedule="s", tick=1.0, message_id="1-1", outcome="succeeded", at=1.0)],
    ),
    "read_schedules": ("g",),
    "aclose": (),
}
"""One valid call of every awaitable Backend method."""


def protocol_methods() -> set[str]:
    """Every method of Backend and of each protocol it is made of, however many."""
    return {
        name
        for cls in Backend.__mro__
        if getattr(cls, "_is_protocol", False) and cls.__module__.startswith("taskrunner")
        for name, value in vars(cls).items()
        if callable(value) and not name.startswith("_")
    }


def test_every_backend_method_is_written_out() -> None:
    """Each protocol method is PartitionedBackend's own, not the protocol's stub
    (and so is covered by the tests below)."""
    methods = protocol_methods()
    assert set(BACKEND_METHODS) <= methods
    for name in methods:
        assert name in vars(PartitionedBackend), f"{name} is not implemented"
    awaitable = {n for n in methods if inspect.iscoroutinefunction(getattr(Backend, n))}
    assert awaitable == set(ARGUMENTS)
    assert isinstance(PartitionedBackend(MemoryBackend()), Backend)


@contract_parametrize()
async def test_an_intact_link_passes_the_contract(
    check: ContractCheck, autojump_clock: trio.testing.MockClock
) -> None:
    async with MemoryBackend(delete_on_ack=False) as backend:
        await check(PartitionedBackend(backend))


@pytest.mark.parametrize("method", sorted(ARGUMENTS))
async def test_a_cut_link_sends_nothing(method: str) -> None:
    backend = MemoryBackend()
    link = PartitionedBackend(backend)
    link.cut = True
    with pytest.raises(BackendError, match=f"partitioned: {method} not sent") as info:
        await getattr(link, method)(*ARGUMENTS[method])
    assert info.value.maybe_applied is False
    assert await backend.length("g") == 0
    assert backend.keys() == []


async def test_a_link_cut_during_a_call_loses_the_reply() -> None:
    backend = MemoryBackend()
    link = PartitionedBackend(backend)

    class CutOnAdd(MemoryBackend):
        async def add(self, group: str, payloads: Any, **options: Any) -> list[str]:
            link.cut = True  # after the store applied it, before the reply
            return await super().add(group, payloads, **options)

    link.backend = CutOnAdd()
    with pytest.raises(BackendError, match="partitioned: no reply to add") as info:
        await link.add("g", [b"x"])
    assert info.value.maybe_applied is not False
    assert await link.backend.length("g") == 1


def test_the_clock_and_the_key_names_answer_through_a_cut_link() -> None:
    backend = MemoryBackend(prefix="p", delete_on_ack=True)
    link = PartitionedBackend(backend)
    link.cut = True
    assert link.stream_keys("g") == backend.stream_keys("g")
    assert link.delete_on_ack is True
    assert PartitionedBackend(MemoryBackend(delete_on_ack=False)).delete_on_ack is False
