"""Task of the backfill-canonical-hashes flow: run the backfill (the one composition) for the parameters."""

from __future__ import annotations

from pydantic import Field

from skillflow.kernel.config import load_promotion_config
from skillflow.operations import backfill
from tasks.common import FlowParams, TenantScope, engine_for, flow_run_id, stage


class BackfillParams(FlowParams):
    """Parameters of the backfill-canonical-hashes flow (rendered as a form in the Prefect UI)."""

    database_url: str | None = Field(None, description="Database URL (default: $SKILLFLOW_DATABASE_URL)")
    dry_run: bool = Field(False, description="Count what would change; write nothing but the report")
    batch_size: int = Field(500, ge=1, le=100_000, description="Rows per batch (one transaction each)")
    agent_id: TenantScope = Field("", max_length=255, description="Only this agent's runs (empty: every agent)")
    force: bool = Field(False, description="Recompute every row, not only rows with a NULL canonical_hash")


@stage(retries=3, delays=(1.0, 5.0, 15.0), run_name="backfill-hashes")
def backfill_hashes(params: BackfillParams) -> backfill.BackfillReport:
    """Keyset batches, one transaction each (a retry re-reads the same rows and converges), then the report."""
    return backfill.run_backfill(
        engine_for(params.database_url),
        params.batch_size,
        params.agent_id or None,
        params.force,
        params.dry_run,
        load_promotion_config().noop_tools,
        flow_run_id=flow_run_id(),
    )
