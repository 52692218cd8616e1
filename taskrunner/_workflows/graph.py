"""The workflow graph and its builders: ``chain``, ``group``, ``chord`` and ``Workflow``.

Theory of operation. ``runner.step(task, payload)`` makes a :class:`StepSpec`,
one run of a task. The canvas builders compose them into a :class:`Canvas`
(its steps, each with the indexes of its parents, and its *heads* and
*tails*): ``chain(a, b)`` makes ``b``'s heads run after ``a``'s tails,
``group(a, b)`` sets them side by side, ``chord(header, body)`` is
``chain(header, body)``. :class:`Workflow` names its steps and their parents
itself (``.step(id, task, payload, after=[...])``). Either compiles, through
:func:`compile_graph`, into one validated :class:`WorkflowGraph`: unique step
ids, parents that are steps, no cycle, known policies; every problem is an
:class:`~taskrunner._workflows.state.InvalidWorkflow` with one line naming it.

A canvas step without an explicit ``id`` is named after its task, with
``.1``, ``.2``... when the task runs more than once in the workflow.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from taskrunner._workflows.state import InvalidWorkflow

__all__ = [
    "HANDLER_ID",
    "NO_PAYLOAD",
    "POLICIES",
    "Canvas",
    "StepNode",
    "StepSpec",
    "Workflow",
    "WorkflowGraph",
    "chain",
    "chord",
    "compile_graph",
    "group",
]


class _NoPayload:
    """The payload of a step given none: it receives its parents' results instead."""

    _instance: _NoPayload | None = None

    def __new__(cls) -> _NoPayload:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NO_PAYLOAD"


NO_PAYLOAD: Final = _NoPayload()
"""A step's payload when none is given (``runner.step("upload")``)."""

POLICIES = ("fail", "continue", "skip")
"""The values of ``on_failure``: what a step's final failure does to its workflow."""

HANDLER_ID = "on_failure"
"""The step id of ``Workflow(on_failure=step)``'s step when it names none."""


def _check_policy(step: str, policy: object) -> str:
    if policy not in POLICIES:
        raise ValueError(
            f"step {step!r}: on_failure should be 'fail', 'continue' or 'skip', got {policy!r}"
        )
    return str(policy)


@attrs.frozen(kw_only=True)
class StepSpec:
    """One run of a task in a workflow, before it has its place (``runner.step(...)``)."""

    task: str
    """The task's name."""
    payload: Any = NO_PAYLOAD
    """Its payload in wire (JSON-ready) form, or :data:`NO_PAYLOAD`: it then receives
    its parents' results (the one parent's, or their list in declared order)."""
    id: str | None = None
    """Its step id; ``None``: named after its task."""
    queue: str | None = None
    """The queue it runs on; ``None``: its task's."""
    on_failure: str = "fail"
    """What its final failure does: ``"fail"``, ``"continue"`` or ``"skip"``."""


@attrs.frozen(kw_only=True)
class StepNode:
    """One step of a compiled :class:`WorkflowGraph`."""

    id: str
    task: str
    payload: Any = NO_PAYLOAD
    parents: tuple[str, ...] = ()
    """Its parents' ids, in declared order (the order of the list it receives)."""
    on_failure: str = "fail"
    queue: str | None = None

    @property
    def has_payload(self) -> bool:
        """Whether it was given a payload (else it receives its parents' results)."""
        return self.payload is not NO_PAYLOAD


@attrs.frozen(kw_only=True)
class WorkflowGraph:
    """A validated workflow: its steps in declared order and its failure handler.

    Build it with :func:`compile_graph` (``runner.dispatch_workflow`` does).
    """

    name: str
    steps: tuple[StepNode, ...]
    handler: StepNode | None = None
    """``Workflow(on_failure=step)``'s step: queued when the workflow fails."""
    children: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict, eq=False)
    """Each step's dependents, in declared order."""
    by_id: Mapping[str, StepNode] = attrs.field(factory=dict, eq=False)
    """Every step by id (the handler too): a 100,000-step group is looked up in O(1)."""

    def step(self, step_id: str) -> StepNode:
        """The step ``step_id`` (the handler too).

        Raises:
            KeyError: no such step.
        """
        return self.by_id[step_id]

    @property
    def roots(self) -> tuple[StepNode, ...]:
        """The steps with no parents: queued at dispatch."""
        return tuple(node for node in self.steps if not node.parents)

    @property
    def sinks(self) -> tuple[str, ...]:
        """The steps no step runs after: their results are the workflow's."""
        return tuple(node.id for node in self.steps if not self.children.get(node.id))


@attrs.frozen
class Canvas:
    """Steps composed by ``chain``/``group``/``chord``, not yet named: each step with the
    indexes of its parents, and the indexes of the composition's heads (steps with no
    parent inside it) and tails (steps none inside it runs after)."""

    steps: tuple[tuple[StepSpec, tuple[int, ...]], ...]
    heads: tuple[int, ...]
    tails: tuple[int, ...]


Part = StepSpec | Canvas


def _canvas(part: object) -> Canvas:
    if isinstance(part, Canvas):
        return part
    if isinstance(part, StepSpec):
        return Canvas(((part, ()),), (0,), (0,))
    if isinstance(part, Workflow):
        raise TypeError("a Workflow cannot be part of a chain or group: dispatch it on its own")
    raise TypeError(f"a chain or group is made of runner.step(...) values, got {part!r}")


def _parts(parts: Sequence[object]) -> list[Canvas]:
    # group(step(u) for u in urls): one iterable argument stands for its items.
    if len(parts) == 1 and not isinstance(parts[0], StepSpec | Canvas | Workflow):
        if isinstance(parts[0], Iterable) and not isinstance(parts[0], str | bytes):
            parts = list(parts[0])
    return [_canvas(part) for part in parts]


def _shifted(canvas: Canvas, by: int) -> list[tuple[StepSpec, tuple[int, ...]]]:
    return [(spec, tuple(p + by for p in parents)) for spec, parents in canvas.steps]


def chain(*parts: Part | Iterable[Part]) -> Canvas:
    """Steps (or groups) run one after the other: each part's heads run after the
    previous part's tails, and receive their results.

    Raises:
        ValueError: no part was given.
    """
    canvases = _parts(parts)
    if not canvases:
        raise ValueError("chain() needs at least one step")
    steps = list(canvases[0].steps)
    heads, tails = canvases[0].heads, canvases[0].tails
    for canvas in canvases[1:]:
        offset = len(steps)
        added = _shifted(canvas, offset)
        for head in canvas.heads:
            spec, parents = added[head]
            added[head] = (spec, tuple(tails) + parents)
        steps += added
        tails = tuple(t + offset for t in canvas.tails)
    return Canvas(tuple(steps), heads, tails)


def group(*parts: Part | Iterable[Part]) -> Canvas:
    """Steps (or chains) run side by side; a step after a group receives the list of
    their results, in order.

    Raises:
        ValueError: no part was given.
    """
    canvases = _parts(parts)
    if not canvases:
        raise ValueError("group() needs at least one step")
    steps: list[tuple[StepSpec, tuple[int, ...]]] = []
    heads: list[int] = []
    tails: list[int] = []
    for canvas in canvases:
        offset = len(steps)
        steps += _shifted(canvas, offset)
        heads += [h + offset for h in canvas.heads]
        tails += [t + offset for t in canvas.tails]
    return Canvas(tuple(steps), tuple(heads), tuple(tails))


def chord(header: Part | Iterable[Part], body: Part) -> Canvas:
    """``header`` (a group) then ``body``, which receives the list of their results."""
    return chain(group(header) if not isinstance(header, Canvas) else header, body)


@attrs.frozen
class Workflow:
    """A DAG of named steps, built one ``.step`` at a time (each call returns a new one):
    ``Workflow("report", on_failure=runner.step("alert")).step(...)``."""

    name: str = "workflow"
    """The workflow's name (shown by ``wf.status()``)."""
    on_failure: StepSpec | None = attrs.field(default=None, kw_only=True)
    """A step (``runner.step(...)``) queued when the workflow fails under a step's
    ``on_failure="fail"``; it receives the failed step's :class:`~taskrunner.StepFailed`
    (in ``ctx.parents`` and, with no payload of its own, as its payload)."""
    nodes: tuple[StepNode, ...] = attrs.field(default=(), kw_only=True)
    """Its steps so far, in declared order."""

    def step(
        self,
        id: str,
        task_name: str,
        payload: Any = NO_PAYLOAD,
        *,
        after: Sequence[str] = (),
        on_failure: str = "fail",
        queue: str | None = None,
    ) -> Workflow:
        """This workflow with one more step.

        Args:
            id: The step's id, unique in the workflow (its results are known by it).
            task_name: The task it runs.
            payload: Its payload; none: it receives its parents' results.
            after: The steps it runs after (their ids), in the order it receives them.
            on_failure: ``"fail"`` (default), ``"continue"`` or ``"skip"``.
            queue: The queue it runs on; ``None``: its task's.

        Raises:
            InvalidWorkflow: ``id`` is taken, or not a non-empty string.
            ValueError: ``on_failure`` is not a policy.
        """
        if not isinstance(id, str) or not id:
            raise InvalidWorkflow(self.name, f"a step id should be a non-empty string, got {id!r}")
        if any(node.id == id for node in self.nodes):
            raise InvalidWorkflow(self.name, f"step id {id!r} is given twice")
        if isinstance(after, str):
            after = [after]
        node = StepNode(
            id=id,
            task=task_name,
            payload=payload,
            parents=tuple(after),
            on_failure=_check_policy(id, on_failure),
            queue=queue,
        )
        return attrs.evolve(self, nodes=(*self.nodes, node))


def _named(canvas: Canvas) -> list[StepNode]:
    specs = [spec for spec, _ in canvas.steps]
    given = {spec.id for spec in specs if spec.id is not None}
    uses = Counter(spec.task for spec in specs if spec.id is None)
    seen: Counter[str] = Counter()
    ids: list[str] = []
    for spec in specs:
        if spec.id is not None:
            ids.append(spec.id)
            continue
        if uses[spec.task] == 1 and spec.task not in given:
            ids.append(spec.task)
            continue
        while True:
            seen[spec.task] += 1
            candidate = f"{spec.task}.{seen[spec.task]}"
            if candidate not in given:
                break
        ids.append(candidate)
    return [
        StepNode(
            id=step_id,
            task=spec.task,
            payload=spec.payload,
            parents=tuple(ids[p] for p in parents),
            on_failure=_check_policy(step_id, spec.on_failure),
            queue=spec.queue,
        )
        for step_id, (spec, parents) in zip(ids, canvas.steps, strict=True)
    ]


def _cycle(nodes: Sequence[StepNode]) -> list[str] | None:
    """One cycle among ``nodes`` (its step ids, the first repeated at the end), or ``None``."""
    parents = {node.id: node.parents for node in nodes}
    colour: dict[str, int] = {}  # 1: on the path, 2: done
    for start in parents:
        if start in colour:
            continue
        path: list[str] = []
        stack = [(start, iter(parents[start]))]
        colour[start] = 1
        path.append(start)
        while stack:
            node, pending = stack[-1]
            nxt = next(pending, None)
            if nxt is None:
                colour[node] = 2
                stack.pop()
                path.pop()
            elif colour.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            elif nxt not in colour:
                colour[nxt] = 1
                path.append(nxt)
                stack.append((nxt, iter(parents[nxt])))
    return None


def compile_graph(work: Workflow | Canvas | StepSpec, *, name: str | None = None) -> WorkflowGraph:
    """The validated graph of a workflow, chain, group, chord or single step.

    Raises:
        InvalidWorkflow: a duplicate step id, a parent that is no step, a cycle, or no
            step at all (each one line naming it).
        TypeError: ``work`` is none of these.
    """
    handler_spec: StepSpec | None = None
    if isinstance(work, Workflow):
        label = name or work.name
        nodes = list(work.nodes)
        handler_spec = work.on_failure
    elif isinstance(work, Canvas | StepSpec):
        label = name or "workflow"
        nodes = _named(_canvas(work))
    else:
        raise TypeError(
            f"a workflow is a Workflow, chain, group, chord or runner.step(...), got {work!r}"
        )
    if not nodes:
        raise InvalidWorkflow(label, "it has no steps")
    counts = Counter(node.id for node in nodes)
    twice = [step_id for step_id, n in counts.items() if n > 1]
    if twice:
        raise InvalidWorkflow(label, f"step id {twice[0]!r} is given twice")
    for node in nodes:
        for parent in node.parents:
            if parent not in counts:
                raise InvalidWorkflow(
                    label, f"step {node.id!r} runs after {parent!r}, which is no step of it"
                )
        if len(set(node.parents)) != len(node.parents):
            raise InvalidWorkflow(label, f"step {node.id!r} names a parent twice")
    cycle = _cycle(nodes)
    if cycle is not None:
        raise InvalidWorkflow(label, f"steps {' -> '.join(map(repr, cycle))} form a cycle")
    handler = None
    if handler_spec is not None:
        handler_id = handler_spec.id or HANDLER_ID
        if handler_id in counts:
            raise InvalidWorkflow(label, f"the on_failure step's id {handler_id!r} is a step's")
        handler = StepNode(
            id=handler_id,
            task=handler_spec.task,
            payload=handler_spec.payload,
            queue=handler_spec.queue,
        )
    children: dict[str, list[str]] = {node.id: [] for node in nodes}
    for node in nodes:
        for parent in node.parents:
            children[parent].append(node.id)
    by_id = {node.id: node for node in nodes}
    if handler is not None:
        by_id[handler.id] = handler
    return WorkflowGraph(
        name=label,
        steps=tuple(nodes),
        handler=handler,
        children={k: tuple(v) for k, v in children.items()},
        by_id=by_id,
    )
