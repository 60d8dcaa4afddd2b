"""Flow ``shadow-evaluation``: drain the durable outbox in batches; passive evidence only."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from prefect import flow
from pydantic import Field

from skillflow.kernel.config import load_promotion_config
from skillflow.lifecycle.shadow import DrainReport
from tasks.common import FlowParams, run_parameters
from tasks.fanout import FanOut, resolve_mode
from tasks.shadow import drain_outbox, fan_out_drains, publish_shadow_summary, requeue_backlog


def drain_run_name() -> str:
    """``shadow-drain`` plus what makes this drain special: dry run, backlog re-queue, fan-out mode."""
    get = run_parameters(flow=True)
    flags = [flag for flag, on in (("dry-run", get("dry_run")), ("backlog", get("evaluate_backlog"))) if on]
    return "-".join(["shadow-drain", *flags, *([str(get("fan_out"))] if get("fan_out") else [])])


class ShadowEvaluationParams(FlowParams):
    """Parameters of one drain (rendered as a form in the Prefect UI)."""

    database_url: str | None = Field(None, description="SQLAlchemy URL (default: $SKILLFLOW_DATABASE_URL)")
    batch_size: int | None = Field(None, ge=1, le=100_000, description="Runs per batch (default: queue size)")
    max_batches: int = Field(50, ge=1, le=100_000, description="Stop after this many batches")
    dry_run: bool = Field(False, description="Evaluate one batch without claiming or writing anything")
    embedder: Literal["minilm", "hashing", "openai"] | None = Field(None, description="Default: $SKILLFLOW_EMBEDDER")
    config_overrides: dict[str, Any] = Field(default_factory=dict, description="PromotionConfig keys to override")
    evaluate_backlog: bool = Field(
        False, description="First re-queue tool-calling runs never shadow-evaluated (recorded while it was off)"
    )
    backlog_since: datetime | None = Field(None, description="Re-queue only backlog runs created at or after this")
    fan_out: FanOut | None = Field(
        None, description="local: this process; pool: concurrent drains on a work pool (default: the setting)"
    )
    chunks: int | None = Field(
        None, ge=1, le=10_000, description="Concurrent drains in pool mode (default: worker slots)"
    )


class ShadowDrainsFailed(RuntimeError):
    """Some concurrent drains did not complete; their claims expire and the next drain retries the runs."""


@flow(name="shadow-evaluation", flow_run_name=drain_run_name)
def shadow_evaluation(params: ShadowEvaluationParams | None = None) -> DrainReport:
    """Claim → evaluate → append records → reconcile stats, batch after batch until the outbox is empty."""
    params = params or ShadowEvaluationParams()
    config = load_promotion_config(overrides=params.config_overrides)
    if params.evaluate_backlog and not params.dry_run:
        requeue_backlog(params.database_url, params.backlog_since)
    if not params.dry_run and resolve_mode(params.fan_out) == "pool":
        child = params.model_dump(mode="json", exclude={"fan_out", "chunks", "evaluate_backlog", "backlog_since"})
        drains, pending, failed = fan_out_drains(params.database_url, child, params.chunks)
        report = DrainReport(pending_left=pending)
        publish_shadow_summary(report, drains)
        if failed:
            raise ShadowDrainsFailed(f"{len(failed)} drain(s) failed: " + "; ".join(failed))
        return report
    report = drain_outbox(
        params.database_url, config, params.batch_size, params.max_batches, params.embedder, params.dry_run
    )
    publish_shadow_summary(report)
    return report
