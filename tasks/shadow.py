"""Tasks of the shadow-evaluation flow: drain the outbox (the one composition) and publish the summary."""

from __future__ import annotations

import os
from datetime import datetime

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from skillflow.injection.embeddings import get_embedder
from skillflow.kernel.config import PromotionConfig, Settings
from skillflow.lifecycle.shadow import DrainReport, drain_shadow_evaluations
from skillflow.storage.outbox import requeue_unevaluated
from tasks.common import engine_for, flow_run_id, stage


@stage(run_name="drain-outbox")
def drain_outbox(
    database_url: str | None,
    config: PromotionConfig,
    batch_size: int | None,
    max_batches: int,
    embedder: str | None,
    dry_run: bool,
) -> DrainReport:
    """Claim → evaluate → append records → reconcile, batch after batch (claims make a retry safe)."""
    model = get_embedder(embedder or Settings().embedder)
    report = drain_shadow_evaluations(
        engine_for(database_url), config, model, None, batch_size, max_batches, dry_run=dry_run
    )
    get_run_logger().info(
        "drain %s: %d batch(es), %d run(s) claimed, %d with evidence, %d record(s) appended, %d without a "
        "candidate, %d failed (%s), %d skill(s) reconciled, %s pending, %.1fs",
        report.status, report.batches, report.claimed, report.evaluated_runs, report.records, report.no_candidate,
        report.failed, ", ".join(i[:12] for i in report.failed_ids[:10]) or "none", report.skills_reconciled,
        "n/a" if report.pending_left is None else report.pending_left, report.seconds,
    )  # fmt: skip
    return report


@stage(run_name="requeue-backlog")
def requeue_backlog(database_url: str | None, since: datetime | None) -> int:
    """Re-queue tool-calling runs that were never shadow-evaluated (idempotent: one set-based UPDATE)."""
    with engine_for(database_url).begin() as conn:
        count = requeue_unevaluated(conn, since)
    get_run_logger().info("re-queued %d never-evaluated run(s) for shadow evaluation", count)
    return count


@task(cache_policy=NO_CACHE, task_run_name="publish-shadow-summary")
def publish_shadow_summary(report: DrainReport, drains: int = 0) -> None:
    """The drain's counts; a pool parent (``drains`` > 0) did no batch itself and points at its children."""
    counts = [
        f"- batches: {report.batches}; runs claimed: {report.claimed}; runs with evidence: {report.evaluated_runs}",
        f"- records appended: {report.records}; runs without a fresh candidate: {report.no_candidate}",
        f"- failed (left in the outbox): {report.failed}; skills reconciled: {report.skills_reconciled}",
    ]
    if drains:
        counts = [f"- fan-out: {drains} concurrent drain(s) ({CHILD_DEPLOYMENT}); each child run has its counts"]
    lines = [
        "# Shadow evaluation",
        "",
        f"- status: {report.status}",
        *counts,
        f"- still pending: {report.pending_left if report.pending_left is not None else 'n/a'}",
    ]
    create_markdown_artifact(
        key="shadow-evaluation", markdown="\n".join(lines), description="Shadow evaluation summary"
    )
    get_run_logger().info("published shadow-evaluation summary (%s, %d record(s))", report.status, report.records)


@stage(run_name="note-backlog")
def note_backlog(database_url: str | None, threshold: int) -> int:
    """Count the shadow outbox and emit ``skillflow.outbox.backlog`` above ``threshold`` (keyed by the database and
    this flow run, so a retried run sends the same event); returns the count."""
    from skillflow.storage.outbox import pending_count
    from tasks.events import emit_backlog

    engine = engine_for(database_url)
    with engine.connect() as conn:
        pending = pending_count(conn)
    database = os.path.basename(engine.url.database or "") or engine.url.drivername
    emit_backlog(pending, threshold, database, flow_run_id())
    get_run_logger().info("shadow outbox: %d run(s) pending (backlog event above %d)", pending, threshold)
    return pending


CHILD_DEPLOYMENT = "shadow-evaluation/shadow-drain"


def fan_out_drains(
    database_url: str | None, child_params: dict[str, object], chunks: int | None
) -> tuple[int, int, list[str]]:
    """Pool mode: ``chunks`` concurrent drains on the workers (the outbox claims give them disjoint batches).

    Returns how many drains ran, the runs still pending afterwards and the child runs that did not complete.
    """
    from skillflow.storage.outbox import pending_count
    from tasks.fanout import FleetSettings, run_children, worker_slots

    settings = FleetSettings()
    n = chunks or settings.chunks or worker_slots(CHILD_DEPLOYMENT)
    params = [{"params": {**child_params, "fan_out": "local", "evaluate_backlog": False}} for _ in range(n)]
    get_run_logger().info("fan-out: %d concurrent drain(s) of %s", n, CHILD_DEPLOYMENT)
    children = run_children(CHILD_DEPLOYMENT, params, flow_run_id(), settings)
    with engine_for(database_url).connect() as conn:
        pending = pending_count(conn)
    return n, pending, [c.failure() for c in children if not c.completed]
