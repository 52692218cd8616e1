"""The per-shard table of a sharded group (issue 27), as ``top`` shows it (pure, on rich).

One row per shard, from :class:`~taskrunner._fleet.shard_counts.ShardCounts`: the messages
queued in its streams, waiting in its delayed set and dead-lettered, and a total row; an
unsharded group shows no such table.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.table import Table

from taskrunner._fleet.shard_counts import ShardCounts, totals


def shards_table(rows: Sequence[ShardCounts]) -> Table:
    """Queued, delayed and dead messages per shard, then their total."""
    table = Table(
        box=box.SIMPLE_HEAD, title=f"shards ({len(rows)})", title_justify="left", pad_edge=False
    )
    for i, name in enumerate(("shard", "queued", "delayed", "dead")):
        table.add_column(name, justify="left" if i == 0 else "right", no_wrap=True)
    for row in rows:
        table.add_row(str(row.shard), f"{row.queued:,}", f"{row.delayed:,}", f"{row.dead:,}")
    total = totals(rows)
    table.add_section()
    table.add_row("total", f"{total.queued:,}", f"{total.delayed:,}", f"{total.dead:,}")
    return table
