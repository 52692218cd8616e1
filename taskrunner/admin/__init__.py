"""Operator tools: pause and resume work, inspect and wipe a group's keys, follow
and cancel tasks, replay dead letters.

:func:`pause` and :func:`resume` stop and restart one queue or one task for a
whole fleet (every runner of the group notices within about a second; see
docs/flow-control.md), through the backend's
:class:`~taskrunner.backends.FlowControl`; :func:`paused` says what is paused.

:func:`get_task` and :func:`cancel` do what :meth:`TaskRunner.get_task
<taskrunner.TaskRunner.get_task>` and :meth:`TaskRunner.cancel
<taskrunner.TaskRunner.cancel>` do, with a backend and a group name alone (no
runner, no registered tasks), on every queue of the group (:func:`queues` finds
them on the store). :func:`dead_letters` lists a group's dead
letters, every queue's or one's (each task, why it failed, its payload, when,
its queue), :func:`replay_dead_letters`
dispatches some of them again (each in one atomic step: the new entry is added
and the dead letter deleted together, so a dead letter is replayed once) and
:func:`purge_dead_letters` deletes them.

:func:`flush` is the "Flushing / cleanup" recipe of the key layout
(docs/redis-key-layout.md) as one call, for development and staging: it drops
in-flight messages, forces a re-election and may let a duplicate unique job
in, so it refuses to run without ``confirm=True``. :func:`list_keys` shows
every documented key of a group that exists, with its type, size and TTL.
:func:`list_groups` lists the groups on the store (a sharded group once, with its
shard count). :func:`schedules` shows a group's periodic schedules: task, spec, next fire,
last fired tick and last outcome. :func:`desired_instances` reads the instance count
the group's leader publishes for an autoscaler (``TaskRunnerConfig(target_wait=...)``).

Both go through the backend's :class:`~taskrunner.backends.Inspection` (``SCAN``,
never ``KEYS``, on Redis), so they work the same on
:class:`~taskrunner.backends.redis.RedisBackend`,
:class:`~taskrunner.backends.memory.MemoryBackend` and any backend of your own
that implements it.
"""

# Where things live: a group's state across its fleet (pausing, schedules, groups and
# shards) in _groups, its keys in _group_keys, tasks and workflows by id in _tasks, dead
# letters in _dead_letters; this module is their public face (docs/reference/admin.md
# lists what the API reference shows, in this order).

from __future__ import annotations

from taskrunner._dispatch.dead import DeadLetterInfo, ReplayResult
from taskrunner._fleet.shard_groups import GroupListing
from taskrunner._schedules.view import ScheduleRow
from taskrunner.admin._dead_letters import (
    PAGE as PAGE,
)
from taskrunner.admin._dead_letters import (
    dead_letter,
    dead_letters,
    purge_dead_letters,
    replay_all_dead_letters,
    replay_dead_letters,
)
from taskrunner.admin._group_keys import documented_keys, flush, list_keys
from taskrunner.admin._groups import (
    desired_instances,
    list_groups,
    pause,
    paused,
    resume,
    schedules,
)
from taskrunner.admin._groups import (
    shards_of as shards_of,
)
from taskrunner.admin._tasks import cancel, cancel_workflow, events, get_task, get_workflow, queues
from taskrunner.backends import KeyInfo

__all__ = [
    "DeadLetterInfo",
    "GroupListing",
    "KeyInfo",
    "ReplayResult",
    "ScheduleRow",
    "cancel",
    "cancel_workflow",
    "dead_letter",
    "dead_letters",
    "desired_instances",
    "documented_keys",
    "events",
    "flush",
    "get_task",
    "get_workflow",
    "list_groups",
    "list_keys",
    "pause",
    "paused",
    "purge_dead_letters",
    "queues",
    "replay_all_dead_letters",
    "replay_dead_letters",
    "resume",
    "schedules",
]
