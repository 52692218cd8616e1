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

import trio

from taskrunner import _keys
from taskrunner.backends._layout import group_keys, group_named_by, keys_to_flush, kind_of
from taskrunner.backends._protocols.inspection import (
    REDIS_TYPES,
    Heartbeat,
    KeyCounts,
    KeyInfo,
    KeyKind,
    Lease,
)
from taskrunner.backends._protocols.schedules import STATE_FIELDS
from taskrunner.backends.memory._catalog import MemoryCatalog
from taskrunner.backends.memory._schedules import MemorySchedules
from taskrunner.backends.memory._state import seconds_left
from taskrunner.backends.memory._tracking import MemoryTracking


class MemoryInspection(MemoryTracking, MemorySchedules, MemoryCatalog):
    """A :class:`~taskrunner.backends.Inspection` of the in-memory stream and state."""

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
        names += [_keys.delayed_tasks(g) for g, members in self._delayed.items() if members]
        names += [_keys.delayed_index(g) for g, index in self._delayed_index.items() if index]
        names += [_keys.entry_index(g) for g, index in self._entry_index.items() if index]
        names += [_keys.cancelled(g) for g, stops in self._stop_requests.items() if stops]
        names += [_keys.metrics(g) for g, fields in self._metrics.items() if fields]
        names += [k for k in list(self._results) if self._live(self._results, k)]
        names += [k for k in list(self._notices) if self._live(self._notices, k)]
        names += [_keys.catalog(g) for g in list(self._catalogs) if self.catalog_size(g)]
        names += [_keys.schedules(g) for g in self._schedule_states if self._state_fields(g)]
        names += [_keys.schedule_specs(g) for g, specs in self._schedule_specs.items() if specs]
        return names + self.keys()

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
            group = group_named_by(name, self.queue)
            if group is not None:
                found.add(group)
        return sorted(found)

    def _sizes(self, group: str) -> dict[str, tuple[int, float | None]]:
        """``{name: (size, ttl)}`` of ``group``'s fixed keys that exist."""
        keys = self.stream_keys(group)
        found: dict[str, tuple[int, float | None]] = {}
        stream = self._streams.get(keys.stream)
        if stream is not None:
            if stream.entries or stream.groups:
                found[keys.stream] = len(stream.entries), None
            if stream.dead:
                found[keys.dead_letter] = len(stream.dead), None
            if stream.ring:
                found[keys.claim_delay_ring] = len(stream.ring), None
        if self._delayed.get(group):
            found[_keys.delayed_tasks(group)] = len(self._delayed[group]), None
        if self._delayed_index.get(group):
            found[_keys.delayed_index(group)] = len(self._delayed_index[group]), None
        if self._entry_index.get(group):
            found[_keys.entry_index(group)] = len(self._entry_index[group]), None
        if self._stop_requests.get(group):
            found[_keys.cancelled(group)] = len(self._stop_requests[group]), None
        if self._metrics.get(group):
            found[_keys.metrics(group)] = len(self._metrics[group]), None
        catalog = self.catalog_size(group)
        if catalog is not None:
            found[_keys.catalog(group)] = catalog
        if self._state_fields(group):
            found[_keys.schedules(group)] = self._state_fields(group), None
        if self._schedule_specs.get(group):
            found[_keys.schedule_specs(group)] = len(self._schedule_specs[group]), None
        for name in (
            _keys.leader(group),
            _keys.worker_tuning_capacity(group),
            _keys.desired_instances(group),
        ):
            value = self._get(name)
            if value is not None:
                found[name] = len(value.encode()), self.ttl(name)
        return found

    def _key_infos(self, group: str) -> list[KeyInfo]:
        fixed = group_keys(self.stream_keys(group), group)
        found = [
            KeyInfo(name=name, kind=fixed[name], type=REDIS_TYPES[fixed[name]], size=size, ttl=ttl)
            for name, (size, ttl) in self._sizes(group).items()
        ]
        for name in self.keys():
            kind = kind_of(name, {})
            if kind is not None and name not in fixed:
                value = self._strings[name][0]
                size = len(value.encode())
                found.append(
                    KeyInfo(name=name, kind=kind, type="string", size=size, ttl=self.ttl(name))
                )
        for name in self.result_keys(group):
            document, expires = self._results[name]
            found.append(
                KeyInfo(
                    name=name, kind=KeyKind.RESULT, type="string", size=len(document),
                    ttl=seconds_left(expires),
                )
            )  # fmt: skip
        for name in self.notify_keys(group):
            found.append(
                KeyInfo(
                    name=name, kind=KeyKind.RESULT_NOTICE, type="list", size=1,
                    ttl=seconds_left(self._notices[name][1]),
                )
            )  # fmt: skip
        return sorted(found, key=lambda key: key.order)

    async def list_keys(self, group: str) -> list[KeyInfo]:
        await trio.lowlevel.checkpoint()
        return self._key_infos(group)

    async def count_keys(self, group: str) -> KeyCounts:
        await trio.lowlevel.checkpoint()
        return KeyCounts.of(key.kind for key in self._key_infos(group))

    async def list_heartbeats(self) -> list[Heartbeat]:
        await trio.lowlevel.checkpoint()
        found = []
        for name in sorted(self.keys()):
            if kind_of(name, {}) is KeyKind.HEARTBEAT:
                host = name.removeprefix(_keys.replication(""))
                found.append(
                    Heartbeat(host=host, instance_id=self._strings[name][0], ttl=self.ttl(name))
                )
        return found

    async def read_lease(self, group: str) -> Lease | None:
        await trio.lowlevel.checkpoint()
        name = _keys.leader(group)
        owner = self._get(name)
        return None if owner is None else Lease(owner=owner, ttl=self.ttl(name))

    async def flush_group(self, group: str, *, heartbeats: bool) -> list[str]:
        await trio.lowlevel.checkpoint()
        keys = self.stream_keys(group)
        stream = self._streams.get(keys.stream)
        others = [g for g in (stream.groups if stream else ()) if g != group]
        doomed = keys_to_flush(
            self._key_infos(group), stream_shared=bool(others), heartbeats=heartbeats
        )
        if stream is not None:
            stream.groups.pop(group, None)  # XGROUP DESTROY
        for name in doomed:
            if stream is not None and name == keys.stream:
                stream.entries.clear()
                stream.seq_of.clear()
                stream.groups.clear()
            elif stream is not None and name == keys.dead_letter:
                stream.dead.clear()
            elif stream is not None and name == keys.claim_delay_ring:
                stream.ring.clear()
            elif name == _keys.delayed_tasks(group):
                self._delayed.pop(group, None)
            elif name == _keys.delayed_index(group):
                self._delayed_index.pop(group, None)
            elif name == _keys.entry_index(group):
                self._entry_index.pop(group, None)
            elif name == _keys.cancelled(group):
                self._stop_requests.pop(group, None)
            elif name == _keys.metrics(group):
                self._metrics.pop(group, None)
            elif name in self._results:
                del self._results[name]
            elif name in self._notices:
                del self._notices[name]
            elif name == _keys.catalog(group):
                self._catalogs.pop(group, None)
            elif name == _keys.schedules(group):
                self._schedule_states.pop(group, None)
            elif name == _keys.schedule_specs(group):
                self._schedule_specs.pop(group, None)
            else:
                self._strings.pop(name, None)
        return doomed
