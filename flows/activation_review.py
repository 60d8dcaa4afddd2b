"""Flow ``activation-review``: publish a skill and its evidence, pause for a reviewer, apply the decision."""

from __future__ import annotations

from typing import Any, Literal

from prefect import flow
from prefect.exceptions import FlowPauseTimeout
from prefect.flow_runs import pause_flow_run
from prefect.input import RunInput
from pydantic import BaseModel, Field

from skillflow.kernel.config import load_promotion_config
from skillflow.lifecycle.review import ReviewOutcome
from tasks.common import flow_run_id
from tasks.review import apply_decision, load_review, publish_review, record_timeout

AWAITING_REVIEW = ("shadow", "candidate")


class ReviewDecision(RunInput):
    """The reviewer's form in the Prefect UI."""

    decision: Literal["activate_user", "activate_developer", "reject", "keep_shadow"]
    reviewer: str
    reason: str = ""


class ActivationReviewParams(BaseModel):
    database_url: str | None = Field(None, description="SQLAlchemy URL (default: $SKILLFLOW_DATABASE_URL)")
    skill_id: str = Field(..., min_length=1, max_length=64, description="The skill to review")
    timeout_seconds: int = Field(3600, ge=1, le=30 * 86_400, description="Unanswered reviews keep the skill in shadow")
    poll_interval_seconds: int = Field(10, ge=1, le=600, description="How often the paused run checks for input")
    config_overrides: dict[str, Any] = Field(default_factory=dict, description="PromotionConfig keys to override")


@flow(name="activation-review")
def activation_review(params: ActivationReviewParams) -> ReviewOutcome:
    config = load_promotion_config(overrides=params.config_overrides)
    run_id = flow_run_id()
    evidence = load_review(params.database_url, params.skill_id, config)
    publish_review(evidence)
    if evidence.status not in AWAITING_REVIEW:
        return ReviewOutcome(
            skill_id=evidence.skill_id,
            decision="none",
            applied=False,
            status=evidence.status,
            injection_role=evidence.injection_role,
            reviewer="",
            reasons=[f"a {evidence.status} skill is not awaiting review"],
        )
    try:
        answer = pause_flow_run(
            wait_for_input=ReviewDecision, timeout=params.timeout_seconds, poll_interval=params.poll_interval_seconds
        )
    except FlowPauseTimeout:
        record_timeout(params.database_url, params.skill_id, run_id)
        return ReviewOutcome(
            skill_id=evidence.skill_id,
            decision="keep_shadow",
            applied=False,
            status=evidence.status,
            injection_role=evidence.injection_role,
            reviewer="",
            reasons=["review timed out"],
        )
    return apply_decision(
        params.database_url, params.skill_id, answer.decision, answer.reviewer, answer.reason, config, run_id
    )
