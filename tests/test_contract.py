"""The backend contract suite against the in-memory backend, on trio's MockClock."""

from __future__ import annotations

import pytest
import trio.testing

from taskrunner.backends.memory import MemoryBackend
from taskrunner.testing import CONTRACT_CHECKS, ContractCheck, contract_parametrize


@contract_parametrize()
@pytest.mark.parametrize("delete_on_ack", [True, False], ids=["delete_on_ack", "keep_on_ack"])
async def test_memory_backend(
    check: ContractCheck, delete_on_ack: bool, autojump_clock: trio.testing.MockClock
) -> None:
    async with MemoryBackend(delete_on_ack=delete_on_ack) as backend:
        await check(backend)


@pytest.mark.parametrize("delete_on_ack", [True, False], ids=["delete_on_ack", "keep_on_ack"])
async def test_memory_backend_on_a_used_stream(
    delete_on_ack: bool, autojump_clock: trio.testing.MockClock
) -> None:
    """Checks start from the end of the stream, so they also pass one after
    another on one backend whose stream already holds entries."""
    async with MemoryBackend(delete_on_ack=delete_on_ack) as backend:
        await backend.add([b"left over"])
        for check in CONTRACT_CHECKS:
            await check(backend)


def test_contract_parametrize_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match="check_nonexistent"):
        contract_parametrize(exclude=["check_nonexistent"])


def test_contract_parametrize_excludes() -> None:
    mark = contract_parametrize(exclude=["check_locks"])
    names = [check.__name__ for check in mark.args[1]]
    assert "check_locks" not in names
    assert len(names) == len(CONTRACT_CHECKS) - 1
