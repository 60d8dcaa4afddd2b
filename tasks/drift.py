"""Tasks: check every ACTIVE skill for drift, store the report, publish it."""

from __future__ import annotations

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from skillflow.config import PromotionConfig
from skillflow.drift import DriftReport, render_markdown, run_drift, store_report
from tasks.common import engine_for, retry_transient

RETRY = {"retries": 2, "retry_delay_seconds": [2, 10], "retry_condition_fn": retry_transient}


@task(cache_policy=NO_CACHE, **RETRY)  # type: ignore[call-overload]  # the shared retry options
def check_drift(
    database_url: str | None,
    config: PromotionConfig,
    agent_id: str | None,
    user_id: str | None,
    dry_run: bool,
    flow_run_id: str | None,
) -> DriftReport:
    """Recompute each ACTIVE skill's figures and demote the drifted ones (each skill is its own transaction)."""
    engine = engine_for(database_url)
    return run_drift(engine, config, agent_id=agent_id, user_id=user_id, dry_run=dry_run, flow_run_id=flow_run_id)


@task(cache_policy=NO_CACHE, **RETRY)  # type: ignore[call-overload]
def store_drift_report(
    database_url: str | None, report: DriftReport, agent_id: str | None, user_id: str | None, flow_run_id: str | None
) -> str:
    return store_report(engine_for(database_url), report, agent_id, user_id, flow_run_id)


@task(cache_policy=NO_CACHE)
def publish_drift_report(report: DriftReport) -> None:
    create_markdown_artifact(key="drift-report", markdown=render_markdown(report), description="Drift demotion report")
