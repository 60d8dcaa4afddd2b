"""Flow ``promotion-cycle``: every (agent, user) partition runs the promotion pipeline, in-process or fanned out."""

from __future__ import annotations

from typing import Any

from prefect import flow
from pydantic import Field

from skillflow.kernel.config import load_promotion_config
from skillflow.kernel.models import utcnow
from skillflow.promotion.backends import check_providers
from skillflow.promotion.report import PromotionReport
from tasks.common import FlowParams, TenantScope, run_name
from tasks.fanout import FanOut, FleetSettings, resolve_mode
from tasks.promotion import fan_out_partitions, list_partitions, run_partitions
from tasks.reporting import publish_report
from tasks.shadow import note_backlog


class PromotionCycleParams(FlowParams):
    """Parameters of one promotion cycle (rendered as a form in the Prefect UI)."""

    database_url: str | None = Field(None, description="SQLAlchemy URL (default: $SKILLFLOW_DATABASE_URL)")
    agent_id: TenantScope = Field("", max_length=255, description="Only this agent (empty: every agent)")
    user_id: TenantScope = Field("", max_length=255, description="Only this user (empty: every user)")
    dry_run: bool = Field(False, description="Compute the report but write nothing")
    config_overrides: dict[str, Any] = Field(default_factory=dict, description="PromotionConfig keys to override")
    force: bool = Field(False, description="Run even if fewer than promotion_every_n_runs runs arrived")
    fan_out: FanOut | None = Field(
        None, description="local: this process; pool: child runs per chunk on a work pool (default: the setting)"
    )
    chunks: int | None = Field(None, ge=1, le=10_000, description="Child runs in pool mode (default: worker slots)")


class PartitionsFailed(RuntimeError):
    """Some partitions failed after every other partition ran; the message names partitions and error classes."""


@flow(name="promotion-cycle", flow_run_name=run_name("cycle", "agent_id", "user_id", flow=True), log_prints=False)
def promotion_cycle(params: PromotionCycleParams | None = None) -> list[PromotionReport]:
    """Run the promotion cycle in every matching (agent, user) partition; returns one report per partition.

    Partitions are isolated: one that fails (after its transient retries) gets a report naming the stage
    and error class, stored like any report, and every other partition still runs. The flow run then ends
    ``Failed`` with :class:`PartitionsFailed` listing the failed partitions (docs/guide/promotion.md). In pool
    mode the partitions run in chunks, one ``promotion-partitions`` child run each (docs/guide/ops.md).
    """
    params = params or PromotionCycleParams()
    config = load_promotion_config(overrides=params.config_overrides or None)
    check_providers()  # a missing LLM key fails the run at once, naming the variable (docs/guide/llm.md)
    now, url = utcnow(), params.database_url
    fleet = FleetSettings()
    partitions = list_partitions(url, params.agent_id or None, params.user_id or None)
    if partitions and resolve_mode(params.fan_out, fleet) == "pool":
        overrides = dict(params.config_overrides)
        reports = fan_out_partitions(url, partitions, params.chunks, overrides, now, params.dry_run, params.force)
    else:
        reports = run_partitions(url, partitions, config, now, params.dry_run, params.force)
    publish_report(reports)
    note_backlog(url, fleet.outbox_backlog_threshold)
    failed = [f"{r.agent_id}/{r.user_id} ({r.partition_failed})" for r in reports if r.partition_failed]
    if failed:
        raise PartitionsFailed(f"{len(failed)} of {len(reports)} partition(s) failed: " + "; ".join(failed))
    return reports
