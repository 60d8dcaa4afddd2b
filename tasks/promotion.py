"""Tasks of the promotion flows: list the partitions, run one partition's cycle, run one "Distill now".

Each task calls the one composition in :mod:`skillflow.promotion.cycle`; a task adds only orchestration
(retries on transient errors, the flow-run id, a readable run name).
"""

from __future__ import annotations

from datetime import datetime

from skillflow.kernel.config import PromotionConfig
from skillflow.promotion import cycle
from skillflow.promotion.cycle import PromotionReport
from skillflow.storage.aggregate import partitions
from tasks.common import engine_for, flow_run_id, stage


@stage()
def list_partitions(database_url: str | None, agent_id: str | None, user_id: str | None) -> list[tuple[str, str]]:
    """Every (agent, user) partition with stored runs, optionally narrowed to one agent or user."""
    with engine_for(database_url).connect() as conn:
        return partitions(conn, agent_id, user_id)


@stage(delays=(2.0, 10.0, 30.0), retries=3)
def cycle_partition(
    database_url: str | None,
    agent_id: str,
    user_id: str,
    config: PromotionConfig,
    now: datetime,
    dry_run: bool,
    force: bool,
) -> PromotionReport:
    """One partition's cycle (sweep → gates → rank → distill → validate → land → report)."""
    return cycle.run_partition(
        engine_for(database_url),
        agent_id,
        user_id,
        config,
        dry_run=dry_run,
        force=force,
        now=now,
        flow_run_id=flow_run_id(),
    )


@stage()
def record_partition_failure(
    database_url: str | None, agent_id: str, user_id: str, dry_run: bool, reason: str
) -> PromotionReport:
    """Store the report of a partition whose cycle failed: which stage, which error class (never a message)."""
    return cycle.record_partition_failure(
        engine_for(database_url), agent_id, user_id, reason, dry_run=dry_run, flow_run_id=flow_run_id()
    )


@stage(delays=(2.0, 10.0, 30.0), retries=3)
def distill_one_class(
    database_url: str | None, agent_id: str, user_id: str, canonical_hash: str, config: PromotionConfig, dry_run: bool
) -> PromotionReport:
    """ "Distill now" for one class: the same gates and validation as a cycle."""
    return cycle.promote_class(
        engine_for(database_url),
        agent_id,
        user_id,
        canonical_hash,
        config,
        dry_run=dry_run,
        flow_run_id=flow_run_id(),
    )
