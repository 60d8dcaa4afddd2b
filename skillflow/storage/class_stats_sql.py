"""The set-based statements that build and fold the maintained class statistics and partition counters.

Each function returns one statement; :mod:`skillflow.storage.class_stats` runs them in one transaction. The
figures follow :func:`skillflow.storage.aggregate.aggregate_query` exactly: only runs created after the class's
newest ``demoted_at`` (``since``) count, outcomes split three ways, distinct non-NULL query fingerprints.
The upserts are ``INSERT … ON CONFLICT`` on SQLite and PostgreSQL and ``MERGE`` on Oracle
(:mod:`skillflow.storage.class_stats_oracle`). A scope is an optional agent, user and list of partitions. The
partition counters' statements live with their reads in :mod:`skillflow.storage.counters`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    ColumnElement,
    Delete,
    Insert,
    String,
    and_,
    any_,
    bindparam,
    case,
    cast,
    delete,
    func,
    literal,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import Select, Subquery
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.selectable import CTE

from skillflow.kernel.models import SkillStatus, WorkflowOutcome
from skillflow.storage import class_stats_oracle as ora
from skillflow.storage.schema import class_fingerprints, class_stats, partition_state, skillbox, workflow_memory

wm, cs, cf, ps = workflow_memory, class_stats, class_fingerprints, partition_state
RESET_STATUSES = (SkillStatus.DEMOTED.value, SkillStatus.DEPRECATED.value)
Key = tuple[str, str, str]
Partition = tuple[str, str]
COUNTS = ("successes", "failures", "unknown", "stamped")


def tenant(
    table: Any, agent_id: str | None, user_id: str | None, partitions: Sequence[Partition] | None = None
) -> list[ColumnElement[bool]]:
    """Optional (agent_id, user_id) scope of ``table``, optionally narrowed to a list of partitions."""
    out: list[ColumnElement[bool]] = []
    if agent_id is not None:
        out.append(table.c.agent_id == agent_id)
    if user_id is not None:
        out.append(table.c.user_id == user_id)
    if partitions is not None:
        out.extend(_listed(table, partitions))
    return out


def _listed(table: Any, partitions: Sequence[Partition]) -> list[ColumnElement[bool]]:
    """``(agent_id, user_id)`` among ``partitions`` as scalar ``IN`` lists, which every backend hashes or probes
    (PostgreSQL plans a row-value ``IN`` list as a chain of ORs, one per partition, on every row). The agent and
    user lists are exact when one of them has a single value; otherwise a length-prefixed key
    (``len(agent):agent user``, which splits back one way only) picks the listed pairs out of their product."""
    agents = sorted({a for a, _ in partitions})
    users = sorted({u for _, u in partitions})
    out: list[ColumnElement[bool]] = [AmongValues(table.c.agent_id, agents), AmongValues(table.c.user_id, users)]
    if len(agents) > 1 and len(users) > 1:
        key = cast(func.length(table.c.agent_id), String) + ":" + table.c.agent_id + table.c.user_id
        out.append(AmongValues(key, sorted({f"{len(a)}:{a}{u}" for a, u in partitions})))
    return out


class AmongValues(ColumnElement[bool]):
    """``expr IN (values)``; on PostgreSQL ``expr = ANY(:array)``, one array parameter instead of one bind
    parameter per value (a 1 000-partition chunk otherwise binds, converts and plans thousands of them)."""

    inherit_cache = False  # the values are the statement: compiled per use, like an expanding IN
    type = Boolean()

    def __init__(self, expr: ColumnElement[Any], values: Sequence[str]) -> None:
        self.expr, self.values = expr, list(values)


@compiles(AmongValues)
def _among_values(element: AmongValues, compiler: SQLCompiler, **kw: Any) -> str:
    return compiler.process(element.expr.in_(element.values), **kw)


@compiles(AmongValues, "postgresql")
def _among_values_pg(element: AmongValues, compiler: SQLCompiler, **kw: Any) -> str:
    array = bindparam(None, element.values, type_=postgresql.ARRAY(String))
    return compiler.process(element.expr == any_(array), **kw)


def demoted(
    agent_id: str | None = None, user_id: str | None = None, partitions: Sequence[Partition] | None = None
) -> Subquery:
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
            *tenant(skillbox, agent_id, user_id, partitions),
        )
        .group_by(skillbox.c.agent_id, skillbox.c.user_id, skillbox.c.canonical_hash)
        .subquery("demoted")
    )


def same_class(a: Any, b: Any) -> ColumnElement[bool]:
    return and_(a.c.agent_id == b.c.agent_id, a.c.user_id == b.c.user_id, a.c.canonical_hash == b.c.canonical_hash)


def succeeded(src: Any) -> ColumnElement[bool]:
    """The runs whose request counts toward ``distinct_queries``: the procedure served it (a failed or unknown run's
    request is not evidence that the procedure generalises; docs/guide/aggregate.md)."""
    return src.c.outcome == WorkflowOutcome.SUCCESS.value  # type: ignore[no-any-return]


def _counts(after: ColumnElement[bool], src: Any = wm) -> list[Any]:
    def n(cond: ColumnElement[bool]) -> Any:
        return func.coalesce(func.sum(case((and_(after, cond), 1), else_=0)), 0)

    return [
        n(src.c.outcome == WorkflowOutcome.SUCCESS.value).label("successes"),
        n(src.c.outcome == WorkflowOutcome.FAILURE.value).label("failures"),
        n(src.c.outcome == WorkflowOutcome.UNKNOWN.value).label("unknown"),
        n(src.c.promoted_skill_id.is_not(None)).label("stamped"),
        func.min(case((after, src.c.created_at))).label("first_seen"),
        func.max(case((after, src.c.created_at))).label("last_seen"),
        func.max(src.c.created_at).label("newest_at"),
        # Every run of a class carries the same tool sequence (both derive from the signature the hash names).
        func.max(src.c.tool_sequence).label("tool_sequence"),
    ]


def pending_runs() -> CTE:
    """The pending runs, filtered on ``stats_pending`` alone so every backend reads them off the pending-only
    index; SQLite materializes them first (its planner would otherwise walk a tenant index through history to
    group by tenant). Scope and grouping apply to these rows."""
    cols = ("id", "agent_id", "user_id", "canonical_hash", "query_fingerprint", "created_at", "outcome")
    return (
        select(*(wm.c[c] for c in cols), wm.c.promoted_skill_id, wm.c.tool_sequence)
        .where(wm.c.stats_pending.is_not(None))
        .cte("pending", nesting=True)
        .prefix_with("MATERIALIZED", dialect="sqlite")
    )


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
            func.count(func.distinct(case((and_(after, succeeded(wm)), wm.c.query_fingerprint)))).label(
                "distinct_queries"
            ),
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
    partitions: Sequence[Partition] | None = None,
) -> Select[Any]:
    """Per (class, query fingerprint): the newest successful run (before or after ``since``; only the pending ones
    with ``pending``)."""
    src: Any = pending_runs() if pending else wm
    q = (
        select(
            src.c.agent_id,
            src.c.user_id,
            src.c.canonical_hash,
            src.c.query_fingerprint,
            func.max(src.c.created_at).label("last_seen"),
        )
        .where(
            src.c.canonical_hash.is_not(None),
            src.c.query_fingerprint.is_not(None),
            succeeded(src),
            *tenant(src, agent_id, user_id, partitions),
        )
        .group_by(src.c.agent_id, src.c.user_id, src.c.canonical_hash, src.c.query_fingerprint)
    )
    if keys is not None:
        q = q.where(tuple_(src.c.agent_id, src.c.user_id, src.c.canonical_hash).in_(list(keys)))
    return q


FP_COLUMNS = ("agent_id", "user_id", "canonical_hash", "query_fingerprint", "last_seen")


def delete_classes(table: Any, agent_id: str | None, user_id: str | None, keys: Sequence[Key] | None) -> Delete:
    stmt = delete(table).where(*tenant(table, agent_id, user_id))
    if keys is not None:
        stmt = stmt.where(tuple_(table.c.agent_id, table.c.user_id, table.c.canonical_hash).in_(list(keys)))
    return stmt


def dialect_insert(dialect: str) -> Any:
    if dialect == "postgresql":
        return postgresql.insert
    if dialect == "sqlite":
        return sqlite.insert
    raise NotImplementedError(f"class statistics fold on {dialect}: no upsert form")


def _least(a: Any, b: Any) -> Any:
    return case((a.is_(None), b), (b.is_(None), a), (b < a, b), else_=a)


def _greatest(a: Any, b: Any) -> Any:
    return case((a.is_(None), b), (b.is_(None), a), (b > a, b), else_=a)


def fold_delta(
    now: datetime, agent_id: str | None, user_id: str | None, partitions: Sequence[Partition] | None = None
) -> Select[Any]:
    """The pending runs in scope, aggregated per class against the current ``since``; ``distinct_queries`` is the
    number of their successful runs' fingerprints not yet counted (no class_fingerprints row newer than
    ``since``)."""
    p = pending_runs()
    d = demoted(agent_id, user_id, partitions)
    after = or_(d.c.since.is_(None), p.c.created_at > d.c.since)
    counted = and_(cf.c.query_fingerprint.is_not(None), or_(d.c.since.is_(None), cf.c.last_seen > d.c.since))
    fresh = case((and_(after, succeeded(p), p.c.query_fingerprint.is_not(None), ~counted), p.c.query_fingerprint))
    fp_join = and_(same_class(cf, p), cf.c.query_fingerprint == p.c.query_fingerprint)
    return (
        select(
            p.c.agent_id,
            p.c.user_id,
            p.c.canonical_hash,
            *_counts(after, p),
            func.count(func.distinct(fresh)).label("distinct_queries"),
            func.max(d.c.since).label("since"),
            literal(0).label("stale"),
            literal(now, cs.c.updated_at.type).label("updated_at"),
        )
        .select_from(p.outerjoin(d, same_class(d, p)).outerjoin(cf, fp_join))
        .where(p.c.canonical_hash.is_not(None), *tenant(p, agent_id, user_id, partitions))
        .group_by(p.c.agent_id, p.c.user_id, p.c.canonical_hash)
    )


CLASS_KEY = ("agent_id", "user_id", "canonical_hash")


def fold_stats(
    dialect: str,
    now: datetime,
    agent_id: str | None,
    user_id: str | None,
    partitions: Sequence[Partition] | None = None,
) -> Any:
    """Upsert the delta into class_stats: counts add, first/last seen widen, the newest run's sequence wins.

    ``since`` keeps the stored value: a class whose ``since`` changed is recounted by the same fold.
    """
    delta = fold_delta(now, agent_id, user_id, partitions)
    if dialect == "oracle":
        return ora.merge_stats(delta, STAT_COLUMNS, CLASS_KEY, (*COUNTS, "distinct_queries"))
    ins = dialect_insert(dialect)(cs).from_select(list(STAT_COLUMNS), delta)
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
    return ins.on_conflict_do_update(index_elements=list(CLASS_KEY), set_=set_)


def fold_fingerprints(
    dialect: str, agent_id: str | None, user_id: str | None, partitions: Sequence[Partition] | None = None
) -> Any:
    """Upsert the pending runs' (class, fingerprint) pairs: the newest run of each wins."""
    source = fingerprints_select(agent_id, user_id, None, True, partitions)
    if dialect == "oracle":
        return ora.merge_fingerprints(source, FP_COLUMNS)
    ins = dialect_insert(dialect)(cf).from_select(list(FP_COLUMNS), source)
    return ins.on_conflict_do_update(
        index_elements=list(FP_COLUMNS[:4]), set_={"last_seen": _greatest(cf.c.last_seen, ins.excluded.last_seen)}
    )


def clear_pending(agent_id: str | None, user_id: str | None, partitions: Sequence[Partition] | None = None) -> Any:
    """Mark the pending runs in scope folded (the same snapshot the delta read); a scoped clear picks its rows
    from :func:`pending_runs`, so no backend walks a tenant's history to find them."""
    scope = tenant(wm, agent_id, user_id, partitions)
    if scope:
        p = pending_runs()
        scope = [wm.c.id.in_(select(p.c.id).where(*tenant(p, agent_id, user_id, partitions)).scalar_subquery())]
    return (
        update(wm)
        .where(wm.c.stats_pending.is_not(None), *scope)
        .values(stats_pending=None)
        .execution_options(synchronize_session=False)
    )


def outdated_keys(
    agent_id: str | None, user_id: str | None, partitions: Sequence[Partition] | None = None
) -> Select[Any]:
    """Classes whose stored figures no longer hold: marked stale, or their ``since`` changed (a demotion, a
    deprecation, a deleted or re-activated retired skill)."""
    return select(cs.c.agent_id, cs.c.user_id, cs.c.canonical_hash).where(
        outdated(), *tenant(cs, agent_id, user_id, partitions)
    )


NO_SINCE = datetime(1900, 1, 1, tzinfo=UTC)  # stands for "no since" in the comparison (no skill is that old)


def current_since() -> Any:
    """Per stored class, its current ``since``: a correlated lookup on ``ix_skillbox_class``, one index probe per
    class (a join to the grouped retired skills is planned as a nested loop when the estimates are off)."""
    sb = skillbox
    return (
        select(func.max(sb.c.demoted_at))
        .where(
            sb.c.agent_id == cs.c.agent_id,
            sb.c.user_id == cs.c.user_id,
            sb.c.canonical_hash == cs.c.canonical_hash,
            sb.c.status.in_(RESET_STATUSES),
            sb.c.demoted_at.is_not(None),
        )
        .scalar_subquery()
    )


def outdated() -> ColumnElement[bool]:
    """The stored row is marked stale, or its ``since`` differs from the current one (NULL-aware)."""
    none = literal(NO_SINCE, cs.c.since.type)
    return or_(cs.c.stale == 1, func.coalesce(cs.c.since, none) != func.coalesce(current_since(), none))
