"""Reviewer decisions: activate, reject, demote — each one transaction with its event and stamping.

Each decision then refits the tenant's applicability rule for the new live skills, outside its transaction
(:func:`skillflow.promotion.refit.refresh_rule`): an activated skill is injected at once.

Activation is the explicit approval boundary: no schedule calls :func:`activate_skill`. It re-checks
that every declared tool still resolves in the agent's registered toolbox, and grants developer
authority only when ``require_shadow`` is on and the skill actually went through SHADOW.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from sqlalchemy import Connection, Engine, select, update

from skillflow.injection.embeddings import Embedder
from skillflow.kernel.config import PromotionConfig, load_promotion_config
from skillflow.kernel.models import InjectionRole, SkillStatus, with_article
from skillflow.lifecycle.revisions import current_revision
from skillflow.promotion.gates import handoff_problem
from skillflow.promotion.refit import refresh_rule
from skillflow.storage.schema import agent_tools, skill_events
from skillflow.storage.skills import (
    InvalidTransition,
    SkillRecord,
    declared_handoffs,
    entered,
    get_skill,
    transition,
)

Role = Literal["user", "developer"]


class ActivationRefused(InvalidTransition):
    """The skill cannot be activated as asked; ``reasons`` say why."""

    def __init__(self, reasons: list[str]) -> None:
        super().__init__("; ".join(reasons))
        self.reasons = reasons


def missing_tools(conn: Connection, skill: SkillRecord) -> list[str]:
    """Declared tools of the skill that no longer resolve in its agent's registered toolbox."""
    declared = sorted(set(skill.tools or ()))
    if not declared:
        return []
    registered = set(
        conn.execute(
            select(agent_tools.c.tool_name).where(
                agent_tools.c.agent_id == skill.agent_id, agent_tools.c.tool_name.in_(declared)
            )
        ).scalars()
    )
    return [t for t in declared if t not in registered]


def tool_problems(conn: Connection, skill: SkillRecord, config: PromotionConfig) -> list[str]:
    """Why the skill's tools forbid it going live: a tool no longer registered (``tool removed: a, b``), or one
    the agent has declared a hand-off since the skill landed (docs/guide/promotion.md, "Gates")."""
    problems = []
    gone = missing_tools(conn, skill)
    if gone:
        problems.append("tool removed: " + ", ".join(gone))
    if not config.promote_handoff_classes:
        handing = handoff_problem(skill.tools or [], declared_handoffs(conn, skill.agent_id))
        problems += [handing] if handing else []
    return problems


def went_through_shadow(conn: Connection, skill_id: str) -> bool:
    """True when the event log shows the skill entered SHADOW (created as shadow or moved there)."""
    row = conn.execute(
        select(skill_events.c.id)
        .where(skill_events.c.skill_id == skill_id, skill_events.c.to_status == SkillStatus.SHADOW.value)
        .limit(1)
    ).first()
    return row is not None


def activation_problems(conn: Connection, skill: SkillRecord, role: Role, config: PromotionConfig) -> list[str]:
    """Every reason the activation must be refused (empty: allowed)."""
    problems: list[str] = []
    status = SkillStatus(skill.status)
    if status not in (SkillStatus.SHADOW, SkillStatus.CANDIDATE, SkillStatus.ACTIVE):
        problems.append(f"cannot activate {with_article(status.value)} skill")
    if role not in ("user", "developer"):
        problems.append(f"unknown role {role!r}")
    if role == "developer":
        if not config.require_shadow:
            problems.append("developer authority requires require_shadow=True")
        if not went_through_shadow(conn, skill.id):
            problems.append("developer authority requires the skill to have gone through shadow review")
    problems += tool_problems(conn, skill, config)
    return problems


def _mark(conn: Connection, skill_id: str, to_status: str, extra: Mapping[str, Any]) -> None:
    """Add reviewer details to the transition's event (the newest event into ``to_status``)."""
    row = entered(conn, skill_id, to_status)
    if row is not None:
        conn.execute(
            update(skill_events).where(skill_events.c.id == row.id).values(details={**(row.details or {}), **extra})
        )


def activate_skill(
    engine: Engine,
    skill_id: str,
    role: Role | None = None,
    *,
    actor: str,
    flow_run_id: str | None = None,
    config: PromotionConfig | None = None,
    reason: str | None = None,
    review: bool = True,
    revision: int | None = None,
    embedder: Embedder | None = None,
) -> SkillRecord:
    """SHADOW (or CANDIDATE) → ACTIVE with ``role`` (default: the skill's stored role), stamping the class.

    Raises :class:`ActivationRefused` with reasons; re-activating with the same role writes nothing (the refit
    still runs: it repairs a crash between an earlier commit and its refit). ``revision``
    is the revision the reviewer saw: when the skill was edited since, the activation is refused. After the
    commit the tenant's applicability rule is refit for the new live skills (``embedder``: default from the
    settings; a refit failure leaves the stale rule, which injects nothing, and never fails the activation).
    """
    config = config or load_promotion_config()
    with engine.begin() as conn:
        skill = get_skill(conn, skill_id)
        role = role or ("developer" if skill.injection_role == "developer" else "user")
        if skill.status == SkillStatus.ACTIVE.value and skill.injection_role == role:
            updated = skill  # asked again: nothing to write; the refit below repairs a crash after the commit
        else:
            problems = activation_problems(conn, skill, role, config)
            if revision is not None and (now := current_revision(conn, skill.id)) != revision:
                problems.append(f"revision {revision} was reviewed but the skill is at revision {now}: review it again")
            if skill.status == SkillStatus.ACTIVE.value and not problems:
                problems.append("already active; demote it and promote a new version to change its authority")
            if problems:
                raise ActivationRefused(problems)
            updated = transition(
                conn,
                skill_id,
                SkillStatus.ACTIVE,
                actor=actor,
                reason=reason,
                flow_run_id=flow_run_id,
                injection_role=InjectionRole(role),
                seen=skill,
            )
            if review:
                _mark(
                    conn,
                    skill_id,
                    SkillStatus.ACTIVE.value,
                    {"review": True, "decision": f"activate_{role}", "revision": current_revision(conn, skill_id)},
                )
    refresh_rule(engine, updated.agent_id, updated.user_id, embedder=embedder, config=config)
    return updated


def _retire(
    engine: Engine,
    skill_id: str,
    to_status: SkillStatus,
    allowed_from: tuple[SkillStatus, ...],
    reason: str,
    actor: str,
    flow_run_id: str | None,
    review: bool,
    decision: str,
    embedder: Embedder | None = None,
) -> SkillRecord:
    if not reason or not reason.strip():
        raise ValueError("a reason is required")
    with engine.begin() as conn:
        skill = get_skill(conn, skill_id)
        if skill.status == to_status.value:
            updated = skill  # asked again: nothing to write; the refit below repairs a crash after the commit
        elif SkillStatus(skill.status) not in allowed_from:
            raise InvalidTransition(f"cannot move {with_article(skill.status)} skill to {to_status.value}")
        else:
            updated = transition(
                conn, skill_id, to_status, actor=actor, reason=reason.strip(), flow_run_id=flow_run_id, seen=skill
            )
            if review:
                _mark(conn, skill_id, to_status.value, {"review": True, "decision": decision})
    refresh_rule(engine, updated.agent_id, updated.user_id, embedder=embedder)  # after the commit; never raises
    return updated


def reject_skill(
    engine: Engine,
    skill_id: str,
    reason: str,
    *,
    actor: str,
    flow_run_id: str | None = None,
    review: bool = True,
    embedder: Embedder | None = None,
) -> SkillRecord:
    """SHADOW/CANDIDATE → REJECTED with a reason (the class may be re-distilled later as a new version)."""
    allowed = (SkillStatus.SHADOW, SkillStatus.CANDIDATE)
    return _retire(
        engine, skill_id, SkillStatus.REJECTED, allowed, reason, actor, flow_run_id, review, "reject", embedder
    )


def demote_skill(
    engine: Engine,
    skill_id: str,
    reason: str,
    *,
    actor: str,
    flow_run_id: str | None = None,
    review: bool = True,
    embedder: Embedder | None = None,
) -> SkillRecord:
    """ACTIVE → DEMOTED with a reason; the class's stamps are released in the same transaction."""
    allowed = (SkillStatus.ACTIVE,)
    return _retire(
        engine, skill_id, SkillStatus.DEMOTED, allowed, reason, actor, flow_run_id, review, "demote", embedder
    )
