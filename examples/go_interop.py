"""Sharing a Redis with a Go fleet: what each side writes, and the other reads.

Runs on fakeredis (``fakeredis[lua]``), so neither a server nor Go is needed:
``python examples/go_interop.py``. The Go fleet's part is played by writing
exactly the bytes the Go library (soroosh-tanzadeh/taskrunner v0.4.1) writes.
"""

import json
import time

import fakeredis
import trio

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend

# --8<-- [start:go]
# A unique task dispatched by a Go producer: Go took taskrunner:unique:echo:A-17 with
# this token, and the message's unique_key is the lock key's suffix.
GO_MESSAGE = (
    b'{"unique":true,"unique_for":60,"unique_key":"echo:A-17","unique_lock_value":"q83vEjRWeJA=",'
    b'"reservation_timeout":30000000000,"task_name":"echo","payload":{"key":"A-17"}}'
)
# A delayed task dispatched by a Go producer: "time" is whole unix seconds, like its score.
GO_MEMBER = (
    '{"id":"5f0c8c6e-4d52-4bd4-9a8e-0c2f6a3b7d11","task":"echo","time":%d,"payload":{"key":"B-2"}}'
)
# --8<-- [end:go]


async def main() -> None:
    client = fakeredis.FakeRedis(protocol=2)
    backend = RedisBackend.from_client(client, prefix="shop", queue="orders")
    runner = TaskRunner(TaskRunnerConfig(consumer_group="interop"), backend)
    ran: list[str] = []
    all_ran = trio.Event()

    @runner.task(name="echo", unique=True, unique_for=60, unique_key=lambda p: p["key"])
    async def echo(payload: dict[str, str]) -> None:
        print(f"ran echo {payload['key']}")
        ran.append(payload["key"])
        if len(ran) == 3:
            all_ran.set()

    # 1. The Go fleet's writes: a lock and its message, and a delayed task due now.
    client.set("taskrunner:unique:echo:A-17", "q83vEjRWeJA=", nx=True, ex=60)
    client.xadd("shop:orders", {"payload": GO_MESSAGE})
    now = int(time.time())
    client.zadd("taskrunner:interop:delayed_tasks", {GO_MEMBER % now: now})

    # --8<-- [start:ours]
    # 2. What we write, as a Go worker or leader reads it.
    await runner.dispatch("echo", {"key": "C-3"})
    [(_, fields)] = client.xrevrange("shop:orders", count=1)
    message = json.loads(fields[b"payload"])
    lock = "taskrunner:unique:" + message["unique_key"]
    print(f"our message: unique_key {message['unique_key']!r}, lock {lock} held: "
          f"{client.exists(lock) == 1}")  # fmt: skip
    await runner.schedule_for("echo", {"key": "D-4"}, 4102444800.25)  # 2100-01-01, and a quarter
    [(member, score)] = client.zrange("taskrunner:interop:delayed_tasks", -1, -1, withscores=True)
    print(f"our delayed member: time {json.loads(member)['time']}, score {score:.2f}")
    # --8<-- [end:ours]

    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        with trio.fail_after(20):
            await all_ran.wait()  # Go's message, ours, and Go's delayed task
            # The pass that moved Go's task records its timing after the move returns,
            # and the bulk writer flushes once a second: wait for the scheduler's fields.
            schedule_count = "taskrunner:interop:delayed_tasks_schedule_count"
            while not client.hexists("taskrunner:interop:metrics", schedule_count):  # noqa: ASYNC110
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()

    # --8<-- [start:after]
    # 3. Locks released (Go's too), and a metrics hash of integers Go can read.
    print(f"locks left: {client.keys('taskrunner:unique:*')}")
    metrics = client.hgetall("taskrunner:interop:metrics")
    print("metrics fields:", ", ".join(sorted(name.decode() for name in metrics)))
    print(f"every value an integer: {all(value.isdigit() for value in metrics.values())}")
    # --8<-- [end:after]
    await backend.aclose()


if __name__ == "__main__":
    trio.run(main)
