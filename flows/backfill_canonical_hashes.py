"""backfill-canonical-hashes: give legacy runs their canonical identity, batch by batch."""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact

from skillflow.backfill import BackfillReport
from tasks.backfill import BackfillParams, backfill_batch, count_scope, store_report


@flow(name="backfill-canonical-hashes")
def backfill_canonical_hashes(params: BackfillParams | None = None) -> BackfillReport:
    """Count the scope, hash NULL-hash rows in keyset batches, store and publish the report."""
    params = params or BackfillParams()
    report = BackfillReport(dry_run=params.dry_run, force=params.force, agent_id=params.agent_id,
                            batch_size=params.batch_size)  # fmt: skip
    report.already_hashed = report.scanned = count_scope(params)
    cursor: str | None = None
    while (batch := backfill_batch(params, cursor)).last_id is not None:
        report.add(batch)
        cursor = batch.last_id
    report.extra["report_id"] = store_report(params, report)
    create_markdown_artifact(key="backfill-report", markdown=report.markdown(), description=report.summary())
    get_run_logger().info("backfill %s", report.summary())
    return report
