"""The backend contract suite: plain async checks every backend must pass.

Each check is ``async def check_xxx(backend) -> None``: it drives one
:class:`~taskrunner.backends.Backend` through the behaviour the protocol
docstrings promise (``taskrunner/backends/_protocols.py``) and raises
:class:`AssertionError` with a message saying what was expected. The checks
know nothing about pytest; :func:`contract_parametrize` turns
:data:`CONTRACT_CHECKS` into one test per check::

    from taskrunner.backends.memory import MemoryBackend
    from taskrunner.testing import contract_parametrize

    @contract_parametrize()
    async def test_backend_contract(check, autojump_clock):
        async with MemoryBackend() as backend:  # a fresh backend per check
            await check(backend)

    # A networked backend: real time, a fresh queue name per check.
    @contract_parametrize(exclude=["check_heartbeats"])  # e.g. a busy shared server
    async def test_redis_contract(check):
        backend = await open_my_backend(queue=f"contract-{uuid.uuid4().hex}")
        try:
            await check(backend)
        finally:
            await backend.aclose()

The operator reads (:class:`~taskrunner.backends.Inspection`: ping, groups,
keys, heartbeats, the lease, flushing a group) have checks of their own,
:data:`INSPECTION_CHECKS`; a backend that only serves tasks leaves them out
with ``contract_parametrize(inspection=False)``.

It also offers :class:`PartitionedBackend`, a backend wrapper whose link can
be cut, to simulate partitions and crashed processes in fleet tests.

Theory of operation. Time only passes through ``trio.sleep``, in steps of a
few tenths of a second with at least 0.1 s between what must and what must
not have happened, so the same check is exact under trio's ``MockClock``
(instant with ``autojump_clock``) and reliable against a real server in real
time (the whole suite takes a few seconds there). Every group, consumer, key
and host name is random, so checks do not collide in shared state. A group's
stream is shared with every other group when the backend has an explicit
prefix, so a check starts from a group whose cursor is already at the end of
its stream (see ``_fresh_group``) and measures lengths as differences:
leftovers from earlier checks are harmless, but nobody else may write to that
stream while a check runs.
Checks that need two groups on one stream (``check_groups_each_get_every_entry``,
the deleted-entry checks) compare ``stream_keys``: on a backend that gives each
group a stream of its own they check that the groups stay apart instead, so
run the suite on both layouts (the default, and an explicit shared ``prefix``).

Whether ``ack`` deletes entries is a backend setting, not part of the
protocol: the checks read a ``delete_on_ack`` attribute from the backend and
treat a backend without one as never deleting.

A "not yet" assertion (the lease is still held, the entry is not claimable
yet) is only made while trio's clock shows that the interval on the server is
surely below its limit; if a stall (a loaded machine, a slow round trip) pushed
the run past it, the answer is legitimately either way, so the check starts
over with fresh names, at most six times, and then fails saying so. Under
``MockClock`` this never happens, and nothing is ever silently skipped.

Each check runs under a hang guard of :data:`CHECK_TIMEOUT` seconds (trio's
clock), so a backend call that never returns fails the check instead of
hanging the test run.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from taskrunner.testing._catalog_checks import (  # noqa: F401 - importing registers the checks
    check_catalog,
    check_catalog_expiry,
)
from taskrunner.testing._cluster import ClusterNode, ClusterProcess, running_cluster
from taskrunner.testing._defer_checks import (  # noqa: F401 - importing registers the checks
    check_defer,
    check_defer_on_a_queue,
    check_move_delayed_keeps_own_lock,
)
from taskrunner.testing._embedded import (
    ServerProcess,
    find_server_binary,
    free_port,
    running_server,
    sync_command,
)
from taskrunner.testing._events_checks import (  # noqa: F401 - importing registers the checks
    check_event_stream_is_capped,
    check_events_ride_with_their_calls,
    check_progress,
    check_read_events_blocks_until_one_comes,
)
from taskrunner.testing._flow_checks import (  # noqa: F401 - importing registers the checks
    check_a_parked_run_is_found_and_cancelled_by_its_task_id,
    check_concurrency_slots,
    check_park_and_resume,
    check_pause_and_resume,
    check_rate_limit,
)
from taskrunner.testing._harness import CHECK_TIMEOUT, ContractCheck, _registry
from taskrunner.testing._inspection_checks import (  # noqa: F401 - importing registers the checks
    check_count_keys,
    check_flush,
    check_list_groups,
    check_list_heartbeats,
    check_list_keys,
    check_ping,
    check_read_lease,
)
from taskrunner.testing._inspection_queue_checks import (  # noqa: F401 - importing registers the checks
    check_count_messages,
    check_events_progress_and_workflows_in_keys_and_flush,
    check_every_queue_in_keys_and_flush,
)
from taskrunner.testing._partition import PartitionedBackend
from taskrunner.testing._queue_tracking_checks import (  # noqa: F401 - importing registers the checks
    check_claim_delays_of_every_queue,
    check_dead_letters_of_every_queue,
    check_lookup_and_cancel_on_every_queue,
    check_lookup_follows_a_moved_task_to_its_queue,
)
from taskrunner.testing._queues_checks import (  # noqa: F401 - importing registers the checks
    check_queue_reclaim_and_moves_stay_apart,
    check_queues_are_separate_streams,
    check_read_many_by_quota_then_in_order,
    check_read_many_waits_for_any_queue,
)
from taskrunner.testing._reclaim_checks import (  # noqa: F401 - importing registers the checks
    check_claim_stale,
    check_claim_stale_drops_deleted_entries,
    check_dead_letter_task_id,
    check_dead_letters,
    check_delete_consumer,
    check_delete_idle_consumer,
    check_get_metrics,
    check_group_info_consumer_idle,
    check_group_info_pending_and_lag,
    check_refresh,
    check_refresh_drops_deleted_entries,
)
from taskrunner.testing._schedule_checks import (  # noqa: F401 - importing registers the checks
    check_add_tick_adds_each_tick_once,
    check_fires_are_fenced_by_the_lease,
    check_fires_only_newer_ticks,
    check_in_flight_marks_and_outcomes,
    check_schedule_specs,
)
from taskrunner.testing._sentinel import (
    SentinelDeployment,
    SentinelProcess,
    running_sentinel_deployment,
)
from taskrunner.testing._state_checks import (  # noqa: F401 - importing registers the checks
    check_delayed_set,
    check_desired_instances,
    check_heartbeat_holder,
    check_heartbeats,
    check_lease_expiry,
    check_lease_ownership,
    check_locks,
    check_metrics_hash,
    check_move_delayed,
    check_move_delayed_unique_lock,
    check_now_advances,
    check_tuning,
    check_unencodable_text_is_refused,
)
from taskrunner.testing._stream_checks import (  # noqa: F401 - importing registers the checks
    check_ack_counts_and_is_idempotent,
    check_ack_deletes_when_delete_on_ack,
    check_add_returns_ordered_ids,
    check_groups_each_get_every_entry,
    check_read_block_returns_early_on_add,
    check_read_blocks_until_timeout,
    check_read_creates_group_lazily,
    check_read_never_redelivers_in_group,
    check_read_respects_count,
    check_read_returns_entries_in_order,
)
from taskrunner.testing._tracking_checks import (  # noqa: F401 - importing registers the checks
    check_cancel_asks_a_running_task_to_stop,
    check_cancel_removes_queued_and_scheduled_tasks,
    check_defer_indexes_the_retry,
    check_delayed_tasks_keep_their_id,
    check_finish_keeps_results,
    check_lookup_follows_an_entry,
    check_purge_and_page_dead_letters,
    check_replay_dead_letters,
    check_wait_result_wakes_every_waiter,
)
from taskrunner.testing._workflow_checks import (  # noqa: F401 - importing registers the checks
    check_workflow_cancel_removes_queued_steps,
    check_workflow_failure_cascades,
    check_workflow_fan_in_counts_each_step_once,
)

if TYPE_CHECKING:
    import pytest

__all__ = [
    "CHECK_TIMEOUT",
    "CONTRACT_CHECKS",
    "INSPECTION_CHECKS",
    "ClusterNode",
    "ClusterProcess",
    "ContractCheck",
    "PartitionedBackend",
    "SentinelDeployment",
    "SentinelProcess",
    "ServerProcess",
    "contract_parametrize",
    "find_server_binary",
    "free_port",
    "running_cluster",
    "running_sentinel_deployment",
    "running_server",
    "sync_command",
]


_MODULE_ORDER = (
    "_stream_checks",
    "_queues_checks",
    "_reclaim_checks",
    "_state_checks",
    "_defer_checks",
    "_flow_checks",
    "_catalog_checks",
    "_schedule_checks",
    "_tracking_checks",
    "_queue_tracking_checks",
    "_workflow_checks",
    "_events_checks",
    "_inspection_checks",
    "_inspection_queue_checks",
)
CONTRACT_CHECKS: tuple[ContractCheck, ...] = tuple(
    sorted(
        _registry,
        key=lambda check: (_MODULE_ORDER.index(check.__module__.rpartition(".")[2]),
                           _registry.index(check)),
    )
)  # fmt: skip
"""Every check, in a stable order (stream and queues first, then shared state,
deferral and flow control, the catalog, schedules, tracking, events, then inspection)."""
INSPECTION_CHECKS: tuple[ContractCheck, ...] = tuple(
    check
    for check in CONTRACT_CHECKS
    if check.__module__.endswith(("._inspection_checks", "._inspection_queue_checks"))
)
"""The checks of the :class:`~taskrunner.backends.Inspection` protocol (the operator
reads), which a backend that serves tasks only may leave out."""


def contract_parametrize(
    *, exclude: Collection[str] = (), inspection: bool = True
) -> pytest.MarkDecorator:
    """A ``pytest.mark.parametrize("check", ...)`` over :data:`CONTRACT_CHECKS`.

    Test ids are the check names without ``check_``. Give the test a fresh
    backend per check (see the module docstring).

    Args:
        exclude: Names of checks to leave out (``"check_heartbeats"``), e.g. one a
            shared server cannot support. Prefer an ``xfail`` with a reason.
        inspection: Include :data:`INSPECTION_CHECKS`; pass ``False`` for a backend
            that does not implement :class:`~taskrunner.backends.Inspection` (it
            serves tasks, but ``taskrunner.admin`` and the operator commands
            cannot use it).

    Raises:
        ValueError: ``exclude`` names a check that does not exist.
    """
    import pytest  # not a runtime dependency of taskrunner

    known = {check.__name__ for check in CONTRACT_CHECKS}
    unknown = set(exclude) - known
    if unknown:
        raise ValueError(f"no such contract checks: {sorted(unknown)!r}")
    left_out = set(exclude)
    if not inspection:
        left_out |= {check.__name__ for check in INSPECTION_CHECKS}
    checks = [check for check in CONTRACT_CHECKS if check.__name__ not in left_out]
    return pytest.mark.parametrize(
        "check", checks, ids=[check.__name__.removeprefix("check_") for check in checks]
    )
