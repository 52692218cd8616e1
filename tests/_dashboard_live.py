"""A dashboard served over HTTP against a real server with a running fleet, in a thread
of its own (so a synchronous browser driver can use it from the test).

:class:`LiveFleet` runs, under one ``trio.run`` in a background thread, three runners
of group ``g`` on their own :class:`~taskrunner.backends.redis.RedisBackend` and the
dashboard (hypercorn's trio worker) on a free port; the test calls into that trio
run with :meth:`LiveFleet.call` (``trio.from_thread``).

The runners read two queues, ``tasks`` (``echo``, ``hold``, ``fail``, ``flaky``,
``ping``) and ``bulk`` (``batch``, whose runs :attr:`LiveFleet.batches` records), and
declare one periodic schedule, ``ping-every-2s`` (``ping`` every 2 seconds). ``echo``,
``hold`` and ``flaky`` keep their results; ``hold`` waits for :meth:`release_held` and
has a timeout, so a cancel interrupts it; ``flaky`` fails while :attr:`LiveFleet.broken`.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Any

import trio
import trio.from_thread
from hypercorn.config import Config
from hypercorn.trio import serve

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend
from taskrunner.dashboard import create_app, redact_url

GROUP = "g"
HOSTS = ("alpha", "bravo", "charlie")
QUEUES = ("tasks", "bulk")
SCHEDULE = "ping-every-2s"


class LiveFleet:
    def __init__(self, url: str, **dashboard: Any) -> None:
        self.url = url
        self.dashboard = dashboard
        self.base = ""
        self.runners: list[TaskRunner] = []
        self.batches: list[Any] = []
        """The payloads ``batch`` ran, in order (appended in the fleet's thread)."""
        self.broken = True
        """Whether ``flaky`` fails (set from the test's thread)."""
        self.mended: list[Any] = []
        """The payloads ``flaky`` ran without failing."""
        self.release = trio.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._ready = threading.Event()
        self._stop: trio.CancelScope | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="live-dashboard", daemon=True)

    def _make_runner(self, host: str) -> TaskRunner:
        runner = TaskRunner(
            TaskRunnerConfig(
                consumer_group=GROUP,
                host=host,
                num_workers=4,
                block_duration=0.2,
                queues=QUEUES,
            ),
            RedisBackend.from_url(self.url),
        )

        @runner.task("echo", keep_result=300)
        async def echo(value: Any) -> Any:
            await trio.sleep(0.01)
            return value

        @runner.task("hold", keep_result=300, timeout=3600)
        async def hold(value: Any) -> Any:
            await self.release.wait()
            return value

        @runner.task("flaky", max_retry=1, keep_result=300)
        async def flaky(value: Any) -> Any:
            if self.broken:
                raise RuntimeError(f"flaky is broken ({value})")
            self.mended.append(value)
            return value

        @runner.task("fail", max_retry=1)
        async def fail(value: Any) -> None:
            raise ValueError(str(value))

        @runner.task("batch", queue="bulk")
        async def batch(value: Any) -> None:
            self.batches.append(value)

        @runner.task("ping")
        async def ping(value: Any) -> None:
            pass

        runner.add_schedule(SCHEDULE, task="ping", every=2)

        return runner

    async def _serve(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        backend = RedisBackend.from_url(self.url)
        app = create_app(backend, server=redact_url(self.url), **self.dashboard)
        config = Config()
        config.bind = ["127.0.0.1:0"]
        config.accesslog = None
        config.errorlog = None
        with trio.CancelScope() as self._stop:
            async with trio.open_nursery() as nursery:
                for host in HOSTS:
                    runner = self._make_runner(host)
                    self.runners.append(runner)
                    await nursery.start(runner.serve)
                binds = await nursery.start(
                    lambda task_status: serve(app, config, task_status=task_status)
                )
                self.base = binds[0]
                self._ready.set()
        # Every connection closed, and their tasks given the time to close their
        # sockets, before trio.run ends (else a socket may be left to the collector).
        for closing in [backend, *(runner.backend for runner in self.runners)]:
            await closing.aclose()
        await trio.sleep(0.2)

    def _main(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as exc:  # reported to the test by start()/stop()
            self._error = exc
        finally:
            self._ready.set()

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(60)
        if self._error is not None or not self.base:
            raise RuntimeError(f"the live dashboard did not start: {self._error!r}")

    def call(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """Run ``fn(*args)`` in the fleet's trio run and return its result."""
        return trio.from_thread.run(fn, *args, trio_token=self._token)

    def dispatch(self, task: str, payloads: list[Any]) -> list[str]:
        async def send() -> list[str]:
            return [str(await self.runners[0].dispatch(task, p)) for p in payloads]

        ids: list[str] = self.call(send)
        return ids

    def release_held(self) -> None:
        async def release() -> None:
            self.release.set()

        self.call(release)

    def stop(self) -> None:
        if self._token is not None and self._stop is not None:
            scope = self._stop
            trio.from_thread.run_sync(scope.cancel, trio_token=self._token)
        self._thread.join(30)
        if self._error is not None:
            raise self._error
