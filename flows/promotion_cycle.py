"""Flow ``promotion-cycle``: every (agent, user) partition runs the promotion pipeline, one task each."""

from __future__ import annotations

from typing import Any

from prefect import flow
from pydantic import BaseModel, Field

from skillflow.kernel.config import load_promotion_config
from skillflow.kernel.models import utcnow
from skillflow.promotion.cycle import PromotionReport, failure_reason
from tasks.promotion import cycle_partition, list_partitions, record_partition_failure
from tasks.reporting import publish_report


class PromotionCycleParams(BaseModel):
    """Parameters of one promotion cycle (rendered as a form in the Prefect UI)."""

    database_url: str | None = Field(None, description="SQLAlchemy URL (default: $SKILLFLOW_DATABASE_URL)")
    agent_id: str | None = Field(None, description="Only this agent (default: every agent)")
    user_id: str | None = Field(None, description="Only this user (default: every user)")
    dry_run: bool = Field(False, description="Compute the report but write nothing")
    config_overrides: dict[str, Any] = Field(default_factory=dict, description="PromotionConfig keys to override")
    force: bool = Field(False, description="Run even if fewer than promotion_every_n_runs runs arrived")


class PartitionsFailed(RuntimeError):
    """Some partitions failed after every other partition ran; the message names partitions and error classes."""


@flow(name="promotion-cycle", log_prints=False)
def promotion_cycle(params: PromotionCycleParams | None = None) -> list[PromotionReport]:
    """Run the promotion cycle in every matching (agent, user) partition; returns one report per partition.

    Partitions are isolated: one that fails (after its transient retries) gets a report naming the stage
    and error class, stored like any report, and every other partition still runs. The flow run then ends
    ``Failed`` with :class:`PartitionsFailed` listing the failed partitions (docs/guide/promotion.md).
    """
    params = params or PromotionCycleParams()
    config = load_promotion_config(overrides=params.config_overrides or None)
    now, url = utcnow(), params.database_url
    reports: list[PromotionReport] = []
    for agent_id, user_id in list_partitions(url, params.agent_id, params.user_id):
        state = cycle_partition(url, agent_id, user_id, config, now, params.dry_run, params.force, return_state=True)
        if state.is_completed():
            reports.append(state.result())
            continue
        reason = failure_reason(state.result(raise_on_failure=False))
        reports.append(record_partition_failure(url, agent_id, user_id, params.dry_run, reason))
    publish_report(reports)
    failed = [f"{r.agent_id}/{r.user_id} ({r.partition_failed})" for r in reports if r.partition_failed]
    if failed:
        raise PartitionsFailed(f"{len(failed)} of {len(reports)} partition(s) failed: " + "; ".join(failed))
    return reports
