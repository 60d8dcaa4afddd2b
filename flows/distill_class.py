"""Flow ``distill-class``: the seed's "Distill now" — one class, the same gates and validation."""

from __future__ import annotations

from prefect import flow
from pydantic import BaseModel, Field

from flows.promotion_cycle import PromotionCycleParams, promote_one
from skillflow.config import load_promotion_config
from skillflow.gates import UNKNOWN_CLASS
from skillflow.models import new_id, utcnow
from skillflow.promotion import LEASE_HELD, PromotionReport, apply_assessments, apply_result
from tasks.common import flow_run_id
from tasks.gating import assess_partition, plan_partition, resolve_class
from tasks.reporting import finish_report, publish_report
from tasks.store import acquire_lease, release_lease


class DistillClassParams(BaseModel):
    """One class of one tenant, by hash or unique hash prefix (at least 4 characters)."""

    database_url: str | None = Field(None, description="SQLAlchemy URL (default: $SKILLFLOW_DATABASE_URL)")
    agent_id: str = Field(..., description="The agent")
    user_id: str = Field(..., description="The user")
    canonical_hash: str = Field(..., min_length=1, max_length=64, description="Class hash or unique prefix")
    dry_run: bool = Field(False, description="Compute the report but write nothing")


@flow(name="distill-class", log_prints=False)
def distill_class(params: DistillClassParams) -> PromotionReport:
    """Gate, distill, validate and store one class; hand-picking never bypasses evidence."""
    url, run_id, now = params.database_url, flow_run_id(), utcnow()
    config = load_promotion_config()
    full = resolve_class(url, params.agent_id, params.user_id, params.canonical_hash)
    # A rejection here counts against the last completed cycle (the next scheduled one waits).
    cycle = plan_partition(url, params.agent_id, params.user_id, config, True).cycle - 1
    # The backoff is a cost control for schedules; an explicit request is not held back by it.
    assessments = (
        assess_partition(url, params.agent_id, params.user_id, config, now, cycle, full, False) if full else []
    )
    report = PromotionReport(
        mode="distill",
        agent_id=params.agent_id,
        user_id=params.user_id,
        cycle=cycle,
        dry_run=params.dry_run,
        flow_run_id=run_id,
    )
    if not assessments:
        report.skipped.append((params.canonical_hash, UNKNOWN_CLASS))
    else:
        apply_assessments(report, assessments, now)
    if assessments and assessments[0].eligible:
        holder = run_id or new_id()
        if not params.dry_run and not acquire_lease(url, params.agent_id, params.user_id, holder):
            report.partition_skipped = LEASE_HELD
        else:
            try:
                cycle_params = PromotionCycleParams(database_url=url, dry_run=params.dry_run)
                result = promote_one(cycle_params, assessments[0].stats, config, cycle, run_id)
                apply_result(report, result)
            finally:
                if not params.dry_run:
                    release_lease(url, params.agent_id, params.user_id, holder)
    finish_report(url, report, mark=False)
    publish_report([report])
    return report
