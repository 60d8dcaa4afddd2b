"""The set-based statements that build and fold the maintained class statistics (SQLite and PostgreSQL).

Each function returns one statement; :mod:`skillflow.storage.class_stats` runs them in one transaction. The
figures follow :func:`skillflow.storage.aggregate.aggregate_query` exactly: only runs created after the class's
newest ``demoted_at`` (``since``) count, outcomes split three ways, distinct non-NULL query fingerprints.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Delete, Insert, and_, case, delete, func, literal, or_, select, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql import Select, Subquery

from skillflow.kernel.models import SkillStatus, WorkflowOutcome
from skillflow.storage.schema import class_fingerprints, class_stats, skillbox, workflow_memory

wm, cs, cf = workflow_memory, class_stats, class_fingerprints
RESET_STATUSES = (SkillStatus.DEMOTED.value, SkillStatus.DEPRECATED.value)
Key = tuple[str, str, str]
COUNTS = ("successes", "failures", "unknown", "stamped")


def tenant(table: Any, agent_id: str | None, user_id: str | None) -> list[ColumnElement[bool]]:
    """Optional (agent_id, user_id) scope of ``table``."""
    out: list[ColumnElement[bool]] = []
    if agent_id is not None:
        out.append(table.c.agent_id == agent_id)
    if user_id is not None:
        out.append(table.c.user_id == user_id)
    return out


def demoted(agent_id: str | None = None, user_id: str | None = None) -> Subquery:
    """Per class, the newest ``demoted_at`` of its demoted/deprecated skills (the current ``since``)."""
    return (
        select(
            skillbox.c.agent_id,
            skillbox.c.user_id,
            skillbox.c.canonical_hash,
            func.max(skillbox.c.demoted_at).label("since"),
        )
        .where(
            skillbox.c.status.in_(RESET_STATUSES),
            skillbox.c.demoted_at.is_not(None),
            *tenant(skillbox, agent_id, user_id),
        )
        .group_by(skillbox.c.agent_id, skillbox.c.user_id, skillbox.c.canonical_hash)
        .subquery("demoted")
    )


def same_class(a: Any, b: Any) -> ColumnElement[bool]:
    return and_(a.c.agent_id == b.c.agent_id, a.c.user_id == b.c.user_id, a.c.canonical_hash == b.c.canonical_hash)


def _counts(after: ColumnElement[bool]) -> list[Any]:
    def n(cond: ColumnElement[bool]) -> Any:
        return func.coalesce(func.sum(case((and_(after, cond), 1), else_=0)), 0)

    return [
        n(wm.c.outcome == WorkflowOutcome.SUCCESS.value).label("successes"),
        n(wm.c.outcome == WorkflowOutcome.FAILURE.value).label("failures"),
        n(wm.c.outcome == WorkflowOutcome.UNKNOWN.value).label("unknown"),
        n(wm.c.promoted_skill_id.is_not(None)).label("stamped"),
        func.min(case((after, wm.c.created_at))).label("first_seen"),
        func.max(case((after, wm.c.created_at))).label("last_seen"),
        func.max(wm.c.created_at).label("newest_at"),
        # Every run of a class carries the same tool sequence (both derive from the signature the hash names).
        func.max(wm.c.tool_sequence).label("tool_sequence"),
    ]


def recount_select(
    now: datetime, agent_id: str | None = None, user_id: str | None = None, keys: Sequence[Key] | None = None
) -> Select[Any]:
    """Every class in scope (or just ``keys``) aggregated from all its runs: one row per class, also for a class
    whose runs all predate its demotion (zero counts), so a later change of ``since`` is noticed."""
    d = demoted(agent_id, user_id)
    after = or_(d.c.since.is_(None), wm.c.created_at > d.c.since)
    q = (
        select(
            wm.c.agent_id,
            wm.c.user_id,
            wm.c.canonical_hash,
            *_counts(after),
            func.count(func.distinct(case((after, wm.c.query_fingerprint)))).label("distinct_queries"),
            func.max(d.c.since).label("since"),
            literal(0).label("stale"),
            literal(now, cs.c.updated_at.type).label("updated_at"),
        )
        .select_from(wm.outerjoin(d, same_class(d, wm)))
        .where(wm.c.canonical_hash.is_not(None), *tenant(wm, agent_id, user_id))
        .group_by(wm.c.agent_id, wm.c.user_id, wm.c.canonical_hash)
    )
    if keys is not None:
        q = q.where(tuple_(wm.c.agent_id, wm.c.user_id, wm.c.canonical_hash).in_(list(keys)))
    return q


STAT_COLUMNS = (
    "agent_id",
    "user_id",
    "canonical_hash",
    *COUNTS,
    "first_seen",
    "last_seen",
    "newest_at",
    "tool_sequence",
    "distinct_queries",
    "since",
    "stale",
    "updated_at",
)


def insert_stats(select_: Select[Any]) -> Insert:
    return cs.insert().from_select(list(STAT_COLUMNS), select_)


def fingerprints_select(
    agent_id: str | None = None,
    user_id: str | None = None,
    keys: Sequence[Key] | None = None,
    pending: bool = False,
) -> Select[Any]:
    """Per (class, query fingerprint): the newest run (all runs, before or after ``since``)."""
    q = (
        select(
            wm.c.agent_id,
            wm.c.user_id,
            wm.c.canonical_hash,
            wm.c.query_fingerprint,
            func.max(wm.c.created_at).label("last_seen"),
        )
        .where(wm.c.canonical_hash.is_not(None), wm.c.query_fingerprint.is_not(None), *tenant(wm, agent_id, user_id))
        .group_by(wm.c.agent_id, wm.c.user_id, wm.c.canonical_hash, wm.c.query_fingerprint)
    )
    if pending:
        q = q.where(wm.c.stats_pending.is_not(None))
    if keys is not None:
        q = q.where(tuple_(wm.c.agent_id, wm.c.user_id, wm.c.canonical_hash).in_(list(keys)))
    return q


FP_COLUMNS = ("agent_id", "user_id", "canonical_hash", "query_fingerprint", "last_seen")


def delete_classes(table: Any, agent_id: str | None, user_id: str | None, keys: Sequence[Key] | None) -> Delete:
    stmt = delete(table).where(*tenant(table, agent_id, user_id))
    if keys is not None:
        stmt = stmt.where(tuple_(table.c.agent_id, table.c.user_id, table.c.canonical_hash).in_(list(keys)))
    return stmt


def _dialect_insert(dialect: str) -> Any:
    if dialect == "postgresql":
        return postgresql.insert
    if dialect == "sqlite":
        return sqlite.insert
    raise NotImplementedError(f"class statistics fold on {dialect}: use the full aggregation (docs/guide/aggregate.md)")


def _least(a: Any, b: Any) -> Any:
    return case((a.is_(None), b), (b.is_(None), a), (b < a, b), else_=a)


def _greatest(a: Any, b: Any) -> Any:
    return case((a.is_(None), b), (b.is_(None), a), (b > a, b), else_=a)


def fold_delta(now: datetime, agent_id: str | None, user_id: str | None) -> Select[Any]:
    """The pending runs in scope, aggregated per class against the current ``since``; ``distinct_queries`` is the
    number of their fingerprints not yet counted (no class_fingerprints row newer than ``since``)."""
    d = demoted(agent_id, user_id)
    after = or_(d.c.since.is_(None), wm.c.created_at > d.c.since)
    counted = and_(cf.c.query_fingerprint.is_not(None), or_(d.c.since.is_(None), cf.c.last_seen > d.c.since))
    fresh = case((and_(after, wm.c.query_fingerprint.is_not(None), ~counted), wm.c.query_fingerprint))
    fp_join = and_(same_class(cf, wm), cf.c.query_fingerprint == wm.c.query_fingerprint)
    return (
        select(
            wm.c.agent_id,
            wm.c.user_id,
            wm.c.canonical_hash,
            *_counts(after),
            func.count(func.distinct(fresh)).label("distinct_queries"),
            func.max(d.c.since).label("since"),
            literal(0).label("stale"),
            literal(now, cs.c.updated_at.type).label("updated_at"),
        )
        .select_from(wm.outerjoin(d, same_class(d, wm)).outerjoin(cf, fp_join))
        .where(wm.c.stats_pending.is_not(None), wm.c.canonical_hash.is_not(None), *tenant(wm, agent_id, user_id))
        .group_by(wm.c.agent_id, wm.c.user_id, wm.c.canonical_hash)
    )


def fold_stats(dialect: str, now: datetime, agent_id: str | None, user_id: str | None) -> Any:
    """Upsert the delta into class_stats: counts add, first/last seen widen, the newest run's sequence wins.

    ``since`` keeps the stored value: a class whose ``since`` changed is recounted by the same fold.
    """
    ins = _dialect_insert(dialect)(cs).from_select(list(STAT_COLUMNS), fold_delta(now, agent_id, user_id))
    ex = ins.excluded
    newer = ex.newest_at >= cs.c.newest_at
    set_: dict[str, Any] = {name: cs.c[name] + ex[name] for name in (*COUNTS, "distinct_queries")}
    set_.update(
        first_seen=_least(cs.c.first_seen, ex.first_seen),
        last_seen=_greatest(cs.c.last_seen, ex.last_seen),
        newest_at=case((newer, ex.newest_at), else_=cs.c.newest_at),
        tool_sequence=case((newer, ex.tool_sequence), else_=cs.c.tool_sequence),
        updated_at=ex.updated_at,
    )
    return ins.on_conflict_do_update(index_elements=["agent_id", "user_id", "canonical_hash"], set_=set_)


def fold_fingerprints(dialect: str, agent_id: str | None, user_id: str | None) -> Any:
    ins = _dialect_insert(dialect)(cf).from_select(list(FP_COLUMNS), fingerprints_select(agent_id, user_id, None, True))
    return ins.on_conflict_do_update(
        index_elements=list(FP_COLUMNS[:4]), set_={"last_seen": _greatest(cf.c.last_seen, ins.excluded.last_seen)}
    )


def clear_pending(agent_id: str | None, user_id: str | None) -> Any:
    """Mark the pending runs in scope folded (the same snapshot the delta read)."""
    return (
        update(wm)
        .where(wm.c.stats_pending.is_not(None), *tenant(wm, agent_id, user_id))
        .values(stats_pending=None)
        .execution_options(synchronize_session=False)
    )


def outdated_keys(agent_id: str | None, user_id: str | None) -> Select[Any]:
    """Classes whose stored figures no longer hold: marked stale, or their ``since`` changed (a demotion, a
    deprecation, a deleted or re-activated retired skill)."""
    d = demoted(agent_id, user_id)
    return (
        select(cs.c.agent_id, cs.c.user_id, cs.c.canonical_hash)
        .select_from(cs.outerjoin(d, same_class(d, cs)))
        .where(outdated(d), *tenant(cs, agent_id, user_id))
    )


def outdated(d: Subquery) -> ColumnElement[bool]:
    """The stored row is marked stale, or its ``since`` differs from the current one in ``d``."""
    moved = or_(
        and_(cs.c.since.is_(None), d.c.since.is_not(None)),
        and_(cs.c.since.is_not(None), d.c.since.is_(None)),
        cs.c.since != d.c.since,
    )
    return or_(cs.c.stale == 1, moved)
