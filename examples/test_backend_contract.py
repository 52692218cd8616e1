"""Running the backend contract suite against a backend (docs/backend-contract.md).

Run it with ``python -m pytest examples/test_backend_contract.py``. Needs
``pytest``, ``pytest-trio`` and ``fakeredis`` (``pip install -e '.[test]'``).
Replace the backend with yours: each check gets a fresh one.
"""

import uuid

import fakeredis
import pytest

from taskrunner.backends.memory import MemoryBackend
from taskrunner.backends.redis import RedisBackend
from taskrunner.testing import contract_parametrize

# Not needed with `trio_mode = true` in your pytest configuration.
pytestmark = pytest.mark.trio


# --8<-- [start:networked]
@contract_parametrize()
async def test_my_backend_contract(check):
    # A fresh backend per check; a fresh stream (queue name) is simplest.
    # Real time: the whole suite takes a few seconds.
    backend = RedisBackend.from_client(
        fakeredis.FakeRedis(protocol=2), queue=f"contract-{uuid.uuid4().hex}"
    )
    try:
        await check(backend)
    finally:
        await backend.aclose()


# --8<-- [end:networked]


# --8<-- [start:memory]
@contract_parametrize()
async def test_memory_contract(check, autojump_clock):
    async with MemoryBackend() as backend:
        await check(backend)


# --8<-- [end:memory]
