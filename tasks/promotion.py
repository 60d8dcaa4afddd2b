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


def run_partitions(
    database_url: str | None,
    partitions: list[tuple[str, str]],
    config: PromotionConfig,
    now: datetime,
    dry_run: bool,
    force: bool,
    limit: str | None = None,
) -> list[PromotionReport]:
    """One chunk of partitions, one task run each (called by a flow, never a task itself).

    Partitions are isolated: one that fails (after its transient retries) gets a stored report naming the
    stage and error class, and the next one still runs. ``limit`` names the global concurrency limit each
    partition holds while it runs (pool mode); the per-partition lease stays the guard against a double
    promotion. Events for promoted skills and rejected classes follow each partition.
    """
    from tasks.events import emit_promotion
    from tasks.fanout import partition_slot

    reports: list[PromotionReport] = []
    for agent_id, user_id in partitions:
        with partition_slot(limit):
            state = cycle_partition(database_url, agent_id, user_id, config, now, dry_run, force, return_state=True)
        if state.is_completed():
            report = state.result()
        else:
            reason = cycle.failure_reason(state.result(raise_on_failure=False))
            report = record_partition_failure(database_url, agent_id, user_id, dry_run, reason)
        emit_promotion([report])
        reports.append(report)
    return reports


CHILD_DEPLOYMENT = "promotion-partitions/promotion-partitions"


def fan_out_partitions(
    database_url: str | None,
    partitions: list[tuple[str, str]],
    chunks: int | None,
    overrides: dict[str, object],
    now: datetime,
    dry_run: bool,
    force: bool,
) -> list[PromotionReport]:
    """Pool mode: one ``promotion-partitions`` child run per chunk, then every partition's stored report.

    Reports come back through the database, not through Prefect results (workers on other machines share
    the database, not a disk). A partition with no stored report is reported as not due when its child
    completed (cadence skips and dry runs store nothing) and as failed otherwise (the child crashed or was
    cancelled before it got there).
    """
    from skillflow.storage.reports import bodies_of_runs
    from tasks.fanout import FleetSettings, chunk, run_children, worker_slots

    settings = FleetSettings()
    groups = chunk(partitions, chunks or settings.chunks or worker_slots(CHILD_DEPLOYMENT))
    base = {"database_url": database_url, "dry_run": dry_run, "force": force, "config_overrides": overrides}
    params = [{"params": {**base, "partitions": g, "now": now.isoformat()}} for g in groups]
    children = run_children(CHILD_DEPLOYMENT, params, flow_run_id(), settings)
    with engine_for(database_url).connect() as conn:
        bodies = bodies_of_runs(conn, "promotion", [c.flow_run_id for c in children])
    stored = {(b["agent_id"], b["user_id"]): PromotionReport.model_validate(b) for b in bodies if b["mode"] == "cycle"}
    reports: list[PromotionReport] = []
    for child, group in zip(children, groups, strict=True):
        for agent_id, user_id in group:
            report = stored.get((agent_id, user_id))
            if report is None and child.completed:
                report = PromotionReport(
                    agent_id=agent_id,
                    user_id=user_id,
                    cycle=0,
                    dry_run=dry_run,
                    flow_run_id=child.flow_run_id,
                    partition_skipped="no report stored: not due (cadence) or a dry run",
                )
            elif report is None:
                reason = f"child run {child.state.lower()}"
                report = record_partition_failure(database_url, agent_id, user_id, dry_run, reason)
            reports.append(report)
    return reports
