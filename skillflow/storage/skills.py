"""Skill lifecycle primitives: insert a version, transition status with stamping, the event log.

Stamping and un-stamping are single set-based UPDATEs in the caller's transaction, next to the status
change, so a crash can never leave a half-stamped class. Transitions are idempotent: asking for the
status a skill already has changes nothing and logs nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Row, RowMapping, and_, bindparam, delete, func, insert, or_, select, update
from sqlalchemy.sql.elements import ColumnElement

from skillflow.kernel.canonical import sequence_tools
from skillflow.kernel.models import LIVE_STATUSES, InjectionRole, SkillStatus, new_id, utcnow, with_article
from skillflow.storage.schema import agent_handoffs, agent_tools, skill_events, skillbox, workflow_memory

RETIRED_STATUSES = (SkillStatus.DEMOTED, SkillStatus.DEPRECATED, SkillStatus.REJECTED)
ALLOWED: dict[SkillStatus, set[SkillStatus]] = {
    SkillStatus.CANDIDATE: {SkillStatus.SHADOW, SkillStatus.ACTIVE, SkillStatus.REJECTED, SkillStatus.DEPRECATED},
    SkillStatus.SHADOW: {SkillStatus.ACTIVE, SkillStatus.REJECTED, SkillStatus.DEPRECATED},
    SkillStatus.ACTIVE: {SkillStatus.DEMOTED, SkillStatus.DEPRECATED},
    SkillStatus.DEMOTED: set(),
    SkillStatus.DEPRECATED: set(),
    SkillStatus.REJECTED: set(),
}


class SkillNotFound(LookupError):
    pass


class InvalidTransition(ValueError):
    pass


CHANGED = "the skill changed while this decision was made (another decision or an edit landed): read it again"


class NameTaken(InvalidTransition):
    """Another live skill of the tenant holds the name (``uq_skillbox_live_name_key``)."""

    def __init__(self, name: str, holder: SkillRecord) -> None:
        super().__init__(
            f"name {name} is used by live skill {holder.id} (v{holder.version}, {holder.status}) of the tenant; "
            "retire or rename that skill first"
        )
        self.name = name
        self.holder = holder


@dataclass(frozen=True)
class SkillRecord:
    id: str
    agent_id: str
    user_id: str
    canonical_hash: str
    version: int
    name: str
    description: str
    status: str
    injection_role: str
    content: str
    prompt_version: str
    distiller: str
    embedding_model: str | None
    demotion_reason: str | None
    preconditions: list[str] | None
    tools: list[str] | None
    trigger_queries: list[str] | None
    source_workflow_ids: list[str] | None
    baseline: dict[str, Any] | None
    stats: dict[str, Any] | None
    validation: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime
    activated_at: datetime | None
    demoted_at: datetime | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any] | RowMapping) -> SkillRecord:
        return cls(**{f.name: row[f.name] for f in fields(cls)})


def live_key(agent_id: str, user_id: str, canonical_hash: str) -> str:
    """One live (candidate/shadow/active) skill per class per tenant: a unique single column."""
    return hashlib.sha256(f"{agent_id}\x1f{user_id}\x1f{canonical_hash}".encode()).hexdigest()


def live_name_key(agent_id: str, user_id: str, name: str) -> str:
    """One live skill per name per tenant (``uq_skillbox_live_name_key``). Names compare exactly: every stored
    name passed the Agent Skills rule (lowercase letters, digits, hyphens), so case never tells two apart."""
    return hashlib.sha256(f"{agent_id}\x1f{user_id}\x1f{name}".encode()).hexdigest()


def live_keys(agent_id: str, user_id: str, canonical_hash: str, name: str, live: bool) -> dict[str, str | None]:
    """The two live keys of a skill row: both set while it is live, both NULL otherwise (one UPDATE sets both)."""
    if not live:
        return {"live_key": None, "live_name_key": None}
    return {
        "live_key": live_key(agent_id, user_id, canonical_hash),
        "live_name_key": live_name_key(agent_id, user_id, name),
    }


def name_holder(conn: Connection, agent_id: str, user_id: str, name: str) -> SkillRecord | None:
    """The live skill of the tenant named ``name``, if any."""
    q = select(skillbox).where(
        skillbox.c.live_name_key == live_name_key(agent_id, user_id, name), tenant_filter(skillbox, agent_id, user_id)
    )
    row = conn.execute(q).mappings().first()
    return SkillRecord.from_row(row) if row else None


def get_skill(conn: Connection, skill_id: str, agent_id: str | None = None, user_id: str | None = None) -> SkillRecord:
    q = select(skillbox).where(skillbox.c.id == skill_id)
    if agent_id is not None:
        q = q.where(skillbox.c.agent_id == agent_id)
    if user_id is not None:
        q = q.where(skillbox.c.user_id == user_id)
    row = conn.execute(q).mappings().first()
    if row is None:
        raise SkillNotFound(f"skill {skill_id} not found")
    return SkillRecord.from_row(row)


def list_skills(
    conn: Connection,
    agent_id: str | None = None,
    user_id: str | None = None,
    statuses: Iterable[SkillStatus | str] | None = None,
    canonical_hash: str | None = None,
) -> list[SkillRecord]:
    q = select(skillbox)
    if agent_id is not None:
        q = q.where(skillbox.c.agent_id == agent_id)
    if user_id is not None:
        q = q.where(skillbox.c.user_id == user_id)
    if statuses is not None:
        q = q.where(skillbox.c.status.in_([str(s) for s in statuses]))
    if canonical_hash is not None:
        q = q.where(skillbox.c.canonical_hash == canonical_hash)
    q = q.order_by(skillbox.c.agent_id, skillbox.c.user_id, skillbox.c.canonical_hash, skillbox.c.version)
    return [SkillRecord.from_row(r) for r in conn.execute(q).mappings()]


def live_skill_for_class(conn: Connection, agent_id: str, user_id: str, canonical_hash: str) -> SkillRecord | None:
    row = (
        conn.execute(
            select(skillbox).where(
                skillbox.c.live_key == live_key(agent_id, user_id, canonical_hash),
                tenant_filter(skillbox, agent_id, user_id),
            )
        )
        .mappings()
        .first()
    )
    return SkillRecord.from_row(row) if row else None


def last_retired(conn: Connection, agent_id: str, user_id: str, canonical_hash: str) -> SkillRecord | None:
    """The newest demoted/deprecated/rejected version of a class (its reason feeds re-distillation)."""
    row = (
        conn.execute(
            select(skillbox)
            .where(
                skillbox.c.agent_id == agent_id,
                skillbox.c.user_id == user_id,
                skillbox.c.canonical_hash == canonical_hash,
                skillbox.c.status.in_([s.value for s in RETIRED_STATUSES]),
            )
            .order_by(skillbox.c.version.desc())
            .limit(1)
        )
        .mappings()
        .first()
    )
    return SkillRecord.from_row(row) if row else None


def next_version(conn: Connection, agent_id: str, user_id: str, canonical_hash: str) -> int:
    current = conn.execute(
        select(func.max(skillbox.c.version)).where(
            skillbox.c.agent_id == agent_id, skillbox.c.user_id == user_id, skillbox.c.canonical_hash == canonical_hash
        )
    ).scalar()
    return int(current or 0) + 1


def entered(conn: Connection, skill_id: str, status: str) -> Row[Any, Any, Any, Any, Any] | None:
    """The newest lifecycle row that moved the skill into ``status`` (``id``, ``event``, ``details``, ``actor``,
    ``flow_run_id``), if any: the transition a decision made, which its reviewer details and its Prefect event's
    id hang on (docs/guide/ops.md)."""
    ev = skill_events.c
    return conn.execute(
        select(ev.id, ev.event, ev.details, ev.actor, ev.flow_run_id)
        .where(ev.skill_id == skill_id, ev.to_status == status)
        .order_by(ev.created_at.desc(), ev.id.desc())
        .limit(1)
    ).first()


def record_event(
    conn: Connection,
    skill: SkillRecord,
    event: str,
    *,
    actor: str,
    from_status: str | None = None,
    to_status: str | None = None,
    reason: str | None = None,
    flow_run_id: str | None = None,
    details: Mapping[str, Any] | None = None,
) -> str:
    event_id = new_id()
    conn.execute(
        insert(skill_events).values(
            id=event_id,
            skill_id=skill.id,
            agent_id=skill.agent_id,
            user_id=skill.user_id,
            event=event,
            from_status=from_status,
            to_status=to_status,
            actor=actor,
            reason=(reason or None) and reason[:1000],
            flow_run_id=flow_run_id,
            created_at=utcnow(),
            details=dict(details) if details else None,
        )
    )
    return event_id


def stamp_class(conn: Connection, skill: SkillRecord) -> int:
    """Stamp every run of the skill's class in its tenant (one set-based UPDATE)."""
    wm = workflow_memory.c
    tenant = (wm.agent_id == skill.agent_id) & (wm.user_id == skill.user_id)
    return _restamp(conn, skill, tenant & (wm.canonical_hash == skill.canonical_hash), skill.id)


def unstamp(conn: Connection, skill: SkillRecord) -> int:
    """Release the skill's runs back to workflow retrieval (one set-based UPDATE)."""
    wm = workflow_memory.c
    tenant = (wm.agent_id == skill.agent_id) & (wm.user_id == skill.user_id)
    return _restamp(conn, skill, tenant & (wm.promoted_skill_id == skill.id), None)


REPAIR_WINDOW = timedelta(hours=1)  # how far from a skill's activation a run may have been captured and not committed


def repair_stamps(conn: Connection, agent_id: str, user_id: str) -> int:
    """Stamp the runs of each ACTIVE skill's class left unstamped, and release the runs still stamped with a skill
    that is not ACTIVE; returns how many runs changed.

    A decision stamps or releases its class in one set-based UPDATE, which cannot see a run whose capture read
    the class's skill before the decision and committed after it (a concurrency audit: 7-15 of about 700 runs
    unstamped under an ACTIVE skill, 4-45 of 1 400 still hidden behind a DEMOTED one). The promotion cycle runs
    this for each partition, so such runs converge within one cycle (docs/RELIABILITY.md). Unstamped runs are
    looked for within :data:`REPAIR_WINDOW` of the activation only (a range of the class index: a run captured
    later read the ACTIVE skill and was stamped), so the cost does not grow with the class's history; released
    ones by the stamp index."""
    wm = workflow_memory.c
    tenant = (wm.agent_id == agent_id) & (wm.user_id == user_id)
    live = list_skills(conn, agent_id, user_id, statuses=[SkillStatus.ACTIVE])
    gone = select(skillbox.c.id).where(
        skillbox.c.agent_id == agent_id,
        skillbox.c.user_id == user_id,
        skillbox.c.status != SkillStatus.ACTIVE.value,
    )
    from skillflow.storage.class_stats import mark_stale

    changed = 0
    behind = list(conn.execute(select(wm.canonical_hash).distinct().where(tenant, wm.promoted_skill_id.in_(gone))))
    if behind:
        mark_stale(conn, [(agent_id, user_id, h) for (h,) in behind if h is not None])  # first: see _restamp
        released = conn.execute(
            update(workflow_memory).where(tenant, wm.promoted_skill_id.in_(gone)).values(promoted_skill_id=None)
        )
        changed += int(released.rowcount or 0)
    for skill in live:
        at = skill.activated_at or skill.created_at
        unstamped = (
            tenant
            & (wm.canonical_hash == skill.canonical_hash)
            & (wm.created_at >= at - REPAIR_WINDOW)
            & (wm.created_at <= at + REPAIR_WINDOW)
            & or_(wm.promoted_skill_id.is_(None), wm.promoted_skill_id != skill.id)
        )
        if conn.execute(select(wm.id).where(unstamped).limit(1)).first() is not None:  # mark only what changes
            changed += _restamp(conn, skill, unstamped, skill.id)
    return changed


def _restamp(conn: Connection, skill: SkillRecord, runs: ColumnElement[bool], skill_id: str | None) -> int:
    """Set the stamp of ``runs`` of the skill's class to ``skill_id``; returns how many runs changed.

    Runs already folded into class_stats change their stamp, so the class is marked for a recount by the next
    fold, and marked **first**: a fold writes the class's class_stats row before its runs, and a stamp that wrote
    them the other way round deadlocked with it (docs/RELIABILITY.md). A class whose runs did not change is
    recounted for nothing, which a decision can afford.
    """
    from skillflow.storage.class_stats import mark_stale

    mark_stale(conn, [(skill.agent_id, skill.user_id, skill.canonical_hash)])
    return int(conn.execute(update(workflow_memory).where(runs).values(promoted_skill_id=skill_id)).rowcount or 0)


def insert_skill(
    conn: Connection,
    *,
    agent_id: str,
    user_id: str,
    canonical_hash: str,
    name: str,
    description: str,
    content: str,
    status: SkillStatus,
    injection_role: InjectionRole = InjectionRole.USER,
    version: int | None = None,
    skill_id: str | None = None,
    preconditions: list[str] | None = None,
    tools: list[str] | None = None,
    trigger_queries: list[str] | None = None,
    source_workflow_ids: list[str] | None = None,
    baseline: Mapping[str, Any] | None = None,
    validation: Mapping[str, Any] | None = None,
    prompt_version: str = "v1",
    distiller: str = "offline",
    embedding_model: str | None = None,
    actor: str = "system",
    flow_run_id: str | None = None,
) -> SkillRecord:
    """Insert a new skill version. A second live skill for the class violates ``uq_skillbox_live_key``, a second
    live skill of the tenant with the same name ``uq_skillbox_live_name_key``.

    An ACTIVE insert stamps the class in the same transaction.
    """
    if injection_role == InjectionRole.DEVELOPER and status == SkillStatus.ACTIVE:
        raise InvalidTransition("developer authority needs shadow review and an explicit activation")
    now = utcnow()
    sid = skill_id or new_id()
    live = status in LIVE_STATUSES
    conn.execute(
        insert(skillbox).values(
            id=sid,
            agent_id=agent_id,
            user_id=user_id,
            canonical_hash=canonical_hash,
            version=version if version is not None else next_version(conn, agent_id, user_id, canonical_hash),
            name=name,
            description=description,
            status=status.value,
            **live_keys(agent_id, user_id, canonical_hash, name, live),
            content=content,
            prompt_version=prompt_version,
            distiller=distiller,
            embedding_model=embedding_model,
            preconditions=preconditions,
            tools=tools,
            trigger_queries=trigger_queries,
            source_workflow_ids=source_workflow_ids,
            baseline=dict(baseline) if baseline else None,
            stats={},
            validation=dict(validation) if validation else None,
            injection_role=injection_role.value,
            created_at=now,
            updated_at=now,
            activated_at=now if status == SkillStatus.ACTIVE else None,
        )
    )
    skill = get_skill(conn, sid)
    record_event(conn, skill, "created", actor=actor, to_status=status.value, flow_run_id=flow_run_id)
    if status == SkillStatus.ACTIVE:
        stamp_class(conn, skill)
    return skill


def transition(
    conn: Connection,
    skill_id: str,
    to_status: SkillStatus,
    *,
    actor: str,
    reason: str | None = None,
    flow_run_id: str | None = None,
    injection_role: InjectionRole | None = None,
    agent_id: str | None = None,
    user_id: str | None = None,
    seen: SkillRecord | None = None,
) -> SkillRecord:
    """Move a skill to ``to_status`` with its stamping consequence and an event, in the caller's transaction.

    Entering ACTIVE stamps the class; leaving ACTIVE releases the stamps. Re-asking for the current
    status is a no-op (idempotent retries). The move is a compare-and-set on the row's status and
    ``updated_at``: a decision, edit or demotion committed since ``seen`` (the record the caller's checks
    read) or since this read refuses it (:class:`InvalidTransition`), so of two decisions made at once
    exactly one applies (docs/guide/lifecycle.md).
    """
    skill = get_skill(conn, skill_id, agent_id, user_id)
    if seen is not None and (seen.status, seen.updated_at) != (skill.status, skill.updated_at):
        raise InvalidTransition(CHANGED)
    current = SkillStatus(skill.status)
    if current == to_status and (injection_role is None or injection_role.value == skill.injection_role):
        return skill
    if to_status not in ALLOWED[current]:
        raise InvalidTransition(f"cannot move {with_article(current.value)} skill to {to_status.value}")
    if to_status in LIVE_STATUSES:  # a legacy duplicate (NULL key) may not go live under a taken name
        holder = name_holder(conn, skill.agent_id, skill.user_id, skill.name)
        if holder is not None and holder.id != skill.id:
            raise NameTaken(skill.name, holder)
    now = utcnow()
    values: dict[str, Any] = {
        "status": to_status.value,
        "updated_at": now,
        **live_keys(skill.agent_id, skill.user_id, skill.canonical_hash, skill.name, to_status in LIVE_STATUSES),
    }
    if injection_role is not None:
        values["injection_role"] = injection_role.value
    if to_status == SkillStatus.ACTIVE:
        values["activated_at"] = now
    if to_status in RETIRED_STATUSES:
        values["demoted_at"] = now
        values["demotion_reason"] = reason
    moved = conn.execute(
        update(skillbox)
        .where(
            skillbox.c.id == skill.id,
            skillbox.c.status == skill.status,
            skillbox.c.updated_at == skill.updated_at,
        )
        .values(**values)
    ).rowcount
    if moved != 1:
        raise InvalidTransition(CHANGED)
    if to_status == SkillStatus.ACTIVE:
        start_activation_stats(conn, skill.id)
    updated = get_skill(conn, skill.id)
    changed = 0
    if to_status == SkillStatus.ACTIVE:
        changed = stamp_class(conn, updated)
    elif current == SkillStatus.ACTIVE:
        changed = unstamp(conn, updated)
    record_event(
        conn,
        updated,
        to_status.value if to_status != SkillStatus.ACTIVE else "activated",
        actor=actor,
        from_status=current.value,
        to_status=to_status.value,
        reason=reason,
        flow_run_id=flow_run_id,
        details={
            "stamped" if to_status == SkillStatus.ACTIVE else "unstamped": changed,
            "role": updated.injection_role,
        },
    )
    return updated


def update_stats(conn: Connection, skill_id: str, patch: Mapping[str, Any]) -> None:
    """Merge ``patch`` into ``skillbox.stats`` (derived figures; recomputed by the flows).

    ``updated_at`` stays: it is what a decision compares (:func:`transition`) and what versions the runtime's
    cached skill vectors, and neither depends on these figures; bumping it made every drift check and shadow drain
    refuse a reviewer's decision made meanwhile (docs/RELIABILITY.md)."""
    current = conn.execute(select(skillbox.c.stats).where(skillbox.c.id == skill_id)).scalar() or {}
    conn.execute(update(skillbox).where(skillbox.c.id == skill_id).values(stats={**current, **patch}))


def start_activation_stats(conn: Connection, skill_id: str) -> None:
    """Drop ``stats["active"]`` as the skill (re-)enters ACTIVE: a new activation starts with empty activation
    stats, as drift's counters do (they count from ``activated_at``). A rolled-back version kept the figures of its
    earlier activation, and ``skillflow skills`` showed them as the current one's (docs/guide/lifecycle.md,
    "Rollback"). Called after the compare-and-set that moved the row, in its transaction (the row is then held), so
    a derived-figure write made meanwhile is kept; ``updated_at`` stays, as in :func:`update_stats`."""
    current = conn.execute(select(skillbox.c.stats).where(skillbox.c.id == skill_id)).scalar() or {}
    if "active" in current:
        kept = {k: v for k, v in current.items() if k != "active"}
        conn.execute(update(skillbox).where(skillbox.c.id == skill_id).values(stats=kept))


def tenant_filter(table: Any, agent_id: str, user_id: str) -> Any:
    return and_(table.c.agent_id == agent_id, table.c.user_id == user_id)


def replace_tools(conn: Connection, agent_id: str, rows: list[dict[str, Any]]) -> None:
    """Make ``rows`` the agent's registered tools: the others deleted, the kept ones updated, the new inserted.

    Only a tool another transaction inserted since this one's read can collide (``IntegrityError``); written
    again, the registration finds that row and updates it, so concurrent registrations of one toolbox converge
    (deleting every row and inserting them all collided again at each attempt)."""
    names = [r["tool_name"] for r in rows]
    conn.execute(delete(agent_tools).where(agent_tools.c.agent_id == agent_id, agent_tools.c.tool_name.not_in(names)))
    have = set(conn.execute(select(agent_tools.c.tool_name).where(agent_tools.c.agent_id == agent_id)).scalars())
    kept = [{**r, "b_agent": r["agent_id"], "b_tool": r["tool_name"]} for r in rows if r["tool_name"] in have]
    if kept:
        stmt = update(agent_tools).where(
            agent_tools.c.agent_id == bindparam("b_agent"), agent_tools.c.tool_name == bindparam("b_tool")
        )
        conn.execute(stmt.values({c: bindparam(c) for c in ("registered_at", "changes_state", "hands_off")}), kept)
    new = [r for r in rows if r["tool_name"] not in have]
    if new:
        conn.execute(insert(agent_tools), new)
    _replace_handoffs(conn, agent_id, [r for r in rows if r.get("hands_off")])


def _replace_handoffs(conn: Connection, agent_id: str, rows: list[dict[str, Any]]) -> None:
    """Make ``rows`` (hands_off = 1) the agent's declared hand-offs in ``agent_handoffs`` (the same diff)."""
    h = agent_handoffs.c
    names = [r["tool_name"] for r in rows]
    conn.execute(delete(agent_handoffs).where(h.agent_id == agent_id, h.tool_name.not_in(names)))
    have = set(conn.execute(select(h.tool_name).where(h.agent_id == agent_id)).scalars())
    new = [
        {"agent_id": agent_id, "tool_name": r["tool_name"], "declared_at": r["registered_at"]}
        for r in rows
        if r["tool_name"] not in have
    ]
    if new:
        conn.execute(insert(agent_handoffs), new)


def declared_state_changes(conn: Connection, agent_id: str) -> dict[str, bool]:
    """Tool → changes state, for the agent's tools registered with a declared flag (the rest use the verb rule)."""
    q = select(agent_tools.c.tool_name, agent_tools.c.changes_state).where(
        agent_tools.c.agent_id == agent_id, agent_tools.c.changes_state.is_not(None)
    )
    return {str(name): bool(flag) for name, flag in conn.execute(q)}


def called_tools(conn: Connection, agent_id: str, user_id: str) -> set[str]:
    """Every tool the tenant's runs call, from their distinct tool sequences (aggregated in SQL: one row per
    class); with the agent's registered tools, what the read-only gate asks "does this tenant change state?" of
    (:func:`skillflow.promotion.gates.read_only_gated`)."""
    wm = workflow_memory.c
    q = select(wm.tool_sequence).where(wm.agent_id == agent_id, wm.user_id == user_id).distinct()
    return {t for (seq,) in conn.execute(q) for t in sequence_tools(seq)}


def declared_handoffs(conn: Connection, agent_id: str) -> frozenset[str]:
    """The agent's tools registered as hand-offs (``Skillflow.register_tools(hands_off=...)``): those
    ``agent_handoffs`` keeps, and any ``agent_tools`` marks (a row written before migration 015's backfill)."""
    kept = select(agent_handoffs.c.tool_name).where(agent_handoffs.c.agent_id == agent_id)
    marked = select(agent_tools.c.tool_name).where(agent_tools.c.agent_id == agent_id, agent_tools.c.hands_off == 1)
    return frozenset(str(name) for (name,) in conn.execute(kept.union(marked)))
