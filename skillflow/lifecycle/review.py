"""Activation review: the evidence a reviewer sees and how a decision is applied.

The decision values are the review form's: ``activate_user``, ``activate_developer``, ``reject`` and
``keep_shadow``; a review that times out keeps the skill in shadow. Every decision is written to
``skill_events`` with the reviewer as actor and ``details.review = true`` (keeping a skill in shadow is
not a transition, so it is logged as a ``reviewed`` event).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel
from sqlalchemy import Engine

from skillflow.kernel.config import PromotionConfig
from skillflow.lifecycle.decisions import ActivationRefused, activate_skill, missing_tools, reject_skill
from skillflow.lifecycle.readiness import get_shadow_readiness
from skillflow.storage.aggregate import aggregate_classes
from skillflow.storage.skills import InvalidTransition, get_skill, last_retired, record_event

Decision = Literal["activate_user", "activate_developer", "reject", "keep_shadow"]
DECISIONS: tuple[str, ...] = ("activate_user", "activate_developer", "reject", "keep_shadow")


class ReviewEvidence(BaseModel):
    """What the reviewer needs: the SKILL.md, its source class, validation and readiness (no raw runs)."""

    skill_id: str
    agent_id: str
    user_id: str
    name: str
    version: int
    status: str
    injection_role: str
    canonical_hash: str
    content: str
    tools: list[str]
    missing_tools: list[str]
    preconditions: list[str]
    baseline: dict[str, Any]
    validation: dict[str, Any]
    class_stats: dict[str, Any]
    readiness: dict[str, Any]
    previous_demotion_reason: str | None = None


class ReviewOutcome(BaseModel):
    skill_id: str
    decision: str
    applied: bool
    status: str
    injection_role: str
    reviewer: str
    reasons: list[str] = []


def gather_evidence(engine: Engine, skill_id: str, config: PromotionConfig) -> ReviewEvidence:
    with engine.connect() as conn:
        skill = get_skill(conn, skill_id)
        classes = aggregate_classes(conn, skill.agent_id, skill.user_id, canonical_hash=skill.canonical_hash)
        stats = classes[0] if classes else None
        retired = last_retired(conn, skill.agent_id, skill.user_id, skill.canonical_hash)
        class_stats = {}
        if stats is not None:
            class_stats = {
                "executions": stats.executions,
                "successes": stats.successes,
                "failures": stats.failures,
                "success_rate": round(stats.success_rate, 4),
                "distinct_queries": stats.distinct_queries,
                "first_seen": stats.first_seen.isoformat(),
                "last_seen": stats.last_seen.isoformat(),
                "tool_sequence": stats.tool_sequence,
            }
        return ReviewEvidence(
            skill_id=skill.id,
            agent_id=skill.agent_id,
            user_id=skill.user_id,
            name=skill.name,
            version=skill.version,
            status=skill.status,
            injection_role=skill.injection_role,
            canonical_hash=skill.canonical_hash,
            content=skill.content,
            tools=list(skill.tools or []),
            missing_tools=missing_tools(conn, skill),
            preconditions=list(skill.preconditions or []),
            baseline=dict(skill.baseline or {}),
            validation=dict(skill.validation or {}),
            class_stats=class_stats,
            readiness=get_shadow_readiness(conn, skill.id, config),
            previous_demotion_reason=retired.demotion_reason
            if retired is not None and retired.id != skill.id
            else None,
        )


def apply_review_decision(
    engine: Engine,
    skill_id: str,
    decision: str,
    reviewer: str,
    *,
    reason: str = "",
    config: PromotionConfig,
    flow_run_id: str | None = None,
) -> ReviewOutcome:
    """Apply one reviewer decision; a refused activation is an outcome with reasons, not an exception."""
    if decision not in DECISIONS:
        raise ValueError(f"unknown decision {decision!r}; expected one of {', '.join(DECISIONS)}")
    reviewer = reviewer.strip() or "unknown reviewer"
    reasons: list[str] = []
    applied = True
    try:
        if decision in ("activate_user", "activate_developer"):
            role: Literal["user", "developer"] = "developer" if decision == "activate_developer" else "user"
            activate_skill(
                engine, skill_id, role, actor=reviewer, flow_run_id=flow_run_id, config=config, reason=reason or None
            )
        elif decision == "reject":
            reject_skill(engine, skill_id, reason or "rejected at review", actor=reviewer, flow_run_id=flow_run_id)
        else:
            log_review_event(engine, skill_id, "reviewed", reviewer, reason, flow_run_id, decision)
    except ActivationRefused as exc:
        applied, reasons = False, list(exc.reasons)
    except InvalidTransition as exc:
        applied, reasons = False, [str(exc)]
    with engine.connect() as conn:
        skill = get_skill(conn, skill_id)
    return ReviewOutcome(
        skill_id=skill_id,
        decision=decision,
        applied=applied,
        status=skill.status,
        injection_role=skill.injection_role,
        reviewer=reviewer,
        reasons=reasons,
    )


def log_review_event(
    engine: Engine,
    skill_id: str,
    event: str,
    actor: str,
    reason: str,
    flow_run_id: str | None,
    decision: str,
) -> None:
    """An audit row for a review that changed nothing (kept in shadow, or timed out)."""
    with engine.begin() as conn:
        skill = get_skill(conn, skill_id)
        record_event(
            conn,
            skill,
            event,
            actor=actor,
            from_status=skill.status,
            to_status=skill.status,
            reason=reason or None,
            flow_run_id=flow_run_id,
            details={"review": True, "decision": decision},
        )


def render_markdown(ev: ReviewEvidence) -> str:
    """The review page: SKILL.md plus its evidence (figures and ids; no raw runs or queries)."""
    ready = ev.readiness
    lines = [
        f"# Review: {ev.name} v{ev.version} ({ev.status}, {ev.injection_role} authority)",
        "",
        f"- skill id: `{ev.skill_id}`; tenant: `{ev.agent_id}` / `{ev.user_id}`",
        f"- trajectory class: `{ev.canonical_hash[:12]}`",
        f"- tools: {', '.join(ev.tools) or '—'}"
        + (f" — **no longer registered: {', '.join(ev.missing_tools)}**" if ev.missing_tools else ""),
        f"- readiness (advisory): {'ready' if ready.get('ready') else 'not ready'}; "
        f"observations {ready.get('observations')}, trajectory match {ready.get('trajectory_match_rate', 0):.2f}, "
        f"matched success {ready.get('matched_success_rate', 0):.2f}",
    ]
    lines += [f"  - {r}" for r in ready.get("reasons", [])]
    if ev.previous_demotion_reason:
        lines.append(f"- previous version demoted: {ev.previous_demotion_reason}")
    lines += [
        "",
        "Decide with the resume form: activate_user, activate_developer (requires require_shadow and shadow"
        " review), reject (give a reason) or keep_shadow. Readiness is observational, not causal.",
        "",
        "## SKILL.md",
        "",
        "````markdown",
        ev.content,
        "````",
    ]
    return "\n".join(lines)


def evidence_table(ev: ReviewEvidence) -> list[dict[str, Any]]:
    """One row per figure: source class stats, frozen baseline, validation checks."""
    rows: list[dict[str, Any]] = []
    rows += [{"section": "source class", "item": k, "value": str(v)} for k, v in ev.class_stats.items()]
    rows += [{"section": "baseline", "item": k, "value": str(v)} for k, v in ev.baseline.items()]
    checks = ev.validation.get("checks", ev.validation)
    if isinstance(checks, dict):
        rows += [{"section": "validation", "item": str(k), "value": str(v)} for k, v in checks.items()]
    return rows
