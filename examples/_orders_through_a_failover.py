"""What ``redis_cluster.py`` and ``redis_sentinel.py`` share: 60 orders dispatched to a
serving runner while its Redis fails over half-way, and every order shipped.

Not an example of its own: those two import it (run either, not this).
"""

from collections.abc import Callable

import trio

from taskrunner import TaskRunner

ORDERS = 60


class Orders:
    """The orders shipped so far (the ``ship`` task's side effect)."""

    def __init__(self) -> None:
        self.shipped: set[int] = set()
        self.all_shipped = trio.Event()

    def ship(self, order: int) -> None:
        self.shipped.add(order)
        if len(self.shipped) == ORDERS:
            self.all_shipped.set()


async def dispatch_through_a_failover(
    runner: TaskRunner, orders: Orders, fail_over: Callable[[], object]
) -> None:
    """Dispatch the orders 30 ms apart, calling ``fail_over`` (blocking: in a thread)
    half-way, as an operator would; wait for every order to ship and the failover call
    to return."""
    failed_over = trio.Event()

    async def run_fail_over() -> None:
        await trio.to_thread.run_sync(fail_over)
        failed_over.set()

    async with trio.open_nursery() as nursery:
        for order in range(ORDERS):
            if order == ORDERS // 2:
                nursery.start_soon(run_fail_over)
            await runner.dispatch("ship", order)  # held while the master moves
            await trio.sleep(0.03)
        with trio.fail_after(20):
            await orders.all_shipped.wait()
            await failed_over.wait()
    print(f"dispatched {ORDERS}, shipped {len(orders.shipped)}")
