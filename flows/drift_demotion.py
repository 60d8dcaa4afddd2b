"""Flow ``drift-demotion``: rolling success of every ACTIVE skill vs its frozen baseline → demote, unstamp."""

from __future__ import annotations

from typing import Any

from prefect import flow
from pydantic import BaseModel, Field

from skillflow.kernel.config import load_promotion_config
from skillflow.lifecycle.drift import DriftReport
from tasks.common import TenantScope, flow_run_id, params_run_name
from tasks.drift import check_drift, check_partitions, fan_out_drift, list_active_partitions, publish_drift_report
from tasks.events import emit_demotions
from tasks.fanout import FanOut, resolve_mode

DESCRIPTION = (
    "Recompute every ACTIVE skill's rolling success over its last activations, compare it with the baseline "
    "frozen at promotion, demote (and release the stamps of) those below baseline minus the allowed drop, and "
    "publish the report with one chart per skill."
)


class DriftDemotionParams(BaseModel):
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


class DriftPartitionsFailed(RuntimeError):
    """Some partitions (or child runs) failed after the others were checked; the message names them."""


@flow(name="drift-demotion", flow_run_name=params_run_name("drift", "agent_id", "user_id"), description=DESCRIPTION)
def drift_demotion(params: DriftDemotionParams | None = None) -> DriftReport:
    """Check every ACTIVE skill against its baseline, demote the drifted, store and publish the report."""
    params = params or DriftDemotionParams()
    config = load_promotion_config(overrides=params.config_overrides)
    agent_id, user_id = params.agent_id or None, params.user_id or None
    url, failed = params.database_url, list[str]()
    if params.partitions is not None:
        report, failed = check_partitions(url, config, [(a, u) for a, u in params.partitions], params.dry_run)
        emit_demotions(report.demoted, params.dry_run)
    elif resolve_mode(params.fan_out) == "pool":
        partitions = list_active_partitions(url, agent_id, user_id)
        overrides = dict(params.config_overrides)
        report, failed = fan_out_drift(url, partitions, params.chunks, overrides, params.dry_run)
    else:
        report = check_drift(url, config, agent_id, user_id, params.dry_run)
        emit_demotions(report.demoted, params.dry_run)
    publish_drift_report(report, url, config, flow_run_id())
    if failed:
        raise DriftPartitionsFailed(f"{len(failed)} failed: " + "; ".join(failed))
    return report
