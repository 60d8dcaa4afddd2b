"""Set-based aggregation of trajectory classes per (agent_id, user_id) partition, and the cycle cadence.

Everything here is one SQL statement per call (``GROUP BY canonical_hash`` over the partition's index
range); no function reads a whole table into Python. After a demotion only runs created after the
class's newest ``demoted_at`` count, for every figure (upstream forgot this for distinct queries). The cycle's
listing and cadence read the maintained partition counters (:mod:`skillflow.storage.counters`) once a recount ran.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, case, func, insert, literal, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql import Select

from skillflow.kernel import canonical
from skillflow.kernel.models import ClassStats, EvidenceRun, SkillStatus, WorkflowOutcome, utcnow
from skillflow.storage.counters import listed_partitions, read_counters, recounted
from skillflow.storage.schema import partition_state, skillbox, workflow_memory

wm = workflow_memory
RESET_STATUSES = (SkillStatus.DEMOTED.value, SkillStatus.DEPRECATED.value)


def partitions(conn: Connection, agent_id: str | None = None, user_id: str | None = None) -> list[tuple[str, str]]:
    """(agent_id, user_id) tenants that have stored runs, optionally filtered, in order: read from the maintained
    counters (docs/guide/aggregate.md), or counted from ``workflow_memory`` before the first recount."""
    if recounted(conn):
        return listed_partitions(conn, agent_id, user_id)
    return partitions_reference(conn, agent_id, user_id)


def partitions_reference(
    conn: Connection, agent_id: str | None = None, user_id: str | None = None
) -> list[tuple[str, str]]:
    """Distinct tenants of ``workflow_memory`` (the reference; its cost grows with history)."""
    q = select(wm.c.agent_id, wm.c.user_id).distinct()
    if agent_id is not None:
        q = q.where(wm.c.agent_id == agent_id)
    if user_id is not None:
        q = q.where(wm.c.user_id == user_id)
    return [(r[0], r[1]) for r in conn.execute(q.order_by(wm.c.agent_id, wm.c.user_id))]


def _demoted_since(agent_id: str, user_id: str, canonical_hash: str | None) -> Any:
    """Per-class newest ``demoted_at`` of demoted/deprecated skills in the tenant (a subquery)."""
    q = select(skillbox.c.canonical_hash.label("canonical_hash"), func.max(skillbox.c.demoted_at).label("since")).where(
        skillbox.c.agent_id == agent_id,
        skillbox.c.user_id == user_id,
        skillbox.c.status.in_(RESET_STATUSES),
        skillbox.c.demoted_at.is_not(None),
    )
    if canonical_hash is not None:
        q = q.where(skillbox.c.canonical_hash == canonical_hash)
    return q.group_by(skillbox.c.canonical_hash).subquery("demoted")


def _count(outcome: WorkflowOutcome) -> Any:
    return func.sum(case((wm.c.outcome == outcome.value, 1), else_=0))


def aggregate_query(agent_id: str, user_id: str, canonical_hash: str | None = None) -> Select[Any]:
    """The aggregation statement (exposed so tests can inspect its query plan).

    The grouped part reads only (agent_id, user_id, canonical_hash, created_at, outcome,
    query_fingerprint, promoted_skill_id), so a covering index on those columns answers it without
    touching table rows; the tool sequence (identical for every run of a class) is one indexed lookup
    per class.
    """
    demoted = _demoted_since(agent_id, user_id, canonical_hash)
    grouped = (
        select(
            wm.c.canonical_hash.label("canonical_hash"),
            _count(WorkflowOutcome.SUCCESS).label("successes"),
            _count(WorkflowOutcome.FAILURE).label("failures"),
            _count(WorkflowOutcome.UNKNOWN).label("unknown"),
            # the requests the procedure served: a failed or unknown run's request is no evidence it generalises
            func.count(
                func.distinct(case((wm.c.outcome == WorkflowOutcome.SUCCESS.value, wm.c.query_fingerprint)))
            ).label("distinct_queries"),
            func.min(wm.c.created_at).label("first_seen"),
            func.max(wm.c.created_at).label("last_seen"),
            func.sum(case((wm.c.promoted_skill_id.is_not(None), 1), else_=0)).label("stamped"),
            func.max(demoted.c.since).label("since"),
        )
        .select_from(wm.outerjoin(demoted, demoted.c.canonical_hash == wm.c.canonical_hash))
        .where(
            wm.c.agent_id == agent_id,
            wm.c.user_id == user_id,
            wm.c.canonical_hash.is_not(None),
            or_(demoted.c.since.is_(None), wm.c.created_at > demoted.c.since),
        )
        .group_by(wm.c.canonical_hash)
    )
    if canonical_hash is not None:
        grouped = grouped.where(wm.c.canonical_hash == canonical_hash)
    g = grouped.subquery("classes")
    seq = wm.alias("seq")
    tool_seq = (
        select(seq.c.tool_sequence)
        .where(seq.c.agent_id == agent_id, seq.c.user_id == user_id, seq.c.canonical_hash == g.c.canonical_hash)
        .order_by(seq.c.created_at.desc())
        .limit(1)
        .scalar_subquery()
    )
    return select(g, tool_seq.label("tool_sequence"))


def _stats(agent_id: str, user_id: str, row: Mapping[str, Any]) -> ClassStats:
    successes, failures = int(row["successes"] or 0), int(row["failures"] or 0)
    executions = successes + failures
    return ClassStats(
        agent_id=agent_id,
        user_id=user_id,
        canonical_hash=row["canonical_hash"],
        executions=executions,
        successes=successes,
        failures=failures,
        unknown=int(row["unknown"] or 0),
        success_rate=successes / executions if executions else 0.0,
        distinct_queries=int(row["distinct_queries"] or 0),
        first_seen=row["first_seen"],
        last_seen=row["last_seen"],
        tool_sequence=row["tool_sequence"],
        since=row["since"],
        stamped=int(row["stamped"] or 0),
    )


def aggregate_classes(
    conn: Connection,
    agent_id: str,
    user_id: str,
    canonical_hash: str | None = None,
    now: datetime | None = None,
) -> list[ClassStats]:
    """Every trajectory class of one partition (or just ``canonical_hash``), aggregated in one statement.

    A class whose runs all predate its last demotion has no current evidence and is not returned.
    ``now`` is accepted for callers that pin the clock; figures never depend on it (recency is a gate).
    """
    del now  # recency is judged by the gates from ``last_seen``; kept for a stable call signature
    rows = conn.execute(aggregate_query(agent_id, user_id, canonical_hash)).mappings()
    stats = [_stats(agent_id, user_id, dict(r)) for r in rows]
    return sorted(stats, key=lambda s: (-s.executions, s.canonical_hash))


def _steps_list(raw: Any) -> list[dict[str, Any]]:
    """Stored steps as a list of step objects (legacy rows hold upstream's ``"Step N: tool"`` mapping)."""
    if isinstance(raw, list):
        return [dict(s) for s in raw if isinstance(s, Mapping)]
    if isinstance(raw, Mapping):
        try:
            steps = canonical.steps_from_document({"steps": raw})
        except ValueError:
            return []
        return [
            {
                "tool": s.tool,
                "arguments": s.arguments,
                "result": s.result,
                "error": s.error,
                "error_class": s.error_class,
                "timestamp": s.timestamp,
            }
            for s in steps
        ]
    return []


def _samples(
    conn: Connection, agent_id: str, user_id: str, chash: str, since: datetime | None, outcome: str, n: int
) -> list[EvidenceRun]:
    if n <= 0:
        return []
    q = select(wm.c.id, wm.c.query, wm.c.steps, wm.c.outcome, wm.c.created_at).where(
        wm.c.agent_id == agent_id, wm.c.user_id == user_id, wm.c.canonical_hash == chash, wm.c.outcome == outcome
    )
    if since is not None:
        q = q.where(wm.c.created_at > since)
    q = q.order_by(wm.c.created_at.desc(), wm.c.id.desc()).limit(n)
    return [EvidenceRun(r.id, r.query, _steps_list(r.steps), r.outcome, r.created_at) for r in conn.execute(q)]


def class_samples(
    conn: Connection,
    agent_id: str,
    user_id: str,
    canonical_hash: str,
    since: datetime | None,
    n_success: int,
    n_failure: int,
) -> tuple[list[EvidenceRun], list[EvidenceRun]]:
    """The newest ``n_success`` successful and ``n_failure`` failed runs of a class created after ``since``."""
    ok = _samples(conn, agent_id, user_id, canonical_hash, since, WorkflowOutcome.SUCCESS.value, n_success)
    bad = _samples(conn, agent_id, user_id, canonical_hash, since, WorkflowOutcome.FAILURE.value, n_failure)
    return ok, bad


def class_signature(conn: Connection, agent_id: str, user_id: str, canonical_hash: str) -> list[dict[str, Any]]:
    """The class's canonical signature (one stored row's; every row of a class shares it). ``[]`` if unknown."""
    row = conn.execute(
        select(wm.c.signature, wm.c.steps)
        .where(wm.c.agent_id == agent_id, wm.c.user_id == user_id, wm.c.canonical_hash == canonical_hash)
        .order_by(wm.c.created_at.desc())
        .limit(1)
    ).first()
    if row is None:
        return []
    if row.signature:
        return [dict(u) for u in row.signature]
    try:  # a legacy row hashed elsewhere without its signature: recompute it from the steps
        units = canonical.signature(canonical.steps_from_document({"steps": row.steps}))
    except ValueError:
        return []
    return [u.as_hashable() for u in units]


def _run_count(conn: Connection, agent_id: str, user_id: str) -> int:
    """The partition's stored runs: its counters (folded + pending) once a recount ran, else a COUNT."""
    if recounted(conn):
        return read_counters(conn, [(agent_id, user_id)])[(agent_id, user_id)].runs
    q = select(func.count()).select_from(wm).where(wm.c.agent_id == agent_id, wm.c.user_id == user_id)
    return int(conn.execute(q).scalar() or 0)


def runs_since_last_cycle(conn: Connection, agent_id: str, user_id: str) -> int:
    """Runs stored in the partition since the last cycle (all runs when no cycle ever ran; never negative)."""
    if recounted(conn):
        return read_counters(conn, [(agent_id, user_id)])[(agent_id, user_id)].runs_since
    seen = conn.execute(
        select(partition_state.c.runs_at_last_cycle).where(
            partition_state.c.agent_id == agent_id, partition_state.c.user_id == user_id
        )
    ).scalar()
    return max(0, _run_count(conn, agent_id, user_id) - int(seen or 0))


def cycle_count(conn: Connection, agent_id: str, user_id: str) -> int:
    """How many cycles have completed in the partition (0 before the first)."""
    value = conn.execute(
        select(partition_state.c.cycle_count).where(
            partition_state.c.agent_id == agent_id, partition_state.c.user_id == user_id
        )
    ).scalar()
    return int(value or 0)


def mark_cycle(
    conn: Connection, agent_id: str, user_id: str, now: datetime | None = None, cycle: int | None = None
) -> int:
    """Record a finished cycle: ``runs_at_last_cycle`` = the current run count (from the counters once a recount
    ran), ``cycle_count`` advanced.

    Idempotence: ``runs_at_last_cycle`` and ``last_cycle_at`` converge on a retry. Without ``cycle`` the
    counter is incremented, so a retry after a committed mark advances it once more (which only shortens
    a rejection backoff by one cycle). Pass ``cycle`` (the number this cycle read from
    :func:`cycle_count` plus one) to make the mark exactly idempotent: the counter becomes
    ``max(cycle_count, cycle)``. Portable upsert (UPDATE, else INSERT under a savepoint); returns the
    partition's cycle count after the mark.
    """
    now = now or utcnow()
    runs = _run_count(conn, agent_id, user_id)
    key = and_(partition_state.c.agent_id == agent_id, partition_state.c.user_id == user_id)
    if cycle is None:
        counter: Any = partition_state.c.cycle_count + 1
    else:
        counter = case((partition_state.c.cycle_count < cycle, literal(cycle)), else_=partition_state.c.cycle_count)
    values = {"cycle_count": counter, "runs_at_last_cycle": runs, "last_cycle_at": now}
    if not conn.execute(update(partition_state).where(key).values(**values)).rowcount:
        try:
            with conn.begin_nested():
                conn.execute(
                    insert(partition_state).values(
                        agent_id=agent_id,
                        user_id=user_id,
                        cycle_count=1 if cycle is None else cycle,
                        runs_at_last_cycle=runs,
                        last_cycle_at=now,
                    )
                )
        except IntegrityError:  # a concurrent first cycle inserted the row: apply ours on top
            conn.execute(update(partition_state).where(key).values(**values))
    return cycle_count(conn, agent_id, user_id)


def unhashed_runs(conn: Connection, agent_id: str, user_id: str, limit: int = 1000) -> int:
    """Legacy rows of the partition that have tool calls but no canonical hash (aggregation skips them).

    Capture hashes every run at write time and always sets ``query_fingerprint``; a row with neither was
    written by something else (an upstream store). Up to ``limit`` such rows are read and counted when
    their steps do yield an identity, so a legacy row without tool calls is not reported.
    """
    rows = conn.execute(
        select(wm.c.steps)
        .where(
            wm.c.agent_id == agent_id,
            wm.c.user_id == user_id,
            wm.c.canonical_hash.is_(None),
            wm.c.query_fingerprint.is_(None),
        )
        .limit(limit)
    ).scalars()
    n = 0
    for steps in rows:
        try:
            units = canonical.signature(canonical.steps_from_document({"steps": steps if steps is not None else []}))
        except ValueError:
            continue
        n += 1 if units else 0
    return n


def runs_since_rejection(conn: Connection, agent_id: str, user_id: str) -> dict[str, int]:
    """Per class whose newest version a reviewer rejected: runs of the class recorded after that rejection.

    The rejection time is the newest ``skill_events`` row into ``rejected`` of the class's skills; only
    classes whose newest skill is REJECTED count (a later version supersedes the rejection).
    """
    from skillflow.storage.schema import skill_events

    newest = (
        select(skillbox.c.canonical_hash.label("h"), func.max(skillbox.c.version).label("v"))
        .where(skillbox.c.agent_id == agent_id, skillbox.c.user_id == user_id)
        .group_by(skillbox.c.canonical_hash)
        .subquery("newest")
    )
    rejected = conn.execute(
        select(skillbox.c.canonical_hash, func.max(skill_events.c.created_at))
        .select_from(
            skillbox.join(skill_events, skill_events.c.skill_id == skillbox.c.id).join(
                newest, and_(newest.c.h == skillbox.c.canonical_hash, newest.c.v == skillbox.c.version)
            )
        )
        .where(
            skillbox.c.agent_id == agent_id,
            skillbox.c.user_id == user_id,
            skillbox.c.status == SkillStatus.REJECTED.value,
            skill_events.c.to_status == SkillStatus.REJECTED.value,
        )
        .group_by(skillbox.c.canonical_hash)
    ).all()
    out: dict[str, int] = {}
    for chash, at in rejected:
        q = select(func.count()).where(
            wm.c.agent_id == agent_id, wm.c.user_id == user_id, wm.c.canonical_hash == chash, wm.c.created_at > at
        )
        out[chash] = int(conn.execute(q).scalar() or 0)
    return out
