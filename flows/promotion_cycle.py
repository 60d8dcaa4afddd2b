"""Flow ``promotion-cycle``: per partition, sweep → aggregate + gates → rank → distill → validate → store."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from prefect import flow
from pydantic import BaseModel, Field

from skillflow.config import PromotionConfig, load_promotion_config
from skillflow.evidence import ClassStats
from skillflow.models import new_id, utcnow
from skillflow.promotion import (
    ACTOR,
    LEASE_HELD,
    ClassResult,
    PromotionReport,
    apply_assessments,
    apply_ranking,
    apply_result,
)
from tasks.common import flow_run_id
from tasks.distillation import distill_candidate
from tasks.gating import assess_partition, list_partitions, plan_partition
from tasks.ranking import rank_candidates
from tasks.reporting import collect_review_flags, finish_report, publish_report
from tasks.staleness import sweep_partition
from tasks.store import acquire_lease, reject_candidate, release_lease, store_candidate
from tasks.validation import validate_candidate


class PromotionCycleParams(BaseModel):
    """Parameters of one promotion cycle (rendered as a form in the Prefect UI)."""

    database_url: str | None = Field(None, description="SQLAlchemy URL (default: $SKILLFLOW_DATABASE_URL)")
    agent_id: str | None = Field(None, description="Only this agent (default: every agent)")
    user_id: str | None = Field(None, description="Only this user (default: every user)")
    dry_run: bool = Field(False, description="Compute the report but write nothing")
    config_overrides: dict[str, Any] = Field(default_factory=dict, description="PromotionConfig keys to override")
    force: bool = Field(False, description="Run even if fewer than promotion_every_n_runs runs arrived")


def promote_one(
    params: PromotionCycleParams, stats: ClassStats, config: PromotionConfig, cycle: int, run_id: str | None
) -> ClassResult:
    """Distill → validate → store (or record the rejection) for one ranked class."""
    url = params.database_url
    draft = distill_candidate(url, stats, config)
    reasons = draft.rejection
    validation = None
    if reasons is None:
        validation = validate_candidate(draft, config)
        reasons = None if validation.ok else list(validation.reasons)
    if reasons is not None:
        if params.dry_run:
            return ClassResult(stats.canonical_hash, "rejected", reasons)
        return reject_candidate(url, stats, cycle, reasons, config)
    if params.dry_run:
        return ClassResult(stats.canonical_hash, "would promote", [])
    return store_candidate(url, draft, validation, config, ACTOR, run_id)


def cycle_partition(
    params: PromotionCycleParams, agent_id: str, user_id: str, config: PromotionConfig, now: datetime
) -> PromotionReport:
    url, run_id = params.database_url, flow_run_id()
    plan = plan_partition(url, agent_id, user_id, config, params.force)
    report = PromotionReport(
        agent_id=agent_id, user_id=user_id, cycle=plan.cycle, dry_run=params.dry_run, flow_run_id=run_id
    )
    if not plan.run:
        report.partition_skipped = plan.reason
        return report
    holder = run_id or new_id()
    if not params.dry_run and not acquire_lease(url, agent_id, user_id, holder):
        report.partition_skipped = LEASE_HELD
        finish_report(url, report, mark=False)
        return report
    try:
        swept = sweep_partition(url, agent_id, user_id, ACTOR, run_id, params.dry_run)
        report.deprecated = list(swept.deprecated)
        report.review_flags += [swept.note] if swept.note else []
        assessments = assess_partition(url, agent_id, user_id, config, now, plan.cycle)
        apply_assessments(report, assessments, now)
        chosen, below = rank_candidates(assessments, config, now)
        apply_ranking(report, below)
        for stats in chosen:
            apply_result(report, promote_one(params, stats, config, plan.cycle, run_id))
        report.review_flags += collect_review_flags(url, agent_id, user_id)
        finish_report(url, report, mark=True)
    finally:
        if not params.dry_run:
            release_lease(url, agent_id, user_id, holder)
    return report


@flow(name="promotion-cycle", log_prints=False)
def promotion_cycle(params: PromotionCycleParams | None = None) -> list[PromotionReport]:
    """Run the promotion cycle in every matching (agent, user) partition; returns one report per partition."""
    params = params or PromotionCycleParams()
    config = load_promotion_config(overrides=params.config_overrides or None)
    now = utcnow()
    reports = [
        cycle_partition(params, agent_id, user_id, config, now)
        for agent_id, user_id in list_partitions(params.database_url, params.agent_id, params.user_id)
    ]
    publish_report(reports)
    return reports
