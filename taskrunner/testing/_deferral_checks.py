"""Contract checks of the Deferral protocol: ack and re-add through the delayed set, atomically."""

from __future__ import annotations

from taskrunner.backends._protocols import Backend
from taskrunner.testing._harness import _contract_check, _delete_on_ack, _name


@_contract_check
async def check_defer(backend: Backend) -> None:
    """``defer`` acks a pending entry (deleting it when the backend deletes on ack)
    and adds the member at ``run_at``; an entry not pending (acked already, never
    read, or in a group that does not exist) is refused and nothing is added."""
    group, consumer, queue = _name("group"), _name("c"), _name("q")
    first, second = await backend.add(group, [b"e1", b"e2"], queue=queue)
    await backend.read(group, consumer, 1, 0, queue=queue)  # e1 pending, e2 not read
    run_at = backend.now() + 30
    member = _name("member").encode()
    assert await backend.defer(group, first, member, run_at, queue=queue) is True
    info = await backend.group_info(group, queue=queue)
    assert info.pending == 0, f"the deferred entry must be acked: {info!r}"
    expected_length = 1 if _delete_on_ack(backend) else 2
    length = await backend.length(group, queue=queue)
    assert length == expected_length, (
        f"with delete_on_ack={_delete_on_ack(backend)} the stream holds {length} entries, "
        f"expected {expected_length}"
    )
    assert await backend.due_delayed(group, run_at - 1, 10) == [], "added before its run_at"
    assert await backend.due_delayed(group, run_at, 10) == [member], "the member at run_at"
    again = _name("again").encode()
    assert await backend.defer(group, first, again, run_at, queue=queue) is False, (
        "an entry deferred already is no longer pending"
    )
    assert await backend.defer(group, second, again, run_at, queue=queue) is False, (
        "an entry never read is not pending"
    )
    assert await backend.defer(_name("nogroup"), first, again, run_at, queue=queue) is False, (
        "a group that does not exist has nothing pending"
    )
    assert await backend.due_delayed(group, run_at + 1, 10) == [member], (
        "a refused defer must add nothing"
    )
