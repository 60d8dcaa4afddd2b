"""Tasks of the backfill-canonical-hashes flow: scope count, one batch, the stored report."""

from __future__ import annotations

import hashlib

from prefect import task
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, Field
from sqlalchemy import select

from skillflow import backfill
from skillflow.config import load_promotion_config
from skillflow.models import new_id, utcnow
from skillflow.storage.schema import reports
from tasks.common import engine_for, flow_run_id, retry_transient


class BackfillParams(BaseModel):
    """Parameters of the backfill-canonical-hashes flow (rendered as a form in the Prefect UI)."""

    database_url: str | None = Field(None, description="Database URL (default: $SKILLFLOW_DATABASE_URL)")
    dry_run: bool = Field(False, description="Count what would change; write nothing but the report")
    batch_size: int = Field(500, ge=1, le=100_000, description="Rows per batch (one transaction each)")
    agent_id: str | None = Field(None, description="Only this agent's runs")
    force: bool = Field(False, description="Recompute every row, not only rows with a NULL canonical_hash")


@task(cache_policy=NO_CACHE, retries=3, retry_delay_seconds=[1, 5, 15], retry_condition_fn=retry_transient)
def count_scope(params: BackfillParams) -> int:
    """Rows already hashed (skipped without ``force``)."""
    with engine_for(params.database_url).connect() as conn:
        return backfill.count_scope(conn, params.agent_id, params.force)[1]


@task(cache_policy=NO_CACHE, retries=3, retry_delay_seconds=[1, 5, 15], retry_condition_fn=retry_transient)
def backfill_batch(params: BackfillParams, after_id: str | None) -> backfill.BatchResult:
    """One keyset batch in its own transaction (a retry re-reads the same rows and converges)."""
    noop = load_promotion_config().noop_tools
    with engine_for(params.database_url).begin() as conn:
        result = backfill.backfill_batch(
            conn, after_id, params.batch_size, params.agent_id, params.force, params.dry_run, noop
        )
    if result.last_id is not None:
        backfill.notify(result)
    return result


@task(cache_policy=NO_CACHE, retries=3, retry_delay_seconds=[1, 5, 15], retry_condition_fn=retry_transient)
def store_report(params: BackfillParams, report: backfill.BackfillReport) -> str:
    """Store the report (kind "backfill"); keyed by the flow run, so a retry does not duplicate it."""
    run_id = flow_run_id()
    report_id = hashlib.sha256(f"backfill:{run_id}".encode()).hexdigest()[:32] if run_id else new_id()
    with engine_for(params.database_url).begin() as conn:
        if conn.execute(select(reports.c.id).where(reports.c.id == report_id)).first() is None:
            conn.execute(
                reports.insert().values(
                    id=report_id,
                    kind="backfill",
                    agent_id=params.agent_id,
                    user_id=None,
                    flow_run_id=run_id,
                    dry_run=1 if params.dry_run else 0,
                    created_at=utcnow(),
                    body=report.as_dict(),
                )
            )
    return report_id
