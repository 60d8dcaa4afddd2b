"""Activation review: the evidence a reviewer sees and how a decision is applied.

The decision values are the review form's: ``activate_user``, ``activate_developer``, ``reject``,
``keep_shadow`` and ``edit`` (a corrected SKILL.md, validated like a distilled one and stored as the next
revision; the review then starts over on it); a review that times out keeps the skill in shadow. An
activation names the revision the reviewer saw, so an edit landing meanwhile refuses it. Every decision is written to
``skill_events`` with the reviewer as actor and ``details.review = true`` (keeping a skill in shadow is
not a transition, so it is logged as a ``reviewed`` event).
"""

from __future__ import annotations

import base64
import html
import re
from typing import Any, Literal

from pydantic import BaseModel
from sqlalchemy import Engine, select

from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import SkillStatus
from skillflow.lifecycle.charts import render_png, skill_charts
from skillflow.lifecycle.decisions import ActivationRefused, activate_skill, missing_tools, reject_skill
from skillflow.lifecycle.readiness import get_shadow_readiness
from skillflow.lifecycle.revisions import EditRefused, current_revision, edit_skill
from skillflow.promotion.redact import clean_reason
from skillflow.promotion.refit import refresh_rule
from skillflow.storage.aggregate import aggregate_classes
from skillflow.storage.schema import skill_events
from skillflow.storage.skills import InvalidTransition, entered, get_skill, last_retired, record_event

Decision = Literal["activate_user", "activate_developer", "reject", "keep_shadow", "edit"]
DECISIONS: tuple[str, ...] = ("activate_user", "activate_developer", "reject", "keep_shadow", "edit")
TRANSITIONS = ("activate_user", "activate_developer", "reject")  # the decisions that move the skill (and emit)


class ReviewEvidence(BaseModel):
    """What the reviewer needs: the SKILL.md, its source class, validation and readiness (no raw runs)."""

    skill_id: str
    agent_id: str
    user_id: str
    name: str
    version: int
    revision: int = 1
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
    chart_png_base64: str | None = None  # class success, shadow match, rolling vs baseline (lifecycle.charts)


class ReviewOutcome(BaseModel):
    skill_id: str
    decision: str
    applied: bool
    status: str
    injection_role: str
    reviewer: str
    reasons: list[str] = []
    revision: int = 1
    event_row: str | None = None  # the lifecycle row of the transition applied (its Prefect event's id derives from it)


def gather_evidence(engine: Engine, skill_id: str, config: PromotionConfig, *, charts: bool = True) -> ReviewEvidence:
    """Everything the review page shows; ``charts`` renders the evidence chart (matplotlib)."""
    with engine.connect() as conn:
        skill = get_skill(conn, skill_id)
        png = render_png(skill_charts(conn, skill, config)) if charts else None
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
            revision=current_revision(conn, skill.id),
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
            chart_png_base64=base64.b64encode(png).decode("ascii") if png else None,
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
    revision: int | None = None,
    skill_md: str | None = None,
) -> ReviewOutcome:
    """Apply one reviewer decision; a refused activation or edit is an outcome with reasons, not an exception.

    ``revision`` is the revision the reviewer saw; ``skill_md`` the corrected text of an ``edit``.
    """
    if decision not in DECISIONS:
        raise ValueError(f"unknown decision {decision!r}; expected one of {', '.join(DECISIONS)}")
    reviewer = reviewer.strip() or "unknown reviewer"
    reason = clean_reason(reason) if reason else ""  # a reviewer's free text is stored: cleaned and redacted
    reasons: list[str] = []
    applied = True
    try:
        if decision in ("activate_user", "activate_developer"):
            role: Literal["user", "developer"] = "developer" if decision == "activate_developer" else "user"
            activate_skill(
                engine, skill_id, role, actor=reviewer, flow_run_id=flow_run_id, config=config, reason=reason or None,
                revision=revision,
            )  # fmt: skip
        elif decision == "edit":
            if not (skill_md or "").strip():
                raise EditRefused(["an edit needs the corrected SKILL.md"])
            edit_skill(
                engine, skill_id, str(skill_md), editor=reviewer, config=config, reason=reason or None,
                expected_revision=revision, flow_run_id=flow_run_id,
            )  # fmt: skip
        elif decision == "reject":
            reject_skill(engine, skill_id, reason or "rejected at review", actor=reviewer, flow_run_id=flow_run_id)
        else:
            log_review_event(engine, skill_id, "reviewed", reviewer, reason, flow_run_id, decision)
    except ActivationRefused as exc:
        applied, reasons = False, list(exc.reasons)
    except EditRefused as exc:
        applied, reasons = False, list(exc.reasons)
    except InvalidTransition as exc:
        applied, reasons = False, [str(exc)]
    with engine.connect() as conn:
        skill = get_skill(conn, skill_id)
        now = current_revision(conn, skill_id)
        moved = entered(conn, skill_id, skill.status) if applied and decision in TRANSITIONS else None
    return ReviewOutcome(
        skill_id=skill_id,
        decision=decision,
        applied=applied,
        status=skill.status,
        injection_role=skill.injection_role,
        reviewer=reviewer,
        reasons=reasons,
        revision=now,
        event_row=moved.id if moved is not None else None,
    )


def decision_of_run(
    engine: Engine, skill_id: str, flow_run_id: str | None, config: PromotionConfig | None = None
) -> ReviewOutcome | None:
    """The outcome of the decision this review flow run already applied to the skill (None: it applied none).

    Read back from the lifecycle log, which the decision wrote in its own transaction (``details.review``: an
    activation, a rejection, kept in shadow, or the review's timeout; an edit is not a decision, the review goes
    on). A retry of a run killed after that commit returns it instead of asking the reviewer again, and the flow
    emits its event again (docs/RELIABILITY.md). For an activation or a rejection the tenant's applicability rule
    is refit when it no longer matches the live skills (``refresh_rule``, a no-op when it does): the decision
    refits after its commit, so a run killed in between left the stale rule, which injects none of the tenant's
    skills, and a retry that only read the decision back never refit it.
    """
    if not flow_run_id:
        return None
    ev = skill_events.c
    with engine.connect() as conn:
        rows = conn.execute(
            select(ev.id, ev.event, ev.actor, ev.details)
            .where(ev.skill_id == skill_id, ev.flow_run_id == flow_run_id)
            .order_by(ev.created_at.desc(), ev.id.desc())
        ).all()
        decided = next((r for r in rows if isinstance(r.details, dict) and r.details.get("review")), None)
        if decided is None:
            return None
        skill = get_skill(conn, skill_id)
        revision = current_revision(conn, skill_id)
    timed_out = decided.event == "review_timeout"
    decision = str(decided.details.get("decision") or decided.event)
    if decision in TRANSITIONS:
        refresh_rule(engine, skill.agent_id, skill.user_id, config=config)  # never raises
    return ReviewOutcome(
        skill_id=skill_id,
        decision=decision,
        applied=not timed_out,
        status=skill.status,
        injection_role=skill.injection_role,
        reviewer="" if timed_out else str(decided.actor),
        reasons=["review timed out"] if timed_out else [],
        revision=revision,
        event_row=str(decided.id) if decision in TRANSITIONS else None,  # as apply_review_decision reports it
    )


def log_review_event(
    engine: Engine,
    skill_id: str,
    event: str,
    actor: str,
    reason: str,
    flow_run_id: str | None,
    decision: str,
    only_in: SkillStatus | None = None,
) -> bool:
    """An audit row for a review that changed nothing (kept in shadow, or timed out); with ``only_in``, only while
    the skill has that status (a review's timeout on a skill decided elsewhere meanwhile writes nothing). Returns
    whether the row was written."""
    with engine.begin() as conn:
        skill = get_skill(conn, skill_id)
        if only_in is not None and skill.status != only_in.value:
            return False
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
    return True


def render_markdown(ev: ReviewEvidence) -> str:
    """The review page: SKILL.md plus its evidence (figures and ids; no raw runs or queries)."""
    ready = ev.readiness
    fence = _fence(ev.content)
    lines = [
        f"# Review: {ev.name} v{ev.version}, revision {ev.revision} ({ev.status}, {ev.injection_role} authority)",
        "",
        f"- skill id: `{ev.skill_id}`; tenant: {_inline(ev.agent_id)} / {_inline(ev.user_id)}",
        f"- trajectory class: `{ev.canonical_hash[:12]}`",
        f"- tools: {', '.join(map(_inline, ev.tools)) or '—'}"
        + (f" — **no longer registered: {', '.join(map(_inline, ev.missing_tools))}**" if ev.missing_tools else ""),
        f"- readiness (advisory): {'ready' if ready.get('ready') else 'not ready'}; "
        f"observations {ready.get('observations')}, trajectory match {ready.get('trajectory_match_rate', 0):.2f}, "
        f"matched success {ready.get('matched_success_rate', 0):.2f}",
    ]
    lines += [f"  - {_inline(r)}" for r in ready.get("reasons", [])]
    if ev.previous_demotion_reason:
        lines.append(f"- previous version demoted: {_inline(ev.previous_demotion_reason)}")
    if ev.chart_png_base64:
        lines += ["", f"![evidence chart of {ev.name}](data:image/png;base64,{ev.chart_png_base64})"]
    lines += [
        "",
        "Decide with the resume form: activate_user, activate_developer (requires require_shadow and shadow"
        " review), reject (give a reason), keep_shadow, or edit (paste the corrected SKILL.md: it is validated"
        " like a distilled skill and the review starts over on the new revision). Readiness is observational,"
        " not causal.",
        "",
        "## SKILL.md",
        "",
        fence + "markdown",
        ev.content,
        fence,
    ]
    return "\n".join(lines)


def _fence(content: str) -> str:
    """A code fence ``content`` cannot close: longer than its longest run of backticks (at least four), so a
    skill's own fence line cannot end the block and make the rest of it read as the page's own text."""
    longest = max((len(run) for run in re.findall(r"`+", content)), default=0)
    return "`" * max(4, longest + 1)


def _inline(text: object) -> str:
    """A stored value (a tool name, a reason) inside one markdown line: whitespace collapsed (no line of its own)
    and markdown's punctuation escaped, so it reads as the text it is and not as the page's markup."""
    return re.sub(r"([\\`*_{}\[\]()<>#+\-.!|~])", r"\\\1", " ".join(str(text).split()))


def evidence_table(ev: ReviewEvidence) -> list[dict[str, Any]]:
    """One row per figure: source class stats, frozen baseline, validation checks."""
    rows: list[dict[str, Any]] = []
    rows += [{"section": "source class", "item": k, "value": str(v)} for k, v in ev.class_stats.items()]
    rows += [{"section": "baseline", "item": k, "value": str(v)} for k, v in ev.baseline.items()]
    checks = ev.validation.get("checks", ev.validation)
    if isinstance(checks, dict):
        rows += [{"section": "validation", "item": str(k), "value": str(v)} for k, v in checks.items()]
    return rows


def render_html(ev: ReviewEvidence) -> str:
    """``skillflow show ID --html``: the review page as one self-contained HTML file (chart embedded)."""
    e = html.escape
    cells = ("section", "item", "value")
    rows = "".join("<tr>" + "".join(f"<td>{e(r[c])}</td>" for c in cells) + "</tr>" for r in evidence_table(ev))
    ready = ev.readiness
    chart = (
        f'<img alt="evidence chart" src="data:image/png;base64,{ev.chart_png_base64}">' if ev.chart_png_base64 else ""
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{e(ev.name)} v{ev.version}.{ev.revision}</title>"
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}pre{background:#f4f4f4;padding:1em;"
        "white-space:pre-wrap}td{border-bottom:1px solid #ddd;padding:2px 8px}</style></head><body>"
        f"<h1>{e(ev.name)} v{ev.version}, revision {ev.revision}</h1>"
        f"<p>{e(ev.status)}, {e(ev.injection_role)} authority; skill <code>{e(ev.skill_id)}</code>; tenant "
        f"<code>{e(ev.agent_id)}</code> / <code>{e(ev.user_id)}</code>; "
        f"class <code>{e(ev.canonical_hash[:12])}</code></p>"
        f"<p>readiness (advisory): {'ready' if ready.get('ready') else 'not ready'}, observations "
        f"{e(str(ready.get('observations')))}</p>{chart}"
        f"<h2>Evidence</h2><table>{rows}</table><h2>SKILL.md</h2><pre>{e(ev.content)}</pre></body></html>\n"
    )
