"""The :class:`~taskrunner.backends.Inspection` protocol over the in-memory stream and state.

Theory of operation: the in-memory backend keeps its state under the names
Redis would hold it by (``taskrunner._keys``), so inspection lists, for each
name, what Redis would report: a key exists exactly when Redis would keep it
(a stream with entries or a consumer group, a non-empty ring, delayed set,
metrics hash or dead-letter stream, a catalog or a string that has not
expired), with the
same type and size (bytes of a string). The decisions (which kind a key is,
which names name a group, what a flush deletes) are the pure functions of
:mod:`taskrunner.backends._protocols.inspection` that the Redis backend uses too.
Nothing here waits: each call is one checkpoint, like one round trip.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import trio

from taskrunner import _keys
from taskrunner._workflows.keys import workflow_ends_key
from taskrunner.backends._layout import (
    group_head,
    group_key_kind,
    group_named_by,
    keys_to_flush,
    queue_key,
    queues_in,
    stream_head,
)
from taskrunner.backends._protocols.inspection import (
    Heartbeat,
    KeyCounts,
    KeyInfo,
    Lease,
    MessageCounts,
)
from taskrunner.backends._protocols.schedules import STATE_FIELDS
from taskrunner.backends.memory._catalog import MemoryCatalog
from taskrunner.backends.memory._queue import _Stream
from taskrunner.backends.memory._schedules import MemorySchedules
from taskrunner.backends.memory._state import seconds_left
from taskrunner.backends.memory._tracking import MemoryTracking


class MemoryInspection(MemoryTracking, MemorySchedules, MemoryCatalog):
    """A :class:`~taskrunner.backends.Inspection` of the in-memory stream and state."""

    # A cancel reads the catalog this class holds (MemoryTracking's own says nothing).
    catalog_keep_result = MemoryCatalog.catalog_keep_result
    # Kept by MemoryFlow (the backend is both): flow control's sorted sets and sets.
    _zsets: dict[str, dict[str, float]]
    _sets: dict[str, set[bytes]]
    # Kept by MemoryEvents and MemoryWorkflows: the event streams (by group), each
    # task's progress (by group and task id) and the workflow records (by key).
    _event_streams: dict[str, Any]
    _progress: dict[tuple[str, str], tuple[Any, float]]
    _flows: dict[str, Any]

    def _event_and_workflow_keys(self) -> dict[str, tuple[str, int, float | None]]:
        """``{name: (type, size, ttl)}`` of the event streams, progress hashes and
        workflow records Redis would hold now (a hash's size: its fields there)."""
        found: dict[str, tuple[str, int, float | None]] = {}
        layout, now = self.key_layout, trio.current_time()
        for g, stream in getattr(self, "_event_streams", {}).items():
            if stream.entries:
                found[_keys.events(g, layout)] = "stream", len(stream.entries), None
        for (g, task_id), (progress, expires) in getattr(self, "_progress", {}).items():
            if expires > now:  # fraction, at (and note): event_commands' HSET
                fields = 2 if progress.note is None else 3
                found[_keys.progress(g, task_id, layout)] = "hash", fields, seconds_left(expires)
        for name, flow in getattr(self, "_flows", {}).items():
            if flow.expires_at > now:
                # start_workflow.lua's nine fields and five per step, and each result kept
                fields = 9 + 5 * len(flow.steps) + len(flow.results)
                ttl = None if math.isinf(flow.expires_at) else seconds_left(flow.expires_at)
                found[name] = "hash", fields, ttl
        return found

    async def ping(self) -> float:
        start = trio.current_time()
        await trio.lowlevel.checkpoint()
        return trio.current_time() - start

    def _names(self) -> list[str]:
        """Every key name Redis would hold now (streams, hashes, sets, strings)."""
        names = []
        for key, stream in self._streams.items():
            if stream.entries or stream.groups:
                names.append(key)
        names += [
            _keys.delayed_tasks(g, self.key_layout)
            for g, members in self._delayed.items()
            if members
        ]
        names += [
            _keys.delayed_index(g, self.key_layout)
            for g, index in self._delayed_index.items()
            if index
        ]
        names += [
            _keys.entry_index(g, self.key_layout) for g, index in self._entry_index.items() if index
        ]
        names += [
            _keys.cancelled(g, self.key_layout) for g, stops in self._stop_requests.items() if stops
        ]
        names += [
            _keys.metrics(g, self.key_layout) for g, fields in self._metrics.items() if fields
        ]
        names += [k for k in list(self._results) if self._live(self._results, k)]
        names += [k for k in list(self._notices) if self._live(self._notices, k)]
        names += [
            _keys.catalog(g, self.key_layout) for g in list(self._catalogs) if self.catalog_size(g)
        ]
        names += [
            _keys.schedules(g, self.key_layout)
            for g in self._schedule_states
            if self._state_fields(g)
        ]
        names += [
            _keys.schedule_specs(g, self.key_layout)
            for g, specs in self._schedule_specs.items()
            if specs
        ]
        names += [
            workflow_ends_key(g, self.key_layout)
            for g, ends in getattr(self, "_workflow_ends", {}).items()
            if ends
        ]
        return names + self.keys() + list(self._event_and_workflow_keys())

    def _state_fields(self, group: str) -> int:
        """How many fields the states hash would have on Redis (one per value set)."""
        return sum(
            getattr(state, attribute) is not None
            for state in self._schedule_states.get(group, {}).values()
            for attribute in STATE_FIELDS
        )

    async def list_groups(self) -> list[str]:
        await trio.lowlevel.checkpoint()
        found = {name for stream in self._streams.values() for name in stream.groups}
        for name in self._names():
            group = group_named_by(name, self.queue, self.key_layout)
            if group is not None:
                found.add(group)
        return sorted(found)

    def _all_keys(self) -> dict[str, tuple[str, int, float | None]]:
        """``{name: (type, size, ttl)}`` of every key Redis would hold now."""
        found: dict[str, tuple[str, int, float | None]] = {}
        for key, stream in self._streams.items():
            if stream.entries or stream.groups:
                found[key] = "stream", len(stream.entries), None
            head, _, queue = key.rpartition(":")  # <prefix>:<queue>; a queue has no ':'
            if stream.dead:
                found[_keys.dead_letter(head, queue)] = "stream", len(stream.dead), None
            if stream.ring:
                found[_keys.claim_delay_ring(head, queue)] = "list", len(stream.ring), None
        layout = self.key_layout
        per_group = (
            (_keys.delayed_tasks, "zset", self._delayed),
            (_keys.delayed_index, "hash", self._delayed_index),
            (_keys.entry_index, "hash", self._entry_index),
            (_keys.cancelled, "zset", self._stop_requests),
            (_keys.metrics, "hash", self._metrics),
            (_keys.schedule_specs, "hash", self._schedule_specs),
            (workflow_ends_key, "hash", getattr(self, "_workflow_ends", {})),  # outcomes
        )
        for name_of, key_type, store in per_group:
            for g, value in store.items():
                if value:
                    found[name_of(g, layout)] = key_type, len(value), None
        for g in list(self._catalogs):
            catalog = self.catalog_size(g)
            if catalog is not None:
                found[_keys.catalog(g, layout)] = "hash", *catalog
        for g in self._schedule_states:
            if self._state_fields(g):
                found[_keys.schedules(g, layout)] = "hash", self._state_fields(g), None
        for name, members in getattr(self, "_zsets", {}).items():  # MemoryFlow's
            if members:
                found[name] = "zset", len(members), None
        for name, items in getattr(self, "_sets", {}).items():
            if items:
                found[name] = "set", len(items), None
        for name in self.keys():
            found[name] = "string", len(self._strings[name][0].encode()), self.ttl(name)
        for name in list(self._results):
            document = self._live(self._results, name)
            if document is not None:
                found[name] = "string", len(document), seconds_left(self._results[name][1])
        for name in list(self._notices):
            if self._live(self._notices, name) is not None:
                found[name] = "list", 1, seconds_left(self._notices[name][1])
        found.update(self._event_and_workflow_keys())
        return found

    def _key_infos(self, group: str) -> list[KeyInfo]:
        own, layout = self.stream_keys(group), self.key_layout
        # With an explicit prefix, the streams under it are every group's that uses
        # it: a queue counts when the group reads its stream (as on Redis).
        explicit = stream_head(own) != group_head(group, layout)
        found = []
        for name, (key_type, size, ttl) in self._all_keys().items():
            kind = group_key_kind(name, group, own, layout)
            if kind is None:
                continue
            hit = queue_key(name, own, self.key_layout)
            if explicit and hit is not None and hit[1] != own.queue:
                stream = self._streams.get(self.stream_keys(group, hit[1]).stream)
                if stream is None or group not in stream.groups:
                    continue
            found.append(KeyInfo(name=name, kind=kind, type=key_type, size=size, ttl=ttl))
        return sorted(found, key=lambda key: key.order)

    async def list_keys(self, group: str) -> list[KeyInfo]:
        await trio.lowlevel.checkpoint()
        return self._key_infos(group)

    async def count_keys(self, group: str) -> KeyCounts:
        await trio.lowlevel.checkpoint()
        return KeyCounts.of(key.kind for key in self._key_infos(group))

    async def list_queues(self, group: str) -> list[str]:
        await trio.lowlevel.checkpoint()
        return queues_in(
            [key.name for key in self._key_infos(group)], self.stream_keys(group), self.key_layout
        )

    async def list_heartbeats(self) -> list[Heartbeat]:
        await trio.lowlevel.checkpoint()
        found = []
        for name in sorted(self.keys()):
            host = _keys.heartbeat_host(name, self.key_layout)
            if host is not None:
                found.append(
                    Heartbeat(host=host, instance_id=self._strings[name][0], ttl=self.ttl(name))
                )
        return found

    async def count_messages(self, group: str, queues: Iterable[str | None]) -> MessageCounts:
        await trio.lowlevel.checkpoint()
        streams = [self._stream(group, queue) for queue in dict.fromkeys(queues)]
        return MessageCounts(
            queued=sum(len(s.entries) for s in streams),
            dead=sum(len(s.dead) for s in streams),
            delayed=len(self._delayed.get(group, {})),
        )

    async def read_lease(self, group: str) -> Lease | None:
        await trio.lowlevel.checkpoint()
        name = _keys.leader(group, self.key_layout)
        owner = self._get(name)
        return None if owner is None else Lease(owner=owner, ttl=self.ttl(name))

    async def flush_group(self, group: str, *, heartbeats: bool) -> list[str]:
        await trio.lowlevel.checkpoint()
        listed = self._key_infos(group)
        queues = queues_in([key.name for key in listed], self.stream_keys(group), self.key_layout)
        shared: set[str] = set()
        streams: dict[str, _Stream] = {}  # by each of its three names, of the queues found
        for queue in queues:
            keys = self.stream_keys(group, queue)
            stream = self._streams.get(keys.stream)
            if stream is None:
                continue
            names = (keys.stream, keys.dead_letter, keys.claim_delay_ring)
            if any(g != group for g in stream.groups):
                shared.update(names)
            stream.groups.pop(group, None)  # XGROUP DESTROY
            streams.update(dict.fromkeys(names, stream))
        doomed = keys_to_flush(listed, heartbeats=heartbeats, shared_names=shared)
        stores = (
            (_keys.delayed_tasks, self._delayed),
            (_keys.delayed_index, self._delayed_index),
            (_keys.entry_index, self._entry_index),
            (_keys.cancelled, self._stop_requests),
            (_keys.metrics, self._metrics),
            (_keys.catalog, self._catalogs),
            (_keys.schedules, self._schedule_states),
            (_keys.schedule_specs, self._schedule_specs),
            (workflow_ends_key, getattr(self, "_workflow_ends", {})),
        )
        by_name: dict[str, dict[str, Any]] = {
            name_of(group, self.key_layout): store for name_of, store in stores
        }
        progress = {
            _keys.progress(group, task_id, self.key_layout): (g, task_id)
            for g, task_id in getattr(self, "_progress", {})
            if g == group
        }
        for name in doomed:
            stream = streams.get(name)
            if stream is not None and name.endswith(":dead") and name not in self._streams:
                stream.dead.clear()
            elif stream is not None and name.startswith("ring:"):
                stream.ring.clear()
            elif stream is not None:
                stream.entries.clear()
                stream.seq_of.clear()
                stream.groups.clear()
            elif name == _keys.events(group, self.key_layout):
                # Emptied, not dropped: blocked readers stay parked on its lot.
                self._event_streams[group].entries.clear()
            elif name in by_name:
                by_name[name].pop(group, None)
            elif name in progress:
                del self._progress[progress[name]]
            elif name in getattr(self, "_flows", {}):
                del self._flows[name]
            elif name in self._results:
                del self._results[name]
            elif name in self._notices:
                del self._notices[name]
            elif name in getattr(self, "_zsets", {}):
                del self._zsets[name]
            elif name in getattr(self, "_sets", {}):
                del self._sets[name]
            else:
                self._strings.pop(name, None)
        return doomed
