"""Typed payloads: annotate the action's parameter with an attrs class (or dataclass).

The payload is unstructured to JSON at dispatch and structured back into the
class on the worker (cattrs does both ways). A payload that does not fit is
refused by ``dispatch`` before anything is queued, naming each bad field; so is
one with a key the class does not have, unless the task is registered with
``extra_keys="ignore"``, which drops such keys.

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

    @runner.task  # registered under the function's name, "send_invoice"
    async def send_invoice(invoice: Invoice) -> None:
        # A real Invoice, nested Lines included, not a dict.
        items = sum(line.quantity for line in invoice.lines)
        print(f"invoice for {invoice.customer}: {len(invoice.lines)} line(s), {items} item(s)")
        seen.append(invoice)
        if len(seen) == 3:
            done.set()

    @runner.task(extra_keys="ignore")  # keys Invoice does not have are dropped
    async def archive_invoice(invoice: Invoice) -> None:
        print(f"archived the invoice for {invoice.customer}")
        seen.append(invoice)
        if len(seen) == 3:
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
            print(f"refused at dispatch: {exc}")
        bad_line = {"customer": "Edsger", "lines": [{"sku": "D-1", "quantity": "two"}]}
        try:
            await runner.dispatch("send_invoice", bad_line)
        except InvalidTaskPayload as exc:
            print(f"refused at dispatch: {exc.problems}")
        archived = {"customer": "Barbara", "lines": [], "archived_by": "ops"}
        try:
            await runner.dispatch("send_invoice", archived)  # "archived_by": not in Invoice
        except InvalidTaskPayload as exc:
            print(f"refused at dispatch: {exc.problems}")
        await runner.dispatch("archive_invoice", archived)  # extra_keys="ignore": accepted
        await done.wait()
        runner.shutdown()

    assert all(isinstance(invoice, Invoice) for invoice in seen)
    print(f"done: {runner.statistics().completed} completed")


if __name__ == "__main__":
    trio.run(main)
