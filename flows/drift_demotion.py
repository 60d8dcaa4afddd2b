"""Flow ``drift-demotion``: rolling success of every ACTIVE skill vs its frozen baseline → demote, unstamp."""

from __future__ import annotations

from typing import Any

from prefect import flow
from pydantic import BaseModel, Field

from skillflow.kernel.config import load_promotion_config
from skillflow.lifecycle.drift import DriftReport
from tasks.drift import check_drift, publish_drift_report


class DriftDemotionParams(BaseModel):
    """Parameters of one drift check (rendered as a form in the Prefect UI)."""

    database_url: str | None = Field(None, description="SQLAlchemy URL (default: $SKILLFLOW_DATABASE_URL)")
    agent_id: str | None = Field(None, description="Only this agent (default: every agent)")
    user_id: str | None = Field(None, description="Only this user (default: every user)")
    dry_run: bool = Field(False, description="Compute and report, demote nothing and write no stats")
    config_overrides: dict[str, Any] = Field(default_factory=dict, description="PromotionConfig keys to override")


@flow(name="drift-demotion")
def drift_demotion(params: DriftDemotionParams | None = None) -> DriftReport:
    """Rolling success of every ACTIVE skill against its frozen baseline: demote the drifted, store the report."""
    params = params or DriftDemotionParams()
    config = load_promotion_config(overrides=params.config_overrides)
    report = check_drift(params.database_url, config, params.agent_id, params.user_id, params.dry_run)
    publish_drift_report(report)
    return report
