"""Tasks of the promotion flows: list the partitions, run one partition's cycle, run one "Distill now".

Each task calls the one composition in :mod:`skillflow.promotion.cycle`; a task adds only orchestration
(retries on transient errors, the flow-run id, a readable run name).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from prefect import get_run_logger

from skillflow.kernel.config import PromotionConfig, get_settings
from skillflow.promotion import cycle
from skillflow.promotion.chunk import Prefetched, prefetch
from skillflow.promotion.report import PromotionReport
from skillflow.storage.aggregate import partitions
from tasks.common import batch_name, engine_for, flow_run_id, run_name, stage


@stage(run_name=run_name("list-partitions", "agent_id", "user_id"))
def list_partitions(database_url: str | None, agent_id: str | None, user_id: str | None) -> list[tuple[str, str]]:
    """Every (agent, user) partition with stored runs, optionally narrowed to one agent or user ("" = all), from the
    maintained partition counters (docs/guide/aggregate.md)."""
    with engine_for(database_url).connect() as conn:
        found = partitions(conn, agent_id or None, user_id or None)
    get_run_logger().info("%d partition(s) with stored runs", len(found))
    return found


@stage(run_name="read-chunk")
def read_chunk(
    database_url: str | None,
    partitions: list[tuple[str, str]],
    config: PromotionConfig,
    dry_run: bool,
    force: bool,
    run_id: str | None,
) -> dict[tuple[str, str], Prefetched]:
    """One read for a chunk: fold its pending runs, every partition's counters, the due ones' statistics."""
    shared = prefetch(engine_for(database_url), partitions, config, dry_run=dry_run, force=force, flow_run_id=run_id)
    due = sum(1 for p in shared.values() if p.stats is not None)
    get_run_logger().info("chunk of %d partition(s): %d due with prefetched statistics", len(partitions), due)
    return shared


def log_report(report: PromotionReport) -> None:
    """One INFO line per partition report: counts and ids (skill ids, class-hash prefixes), never content."""
    tenant = f"{report.agent_id}/{report.user_id}"
    if report.partition_skipped or report.partition_failed:
        state = "failed" if report.partition_failed else "skipped"
        get_run_logger().info("partition %s %s: %s", tenant, state, report.partition_failed or report.partition_skipped)
        return
    get_run_logger().info(
        "partition %s cycle %d: %d class(es) considered, %d landed (%s), %d would land, %d rejected (%s), "
        "%d skipped, %d deprecated%s",
        tenant, report.cycle, report.candidates_considered, len(report.promoted),
        ", ".join(s[:12] for s in report.promoted) or "none", len(report.would_promote), len(report.rejected),
        ", ".join(h[:12] for h, _ in report.rejected) or "none", len(report.skipped), len(report.deprecated),
        " (dry run)" if report.dry_run else "",
    )  # fmt: skip


@stage(delays=(2.0, 10.0, 30.0), retries=3, run_name="cycle-{agent_id}-{user_id}")
def cycle_partition(
    database_url: str | None,
    agent_id: str,
    user_id: str,
    config: PromotionConfig,
    now: datetime,
    dry_run: bool,
    force: bool,
    prefetched: Prefetched | None = None,
) -> PromotionReport:
    """One partition's cycle (sweep → gates → rank → distill → validate → land → report), from its chunk's read."""
    report = cycle.run_partition(
        engine_for(database_url),
        agent_id,
        user_id,
        config,
        dry_run=dry_run,
        force=force,
        now=now,
        flow_run_id=flow_run_id(),
        prefetched=prefetched,
    )
    log_report(report)
    return report


@stage(run_name="partition-failed-{agent_id}-{user_id}")
def record_partition_failure(
    database_url: str | None, agent_id: str, user_id: str, dry_run: bool, reason: str, owner: str | None = None
) -> PromotionReport:
    """Store the report of a partition whose cycle failed: which stage, which error class (never a message).

    ``owner``: the flow run that owed the report (a fan-out's crashed child; default this run), under whose id it
    is stored, so that the owner's retry replaces it with its own rather than adding a second report of the cycle.
    """
    report = cycle.record_partition_failure(
        engine_for(database_url), agent_id, user_id, reason, dry_run=dry_run, flow_run_id=owner or flow_run_id()
    )
    log_report(report)
    return report


@stage(delays=(2.0, 10.0, 30.0), retries=3, run_name=run_name("distill", "agent_id", "user_id", "canonical_hash"))
def distill_one_class(
    database_url: str | None, agent_id: str, user_id: str, canonical_hash: str, config: PromotionConfig, dry_run: bool
) -> PromotionReport:
    """ "Distill now" for one class: the same gates and validation as a cycle."""
    report = cycle.promote_class(
        engine_for(database_url),
        agent_id,
        user_id,
        canonical_hash,
        config,
        dry_run=dry_run,
        flow_run_id=flow_run_id(),
    )
    log_report(report)
    return report


@stage(retries=0, run_name=batch_name("cycle"))
def cycle_batch(
    database_url: str | None,
    batch: list[tuple[str, str]],
    config: PromotionConfig,
    now: datetime,
    dry_run: bool,
    force: bool,
    prefetched: dict[tuple[str, str], Prefetched],
) -> tuple[list[PromotionReport], list[tuple[str, str]]]:
    """Several partitions' cycles in one task run: (their reports, the partitions that raised).

    Each partition is the same composition as :func:`cycle_partition`; one that raises is handed back, and
    :func:`run_partitions` runs it again as its own task run, with the transient retries and a failed state of its
    own in the UI. A task run costs the Prefect server about 50 ms of CPU (three state events) whatever the
    partition does (docs/BENCHMARKS.md, "Scale"), so a fleet runs partitions in batches.
    """
    engine, run_id, settings = engine_for(database_url), flow_run_id(), get_settings()
    reports: list[PromotionReport] = []
    deferred: list[tuple[str, str]] = []
    for agent_id, user_id in batch:
        try:
            report = cycle.run_partition(
                engine, agent_id, user_id, config, dry_run=dry_run, force=force, now=now, flow_run_id=run_id,
                settings=settings, prefetched=prefetched.get((agent_id, user_id)),
            )  # fmt: skip
        except Exception:  # noqa: BLE001 - the partition runs again alone, where its failure is retried and shown
            deferred.append((agent_id, user_id))
            continue
        log_report(report)
        reports.append(report)
    return reports, deferred


def run_partitions(
    database_url: str | None,
    partitions: list[tuple[str, str]],
    config: PromotionConfig,
    now: datetime,
    dry_run: bool,
    force: bool,
    limit: str | None = None,
    per_task: int = 1,
) -> list[PromotionReport]:
    """One chunk of partitions, one task run each or ``per_task`` per task run (called by a flow, never a task).

    Partitions are isolated: one that fails (after its transient retries) gets a stored report naming the
    stage and error class, and the next one still runs. ``limit`` names the global concurrency limit the chunk
    holds one slot of while it runs (pool mode): its partitions run one after another, so the limit bounds how
    many partitions hit the database and the provider at once across the fleet, at one acquisition per chunk
    instead of one per partition (an acquisition is a round trip to the Prefect server, ~0.1 s; per partition it
    dominated the cycle, docs/BENCHMARKS.md). The per-partition lease stays the guard against a double promotion.
    With ``per_task`` > 1 (a fleet's ``partitions_per_task``) partitions run in batches (:func:`cycle_batch`); a
    partition that raises in its batch runs again alone, so its failure is still its own failed task run.
    Events for promoted skills and rejected classes follow each partition. One read serves the chunk
    (:func:`skillflow.promotion.chunk.prefetch`): a partition that is not due costs no statement.
    """
    from tasks.events import emit_promotion
    from tasks.fanout import partition_slot, run_batched

    reports: dict[tuple[str, str], PromotionReport] = {}

    def done(batch_reports: list[PromotionReport]) -> None:
        reports.update({(r.agent_id, r.user_id): r for r in batch_reports})
        emit_promotion(batch_reports)

    with partition_slot(limit):
        shared = read_chunk(database_url, partitions, config, dry_run, force, flow_run_id()) if partitions else {}

        def batch(group: list[tuple[str, str]]) -> Any:
            mine = {p: shared[p] for p in group if p in shared}
            return cycle_batch(database_url, group, config, now, dry_run, force, mine, return_state=True)

        def alone(partition: tuple[str, str]) -> None:
            agent_id, user_id = partition
            state = cycle_partition(
                database_url, agent_id, user_id, config, now, dry_run, force, shared.get(partition), return_state=True
            )
            if state.is_completed():
                report = state.result()
            else:
                reason = cycle.failure_reason(state.result(raise_on_failure=False))
                report = record_partition_failure(database_url, agent_id, user_id, dry_run, reason)
            done([report])

        run_batched(partitions, per_task, batch, alone, done)
    return [reports[p] for p in dict.fromkeys(partitions)]


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
    get_run_logger().info(
        "fan-out: %d partition(s) in %d chunk(s) of %s", len(partitions), len(groups), CHILD_DEPLOYMENT
    )
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
                report = record_partition_failure(database_url, agent_id, user_id, dry_run, reason, child.flow_run_id)
            reports.append(report)
    return reports
