"""The task context, a lifespan and middleware.

- ``@runner.lifespan``: an async generator entered once per ``serve`` (before
  anything is fetched) and exited after the workers drained; what it yields is
  every run's ``ctx.state``;
- ``@runner.middleware``: ``async def (ctx, call_next)`` around every run, the
  first registered outermost; ``call_next()`` returns the action's result;
- an action taking a second parameter (or one annotated ``TaskContext``) gets
  the run's :class:`~taskrunner.TaskContext`.

Run it with ``python examples/context_lifespan_middleware.py``.
"""

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import trio

from taskrunner import TaskContext, TaskRunner, TaskRunnerConfig
from taskrunner.backends.memory import MemoryBackend

CallNext = Callable[[], Awaitable[Any]]


class Client:
    """Stands for a connection pool or an HTTP client: opened once, shared by every run."""

    async def get(self, path: str) -> str:
        await trio.sleep(0.01)
        return f"200 OK {path}"


async def main() -> None:
    runner = TaskRunner(TaskRunnerConfig(consumer_group="crawler"), MemoryBackend())
    done = trio.Event()

    # --8<-- [start:lifespan]
    @runner.lifespan
    async def resources(runner: TaskRunner) -> AsyncIterator[dict[str, Any]]:
        print("lifespan: opening the client")
        client = Client()
        yield {"client": client}  # becomes ctx.state
        print("lifespan: closing the client")

    # --8<-- [end:lifespan]

    # --8<-- [start:middleware]
    @runner.middleware
    async def timing(ctx: TaskContext, call_next: CallNext) -> Any:
        started = trio.current_time()
        result = await call_next()  # runs the inner middlewares and the action
        elapsed = trio.current_time() - started
        print(f"timing: {ctx.task_name} attempt {ctx.attempt} took {elapsed * 1000:.0f} ms")
        return result

    @runner.middleware
    async def audit(ctx: TaskContext, call_next: CallNext) -> Any:
        result = await call_next()
        print(f"audit: {ctx.task_name} returned {result!r}")
        return result

    # --8<-- [end:middleware]

    # --8<-- [start:context]
    @runner.task(name="fetch", timeout=30.0)
    async def fetch(payload: dict[str, str], ctx: TaskContext) -> str:
        print(
            f"fetch: message {ctx.message_id == task_id}, attempt {ctx.attempt} of "
            f"{ctx.max_attempts}, deadline in {ctx.deadline - trio.current_time():.0f}s"
        )
        response: str = await ctx.state["client"].get(payload["path"])
        done.set()
        return response

    # --8<-- [end:context]

    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        task_id = (await runner.dispatch("fetch", {"path": "/index.html"})).id
        await done.wait()
        runner.shutdown()
    print("served")


if __name__ == "__main__":
    trio.run(main)
