"""Flow ``promotion-cycle``: every (agent, user) partition runs the promotion pipeline, one task each."""

from __future__ import annotations

from typing import Any

from prefect import flow
from pydantic import BaseModel, Field

from skillflow.kernel.config import load_promotion_config
from skillflow.kernel.models import utcnow
from skillflow.promotion.cycle import PromotionReport
from tasks.promotion import cycle_partition, list_partitions
from tasks.reporting import publish_report


class PromotionCycleParams(BaseModel):
    """Parameters of one promotion cycle (rendered as a form in the Prefect UI)."""

    database_url: str | None = Field(None, description="SQLAlchemy URL (default: $SKILLFLOW_DATABASE_URL)")
    agent_id: str | None = Field(None, description="Only this agent (default: every agent)")
    user_id: str | None = Field(None, description="Only this user (default: every user)")
    dry_run: bool = Field(False, description="Compute the report but write nothing")
    config_overrides: dict[str, Any] = Field(default_factory=dict, description="PromotionConfig keys to override")
    force: bool = Field(False, description="Run even if fewer than promotion_every_n_runs runs arrived")


@flow(name="promotion-cycle", log_prints=False)
def promotion_cycle(params: PromotionCycleParams | None = None) -> list[PromotionReport]:
    """Run the promotion cycle in every matching (agent, user) partition; returns one report per partition."""
    params = params or PromotionCycleParams()
    config = load_promotion_config(overrides=params.config_overrides or None)
    now, url = utcnow(), params.database_url
    reports = [
        cycle_partition(url, agent_id, user_id, config, now, params.dry_run, params.force)
        for agent_id, user_id in list_partitions(url, params.agent_id, params.user_id)
    ]
    publish_report(reports)
    return reports
