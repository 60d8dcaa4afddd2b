"""The review form refuses a rejection without a reason: in the model, and when a paused run is resumed."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from sqlalchemy import Engine, select

from flows.activation_review import ActivationReviewParams, ReviewDecision, review_form
from skillflow.lifecycle.review import ReviewEvidence
from skillflow.storage.schema import skill_events
from skillflow.storage.skills import get_skill
from tests.flows.test_lifecycle_flows import OVERRIDES, _paused_run_id, _skill, review_in_thread


@pytest.mark.parametrize("reason", ["", "   ", "\n\t"])
def test_a_rejection_needs_a_reason(reason: str) -> None:
    with pytest.raises(ValidationError, match="reason"):
        ReviewDecision(decision="reject", reviewer="alice", reason=reason)
    form = review_form(ReviewEvidence.model_construct(skill_id="s", name="n", version=1, revision=1, content="x",
                                                      agent_id="a", user_id="u"), None)  # fmt: skip
    with pytest.raises(ValidationError, match="reason"):
        form(decision="reject", reviewer="alice", reason=reason)
    assert ReviewDecision(decision="keep_shadow", reviewer="alice", reason=reason).decision == "keep_shadow"
    assert ReviewDecision(decision="reject", reviewer="alice", reason=" wrong tools ").reason == " wrong tools "


@pytest.mark.prefect
def test_a_paused_review_refuses_a_rejection_without_reason(prefect_harness: None, sqlite_engine: Engine) -> None:
    from prefect.flow_runs import resume_flow_run

    skill = _skill(sqlite_engine)
    params = ActivationReviewParams(
        database_url=str(sqlite_engine.url), skill_id=skill.id, timeout_seconds=120, poll_interval_seconds=1,
        config_overrides=OVERRIDES,
    )  # fmt: skip
    waited = review_in_thread(params)
    run_id = _paused_run_id(skill.id)
    with pytest.raises(RuntimeError, match="reason"):
        resume_flow_run(run_id, run_input={"decision": "reject", "reviewer": "alice", "reason": "  "})
    with sqlite_engine.connect() as conn:
        assert get_skill(conn, skill.id).status == "shadow"  # the run stays paused; nothing was applied
    resume_flow_run(run_id, run_input={"decision": "keep_shadow", "reviewer": "alice", "reason": ""})
    assert waited().decision == "keep_shadow"
    with sqlite_engine.connect() as conn:
        assert get_skill(conn, skill.id).status == "shadow"
        events = conn.execute(select(skill_events.c.event).where(skill_events.c.skill_id == skill.id)).scalars()
        assert "rejected" not in set(events)
