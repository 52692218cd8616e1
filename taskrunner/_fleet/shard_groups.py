"""The groups on a store, a sharded group listed once (issue 27), for ``admin.list_groups``
and the dashboard's front page.

Theory of operation. :meth:`Inspection.list_groups
<taskrunner.backends.Inspection.list_groups>` names every group it finds a key or a
consumer group of, and each shard of a sharded group is named to the backend as the
group of its hash tag (``<group>:<i>:<salt>``, docs/sharding.md), so the listing names
every shard as a group of its own. :func:`list_groups` reads the shard count recorded
for each group a shard-like name points to (one read per such group; none for a store
without sharded groups) and folds the shards' tags into their group
(:func:`taskrunner._shards.fold_shard_tags`, pure): a name is a shard only if it is the
very tag the recorded count gives that shard, so a group that merely looks like one
(``shop:3:0`` with ``shop`` unsharded) stays listed as itself.
"""

from __future__ import annotations

import attrs

from taskrunner import _shards
from taskrunner.backends import Inspection


@attrs.frozen(kw_only=True)
class GroupListing:
    """One group on the store."""

    name: str
    """The group's name (never a shard's tag)."""
    shards: int
    """Its recorded shard count (1: not sharded)."""


async def list_groups(inspection: Inspection) -> list[GroupListing]:
    """Every group on the store, by name, each sharded group once with its shard count.

    Raises:
        BackendError: the store could not be read.
    """
    names = await inspection.list_groups()
    counts = await _recorded_counts(inspection, names)
    folded = _shards.fold_shard_tags(names, counts)
    return [GroupListing(name=name, shards=folded[name]) for name in sorted(folded)]


async def _recorded_counts(inspection: Inspection, names: list[str]) -> dict[str, int]:
    """The recorded shard count of each group a shard-like name of ``names`` points to
    (only the cluster layout records one: none is read on another)."""
    read = getattr(inspection, "read_shard_count", None)  # an Inspection alone has none
    if read is None or getattr(inspection, "key_layout", "go") != "cluster":
        return {}
    candidates = sorted({split[0] for name in names if (split := _shards.split_tag(name))})
    counts = {}
    for group in candidates:
        try:
            count = await read(group)
        except ValueError:  # a name the keys cannot carry is no group of ours
            continue
        counts[group] = count or 1
    return counts
