"""Tasks: the cadence plan and the SQL aggregation + gates (+ rejection backoff) of one partition."""

from __future__ import annotations

from datetime import datetime

from prefect import task
from prefect.cache_policies import NO_CACHE

from skillflow import promotion
from skillflow.config import PromotionConfig
from skillflow.promotion import Assessment, Plan
from skillflow.storage.aggregate import partitions
from tasks.common import engine_for, retry_transient


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[1, 5], retry_condition_fn=retry_transient)
def list_partitions(database_url: str | None, agent_id: str | None, user_id: str | None) -> list[tuple[str, str]]:
    with engine_for(database_url).connect() as conn:
        return partitions(conn, agent_id, user_id)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[1, 5], retry_condition_fn=retry_transient)
def plan_partition(database_url: str | None, agent_id: str, user_id: str, config: PromotionConfig, force: bool) -> Plan:
    return promotion.plan_partition(engine_for(database_url), agent_id, user_id, config, force)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[1, 5], retry_condition_fn=retry_transient)
def assess_partition(
    database_url: str | None,
    agent_id: str,
    user_id: str,
    config: PromotionConfig,
    now: datetime,
    cycle: int,
    canonical_hash: str | None = None,
    respect_backoff: bool = True,
) -> list[Assessment]:
    return promotion.assess_classes(
        engine_for(database_url), agent_id, user_id, config, now, cycle, canonical_hash, respect_backoff
    )


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[1, 5], retry_condition_fn=retry_transient)
def resolve_class(database_url: str | None, agent_id: str, user_id: str, prefix: str) -> str | None:
    """A unique hash prefix → the full class hash (None when unknown; ambiguous prefixes raise)."""
    if len(prefix) < 4:
        return None
    return promotion.resolve_hash(engine_for(database_url), agent_id, user_id, prefix)
