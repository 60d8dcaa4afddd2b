"""Flow ``activation-review``: publish a skill and its evidence, pause for a reviewer, apply the decision."""

from __future__ import annotations

from typing import Any, Literal
from uuid import uuid4

import pydantic
from prefect import flow, get_run_logger
from prefect.exceptions import FlowPauseTimeout
from prefect.flow_runs import pause_flow_run
from prefect.input import RunInput
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.config import JsonDict

from skillflow.kernel.config import load_promotion_config
from skillflow.lifecycle.review import ReviewEvidence, ReviewOutcome
from tasks.common import flow_run_id, run_name
from tasks.events import emit_review
from tasks.review import (
    apply_decision,
    earlier_answer,
    leave_expired_pause,
    load_decision,
    load_review,
    publish_review,
    record_timeout,
)

AWAITING_REVIEW = ("shadow", "candidate")
MAX_EDIT_ROUNDS = 5
DESCRIPTION = (
    "Publish one SHADOW skill's SKILL.md and evidence (charts, readiness, validation) as artifacts, pause for a "
    "reviewer's decision in the Resume form (activate, reject, keep in shadow, or edit the SKILL.md first), "
    "apply it, and record it in the lifecycle log. An unanswered review keeps the skill in shadow."
)


REASON_REQUIRED: JsonDict = {
    "if": {"properties": {"decision": {"const": "reject"}}, "required": ["decision"]},
    "then": {"properties": {"reason": {"pattern": "\\S"}}, "required": ["reason"]},
}  # the Prefect server checks a resumed run's input against the form's JSON schema before storing it


class ReviewDecision(RunInput):
    """The reviewer's form in the Prefect UI; a rejection without a reason is refused, never stored."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=REASON_REQUIRED)

    decision: Literal["activate_user", "activate_developer", "reject", "keep_shadow", "edit"] = Field(
        description="activate_user: go live as user-level guidance. activate_developer: go live with developer "
        "authority (needs require_shadow and a shadow period). reject: retire it (give a reason). keep_shadow: "
        "decide later. edit: store the corrected SKILL.md below as a new revision and review that one."
    )
    reviewer: str = Field(min_length=1, max_length=255, description="Your name, recorded as the decision's actor")
    reason: str = Field("", max_length=1000, description="Why; required to reject, stored with the decision")
    skill_md: str = Field("", description="For edit: the corrected SKILL.md (validated like a distilled skill)")

    @model_validator(mode="after")
    def _rejection_has_a_reason(self) -> ReviewDecision:
        if self.decision == "reject" and not self.reason.strip():
            raise ValueError("reason is required to reject (it is stored with the decision)")
        return self


def review_form(evidence: ReviewEvidence, artifact_url: str | None) -> type[ReviewDecision]:
    """The form for this skill: its name, revision and a link to the review artifact; the editor prefilled."""
    link = f"[the review artifact]({artifact_url})" if artifact_url else f"artifact `{evidence.skill_id}`"
    form: Any = pydantic.create_model(
        "ReviewDecision",
        __base__=ReviewDecision,
        skill_md=(str, Field(evidence.content, description=ReviewDecision.model_fields["skill_md"].description)),
    )
    form._description = (
        f"**Review {evidence.name} v{evidence.version}, revision {evidence.revision}** "
        f"(skill `{evidence.skill_id}`, tenant `{evidence.agent_id}/{evidence.user_id}`). "
        f"Read {link} (SKILL.md, charts, readiness, validation) before deciding."
    )
    return form  # type: ignore[no-any-return]


class ActivationReviewParams(BaseModel):
    database_url: str | None = Field(None, description="SQLAlchemy URL (default: $SKILLFLOW_DATABASE_URL)")
    skill_id: str = Field(..., min_length=1, max_length=64, description="The skill to review")
    timeout_seconds: int = Field(3600, ge=1, le=30 * 86_400, description="Unanswered reviews keep the skill in shadow")
    poll_interval_seconds: int = Field(10, ge=1, le=600, description="How often the paused run checks for input")
    config_overrides: dict[str, Any] = Field(default_factory=dict, description="PromotionConfig keys to override")


def pause_key(evidence: ReviewEvidence) -> str:
    """A key no earlier pause of this flow run used. Prefect's default key numbers an attempt's pauses ("1", "2",
    …), and a retry that keeps the run's fired pauses (``prefect flow-run retry``) is handed what an earlier
    attempt's pause of the same number stored instead of pausing: an answer about the revision that attempt showed
    (applied to whatever revision this one loaded), or nothing when it timed out, which fails the run. A fresh key
    asks the reviewer about what this attempt shows, however the run is retried (docs/RELIABILITY.md)."""
    return f"{pause_prefix(evidence)}{uuid4().hex[:12]}"


def pause_prefix(evidence: ReviewEvidence) -> str:
    """The start of every pause key of the revision ``evidence`` shows (the ``-`` keeps r1 apart from r10)."""
    return f"review-r{evidence.revision}-"


def _answer_given(run_id: str | None, evidence: ReviewEvidence, url: str | None) -> ReviewDecision | None:
    """The reviewer's answer about this revision that an earlier attempt of this run stored and did not apply, as
    the form reads it; None when there is none or it no longer fits the form."""
    stored = earlier_answer(run_id, pause_prefix(evidence))
    if stored is None:
        return None
    try:
        return review_form(evidence, url)(**stored)
    except (pydantic.ValidationError, TypeError):
        return None


def _not_awaiting(evidence: ReviewEvidence, reasons: list[str], decision: str = "none") -> ReviewOutcome:
    return ReviewOutcome(
        skill_id=evidence.skill_id, decision=decision, applied=False, status=evidence.status,
        injection_role=evidence.injection_role, reviewer="", reasons=reasons, revision=evidence.revision,
    )  # fmt: skip


@flow(name="activation-review", flow_run_name=run_name("review", "skill_id", flow=True), description=DESCRIPTION)
def activation_review(params: ActivationReviewParams) -> ReviewOutcome:
    """Publish the evidence, pause for the reviewer, apply the decision (an edit starts the review over)."""
    logger = get_run_logger()
    config = load_promotion_config(overrides=params.config_overrides)
    run_id = flow_run_id()
    for round_ in range(MAX_EDIT_ROUNDS + 1):
        evidence = load_review(params.database_url, params.skill_id, config)
        if round_ == 0 and (done := load_decision(params.database_url, params.skill_id, run_id, config)) is not None:
            # A retry of this run after its decision committed: not asked again; its event is sent again under
            # the same id, and the tenant's rule refit if the crash came before it (docs/RELIABILITY.md).
            logger.info("decision %s on skill %s already applied by this flow run", done.decision, done.skill_id)
            emit_review(done, evidence.agent_id, evidence.user_id)
            return done
        url = publish_review(evidence)
        if evidence.status not in AWAITING_REVIEW:
            logger.info("skill %s is %s: not awaiting review", evidence.skill_id, evidence.status)
            return _not_awaiting(evidence, [f"a {evidence.status} skill is not awaiting review"])
        # A retry (round 0) first looks for the answer an earlier attempt got about this revision and did not live to
        # apply (its process died: a lost machine, a kill while applying); later rounds show a new revision.
        answer = _answer_given(run_id, evidence, url) if round_ == 0 else None
        if answer is not None:
            logger.info("applying the answer an earlier attempt got for revision %d", evidence.revision)
        else:
            logger.info("waiting for a review of skill %s revision %d", evidence.skill_id, evidence.revision)
            try:
                answer = pause_flow_run(
                    wait_for_input=review_form(evidence, url),
                    timeout=params.timeout_seconds,
                    poll_interval=params.poll_interval_seconds,
                    key=pause_key(evidence),
                )
            except FlowPauseTimeout:
                record_timeout(params.database_url, params.skill_id, run_id)
                leave_expired_pause(run_id)  # else Prefect fails the run when it completes
                logger.info("review of skill %s timed out: it stays in shadow", evidence.skill_id)
                return _not_awaiting(evidence, ["review timed out"], "keep_shadow")
        outcome = apply_decision(
            params.database_url, params.skill_id, answer.decision, answer.reviewer, answer.reason, config, run_id,
            evidence.revision, answer.skill_md if answer.decision == "edit" else None,
        )  # fmt: skip
        logger.info(
            "decision %s by %s on skill %s: applied=%s status=%s revision=%d reasons=%d",
            outcome.decision, outcome.reviewer, outcome.skill_id, outcome.applied, outcome.status, outcome.revision,
            len(outcome.reasons),
        )  # fmt: skip
        emit_review(outcome, evidence.agent_id, evidence.user_id)  # activated / rejected, for automations
        if answer.decision != "edit" or not outcome.applied:
            return outcome
    return outcome
