"""Tasks: the partition lease, store-and-stamp of a validated skill, and rejection bookkeeping."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from skillflow import promotion
from skillflow.config import PromotionConfig
from skillflow.evidence import ClassStats
from skillflow.promotion import ClassResult
from skillflow.storage import leases
from tasks.common import engine_for, retry_transient
from tasks.distillation import Draft


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[1, 5], retry_condition_fn=retry_transient)
def acquire_lease(database_url: str | None, agent_id: str, user_id: str, holder: str) -> bool:
    name = promotion.lease_name(agent_id, user_id)
    return leases.acquire(engine_for(database_url), name, holder, promotion.LEASE_TTL_SECONDS)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[1, 5], retry_condition_fn=retry_transient)
def release_lease(database_url: str | None, agent_id: str, user_id: str, holder: str) -> None:
    leases.release(engine_for(database_url), promotion.lease_name(agent_id, user_id), holder)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[1, 5], retry_condition_fn=retry_transient)
def store_candidate(
    database_url: str | None,
    draft: Draft,
    validation: Any,
    config: PromotionConfig,
    actor: str,
    flow_run_id: str | None,
) -> ClassResult:
    """Insert + vectors + stamping + cleared backoff in one transaction (a live skill → skipped)."""
    return promotion.store_skill(
        engine_for(database_url),
        draft.evidence,
        draft.outcome,
        validation,
        config,
        actor=actor,
        flow_run_id=flow_run_id,
    )


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[1, 5], retry_condition_fn=retry_transient)
def reject_candidate(
    database_url: str | None, stats: ClassStats, cycle: int, reasons: list[str], config: PromotionConfig
) -> ClassResult:
    return promotion.record_rejection(engine_for(database_url), stats, cycle, reasons, config)
