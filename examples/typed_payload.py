"""Typed payloads: annotate the action's parameter with an attrs class (or dataclass).

The payload is unstructured to JSON at dispatch and structured back into the
class on the worker (cattrs does both ways). A payload that does not fit is
refused by ``dispatch`` before anything is queued.

Run it with ``python examples/typed_payload.py``; it finishes by itself.
"""

import attrs
import trio

from taskrunner import InvalidTaskPayload, TaskRunner, TaskRunnerConfig
from taskrunner.backends.memory import MemoryBackend


@attrs.frozen
class Line:
    sku: str
    quantity: int


@attrs.frozen
class Invoice:
    customer: str
    lines: list[Line]


async def main() -> None:
    runner = TaskRunner(TaskRunnerConfig(consumer_group="billing"), MemoryBackend())
    done = trio.Event()
    seen: list[Invoice] = []

    @runner.task(name="send_invoice")
    async def send_invoice(invoice: Invoice) -> None:
        # A real Invoice, nested Lines included, not a dict.
        items = sum(line.quantity for line in invoice.lines)
        print(f"invoice for {invoice.customer}: {len(invoice.lines)} line(s), {items} item(s)")
        seen.append(invoice)
        if len(seen) == 2:
            done.set()

    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        # An instance of the class...
        await runner.dispatch("send_invoice", Invoice("Ada", [Line("A-1", 2), Line("B-7", 1)]))
        # ...or plain data that structures into it.
        await runner.dispatch(
            "send_invoice", {"customer": "Alan", "lines": [{"sku": "C-3", "quantity": 5}]}
        )
        try:
            await runner.dispatch("send_invoice", {"customer": "Grace"})  # no "lines"
        except InvalidTaskPayload as exc:
            print(f"refused at dispatch: {type(exc).__name__}")
        await done.wait()
        runner.shutdown()

    assert all(isinstance(invoice, Invoice) for invoice in seen)
    print(f"done: {runner.statistics().completed} completed")


if __name__ == "__main__":
    trio.run(main)
