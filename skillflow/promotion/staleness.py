"""Staleness sweep: an ACTIVE skill whose declared tools no longer all resolve, or that calls a tool the agent has
since declared a hand-off, is deprecated at once."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, Row, select

from skillflow.injection.embeddings import Embedder
from skillflow.kernel.models import SkillStatus
from skillflow.promotion.gates import handoff_problem
from skillflow.promotion.refit import refresh_rule
from skillflow.storage.schema import agent_tools, skill_events, skillbox
from skillflow.storage.skills import SkillRecord, declared_handoffs, list_skills, transition

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


def deprecated_by_run(conn: Connection, agent_id: str, user_id: str, flow_run_id: str) -> list[Row[Any, Any, Any]]:
    """The partition's skills this flow run deprecated (``id``, ``demotion_reason``, ``canonical_hash``,
    ``version``): an earlier attempt of it, killed after a deprecation committed, that a retry (the same flow-run
    id) reports and refits for again (docs/RELIABILITY.md). One statement: the partition's DEPRECATED skills
    joined to their lifecycle rows of this flow run (read by skill id), no skill's content read."""
    sb, ev = skillbox.c, skill_events.c
    q = (
        select(sb.id, sb.demotion_reason, sb.canonical_hash, sb.version)
        .join(skill_events, ev.skill_id == sb.id)
        .where(
            sb.agent_id == agent_id,
            sb.user_id == user_id,
            sb.status == SkillStatus.DEPRECATED.value,
            ev.event == SkillStatus.DEPRECATED.value,
            ev.flow_run_id == flow_run_id,
        )
        .distinct()
    )
    return list(conn.execute(q))


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
    them the tenant's applicability rule is refit for its remaining live skills (never raises). A retry of the
    same flow run reports the deprecations an earlier attempt committed and refits for them, as that attempt
    would have (:func:`deprecated_by_run`).
    """
    with engine.connect() as conn:
        toolbox = set(registered_tools(conn, agent_id))
        handoffs = frozenset() if handoffs_allowed else declared_handoffs(conn, agent_id)
        active = list_skills(conn, agent_id, user_id, statuses=[SkillStatus.ACTIVE])
        # A retry may find its own earlier deprecations; they keep their place in the listing's order.
        earlier = deprecated_by_run(conn, agent_id, user_id, flow_run_id) if flow_run_id and not dry_run else []
    if not toolbox:
        return SweepResult([], f"agent {agent_id} has no registered toolbox: staleness sweep skipped")
    entries: list[tuple[tuple[str, int], SkillRecord | Row[Any, Any, Any]]] = [
        *(((s.canonical_hash, s.version), s) for s in active),
        *(((e.canonical_hash, e.version), e) for e in earlier),
    ]
    found: list[tuple[str, str]] = []
    for _, skill in sorted(entries, key=lambda entry: entry[0]):
        if not isinstance(skill, SkillRecord):  # deprecated by this flow run's earlier attempt
            found.append((skill.id, skill.demotion_reason or ""))
            continue
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
