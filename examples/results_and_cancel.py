"""Results, lookup by id, cancellation and dead-letter replay, on one in-memory runner.

Run it with ``python examples/results_and_cancel.py``; it finishes by itself in about
two seconds (a running task is stopped within about a second of its cancel).
"""

import logging

import attrs
import trio

from taskrunner import TaskCancelled, TaskFailed, TaskRunner, TaskRunnerConfig, admin
from taskrunner.backends.memory import MemoryBackend

backend = MemoryBackend()
runner = TaskRunner(TaskRunnerConfig(consumer_group="shop"), backend)


# --8<-- [start:tasks]
@attrs.frozen
class Thumbnail:
    path: str
    width: int


@runner.task(keep_result=3600)  # keep each outcome for an hour
async def resize(payload: dict[str, int]) -> Thumbnail:
    return Thumbnail(path=f"thumbs/{payload['image']}.png", width=payload["width"])


@runner.task(keep_result=3600, max_retry=1)
async def charge(payload: dict[str, int]) -> None:
    raise ValueError(f"card declined for {payload['cents']} cents")


crunching = trio.Event()


@runner.task(keep_result=3600)  # no timeout needed: a cancel interrupts any async run
async def crunch(payload: None) -> None:
    crunching.set()
    await trio.sleep(3600)  # long: cancelled while it runs


# --8<-- [end:tasks]

imported: list[int] = []
all_imported = trio.Event()
locked = {13}


@runner.task(max_retry=1)
async def import_row(payload: int) -> None:
    if payload in locked:  # fails once: a dead letter, then replayed
        locked.discard(payload)
        raise RuntimeError(f"row {payload} is locked")
    imported.append(payload)
    if len(imported) == 3:
        all_imported.set()


async def results() -> None:
    # --8<-- [start:results]
    handle = await runner.dispatch("resize", {"image": 7, "width": 128})
    thumbnail = await handle.result(timeout=10)  # a Thumbnail, structured back
    print(f"resize: {thumbnail.path} at {thumbnail.width} px")
    info = await runner.get_task(handle.id)
    assert info is not None
    print(f"get_task: {info.state.value}, {info.attempts} attempt(s), result {info.result}")

    failing = await runner.dispatch("charge", {"cents": 1250})
    try:
        await failing.result(timeout=10)
    except TaskFailed as exc:
        print(f"charge failed: {exc.error_type}: {exc.error}")
    # --8<-- [end:results]


async def cancellation() -> None:
    # --8<-- [start:cancel]
    later = await runner.dispatch_delayed("resize", {"image": 8, "width": 64}, delay=3600)
    info = await runner.get_task(later.id)
    assert info is not None
    print(f"delayed: {info.state.value}; cancel -> {await later.cancel()}")

    running = await runner.dispatch("crunch")
    await crunching.wait()
    info = await runner.get_task(running.id)
    assert info is not None
    print(f"crunch: {info.state.value}; cancel -> {await runner.cancel(running.id)}")
    try:
        await running.result(timeout=10)  # stopped within about a second
    except TaskCancelled:
        print("crunch: result() raised TaskCancelled")
    print(f"cancel again -> {await runner.cancel(running.id)}")  # finished: nothing to do
    # --8<-- [end:cancel]


async def dead_letters() -> None:
    await runner.dispatch_many("import_row", [12, 13, 14])
    while len(await backend.dead_letters("shop")) < 2:  # noqa: ASYNC110 - the backend's state
        await trio.sleep(0.01)
    # --8<-- [start:dead]
    letters = await admin.dead_letters(backend, "shop")
    for dead in letters:
        print(f"dead letter: {dead.task_name} {dead.payload} ({dead.reason.split(':')[0]})")
    rows = [dead.id for dead in letters if dead.task_name == "import_row"]
    (result,) = await admin.replay_dead_letters(backend, "shop", rows)  # runs again, once
    print(f"replayed: {result.replayed}")
    gone = await admin.purge_dead_letters(backend, "shop", confirm=True)  # the rest
    print(f"purged: {gone}; dead letters left: {len(await admin.dead_letters(backend, 'shop'))}")
    # --8<-- [end:dead]
    await all_imported.wait()
    print(f"rows imported: {sorted(imported)}")


async def main() -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await results()
        await cancellation()
        await dead_letters()
        runner.shutdown()


if __name__ == "__main__":
    logging.basicConfig(level=logging.CRITICAL)  # the failures here are on purpose
    trio.run(main)
