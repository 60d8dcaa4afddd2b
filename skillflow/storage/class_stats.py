"""Maintained per-class statistics: fold new runs in, recount from scratch, read one row per class.

Every run is stored with ``stats_pending = 1``; :func:`fold` aggregates the pending runs per class, adds them to
``class_stats`` (and their query fingerprints to ``class_fingerprints``) and clears the marks, in one transaction
that sees one snapshot, so a retry or a concurrent fold converges to the same rows. A run committed while a fold
runs stays pending for the next one; a backdated import is pending like any new run, whatever its created_at.
A class whose ``since`` (newest demotion) changed, or that a write path marked stale (stamping, backfill,
:func:`delete_runs`), is recounted from its runs by the same fold. The fold also adds each partition's folded
runs (hashed or not) to ``partition_state.runs_folded``, which the cycle's listing and cadence read
(:mod:`skillflow.storage.counters`). :func:`recount` rebuilds everything; the full aggregation
(:func:`skillflow.storage.aggregate.aggregate_classes`) stays the reference (docs/guide/aggregate.md).
"""

from __future__ import annotations

import gc
import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, String, and_, delete, func, insert, or_, select, tuple_, type_coerce, update
from sqlalchemy.exc import DBAPIError, IntegrityError

from skillflow.kernel.models import ClassStats, utcnow
from skillflow.storage import class_stats_sql as q
from skillflow.storage.aggregate import aggregate_classes
from skillflow.storage.counters import fold_counters, read_counters, recounted, reset_counters
from skillflow.storage.schema import (
    class_fingerprints,
    class_stats,
    class_stats_state,
    partition_state,
    workflow_memory,
)

cs, cf, state = class_stats, class_fingerprints, class_stats_state
Key = q.Key
Partition = q.Partition
CHUNK = 200  # keys per recount statement (a bounded IN list)
RETRIES = 12  # about 12 s of backoff in all before a fold gives up (docs/guide/aggregate.md)
ANALYZE_AFTER = 100_000  # a fold of this many runs refreshes the planner's statistics (PostgreSQL)
T = TypeVar("T")
log = logging.getLogger("skillflow.storage.class_stats")


def refresh_planner_stats(engine: Engine) -> bool:
    """``ANALYZE`` the tables a recount or a large fold rewrote (PostgreSQL only; True if it ran).

    A recount clears ``stats_pending`` on every run. Until the table is analyzed again, PostgreSQL plans the
    pending-runs reads of every cycle (the partition listing, each chunk's fold) from statistics that still
    count the runs as pending, and scans the whole history instead of the pending-only index — 0.6 s at 1M rows
    warm, 5.5 s cold, on every listing (docs/BENCHMARKS.md, "Scale"). Autovacuum would analyze it eventually
    where it is on; this does it at once. PostgreSQL skips a table the role does not own (a server warning); a
    failed ``ANALYZE`` is logged and changes nothing else. SQLite and Oracle plan these reads from the index
    without it.
    """
    if engine.dialect.name != "postgresql":
        return False
    try:
        with engine.begin() as conn:
            for table in (workflow_memory, class_stats, class_fingerprints, partition_state):
                conn.exec_driver_sql(f"ANALYZE {conn.dialect.identifier_preparer.format_table(table)}")
    except DBAPIError as exc:
        log.warning("ANALYZE after the recount failed: %s", type(exc).__name__)
        return False
    return True


def _retryable(exc: BaseException) -> bool:
    """A serialization failure or deadlock (PostgreSQL 40001/40P01, Oracle ORA-08177), a key another fold inserted
    first, or SQLite's stale snapshot: the fold saw a concurrent one and simply runs again."""
    if isinstance(exc, IntegrityError):
        return True
    code = getattr(getattr(exc, "orig", None), "sqlstate", None)
    return code in ("40001", "40P01") or "database is locked" in str(exc) or "ORA-08177" in str(exc)


def _in_snapshot(engine: Engine, work: Callable[[Connection], T]) -> T:
    """Run ``work`` in one transaction that sees one snapshot (REPEATABLE READ on PostgreSQL; SQLite holds the
    write lock from the first statement; SERIALIZABLE on Oracle), retrying when a concurrent fold made it fail."""
    isolation = {"postgresql": "REPEATABLE READ", "oracle": "SERIALIZABLE"}.get(engine.dialect.name)
    options: dict[str, Any] = {"isolation_level": isolation} if isolation else {}
    for attempt in range(RETRIES):
        try:
            with engine.connect().execution_options(**options) as conn, conn.begin():
                return work(conn)
        except DBAPIError as exc:
            if attempt == RETRIES - 1 or not _retryable(exc):
                raise
            # Exponential with jitter: the shadow drain and late outcomes write the same fresh rows as every fold
            # (their outbox flag, its pending mark), so under load a fold needs more than a few quick tries.
            time.sleep(min(2.0, 0.05 * 2**attempt) * (0.5 + random.random()))
    raise AssertionError("unreachable")  # pragma: no cover


def _touch_state(conn: Connection, now: datetime, folded: int | None, recounted: bool) -> bool:
    """Update the bookkeeping row first (on SQLite this takes the write lock); False if no recount ever ran."""
    values: dict[str, Any] = {"folded_at": now}
    if folded is not None:
        values["last_folded"] = folded
    if recounted:
        values["recounted_at"] = now
    return bool(conn.execute(update(state).where(state.c.id == 1).values(**values)).rowcount)


def _recount(conn: Connection, now: datetime, agent_id: str | None, user_id: str | None) -> int:
    for table in (cs, cf):
        conn.execute(q.delete_classes(table, agent_id, user_id, None))
    conn.execute(q.insert_stats(q.recount_select(now, agent_id, user_id)))
    conn.execute(insert(cf).from_select(list(q.FP_COLUMNS), q.fingerprints_select(agent_id, user_id)))
    conn.execute(reset_counters(agent_id, user_id))
    conn.execute(fold_counters(conn.dialect.name, agent_id, user_id, recount=True))
    conn.execute(q.clear_pending(agent_id, user_id))
    return int(conn.execute(select(func.count()).select_from(cs).where(*q.tenant(cs, agent_id, user_id))).scalar() or 0)


def recount(engine: Engine, agent_id: str | None = None, user_id: str | None = None) -> int:
    """Rebuild the statistics of every class in scope from all its runs (the ``recount``); returns the classes."""
    now = utcnow()

    def work(conn: Connection) -> int:
        full = agent_id is None and user_id is None
        if not _touch_state(conn, now, None, recounted=full) and full:
            conn.execute(insert(state).values(id=1, recounted_at=now, folded_at=now, last_folded=0))
        return _recount(conn, now, agent_id, user_id)

    classes = _in_snapshot(engine, work)
    if agent_id is None and user_id is None:
        refresh_planner_stats(engine)
    return classes


def _recount_keys(conn: Connection, now: datetime, keys: Sequence[Key]) -> None:
    for i in range(0, len(keys), CHUNK):
        chunk = keys[i : i + CHUNK]
        for table in (cs, cf):
            conn.execute(q.delete_classes(table, None, None, chunk))
        conn.execute(q.insert_stats(q.recount_select(now, keys=chunk)))
        conn.execute(insert(cf).from_select(list(q.FP_COLUMNS), q.fingerprints_select(keys=chunk)))


def fold(
    engine: Engine,
    agent_id: str | None = None,
    user_id: str | None = None,
    *,
    partitions: Sequence[Partition] | None = None,
) -> dict[str, int]:
    """Fold the pending runs in scope (an agent, a user, a list of partitions) into the statistics and the
    partition counters, and recount outdated classes; idempotent.

    Before the first recount (a database just migrated to 010 or 011) the whole store is recounted instead.
    Returns ``{"folded": runs, "recounted": classes}`` (counts only).
    """
    now = utcnow()
    dialect = engine.dialect.name
    parts = list(partitions) if partitions is not None else None

    recounted_all = False  # the first fold recounted the whole store (set by the attempt that committed)

    def work(conn: Connection) -> dict[str, int]:
        nonlocal recounted_all
        recounted_all = False
        # A scoped fold on PostgreSQL (and Oracle) only reads the bookkeeping row, so disjoint scopes fold
        # concurrently; SQLite's first statement must write to take the lock.
        scoped = (agent_id is not None or user_id is not None or parts is not None) and dialect != "sqlite"
        exists = (
            conn.execute(select(state.c.id).where(state.c.id == 1)).first() is not None
            if scoped
            else _touch_state(conn, now, None, recounted=False)
        )
        if not exists:
            conn.execute(insert(state).values(id=1, recounted_at=now, folded_at=now, last_folded=0))
            recounted_all = True
            return {"folded": 0, "recounted": _recount(conn, now, None, None)}
        conn.execute(q.fold_stats(dialect, now, agent_id, user_id, parts))
        conn.execute(q.fold_fingerprints(dialect, agent_id, user_id, parts))
        conn.execute(fold_counters(dialect, agent_id, user_id, parts))
        folded = int(conn.execute(q.clear_pending(agent_id, user_id, parts)).rowcount or 0)
        keys = [(r[0], r[1], r[2]) for r in conn.execute(q.outdated_keys(agent_id, user_id, parts))]
        _recount_keys(conn, now, keys)
        if not scoped:
            _touch_state(conn, now, folded, recounted=False)
        return {"folded": folded, "recounted": len(keys)}

    result = _in_snapshot(engine, work)
    if recounted_all or result["folded"] >= ANALYZE_AFTER:
        refresh_planner_stats(engine)
    return result


def mark_stale(conn: Connection, keys: Iterable[Key]) -> int:
    """Mark classes for a recount by the next fold, in the caller's transaction (a write path that changed or
    deleted runs already folded: stamping, backfill, :func:`delete_runs`). A class without a row gets one."""
    wanted = sorted(set(keys))
    for i in range(0, len(wanted), CHUNK):
        chunk = wanted[i : i + CHUNK]
        match = tuple_(cs.c.agent_id, cs.c.user_id, cs.c.canonical_hash).in_(chunk)
        marked = int(conn.execute(update(cs).where(match).values(stale=1)).rowcount or 0)
        have = {
            (r[0], r[1], r[2])
            for r in conn.execute(select(cs.c.agent_id, cs.c.user_id, cs.c.canonical_hash).where(match))
        }
        if marked < len(have):
            # A row appeared after the UPDATE's snapshot: a recount deleted the class's row (the UPDATE waited on it
            # and skipped it) and inserted it again from a snapshot without this transaction's change. Mark it.
            conn.execute(update(cs).where(match).values(stale=1))
        missing = [k for k in chunk if k not in have]
        if missing:
            now = utcnow()
            conn.execute(
                insert(cs),
                [{"agent_id": a, "user_id": u, "canonical_hash": h, "newest_at": now, "stale": 1, "updated_at": now}
                 for a, u, h in missing],
            )  # fmt: skip
    return len(wanted)


def delete_runs(conn: Connection, agent_id: str, user_id: str, run_ids: Sequence[str]) -> int:
    """Delete runs of one tenant, mark their classes for a recount and take the folded ones off the partition's
    counter, in the caller's transaction."""
    wm = workflow_memory
    scope = and_(wm.c.agent_id == agent_id, wm.c.user_id == user_id, wm.c.id.in_(list(run_ids)))
    hashes = conn.execute(select(wm.c.canonical_hash).where(scope, wm.c.canonical_hash.is_not(None)).distinct())
    mark_stale(conn, [(agent_id, user_id, h) for h in hashes.scalars()])
    folded = int(conn.execute(delete(wm).where(scope, wm.c.stats_pending.is_(None))).rowcount or 0)
    pending = int(conn.execute(delete(wm).where(scope)).rowcount or 0)
    if folded:
        ps = partition_state
        conn.execute(
            update(ps)
            .where(ps.c.agent_id == agent_id, ps.c.user_id == user_id)
            .values(runs_folded=ps.c.runs_folded - folded)
        )
    return folded + pending


def _utc(value: Any) -> datetime | None:
    """A timestamp as the driver returns it (SQLite: naive UTC text) as aware UTC, like ``UTCDateTime``."""
    if value is None:
        return None
    if isinstance(value, str):  # naive UTC text: parsed with its offset in one call (the UTC singleton)
        try:
            return datetime.fromisoformat(value + "+00:00")
        except ValueError:  # a time written with its offset ("…Z", "…+02:00") by another tool
            value = datetime.fromisoformat(value)
    stamp: datetime = value
    if stamp.tzinfo is None:
        return stamp.replace(tzinfo=UTC)
    return stamp if stamp.tzinfo is UTC else stamp.astimezone(UTC)


SLICE = 1000  # partitions per read statement (a bounded IN list, as storage.counters.SLICE)


def read_stats(
    conn: Connection,
    partitions: Sequence[Partition] | None = None,
    canonical_hash: str | None = None,
) -> tuple[dict[Partition, list[ClassStats]], list[Key]]:
    """One statement (per :data:`SLICE` partitions): every class of ``partitions`` (all when None) with current
    evidence, grouped per partition and ordered like :func:`aggregate_classes`; plus the keys whose stored
    figures are outdated (stale, or ``since`` changed after the last fold), which the caller must aggregate.

    Rows come back as plain tuples with the timestamps as the driver returns them (parsed here, not by the
    column type), which is most of the cost of reading thousands of classes."""
    wanted = list(dict.fromkeys(partitions)) if partitions is not None else None
    out: dict[Partition, list[ClassStats]] = {p: [] for p in wanted or ()}
    outdated: list[Key] = []
    slices = [wanted[i : i + SLICE] for i in range(0, len(wanted), SLICE)] if wanted is not None else [None]
    raw = conn.dialect.name in ("sqlite", "postgresql")
    with _no_gc():
        for part in slices:
            _read_slice(conn, part, canonical_hash, raw, out, outdated)
    for stats_list in out.values():
        stats_list.sort(key=_order)
    return out, outdated


@contextmanager
def _no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while thousands of acyclic rows and ``ClassStats`` are built: each full
    collection walks every object of the process, which doubled the read of 5 000 classes every other call."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _read_slice(
    conn: Connection,
    part: list[Partition] | None,
    canonical_hash: str | None,
    raw: bool,
    out: dict[Partition, list[ClassStats]],
    outdated: list[Key],
) -> None:
    """One :func:`read_stats` statement: the classes of ``part`` (all when None) into ``out`` / ``outdated``."""
    stale = q.outdated()
    times = [type_coerce(c, String) if raw else c for c in (cs.c.first_seen, cs.c.last_seen, cs.c.since)]
    stmt = (
        select(cs.c.agent_id, cs.c.user_id, cs.c.canonical_hash, cs.c.successes, cs.c.failures, cs.c.unknown,
               cs.c.distinct_queries, cs.c.tool_sequence, cs.c.stamped, *times, stale.label("outdated"))
        .where(or_(cs.c.successes > 0, cs.c.failures > 0, cs.c.unknown > 0, stale), *q.tenant(cs, None, None, part))
    )  # fmt: skip
    if canonical_hash is not None:
        stmt = stmt.where(cs.c.canonical_hash == canonical_hash)
    for a, u, h, ok, bad, unknown, dq, seq, stamped, first, last, since, old in conn.execute(stmt).all():
        if old:
            outdated.append((a, u, h))
            continue
        n = ok + bad
        stats = ClassStats(
            agent_id=a,
            user_id=u,
            canonical_hash=h,
            executions=n,
            successes=ok,
            failures=bad,
            unknown=unknown,
            success_rate=ok / n if n else 0.0,
            distinct_queries=dq,
            first_seen=_utc(first),  # type: ignore[arg-type]  # a class with evidence has both
            last_seen=_utc(last),  # type: ignore[arg-type]
            tool_sequence=seq,
            since=_utc(since),
            stamped=stamped,
        )
        bucket = out.get((a, u))
        if bucket is None:
            bucket = out[(a, u)] = []
        bucket.append(stats)


def _order(s: ClassStats) -> tuple[int, str]:
    return (-s.executions, s.canonical_hash)


def _current(conn: Connection, agent_id: str, user_id: str) -> bool:
    """The partition's statistics hold every stored run: a recount ran and none of its runs is pending."""
    return recounted(conn) and read_counters(conn, [(agent_id, user_id)])[(agent_id, user_id)].pending == 0


def partition_stats(
    engine: Engine, agent_id: str, user_id: str, canonical_hash: str | None = None, *, write: bool = True
) -> list[ClassStats]:
    """The classes of one partition, as :func:`aggregate_classes` returns them, from the maintained statistics.

    With ``write`` the partition's pending runs are folded first (cheap when none are). Without it (a dry run,
    which writes nothing) the statistics are read as they are when none of the partition's runs is pending, else
    the full aggregation answers. A class outdated between the fold and the read is aggregated on the spot.
    """
    if not write:
        with engine.connect() as conn:
            if not _current(conn, agent_id, user_id):
                return aggregate_classes(conn, agent_id, user_id, canonical_hash=canonical_hash)
    else:
        fold(engine, agent_id, user_id)
    with engine.connect() as conn:
        return completed(conn, read_stats(conn, [(agent_id, user_id)], canonical_hash))[(agent_id, user_id)]


def completed(
    conn: Connection, read: tuple[dict[Partition, list[ClassStats]], list[Key]]
) -> dict[Partition, list[ClassStats]]:
    """A :func:`read_stats` result with every outdated class aggregated on the spot (one statement each)."""
    by_partition, outdated = read
    for a, u, h in outdated:
        by_partition.setdefault((a, u), []).extend(aggregate_classes(conn, a, u, canonical_hash=h))
        by_partition[(a, u)].sort(key=_order)
    return by_partition
