"""Flow ``distill-class``: the "Distill now" button — one class, the same gates and validation as a cycle."""

from __future__ import annotations

from prefect import flow
from pydantic import Field

from skillflow.kernel.config import load_promotion_config
from skillflow.promotion.backends import check_providers
from skillflow.promotion.report import PromotionReport
from tasks.common import FlowParams, run_name
from tasks.events import emit_promotion
from tasks.promotion import distill_one_class
from tasks.reporting import publish_report


class DistillClassParams(FlowParams):
    """One class of one tenant, by hash or unique hash prefix (at least 4 characters)."""

    database_url: str | None = Field(None, description="SQLAlchemy URL (default: $SKILLFLOW_DATABASE_URL)")
    agent_id: str = Field(..., description="The agent")
    user_id: str = Field(..., description="The user")
    canonical_hash: str = Field(..., min_length=1, max_length=64, description="Class hash or unique prefix")
    dry_run: bool = Field(False, description="Compute the report but write nothing")


@flow(
    name="distill-class",
    log_prints=False,
    flow_run_name=run_name("distill", "agent_id", "user_id", "canonical_hash", flow=True),
    description="Distill now: one class of one tenant through the same gates, distillation, validation and store "
    "as a promotion cycle; publishes its own report.",
)
def distill_class(params: DistillClassParams) -> PromotionReport:
    """Gate, distill, validate and store one class; hand-picking never bypasses evidence."""
    config = load_promotion_config()
    check_providers()  # a missing LLM key fails the run at once, naming the variable (docs/guide/llm.md)
    report = distill_one_class(
        params.database_url, params.agent_id, params.user_id, params.canonical_hash, config, params.dry_run
    )
    publish_report([report])
    emit_promotion([report])  # skill.promoted / class.rejected, like a cycle
    return report
