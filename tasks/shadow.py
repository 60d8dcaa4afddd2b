"""Tasks of the shadow-evaluation flow: drain the outbox (the one composition) and publish the summary."""

from __future__ import annotations

import os
from datetime import datetime

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from skillflow.injection.embeddings import get_embedder
from skillflow.kernel.config import PromotionConfig, Settings
from skillflow.lifecycle.shadow import DrainReport, drain_shadow_evaluations
from skillflow.storage.outbox import requeue_unevaluated
from tasks.common import engine_for, flow_run_id, stage


@stage()
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
    return drain_shadow_evaluations(
        engine_for(database_url), config, model, None, batch_size, max_batches, dry_run=dry_run
    )


@stage()
def requeue_backlog(database_url: str | None, since: datetime | None) -> int:
    """Re-queue tool-calling runs that were never shadow-evaluated (idempotent: one set-based UPDATE)."""
    with engine_for(database_url).begin() as conn:
        return requeue_unevaluated(conn, since)


@task(cache_policy=NO_CACHE)
def publish_shadow_summary(report: DrainReport) -> None:
    lines = [
        "# Shadow evaluation",
        "",
        f"- status: {report.status}",
        f"- batches: {report.batches}; runs claimed: {report.claimed}; runs with evidence: {report.evaluated_runs}",
        f"- records appended: {report.records}; runs without a fresh candidate: {report.no_candidate}",
        f"- failed (left in the outbox): {report.failed}; skills reconciled: {report.skills_reconciled}",
        f"- still pending: {report.pending_left if report.pending_left is not None else 'n/a'}",
    ]
    create_markdown_artifact(
        key="shadow-evaluation", markdown="\n".join(lines), description="Shadow evaluation summary"
    )


@stage()
def note_backlog(database_url: str | None, threshold: int) -> int:
    """Count the shadow outbox and emit ``skillflow.outbox.backlog`` above ``threshold``; returns the count."""
    from skillflow.storage.outbox import pending_count
    from tasks.events import emit_backlog

    engine = engine_for(database_url)
    with engine.connect() as conn:
        pending = pending_count(conn)
    emit_backlog(pending, threshold, os.path.basename(engine.url.database or "") or engine.url.drivername)
    return pending


CHILD_DEPLOYMENT = "shadow-evaluation/shadow-drain"


def fan_out_drains(
    database_url: str | None, child_params: dict[str, object], chunks: int | None
) -> tuple[int, list[str]]:
    """Pool mode: ``chunks`` concurrent drains on the workers (the outbox claims give them disjoint batches).

    Returns the runs still pending afterwards and the child runs that did not complete.
    """
    from skillflow.storage.outbox import pending_count
    from tasks.fanout import FleetSettings, run_children, worker_slots

    settings = FleetSettings()
    n = chunks or settings.chunks or worker_slots(CHILD_DEPLOYMENT)
    params = [{"params": {**child_params, "fan_out": "local", "evaluate_backlog": False}} for _ in range(n)]
    children = run_children(CHILD_DEPLOYMENT, params, flow_run_id(), settings)
    with engine_for(database_url).connect() as conn:
        pending = pending_count(conn)
    return pending, [f"child run {c.flow_run_id} {c.state.lower()}" for c in children if not c.completed]
