"""Tasks of the drift-demotion flow: check every ACTIVE skill (the one composition) and publish the report."""

from __future__ import annotations

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from skillflow.kernel.config import PromotionConfig
from skillflow.lifecycle.drift import DriftReport, render_markdown, run_drift
from tasks.common import engine_for, flow_run_id, stage


@stage()
def check_drift(
    database_url: str | None, config: PromotionConfig, agent_id: str | None, user_id: str | None, dry_run: bool
) -> DriftReport:
    """Recompute each ACTIVE skill's figures, demote the drifted ones (one transaction each), store the report."""
    engine = engine_for(database_url)
    return run_drift(engine, config, agent_id=agent_id, user_id=user_id, dry_run=dry_run, flow_run_id=flow_run_id())


@task(cache_policy=NO_CACHE)
def publish_drift_report(report: DriftReport) -> None:
    create_markdown_artifact(key="drift-report", markdown=render_markdown(report), description="Drift demotion report")
