"""Tasks of the activation review: gather the evidence, publish it, apply the reviewer's decision."""

from __future__ import annotations

import re

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from skillflow.kernel.config import PromotionConfig
from skillflow.lifecycle.review import (
    ReviewEvidence,
    ReviewOutcome,
    apply_review_decision,
    evidence_table,
    gather_evidence,
    log_review_event,
    render_markdown,
)
from tasks.common import engine_for, stage

ACTOR = "flow:activation-review"


def artifact_key(skill_id: str) -> str:
    """Stable artifact key ``review-<skill-id-prefix>`` (keys allow lowercase letters, digits and dashes)."""
    return "review-" + re.sub(r"[^a-z0-9-]", "-", skill_id.lower())[:12]


@stage()
def load_review(database_url: str | None, skill_id: str, config: PromotionConfig) -> ReviewEvidence:
    return gather_evidence(engine_for(database_url), skill_id, config)


@task(cache_policy=NO_CACHE)
def publish_review(evidence: ReviewEvidence) -> str:
    key = artifact_key(evidence.skill_id)
    create_markdown_artifact(key=key, markdown=render_markdown(evidence), description="SKILL.md under review")
    rows = evidence_table(evidence)
    if rows:
        create_table_artifact(key=f"{key}-evidence", table=rows, description="Source class, baseline, validation")
    return key


@stage()
def apply_decision(
    database_url: str | None,
    skill_id: str,
    decision: str,
    reviewer: str,
    reason: str,
    config: PromotionConfig,
    flow_run_id: str | None,
) -> ReviewOutcome:
    engine = engine_for(database_url)
    return apply_review_decision(
        engine, skill_id, decision, reviewer, reason=reason, config=config, flow_run_id=flow_run_id
    )


@stage()
def record_timeout(database_url: str | None, skill_id: str, flow_run_id: str | None) -> None:
    """A review nobody answered: the skill stays in shadow; the audit log says so."""
    log_review_event(engine_for(database_url), skill_id, "review_timeout", ACTOR, "", flow_run_id, "keep_shadow")
