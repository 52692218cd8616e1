"""The dashboard's workflow page value: the DAG's layers and the view (pure), and its
read on MemoryBackend (the page itself is in tests/test_dashboard_browser.py)."""

from __future__ import annotations

import pytest

from taskrunner import StepState, StepStatus, WorkflowState, WorkflowStatus
from taskrunner.backends.memory import MemoryBackend
from taskrunner.dashboard._workflows import layers_of, read_workflow, workflow_view


@pytest.mark.parametrize(
    ("steps", "layers"),
    [
        ([("a", [])], [["a"]]),
        ([("a", []), ("b", ["a"]), ("c", ["b"])], [["a"], ["b"], ["c"]]),
        ([("x.1", []), ("x.2", []), ("m", ["x.1", "x.2"])], [["x.1", "x.2"], ["m"]]),
        # A step sits one layer after its deepest parent, not its first.
        (
            [("e", []), ("c", ["e"]), ("s", ["c"]), ("mail", ["e", "s"])],
            [["e"], ["c"], ["s"], ["mail"]],
        ),
        # Declared order within a layer; a parent declared later still comes first.
        ([("late", ["root"]), ("root", []), ("b", ["root"])], [["root"], ["late", "b"]]),
        # A parent that is not a step (the on_failure step's) is no layer.
        ([("a", []), ("on_failure", ["gone"])], [["a", "on_failure"]]),
    ],
)
def test_layers(steps: list[tuple[str, list[str]]], layers: list[list[str]]) -> None:
    assert layers_of(steps) == layers


def test_the_view_counts_every_state_and_places_each_step() -> None:
    status = WorkflowStatus(
        workflow_id="w1",
        name="report",
        state=WorkflowState.FAILED,
        counts={"succeeded": 1, "failed": 1, "cancelled": 1},
        steps=(
            StepStatus(id="a", task="t", state=StepState.SUCCEEDED, task_id="1-0"),
            StepStatus(
                id="b",
                task="t",
                state=StepState.FAILED,
                parents=("a",),
                error_type="KeyError",
                error="'x'",
                task_id="2-0",
            ),
            StepStatus(
                id="c", task="u", state=StepState.CANCELLED, parents=("b",), on_failure="skip"
            ),
        ),
        failed_step="b",
    )
    view = workflow_view(status)
    assert view.counts == {
        "pending": 0, "queued": 0, "succeeded": 1, "failed": 1, "cancelled": 1,
    }  # fmt: skip
    assert view.total == 3
    assert [[s.id for s in layer] for layer in view.layers] == [["a"], ["b"], ["c"]]
    assert view.layers[1][0].error == "KeyError: 'x'"
    assert view.layers[1][0].after == ["a"]
    assert view.layers[2][0].on_failure == "skip"
    assert view.layers[2][0].task_id is None
    assert view.failed_step == "b"
    assert view.reason is None
    assert not view.cancellable


async def test_an_unknown_workflow_reads_none() -> None:
    assert await read_workflow(MemoryBackend(), "g", "nope") is None
