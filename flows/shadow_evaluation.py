"""Flow ``shadow-evaluation``: drain the durable outbox in batches; passive evidence only."""

from __future__ import annotations

from typing import Any, Literal

from prefect import flow
from pydantic import BaseModel, Field

from skillflow.config import load_promotion_config
from skillflow.shadow import DrainReport
from tasks.shadow import drain_shadow_batch, publish_shadow_summary


class ShadowEvaluationParams(BaseModel):
    """Parameters of one drain (rendered as a form in the Prefect UI)."""

    database_url: str | None = Field(None, description="SQLAlchemy URL (default: $SKILLFLOW_DATABASE_URL)")
    batch_size: int | None = Field(None, ge=1, le=100_000, description="Runs per batch (default: queue size)")
    max_batches: int = Field(50, ge=1, le=100_000, description="Stop after this many batches")
    dry_run: bool = Field(False, description="Evaluate one batch without claiming or writing anything")
    embedder: Literal["minilm", "hashing", "openai"] | None = Field(None, description="Default: $SKILLFLOW_EMBEDDER")
    config_overrides: dict[str, Any] = Field(default_factory=dict, description="PromotionConfig keys to override")


@flow(name="shadow-evaluation")
def shadow_evaluation(params: ShadowEvaluationParams | None = None) -> DrainReport:
    """Claim → evaluate → append records → reconcile stats, batch after batch until the outbox is empty."""
    params = params or ShadowEvaluationParams()
    config = load_promotion_config(overrides=params.config_overrides)
    if not config.shadow_evaluation_enabled:
        report = DrainReport(status="disabled")
    else:
        size = params.batch_size or config.shadow_evaluation_queue_size
        report = DrainReport(status="dry_run" if params.dry_run else "ok", batches=0)
        for _ in range(params.max_batches):
            batch = drain_shadow_batch(
                params.database_url, config, size, params.embedder, params.dry_run, report.failed_ids
            )
            report.add(batch)
            if params.dry_run or batch.claimed == 0 or batch.claimed == batch.failed:
                break
    publish_shadow_summary(report)
    return report
