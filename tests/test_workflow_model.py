"""The workflow graph, its builders and its decisions: pure, table-tested."""

from __future__ import annotations

import json

import pytest

from taskrunner._wire import encode_result, failed, succeeded
from taskrunner._workflows import (
    NO_PAYLOAD,
    InvalidWorkflow,
    StepFailed,
    StepSpec,
    StepState,
    Workflow,
    WorkflowState,
    chain,
    chord,
    group,
)
from taskrunner._workflows.decisions import Progress, cancel, finish, start
from taskrunner._workflows.graph import compile_graph
from taskrunner._workflows.inputs import MAX_INPUT_BYTES, ParentResult, step_inputs
from taskrunner.errors import InvalidTaskPayload

S = StepState


def step(task: str, payload: object = NO_PAYLOAD, **kw: object) -> StepSpec:
    return StepSpec(task=task, payload=payload, **kw)  # type: ignore[arg-type]


def parents_of(work: object) -> dict[str, tuple[str, ...]]:
    graph = compile_graph(work)  # type: ignore[arg-type]
    return {node.id: node.parents for node in graph.steps}


@pytest.mark.parametrize(
    ("work", "expected"),
    [
        (chain(step("a"), step("b"), step("c")), {"a": (), "b": ("a",), "c": ("b",)}),
        (
            chord(group(step("f", 1), step("f", 2)), step("m")),
            {"f.1": (), "f.2": (), "m": ("f.1", "f.2")},
        ),
        (
            chord((step("f", u) for u in range(3)), step("m")),
            {"f.1": (), "f.2": (), "f.3": (), "m": ("f.1", "f.2", "f.3")},
        ),
        (
            chain(step("a"), group(step("b"), step("c")), step("d")),
            {"a": (), "b": ("a",), "c": ("a",), "d": ("b", "c")},
        ),
        (group(chain(step("a"), step("b")), step("c")), {"a": (), "b": ("a",), "c": ()}),
        (chain(step("a", id="x"), step("a")), {"x": (), "a": ("x",)}),
        (step("solo", 1), {"solo": ()}),
    ],
)
def test_builders_compose(work: object, expected: dict[str, tuple[str, ...]]) -> None:
    assert parents_of(work) == expected


def report() -> Workflow:
    return (
        Workflow("report")
        .step("extract", "extract", {"day": "2026-12-01"})
        .step("clean", "clean", after=["extract"])
        .step("stats", "stats", after=["clean"])
        .step("chart", "chart", after=["clean"])
        .step("mail", "mail", after=["stats", "chart"], on_failure="continue")
    )


def test_dag_compiles_with_children_and_sinks() -> None:
    graph = compile_graph(report())
    assert graph.children["clean"] == ("stats", "chart")
    assert graph.sinks == ("mail",)
    assert [n.id for n in graph.roots] == ["extract"]
    assert graph.step("extract").has_payload
    assert not graph.step("clean").has_payload


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: Workflow("w").step("a", "t").step("a", "t"),
            "workflow 'w': step id 'a' is given twice",
        ),
        (
            lambda: compile_graph(Workflow("w").step("a", "t", after=["nope"])),
            "workflow 'w': step 'a' runs after 'nope', which is no step of it",
        ),
        (
            lambda: compile_graph(
                Workflow("w")
                .step("a", "t", after=["c"])
                .step("b", "t", after=["a"])
                .step("c", "t", after=["b"])
            ),
            "workflow 'w': steps 'a' -> 'c' -> 'b' -> 'a' form a cycle",
        ),
        (
            lambda: compile_graph(Workflow("w").step("a", "t", after=["a"])),
            "steps 'a' -> 'a' form a cycle",
        ),
        (lambda: compile_graph(Workflow("w")), "workflow 'w': it has no steps"),
        (
            lambda: compile_graph(chain(step("a", id="x"), step("b", id="x"))),
            "step id 'x' is given twice",
        ),
        (lambda: Workflow("w").step("", "t"), "a step id should be a non-empty string, got ''"),
        (
            lambda: compile_graph(
                Workflow("w", on_failure=StepSpec(task="alert", id="a")).step("a", "t")
            ),
            "the on_failure step's id 'a' is a step's",
        ),
    ],
)
def test_invalid_workflows_say_why_in_one_line(build: object, message: str) -> None:
    with pytest.raises(InvalidWorkflow) as caught:
        build()  # type: ignore[operator]
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(
        ValueError,
        match=r"step 'a': on_failure should be 'fail', 'continue' or 'skip', got 'ignore'",
    ):
        Workflow("w").step("a", "t", on_failure="ignore")


def _progress(
    graph_states: dict[str, StepState],
    waiting: dict[str, int],
    state: WorkflowState = WorkflowState.RUNNING,
) -> Progress:
    return Progress(state=state, steps=graph_states, waiting=waiting)


CHORD = compile_graph(chord(group(step("f", 1), step("f", 2)), step("m")))
DAG = compile_graph(report())
HANDLED = compile_graph(
    Workflow("h", on_failure=StepSpec(task="alert"))
    .step("a", "t")
    .step("b", "t")
    .step("c", "t", after=["a", "b"])
)


@pytest.mark.parametrize(
    ("graph", "progress", "step_id", "outcome", "queue", "cancel_ids", "end"),
    [
        # The first header step of a chord counts; the second queues the body, once.
        (CHORD, start(CHORD), "f.1", S.SUCCEEDED, (), (), None),
        (
            CHORD,
            _progress({"f.1": S.SUCCEEDED, "f.2": S.QUEUED, "m": S.PENDING}, {"m": 1}),
            "f.2",
            S.SUCCEEDED,
            ("m",),
            (),
            None,
        ),
        # The sink's success ends the workflow.
        (
            CHORD,
            _progress({"f.1": S.SUCCEEDED, "f.2": S.SUCCEEDED, "m": S.QUEUED}, {"m": 0}),
            "m",
            S.SUCCEEDED,
            (),
            (),
            WorkflowState.SUCCEEDED,
        ),
        # "fail": the running sibling is cancelled, the pending body too; the workflow fails.
        (CHORD, start(CHORD), "f.1", S.FAILED, (), ("f.2",), WorkflowState.FAILED),
        # A cancelled step under "fail" ends it the same way.
        (CHORD, start(CHORD), "f.2", S.CANCELLED, (), ("f.1",), WorkflowState.FAILED),
        # "continue": mail's parents are stats and chart; chart failing under the default
        # policy fails the workflow, mail failing under "continue" still ends it.
        (
            DAG,
            _progress(
                {
                    "extract": S.SUCCEEDED,
                    "clean": S.SUCCEEDED,
                    "stats": S.SUCCEEDED,
                    "chart": S.SUCCEEDED,
                    "mail": S.QUEUED,
                },
                {"clean": 0, "stats": 0, "chart": 0, "mail": 0},
            ),
            "mail",
            S.FAILED,
            (),
            (),
            WorkflowState.SUCCEEDED,
        ),
        # A handler is queued when the workflow fails.
        (HANDLED, start(HANDLED), "a", S.FAILED, ("on_failure",), ("b",), WorkflowState.FAILED),
    ],
)
def test_finish_decides(
    graph: object,
    progress: Progress,
    step_id: str,
    outcome: StepState,
    queue: tuple[str, ...],
    cancel_ids: tuple[str, ...],
    end: WorkflowState | None,
) -> None:
    decision = finish(graph, progress, step_id, outcome)  # type: ignore[arg-type]
    assert not decision.duplicate
    assert decision.states[step_id] is outcome
    assert decision.queue == queue
    assert decision.cancel == cancel_ids
    assert decision.end is end


def test_a_replayed_finish_counts_once() -> None:
    progress = _progress({"f.1": S.SUCCEEDED, "f.2": S.QUEUED, "m": S.PENDING}, {"m": 1})
    assert finish(CHORD, progress, "f.1", S.SUCCEEDED).duplicate
    assert finish(CHORD, progress, "f.1", S.FAILED).duplicate
    assert finish(CHORD, progress, "nope", S.SUCCEEDED).duplicate


def test_policies_continue_and_skip_still_queue_the_dependent() -> None:
    graph = compile_graph(
        Workflow("p")
        .step("a", "t", on_failure="skip")
        .step("b", "t", on_failure="continue")
        .step("c", "t", after=["a", "b"])
    )
    first = finish(graph, start(graph), "a", S.FAILED)
    assert first.queue == ()
    assert first.waiting == {"c": 1}
    assert first.end is None
    progress = _progress({"a": S.FAILED, "b": S.QUEUED, "c": S.PENDING}, {"c": 1})
    assert finish(graph, progress, "b", S.FAILED).queue == ("c",)


def test_a_finish_in_a_workflow_that_is_over_only_records() -> None:
    progress = _progress(
        {"f.1": S.QUEUED, "f.2": S.CANCELLED, "m": S.CANCELLED}, {"m": 2}, WorkflowState.CANCELLED
    )
    decision = finish(CHORD, progress, "f.1", S.SUCCEEDED)
    assert decision.states == {"f.1": S.SUCCEEDED}
    assert decision.queue == ()
    assert decision.end is None


def test_cancel_decides() -> None:
    decision = cancel(CHORD, start(CHORD))
    assert decision.end is WorkflowState.CANCELLED
    assert decision.cancel == ("f.1", "f.2")
    assert decision.states == {"m": S.CANCELLED}
    over = _progress({"f.1": S.SUCCEEDED}, {}, WorkflowState.SUCCEEDED)
    assert cancel(CHORD, over).duplicate


def _doc(value: object) -> bytes:
    return encode_result(
        succeeded("t", value, attempts=1, enqueued_at=0, started_at=0, finished_at=1)
    )


def _failed_doc() -> bytes:
    return encode_result(
        failed("t", "KeyError", "'x'", attempts=1, enqueued_at=0, started_at=0, finished_at=1)
    )


@pytest.mark.parametrize(
    ("has_payload", "parents", "payload", "ctx_parents"),
    [
        (False, [ParentResult(step="a", policy="fail", document=_doc(1))], 1, {"a": 1}),
        (
            False,
            [
                ParentResult(step="a", policy="fail", document=_doc(1)),
                ParentResult(step="b", policy="fail", document=_doc([2])),
            ],
            [1, [2]],
            {"a": 1, "b": [2]},
        ),
        (
            False,
            [
                ParentResult(step="a", policy="continue", document=_failed_doc()),
                ParentResult(step="b", policy="skip", document=_failed_doc()),
                ParentResult(step="c", policy="fail", document=_doc(3)),
            ],
            [StepFailed("a", "KeyError", "'x'"), 3],
            {"a": StepFailed("a", "KeyError", "'x'"), "c": 3},
        ),
        (True, [ParentResult(step="a", policy="fail", document=_doc(1))], {"own": 1}, {"a": 1}),
        (False, [ParentResult(step="a", policy="skip", document=_failed_doc())], None, {}),
        (False, [], None, {}),
    ],
)
def test_step_inputs(
    has_payload: bool, parents: list[ParentResult], payload: object, ctx_parents: dict[str, object]
) -> None:
    inputs = step_inputs("s", "t", {"own": 1} if has_payload else None, has_payload, parents)
    assert inputs.payload == payload
    assert dict(inputs.parents) == ctx_parents


def test_step_inputs_are_capped() -> None:
    big = json.dumps({"state": "succeeded", "value": "x" * MAX_INPUT_BYTES}).encode()
    with pytest.raises(
        InvalidTaskPayload,
        match=r"step 's' receives \d+ bytes of its parents' results, over the 8388608-byte cap",
    ):
        step_inputs("s", "t", None, False, [ParentResult(step="a", policy="fail", document=big)])


def test_an_undecoded_step_is_still_found_in_its_entry() -> None:
    from taskrunner._execution.poison import workflow_step_in

    raw = (
        b'{"task_name":"t","payload":{"workflow":"fake","step":"x"},'
        b'"id":"9-1","workflow":"w1","step":"s1"}'
    )
    found = workflow_step_in(raw)
    assert found is not None
    assert (found.workflow, found.step, found.task_id) == ("w1", "s1", "9-1")
    assert workflow_step_in(b'{"task_name":"t","payload":1}') is None
    assert workflow_step_in(b'\xff"workflow"') is None
