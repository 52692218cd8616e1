"""A chain step's carried inputs (its one parent's header and result, in its entry):
the quick read of a parent's success gives what the general path gives, and leaves
every other case to it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from taskrunner._serve.steps import GENERAL, carried_sources, carried_success
from taskrunner._wire import cancelled, encode_result, failed, succeeded
from taskrunner._workflows.inputs import MAX_INPUT_BYTES, step_inputs

TIMES: dict[str, Any] = {"attempts": 1, "enqueued_at": 0, "started_at": 0, "finished_at": 1}


def header(policy: str = "fail", *, own: bool = False) -> bytes:
    return json.dumps({"step": "resize", "policy": policy, "own": own}).encode()


def general_payload(carried: tuple[bytes, bytes], own_payload: Any = None) -> Any:
    sources = carried_sources(carried)
    return step_inputs("next", "t", own_payload, sources.has_payload, sources.parents).payload


@pytest.mark.parametrize(
    "value", [{"resized": 7}, [1, "two", None], None, 0, "x" * 1000, {"nested": {"a": [1.5]}}]
)
def test_a_parents_success_is_its_value(value: Any) -> None:
    carried = (header(), encode_result(succeeded("resize", value, **TIMES)))
    assert carried_success(carried) == value == general_payload(carried)


@pytest.mark.parametrize(
    "carried",
    [
        (header("continue"), encode_result(failed("resize", "KeyError", "'a'", **TIMES))),
        (header("skip"), encode_result(failed("resize", "KeyError", "'a'", **TIMES))),
        (header("continue"), encode_result(cancelled("resize", finished_at=1))),
        (header(own=True), encode_result(succeeded("resize", 1, **TIMES))),
        (header(), b'{"state":"succeeded","value":"' + b"x" * MAX_INPUT_BYTES + b'"}'),
    ],
    ids=["failed-continue", "failed-skip", "cancelled", "own-payload", "over-the-cap"],
)
def test_anything_else_is_left_to_the_general_path(carried: tuple[bytes, bytes]) -> None:
    assert carried_success(carried) is GENERAL
