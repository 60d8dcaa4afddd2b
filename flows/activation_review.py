"""Flow ``activation-review``: publish a skill and its evidence, pause for a reviewer, apply the decision."""

from __future__ import annotations

from typing import Any, Literal
from uuid import uuid4

import pydantic
from prefect import flow, get_run_logger
from prefect.exceptions import FlowPauseTimeout
from prefect.flow_runs import pause_flow_run, suspend_flow_run
from prefect.input import RunInput
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.config import JsonDict

from skillflow.kernel.config import load_promotion_config
from skillflow.kernel.models import SkillStatus, with_article
from skillflow.lifecycle.review import ReviewEvidence, ReviewOutcome
from tasks.common import FlowParams, deployment_of_run, flow_run_id, run_name
from tasks.events import emit_review
from tasks.review import (
    apply_decision,
    delete_answers,
    earlier_answer,
    expire_review,
    leave_expired_pause,
    load_decision,
    load_review,
    publish_review,
    record_timeout,
    schedule_expiry,
)

AWAITING_REVIEW = ("shadow", "candidate")
ANSWERS = "review-r"  # the start of every pause key of a review, whatever the revision (``pause_prefix``)
MAX_EDIT_ROUNDS = 5
# A suspended review's own timeout on the Prefect server, beyond the expiry run's: a backstop that fails the run
# only if its expiry never ran (no worker on the pool for a day).
EXPIRY_GRACE_SECONDS = 86_400
DESCRIPTION = (
    "Publish one SHADOW skill's SKILL.md and evidence (charts, readiness, validation) as artifacts, pause for a "
    "reviewer's decision in the Resume form (activate, reject, keep in shadow, or edit the SKILL.md first), "
    "apply it, and record it in the lifecycle log. An unanswered review keeps the skill in shadow. A deployment's "
    "run is suspended while it waits (no process), resumed by the answer and expired by a run scheduled at its "
    "timeout."
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


class ReviewExpiry(BaseModel):
    """What an expiry run expires: the suspended review run and the pause it waits in."""

    flow_run_id: str = Field(..., min_length=1, max_length=64, description="The suspended review's flow run")
    key: str = Field(..., min_length=1, max_length=128, description="The pause key it waits under")


class ActivationReviewParams(FlowParams):
    database_url: str | None = Field(None, description="SQLAlchemy URL (default: $SKILLFLOW_DATABASE_URL)")
    skill_id: str = Field(..., min_length=1, max_length=64, description="The skill to review")
    timeout_seconds: int = Field(3600, ge=1, le=30 * 86_400, description="Unanswered reviews keep the skill in shadow")
    poll_interval_seconds: int = Field(10, ge=1, le=600, description="How often a paused run checks for input")
    wait: Literal["suspend", "pause"] = Field(
        "suspend",
        description="suspend: a deployment's run exits while it waits and frees its worker; the answer resumes it on "
        "any worker, and a run of this deployment scheduled at the timeout expires it. pause: the run's process waits "
        "(always so for a run without a deployment)",
    )
    config_overrides: dict[str, Any] = Field(default_factory=dict, description="PromotionConfig keys to override")
    expires: ReviewExpiry | None = Field(
        None, description="Set only on the run a suspended review schedules at its timeout: expire that review"
    )


def pause_key(evidence: ReviewEvidence) -> str:
    """A key no earlier pause of this flow run used. Prefect's default key numbers an attempt's pauses ("1", "2",
    …), and a retry that keeps the run's fired pauses (``prefect flow-run retry``) is handed what an earlier
    attempt's pause of the same number stored instead of pausing: an answer about the revision that attempt showed
    (applied to whatever revision this one loaded), or nothing when it timed out, which fails the run. A fresh key
    asks the reviewer about what this attempt shows, however the run is retried (docs/RELIABILITY.md)."""
    return f"{pause_prefix(evidence)}{uuid4().hex[:12]}"


def pause_prefix(evidence: ReviewEvidence) -> str:
    """The start of every pause key of the revision ``evidence`` shows (the ``-`` keeps r1 apart from r10)."""
    return f"{ANSWERS}{evidence.revision}-"


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


def _expire(params: ActivationReviewParams, expires: ReviewExpiry, config: Any) -> ReviewOutcome:
    """The expiry run: the suspended review still waiting under its key times out (kept in shadow, ``review_timeout``
    recorded for that run, which ends Completed); an answered, re-asked or ended review is left as it is."""
    logger = get_run_logger()
    expired = expire_review(params.database_url, params.skill_id, expires.flow_run_id, expires.key)
    evidence = load_review(params.database_url, params.skill_id, config)
    if not expired:
        logger.info("review run %s is no longer waiting under %s: nothing to expire", expires.flow_run_id, expires.key)
        return _not_awaiting(evidence, ["the review is no longer waiting"])
    delete_answers(expires.flow_run_id, ANSWERS)  # that run has ended: no answer of it will be applied
    if evidence.status != SkillStatus.SHADOW.value:
        return _decided_elsewhere(evidence)
    logger.info("review of skill %s (run %s) timed out: it stays in shadow", params.skill_id, expires.flow_run_id)
    return _not_awaiting(evidence, ["review timed out"], "keep_shadow")


def _decided_elsewhere(evidence: ReviewEvidence) -> ReviewOutcome:
    """The review's timeout came after the skill left shadow another way (``skillflow activate``/``reject``):
    nothing timed out, nothing is recorded (docs/guide/lifecycle.md)."""
    get_run_logger().info(
        "skill %s was decided elsewhere while its review waited: it is %s", evidence.skill_id, evidence.status
    )
    return _not_awaiting(evidence, [f"the skill was decided elsewhere: it is {evidence.status}"])


@flow(name="activation-review", flow_run_name=run_name("review", "skill_id", flow=True), description=DESCRIPTION)
def activation_review(params: ActivationReviewParams) -> ReviewOutcome:
    """Publish the evidence, pause for the reviewer, apply the decision (an edit starts the review over)."""
    config = load_promotion_config(overrides=params.config_overrides)
    run_id = flow_run_id()
    if params.expires is not None:  # the run a suspended review scheduled at its timeout
        return _expire(params, params.expires, config)
    outcome = _review(params, config, run_id)
    # The run has its outcome (a decision is recorded in skillflow's tables, which a retry reads back): the Prefect
    # server's raw copies of its answers go, one about another revision never applied too (docs/SECURITY.md). A run
    # that raised keeps them, for its retry to apply (``_answer_given``).
    delete_answers(run_id, ANSWERS)
    return outcome


def _review(params: ActivationReviewParams, config: Any, run_id: str | None) -> ReviewOutcome:
    """The review's rounds: the revision shown, the reviewer's answer, the decision applied; an applied edit shows
    the new revision in the next round."""
    logger = get_run_logger()
    deployment = deployment_of_run() if params.wait == "suspend" else None
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
            return _not_awaiting(evidence, [f"{with_article(evidence.status)} skill is not awaiting review"])
        # Round 0 first looks for an answer about this revision stored for this run and not applied: the answer that
        # resumed a suspended review (this execution is the resumed one), or one an earlier attempt got and did not live
        # to apply (its process died: a lost machine, a kill while applying). Later rounds show a new revision.
        answer = _answer_given(run_id, evidence, url) if round_ == 0 else None
        if answer is not None:
            logger.info("applying the reviewer's stored answer for revision %d", evidence.revision)
        else:
            logger.info("waiting for a review of skill %s revision %d", evidence.skill_id, evidence.revision)
            key = pause_key(evidence)
            try:
                if deployment is not None and schedule_expiry(deployment, params, run_id, key):
                    # The process exits here (Prefect's Pause) and frees its worker. The answer resumes the run on any
                    # worker, which runs this flow again from the top: round 0 finds the answer (``_answer_given``).
                    answer = suspend_flow_run(
                        wait_for_input=review_form(evidence, url),
                        timeout=params.timeout_seconds + EXPIRY_GRACE_SECONDS,
                        key=key,
                    )
                else:
                    answer = pause_flow_run(
                        wait_for_input=review_form(evidence, url),
                        timeout=params.timeout_seconds,
                        poll_interval=params.poll_interval_seconds,
                        key=key,
                    )
            except FlowPauseTimeout:
                timed_out = record_timeout(params.database_url, params.skill_id, run_id)
                leave_expired_pause(run_id)  # else Prefect fails the run when it completes
                if not timed_out:
                    return _decided_elsewhere(load_review(params.database_url, params.skill_id, config))
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
        delete_answers(run_id, ANSWERS)  # the edit is recorded as a revision; the next round asks about that one
    return outcome
