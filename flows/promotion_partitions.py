"""Flow ``promotion-partitions``: one chunk of (agent, user) partitions of a promotion cycle, on a worker.

The ``promotion-cycle`` parent starts one run of this flow per chunk on a work pool (docs/guide/ops.md,
"Fan-out"); an automation starts it for one tenant to re-qualify after a demotion. Each partition is one
task run of the one composition (:func:`skillflow.promotion.cycle.run_partition`) and fails alone; on a pool the
chunk holds one slot of the global concurrency limit while its partitions run one after another.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from prefect import flow
from pydantic import Field

from skillflow.kernel.config import load_promotion_config
from skillflow.kernel.models import utcnow
from skillflow.promotion.backends import check_providers
from skillflow.promotion.report import PromotionReport
from tasks.common import FlowParams, batch_name
from tasks.fanout import FleetSettings, current_work_pool
from tasks.promotion import run_partitions
from tasks.reporting import publish_report


class PromotionPartitionsParams(FlowParams):
    """A chunk of partitions (rendered as a form in the Prefect UI)."""

    database_url: str | None = Field(None, description="SQLAlchemy URL (default: $SKILLFLOW_DATABASE_URL)")
    partitions: list[tuple[str, str]] = Field(
        default_factory=list, max_length=100_000, description="(agent_id, user_id) pairs to run, in order"
    )
    dry_run: bool = Field(False, description="Compute the reports but write nothing")
    force: bool = Field(False, description="Run even if fewer than promotion_every_n_runs runs arrived")
    config_overrides: dict[str, Any] = Field(default_factory=dict, description="PromotionConfig keys to override")
    now: datetime | None = Field(None, description="The parent cycle's clock (default: now)")
    partitions_per_task: int | None = Field(
        None, ge=1, le=10_000, description="Partitions per task run (default: the fleet setting on a work pool, else 1)"
    )
    concurrency_limit: str | None = Field(
        None, description="Global concurrency limit per partition (default: the fleet setting on a work pool)"
    )


@flow(name="promotion-partitions", flow_run_name=batch_name("partitions", "partitions", flow=True), log_prints=False)
def promotion_partitions(params: PromotionPartitionsParams | None = None) -> list[PromotionReport]:
    """Run the promotion cycle in each partition of the chunk; a failed partition is reported, never fatal."""
    params = params or PromotionPartitionsParams()
    config = load_promotion_config(overrides=params.config_overrides or None)
    check_providers()  # a missing LLM key fails the run at once, naming the variable (docs/guide/llm.md)
    fleet = FleetSettings() if current_work_pool() else None
    limit = params.concurrency_limit or (fleet.concurrency_limit if fleet else None)
    reports = run_partitions(
        params.database_url,
        [(a, u) for a, u in params.partitions],
        config,
        params.now or utcnow(),
        params.dry_run,
        params.force,
        limit,
        params.partitions_per_task or (fleet.partitions_per_task if fleet else 1),
    )
    publish_report(reports)
    return reports
