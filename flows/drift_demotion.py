"""Flow ``drift-demotion``: rolling success of every ACTIVE skill vs its frozen baseline → demote, unstamp."""

from __future__ import annotations

from typing import Any

from prefect import flow
from pydantic import Field

from skillflow.kernel.config import load_promotion_config
from skillflow.lifecycle.drift import DriftReport
from tasks.common import FlowParams, TenantScope, flow_run_id, run_name
from tasks.drift import check_partitions, fan_out_drift, list_active_partitions, publish_drift_report
from tasks.fanout import FanOut, FleetSettings, current_work_pool, resolve_mode

DESCRIPTION = (
    "Recompute every ACTIVE skill's rolling success over its last activations, compare it with the baseline "
    "frozen at promotion, demote (and release the stamps of) those below baseline minus the allowed drop, and "
    "publish the report with one chart per skill."
)


class DriftDemotionParams(FlowParams):
    """Parameters of one drift check (rendered as a form in the Prefect UI)."""

    database_url: str | None = Field(None, description="SQLAlchemy URL (default: $SKILLFLOW_DATABASE_URL)")
    agent_id: TenantScope = Field("", max_length=255, description="Only this agent (empty: every agent)")
    user_id: TenantScope = Field("", max_length=255, description="Only this user (empty: every user)")
    dry_run: bool = Field(False, description="Compute and report, demote nothing and write no stats")
    config_overrides: dict[str, Any] = Field(default_factory=dict, description="PromotionConfig keys to override")
    partitions: list[tuple[str, str]] | None = Field(
        None, max_length=100_000, description="Only these (agent_id, user_id) pairs, one report each (a fan-out child)"
    )
    fan_out: FanOut | None = Field(
        None, description="local: this process; pool: child runs per chunk on a work pool (default: the setting)"
    )
    chunks: int | None = Field(None, ge=1, le=10_000, description="Child runs in pool mode (default: worker slots)")
    partitions_per_task: int | None = Field(
        None, ge=1, le=10_000, description="Partitions per task run (default: the fleet setting on a work pool, else 1)"
    )
    drift_run_id: str | None = Field(
        None,
        max_length=64,
        description="The drift run this chunk belongs to (set by a fan-out parent): reports are keyed by it and tenant",
    )


class DriftPartitionsFailed(RuntimeError):
    """Some partitions (or child runs) failed after the others were checked; the message names them."""


@flow(name="drift-demotion", flow_run_name=run_name("drift", "agent_id", "user_id", flow=True), description=DESCRIPTION)
def drift_demotion(params: DriftDemotionParams | None = None) -> DriftReport:
    """Check every ACTIVE skill against its baseline, demote the drifted, store and publish the report.

    Each (agent, user) partition with an ACTIVE skill is its own unit of work in every mode: one stored report
    each, locally or in ``drift-partitions`` child runs; one ``check-drift`` task run each, or on a work pool one
    task run per batch of ``SKILLFLOW_FLEET_PARTITIONS_PER_TASK`` (a partition that fails runs again alone). A
    failed partition (or skill check) is named and ends the run Failed after every other partition was checked and
    published.
    """
    params = params or DriftDemotionParams()
    config = load_promotion_config(overrides=params.config_overrides)
    agent_id, user_id = params.agent_id or None, params.user_id or None
    url, given = params.database_url, params.partitions
    partitions = [(a, u) for a, u in given] if given is not None else list_active_partitions(url, agent_id, user_id)
    if given is None and resolve_mode(params.fan_out) == "pool":
        overrides = dict(params.config_overrides)
        report, failed = fan_out_drift(url, partitions, params.chunks, overrides, params.dry_run)
    else:
        per_task = params.partitions_per_task or (FleetSettings().partitions_per_task if current_work_pool() else 1)
        report, failed = check_partitions(url, config, partitions, params.dry_run, per_task, params.drift_run_id)
    publish_drift_report(report, url, config, flow_run_id())
    if failed:
        raise DriftPartitionsFailed(f"{len(failed)} failed: " + "; ".join(failed))
    return report
