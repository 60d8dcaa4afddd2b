"""backfill-canonical-hashes: give legacy runs their canonical identity, batch by batch."""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact

from skillflow.operations.backfill import BackfillReport
from tasks.backfill import BackfillParams, backfill_hashes
from tasks.common import run_name


@flow(
    name="backfill-canonical-hashes",
    flow_run_name=run_name("backfill", "agent_id", flow=True),
    description="Give legacy runs (NULL canonical_hash) their canonical identity in keyset batches, one "
    "transaction each; store and publish the report.",
)
def backfill_canonical_hashes(params: BackfillParams | None = None) -> BackfillReport:
    """Count the scope, hash NULL-hash rows in keyset batches, store and publish the report."""
    params = params or BackfillParams()
    report = backfill_hashes(params)
    create_markdown_artifact(key="backfill-report", markdown=report.markdown(), description=report.summary())
    get_run_logger().info("backfill %s", report.summary())
    return report
