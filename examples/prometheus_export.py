"""One runner's metrics in your own Prometheus registry (docs/prometheus.md).

``python examples/prometheus_export.py`` runs one task on the in-memory backend and
prints two lines of the exposition.
"""

import prometheus_client
import trio
from prometheus_client import CollectorRegistry

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.memory import MemoryBackend
from taskrunner.prometheus import RunnerCollector


async def main() -> None:
    runner = TaskRunner(TaskRunnerConfig(consumer_group="emails"), MemoryBackend())

    @runner.task(name="send_email")
    async def send_email(payload: dict[str, str]) -> None:
        await trio.sleep(0.01)

    registry = CollectorRegistry()
    collector = RunnerCollector(runner, refresh_interval=0.2)
    registry.register(collector)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await nursery.start(collector.run_updater)  # keeps the backend snapshot fresh
        await runner.dispatch("send_email", {"to": "ada@example.com"})
        await trio.sleep(1.5)  # the run, a timing flush, a refresh
        for line in prometheus_client.generate_latest(registry).decode().splitlines():
            if line.startswith(("taskrunner_tasks_completed", "taskrunner_queue_size")):
                print(line)
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main)
