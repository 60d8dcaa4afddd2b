"""The promotion report: what one cycle (or one "Distill now") did in one partition, and how stages fill it."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field
from sqlalchemy import Engine

from skillflow.kernel.models import SkillStatus, utcnow
from skillflow.promotion.gates import whole_days_since
from skillflow.promotion.landing import ClassResult, Decision
from skillflow.promotion.stages import Assessment
from skillflow.storage.aggregate import mark_cycle
from skillflow.storage.reports import report_id, write_report


class GateRow(BaseModel):
    """One line of the per-class gate table."""

    hash: str
    canonical_hash: str
    executions: int
    success_rate: float
    distinct_queries: int
    last_seen_days: int
    checks: dict[str, bool]
    score: float | None = None
    decision: str = "ineligible"
    reason: str | None = None


class PromotionReport(BaseModel):
    """What one cycle (or one "Distill now") did in one (agent, user) partition; stored and published."""

    kind: Literal["promotion"] = "promotion"
    mode: Literal["cycle", "distill"] = "cycle"
    agent_id: str
    user_id: str
    cycle: int
    dry_run: bool = False
    flow_run_id: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    partition_skipped: str | None = None
    partition_failed: str | None = None
    promoted: list[str] = Field(default_factory=list)
    would_promote: list[str] = Field(default_factory=list)
    rejected: list[tuple[str, list[str]]] = Field(default_factory=list)
    skipped: list[tuple[str, str]] = Field(default_factory=list)
    deprecated: list[tuple[str, str]] = Field(default_factory=list)
    review_flags: list[str] = Field(default_factory=list)
    candidates_considered: int = 0
    gates: list[GateRow] = Field(default_factory=list)
    applicability: dict[str, Any] | None = None  # the fitted injection rule (promotion/calibrate.py)

    def decide(self, canonical_hash: str, decision: Decision, reason: str | None = None) -> None:
        for row in self.gates:
            if row.canonical_hash == canonical_hash:
                row.decision, row.reason = decision, reason


def gate_rows(assessments: list[Assessment], now: datetime) -> list[GateRow]:
    rows = []
    for a in assessments:
        s = a.stats
        decision: Decision = "backoff" if a.backoff else ("ineligible" if not a.gate.eligible else "below cut")
        rows.append(
            GateRow(
                hash=s.canonical_hash[:12],
                canonical_hash=s.canonical_hash,
                executions=s.executions,
                success_rate=round(s.success_rate, 4),
                distinct_queries=s.distinct_queries,
                last_seen_days=whole_days_since(s.last_seen, now),
                checks=dict(a.gate.checks),
                score=round(a.score, 4) if a.gate.eligible else None,
                decision=decision,
                reason=a.backoff or a.gate.reason,
            )
        )
    return rows


def apply_result(report: PromotionReport, result: ClassResult) -> None:
    """Record one class's end in the report and its gate row."""
    h = result.canonical_hash
    if result.decision == "promoted" and result.skill_id:
        report.promoted.append(result.skill_id)
        if result.status == SkillStatus.SHADOW.value:
            report.review_flags.append(f"skill {result.skill_id} landed SHADOW: it needs an explicit activation review")
    elif result.decision == "would promote":
        report.would_promote.append(h)
    elif result.decision == "rejected":
        report.rejected.append((h, result.reasons))
    else:
        report.skipped.append((h, result.reasons[0] if result.reasons else ""))
    report.decide(h, result.decision, "; ".join(result.reasons) or None)


def apply_assessments(report: PromotionReport, assessments: list[Assessment], now: datetime) -> None:
    report.candidates_considered = len(assessments)
    report.gates = gate_rows(assessments, now)
    for a in assessments:
        if not a.eligible:
            report.skipped.append((a.stats.canonical_hash, a.backoff or a.gate.reason or ""))


def apply_ranking(report: PromotionReport, below: list[tuple[str, str]]) -> None:
    for h, reason in below:
        report.skipped.append((h, reason))
        report.decide(h, "below cut", reason)


def finish_partition(engine: Engine, report: PromotionReport, mark: bool) -> str | None:
    """Store the report and (for a real cycle) mark the partition's cycle, in one idempotent transaction."""
    if report.dry_run:
        return None
    rid = report_id("promotion", report.flow_run_id, report.mode, report.agent_id, report.user_id)
    with engine.begin() as conn:
        write_report(
            conn,
            report_id=rid,
            kind="promotion",
            body=report.model_dump(mode="json"),
            created_at=report.created_at,
            agent_id=report.agent_id,
            user_id=report.user_id,
            flow_run_id=report.flow_run_id,
        )
        if mark:
            mark_cycle(conn, report.agent_id, report.user_id, report.created_at, cycle=report.cycle)
    return rid
