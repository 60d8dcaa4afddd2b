"""Task: the staleness sweep of one partition (ACTIVE skills with a removed tool → DEPRECATED)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from skillflow.staleness import SweepResult, sweep
from tasks.common import engine_for, retry_transient


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[1, 5], retry_condition_fn=retry_transient)
def sweep_partition(
    database_url: str | None, agent_id: str, user_id: str, actor: str, flow_run_id: str | None, dry_run: bool
) -> SweepResult:
    return sweep(engine_for(database_url), agent_id, user_id, actor=actor, flow_run_id=flow_run_id, dry_run=dry_run)
