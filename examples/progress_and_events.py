"""Progress reports and the event stream, on one in-memory runner.

Run it with ``python examples/progress_and_events.py``; it finishes by itself in about
two seconds.
"""

import trio

from taskrunner import Retry, TaskContext, TaskRunner, TaskRunnerConfig, TaskState
from taskrunner.backends.memory import MemoryBackend

backend = MemoryBackend()
# --8<-- [start:config]
runner = TaskRunner(TaskRunnerConfig(consumer_group="media", events=True), backend)
# --8<-- [end:config]


# --8<-- [start:progress]
@runner.task(keep_result=3600)
async def transcode(frames: int, ctx: TaskContext) -> int:
    for frame in range(1, frames + 1):
        await trio.sleep(0.01)  # the work
        # Cheap in a tight loop: the runner writes the latest report once a second.
        await ctx.progress(frame / frames, note=f"frame {frame} of {frames}")
    return frames


# --8<-- [end:progress]


@runner.task(max_retry=2)
async def upload(name: str, ctx: TaskContext) -> None:
    if ctx.attempt == 1:
        raise Retry(delay=0.1)  # the first attempt asks for another


async def main() -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        # --8<-- [start:events]
        seen: list[str] = []

        async def follow() -> None:
            async for event in runner.events():  # from now on, as they come
                seen.append(f"{event.task_name} {event.kind} (attempt {event.attempt})")
                if event.task_name == "upload" and event.kind == "succeeded":
                    break  # nothing is left open

        # --8<-- [end:events]
        nursery.start_soon(follow)
        await trio.sleep(0.1)  # the reader starts from now
        handle = await runner.dispatch("transcode", 150)
        with trio.fail_after(10):
            while True:  # the first report is written about a second after it is made
                # --8<-- [start:get_task]
                info = await runner.get_task(handle)
                if info is not None and info.progress is not None:
                    print(f"transcode: {info.state.value}, progress {info.progress}")
                    # --8<-- [end:get_task]
                    break
                await trio.sleep(0.1)
        print(f"transcode returned {await handle.result(timeout=20)} frames")
        done = await runner.get_task(handle)
        assert done is not None
        assert done.state is TaskState.SUCCEEDED
        print(f"last report: {done.progress}")
        await runner.dispatch("upload", "movie.mp4")
        with trio.fail_after(10):
            while not seen or not seen[-1].startswith("upload succeeded"):  # noqa: ASYNC110
                await trio.sleep(0.05)
        for line in seen:
            print(f"event: {line}")
        runner.shutdown()


if __name__ == "__main__":
    trio.run(main)
