"""Contract check of the operator tools: :func:`taskrunner.admin.flush`.

The admin module supports the backends that ship with taskrunner (memory and
Redis); a backend of your own that ``taskrunner.admin`` cannot inspect should
leave this check out (``contract_parametrize(exclude=["check_flush"])``).
"""

from __future__ import annotations

import math

from taskrunner._wire import TimingIncrement, task_fields
from taskrunner.backends._protocols import Backend
from taskrunner.testing._harness import _contract_check, _fresh_group, _name, _shares_stream


@_contract_check
async def check_flush(backend: Backend) -> None:
    """``admin.flush`` means the same on every backend: the group's own keys go
    (lease, tuning value, metrics, delayed set, the group itself, and its stream
    and dead letters unless another group reads them), unique locks go, other
    groups' keys stay, and heartbeats go only with ``replication=True``.

    ``count_heartbeats`` is global and ``replication=True`` deletes every
    heartbeat: nobody else may use heartbeats on the same store meanwhile.
    """
    from taskrunner import admin

    group, other = await _fresh_group(backend), await _fresh_group(backend)
    shared = _shares_stream(backend, group, other)
    lock, host = f"taskrunner:unique:{_name('task')}", _name("host")
    base = await backend.length(group), len(await backend.dead_letters(group, 100_000))
    for g in (group, other):
        await backend.acquire_lease(g, "owner", 30.0)
        await backend.publish_tuning(g, 5, 30.0)
        await backend.increment_metrics(
            g, [TimingIncrement(fields=task_fields("t"), micros=1000, count=1)]
        )
        await backend.add_delayed(g, b'{"id":"later"}', backend.now() + 60)
        await backend.add(g, [b"entry"])
    for g in (group, other):
        await backend.read(g, _name("consumer"), 10, 0)
    await backend.dead_letter(group, "1700000000000-0", b"payload", "boom")
    await backend.acquire_lock(lock, "token", 30.0)
    beats = await backend.count_heartbeats()
    await backend.heartbeat(host, "instance", 30.0)

    deleted = await admin.flush(backend, group, confirm=True, replication=False)

    gone = (
        await backend.lease_owner(group),
        await backend.read_tuning(group),
        await backend.read_metrics(group),
        await backend.due_delayed(group, math.inf, 10),
        (await backend.group_info(group)).pending,
    )
    assert gone == (None, None, {}, [], 0), (
        f"flush left the group's lease, tuning, metrics, delayed set or pending: {gone!r}"
    )
    kept = (
        await backend.lease_owner(other),
        await backend.read_tuning(other),
        await backend.read_metrics(other),
        len(await backend.due_delayed(other, math.inf, 10)),
        (await backend.group_info(other)).pending,
    )
    metrics = {"t_sum": 1.0, "t_sum_us": 1000.0, "t_count": 1.0}
    expected = ("owner", 5, metrics, 1, 2 if shared else 1)
    assert kept == expected, f"flush touched another group's keys: {kept!r}, not {expected!r}"
    stream_left = await backend.length(group), len(await backend.dead_letters(group, 100_000))
    want = (base[0] + 2, base[1] + 1) if shared else (0, 0)
    assert stream_left == want, (
        f"{'a stream other groups read must stay' if shared else 'the stream must go'}: "
        f"(length, dead letters) is {stream_left!r}, not {want!r}"
    )
    assert await backend.acquire_lock(lock, "other", 1.0) is True, "unique locks must be deleted"
    await backend.release_lock(lock, "other")
    assert await backend.count_heartbeats() == beats + 1, "replication=False deleted a heartbeat"
    assert not any(name.startswith("taskrunner:replication:") for name in deleted), (
        f"flush(replication=False) reports deleting heartbeats: {deleted!r}"
    )
    assert not any(other in name for name in deleted), f"another group's keys: {deleted!r}"

    deleted = await admin.flush(backend, group, confirm=True, replication=True)
    assert await backend.count_heartbeats() == 0, "replication=True must delete every heartbeat"
    assert any(name.startswith("taskrunner:replication:") for name in deleted), (
        f"flush(replication=True) does not report the heartbeats it deleted: {deleted!r}"
    )
    await backend.resign_lease(other, "owner")
