"""The keys of a workflow's record, of the group's workflow ends and of its running
workflows' index, in the group's slot in every layout."""

from __future__ import annotations

from taskrunner._keys import KeyLayout, group_root

__all__ = ["running_workflows", "workflow_ends_key", "workflow_key"]


def workflow_key(group: str, workflow_id: str, layout: KeyLayout = "go") -> str:
    """A workflow's record: ``<root>:workflow:<workflow id>`` (``taskrunner:<group>`` or,
    in the cluster layout, ``taskrunner:{<group>}``: the slot of the group's streams)."""
    return f"{group_root(group, layout)}:workflow:{workflow_id}"


def workflow_ends_key(group: str, layout: KeyLayout = "go") -> str:
    """The group's count of workflows that ended, by outcome: ``<root>:workflow_ends``
    (a hash: ``succeeded``, ``failed``, ``cancelled``), counted in the atomic step that
    ends each workflow, so each is counted once."""
    return f"{group_root(group, layout)}:workflow_ends"


def running_workflows(group: str, layout: KeyLayout = "go") -> str:
    """The group's running workflows, a sorted set of their records' keys (scored by
    when each started): ``<root>:workflows``; the leader's check of uncounted steps
    goes through it, and a workflow leaves it in the step that ends it."""
    return f"{group_root(group, layout)}:workflows"
