"""Reading back an answer an earlier attempt of a review got (``tasks.review.earlier_answer``) never raises, and
only an answer that fits the form about the revision shown is applied (docs/RELIABILITY.md); the end-to-end
case is ``tests/faults/test_kill_review_paths.py``."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any
from uuid import uuid4

import pytest

from flows import activation_review as flow
from skillflow.lifecycle.review import ReviewEvidence

RUN = str(uuid4())
T0 = datetime(2026, 12, 5, tzinfo=UTC)
GOOD = {"decision": "reject", "reviewer": "alice", "reason": "wrong procedure", "skill_md": ""}


def _evidence(revision: int = 2) -> ReviewEvidence:
    return ReviewEvidence(
        skill_id="s1", agent_id="a", user_id="u", name="cancel-reservation", version=1, revision=revision,
        status="shadow", injection_role="user", canonical_hash="0" * 64, content="---\nname: x\n---\n", tools=[],
        missing_tools=[], preconditions=[], baseline={}, validation={}, class_stats={}, readiness={},
    )  # fmt: skip


def _stored(monkeypatch: pytest.MonkeyPatch, inputs: Any) -> list[str]:
    """Serve ``inputs`` (or raise it) as the Prefect server's stored run inputs; returns the prefixes asked."""
    import prefect.input.actions as actions

    asked: list[str] = []

    def fake(key_prefix: str, limit: int = 1, exclude_keys: Any = None, flow_run_id: Any = None) -> Any:
        asked.append(key_prefix)
        if isinstance(inputs, BaseException):
            raise inputs
        return [i for i in inputs if i.key.startswith(key_prefix)]

    monkeypatch.setattr(actions, "filter_flow_run_input", fake)
    return asked


def _input(key: str, value: Any, minutes: int = 0) -> SimpleNamespace:
    return SimpleNamespace(key=key, value=value, created=T0 + timedelta(minutes=minutes))


def test_the_newest_answer_about_the_revision_shown_is_applied(monkeypatch: pytest.MonkeyPatch) -> None:
    older = GOOD | {"reason": "first answer"}
    asked = _stored(
        monkeypatch,
        [
            _input("paused-review-r2-aaa-schema", json.dumps({"type": "object"}), 0),
            _input("paused-review-r2-aaa-response", json.dumps(older), 1),
            _input("paused-review-r2-bbb-response", json.dumps(GOOD), 2),
        ],
    )
    answer = flow._answer_given(RUN, _evidence(2), None)
    assert answer is not None and (answer.decision, answer.reason) == ("reject", "wrong procedure")
    assert asked == ["paused-review-r2-", "suspended-review-r2-"]  # never another revision's keys (r1, r20 …)


def test_an_answer_to_a_suspended_review_is_read_as_one_to_a_paused_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deployment's review waits suspended; Prefect keys its input by that state's name (``suspended-<key>-…``)."""
    _stored(
        monkeypatch,
        [
            _input("paused-review-r2-aaa-response", json.dumps(GOOD | {"reason": "an earlier attempt's"}), 0),
            _input("suspended-review-r2-bbb-response", json.dumps(GOOD), 1),
            _input("suspended-review-r1-ccc-response", json.dumps(GOOD | {"reason": "revision 1"}), 2),
        ],
    )
    answer = flow._answer_given(RUN, _evidence(2), None)
    assert answer is not None and answer.reason == "wrong procedure"


@pytest.mark.parametrize(
    "inputs",
    [
        RuntimeError("server down"),
        [_input("paused-review-r2-a-response", "not json {")],
        [_input("paused-review-r2-a-response", json.dumps(["reject"]))],
        [_input("paused-review-r2-a-response", json.dumps(GOOD | {"reason": ""}))],  # a rejection without a reason
        [_input("paused-review-r2-a-response", json.dumps(GOOD | {"decision": "approve_everything"}))],
        [_input("paused-review-r2-a-response", json.dumps(GOOD | {"role": "developer"}))],  # not a field of the form
        [_input("paused-review-r2-a-response", None)],
        [_input("paused-review-r2-a-description", json.dumps(GOOD))],  # only a response is an answer
        [],
    ],
)
def test_anything_else_asks_the_reviewer_again(monkeypatch: pytest.MonkeyPatch, inputs: Any) -> None:
    _stored(monkeypatch, inputs)
    assert flow._answer_given(RUN, _evidence(2), None) is None


def test_no_flow_run_reads_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _stored(monkeypatch, [_input("paused-review-r2-a-response", json.dumps(GOOD))])
    assert flow._answer_given(None, _evidence(2), None) is None and asked == []


def test_the_prefixes_asked_are_the_ones_prefect_stores_a_wait_s_input_under() -> None:
    """``earlier_answer`` asks ``<state>-<key prefix>``; Prefect must store each wait's answer under it."""
    from prefect.input.run_input import keyset_from_paused_state
    from prefect.states import Paused, Suspended

    from tasks.review import WAIT_STATES

    key = "review-r2-0123abcd"
    for prefix, state in zip(WAIT_STATES, (Paused(pause_key=key), Suspended(pause_key=key)), strict=True):
        assert keyset_from_paused_state(state)["response"].startswith(f"{prefix}-review-r2-")
