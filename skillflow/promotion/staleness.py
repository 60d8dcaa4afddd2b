"""Staleness sweep: an ACTIVE skill whose declared tools no longer all resolve, or that calls a tool the agent has
since declared a hand-off, is deprecated at once."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, select

from skillflow.injection.embeddings import Embedder
from skillflow.kernel.models import SkillStatus
from skillflow.promotion.gates import handoff_problem
from skillflow.promotion.refit import refresh_rule
from skillflow.storage.schema import agent_tools
from skillflow.storage.skills import declared_handoffs, list_skills, transition

log = logging.getLogger("skillflow.promotion.staleness")


@dataclass(frozen=True)
class SweepResult:
    """Skills deprecated (or that would be, in a dry run) with their reasons; ``note`` when the sweep was skipped."""

    deprecated: list[tuple[str, str]]
    note: str | None = None


def registered_tools(conn: Connection, agent_id: str) -> list[str]:
    """The agent's registered toolbox (sorted)."""
    q = select(agent_tools.c.tool_name).where(agent_tools.c.agent_id == agent_id).order_by(agent_tools.c.tool_name)
    return list(conn.execute(q).scalars())


def missing_tools(declared: list[str] | None, toolbox: set[str]) -> list[str]:
    return sorted({t for t in (declared or []) if t not in toolbox})


def sweep(
    engine: Engine,
    agent_id: str,
    user_id: str,
    *,
    actor: str,
    flow_run_id: str | None = None,
    dry_run: bool = False,
    embedder: Embedder | None = None,
    handoffs_allowed: bool = False,
) -> SweepResult:
    """Deprecate every ACTIVE skill of the partition that declares a tool missing from the toolbox
    (``tool removed: a, b``) or, unless ``handoffs_allowed`` (``promote_handoff_classes``), a tool the agent
    declared a hand-off (``hand-off: calls a declared hand-off tool (t)``; docs/guide/promotion.md, "Gates").

    An agent with no registered toolbox is not swept: an empty list cannot tell "every tool removed"
    from "never registered". Each deprecation is its own transaction and idempotent (``transition``); after
    them the tenant's applicability rule is refit for its remaining live skills (never raises).
    """
    with engine.connect() as conn:
        toolbox = set(registered_tools(conn, agent_id))
        handoffs = frozenset() if handoffs_allowed else declared_handoffs(conn, agent_id)
        active = list_skills(conn, agent_id, user_id, statuses=[SkillStatus.ACTIVE])
    if not toolbox:
        return SweepResult([], f"agent {agent_id} has no registered toolbox: staleness sweep skipped")
    found: list[tuple[str, str]] = []
    for skill in active:
        missing = missing_tools(skill.tools, toolbox)
        reason = "tool removed: " + ", ".join(missing) if missing else handoff_problem(skill.tools or [], handoffs)
        if reason is None:
            continue
        found.append((skill.id, reason))
        if dry_run:
            continue
        with engine.begin() as conn:
            transition(conn, skill.id, SkillStatus.DEPRECATED, actor=actor, reason=reason, flow_run_id=flow_run_id)
    if found and not dry_run:
        refresh_rule(engine, agent_id, user_id, embedder=embedder)
    log.info("staleness sweep: %d deprecated (dry_run=%s)", len(found), dry_run)
    return SweepResult(found)
