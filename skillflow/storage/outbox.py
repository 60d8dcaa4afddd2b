"""The durable shadow outbox (``workflow_memory.shadow_pending = 1``): claim, peek and clear rows.

Two overlapping drains must never evaluate the same run at the same time:

* PostgreSQL: ``SELECT … FOR UPDATE SKIP LOCKED LIMIT n`` inside the batch's transaction; the locks are
  the claim, so a crashed drain releases its rows when its transaction aborts.
* Oracle: the same ``FOR UPDATE SKIP LOCKED`` without a row limit (Oracle refuses ``FETCH FIRST`` with
  ``FOR UPDATE``); rows are locked as they are fetched, so ``fetchmany(n)`` claims exactly ``n``.
* SQLite: one atomic ``UPDATE … SET shadow_claimed_at = now WHERE id IN (SELECT … LIMIT n) RETURNING id``.
  The UPDATE takes the database write lock before its sub-select runs, so two drains get disjoint rows.
  A claim older than ``stale_after`` is treated as abandoned (a crashed drain) and can be re-claimed.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, bindparam, select, update

from skillflow.kernel.models import utcnow
from skillflow.storage.schema import workflow_memory

log = logging.getLogger(__name__)

SKIP_LOCKED_DIALECTS = ("postgresql", "oracle")
DEFAULT_STALE_SECONDS = 300.0

_COLUMNS = (
    workflow_memory.c.id,
    workflow_memory.c.agent_id,
    workflow_memory.c.user_id,
    workflow_memory.c.query,
    workflow_memory.c.canonical_hash,
    workflow_memory.c.outcome,
    workflow_memory.c.created_at,
    workflow_memory.c.shadow_evaluations,
)


@dataclass(frozen=True)
class PendingRun:
    """What shadow evaluation needs of one stored run (nothing else is read)."""

    id: str
    agent_id: str
    user_id: str
    query: str
    canonical_hash: str | None
    outcome: str
    created_at: datetime
    evaluations: tuple[dict[str, Any], ...]

    @classmethod
    def from_row(cls, row: Any) -> PendingRun:
        return cls(
            id=row.id,
            agent_id=row.agent_id,
            user_id=row.user_id,
            query=row.query,
            canonical_hash=row.canonical_hash,
            outcome=row.outcome,
            created_at=row.created_at,
            evaluations=_records(row.id, row.shadow_evaluations),
        )


def _records(run_id: str, value: Any) -> tuple[dict[str, Any], ...]:
    """A run's stored shadow records: a list of objects. Anything else in the column (a row written by another
    tool or repaired by hand) must not fail the batch of every tenant's runs: what is not a record is left out,
    logged, and the run is evaluated again; the ``shadow_observations`` index keeps what was already counted (its
    idempotency keys), and the run's next write stores the records read."""
    if value is None:
        return ()
    records = value if isinstance(value, list) else []
    kept = tuple(r for r in records if isinstance(r, dict))
    if len(kept) != len(records) or not isinstance(value, list):
        log.warning("run %s: %s in its shadow records left out (not a list of objects)", run_id, type(value).__name__)
    return kept


def uses_row_locks(conn: Connection) -> bool:
    return conn.dialect.name in SKIP_LOCKED_DIALECTS


def _pending(exclude: Collection[str]) -> Any:
    cond = workflow_memory.c.shadow_pending == 1
    if exclude:
        cond = cond & workflow_memory.c.id.not_in(list(exclude))
    return cond


def lock_batch(conn: Connection, n: int, exclude: Collection[str] = ()) -> list[PendingRun]:
    """PostgreSQL/Oracle: lock up to ``n`` pending rows nobody else holds (inside the caller's transaction)."""
    q = select(*_COLUMNS).where(_pending(exclude)).order_by(workflow_memory.c.created_at, workflow_memory.c.id)
    if conn.dialect.name == "oracle":
        result = conn.execute(q.with_for_update(skip_locked=True))
        return [PendingRun.from_row(r) for r in result.fetchmany(n)]
    rows = conn.execute(q.limit(n).with_for_update(skip_locked=True)).all()
    return [PendingRun.from_row(r) for r in rows]


def claim_batch(
    conn: Connection, n: int, stale_after: float = DEFAULT_STALE_SECONDS, exclude: Collection[str] = ()
) -> list[str]:
    """SQLite: atomically stamp ``shadow_claimed_at`` on up to ``n`` unclaimed (or stale) rows; their ids."""
    now = utcnow()
    stale = now - timedelta(seconds=stale_after)
    free = (workflow_memory.c.shadow_claimed_at.is_(None)) | (workflow_memory.c.shadow_claimed_at < stale)
    inner = (
        select(workflow_memory.c.id)
        .where(_pending(exclude), free)
        .order_by(workflow_memory.c.created_at, workflow_memory.c.id)
        .limit(n)
    )
    stmt = (
        update(workflow_memory)
        .where(workflow_memory.c.id.in_(inner.scalar_subquery()))
        .values(shadow_claimed_at=now)
        .returning(workflow_memory.c.id)
    )
    return [r[0] for r in conn.execute(stmt)]


def read_runs(conn: Connection, ids: Sequence[str]) -> list[PendingRun]:
    """The claimed rows, oldest first."""
    if not ids:
        return []
    rows = conn.execute(
        select(*_COLUMNS)
        .where(workflow_memory.c.id.in_(list(ids)))
        .order_by(workflow_memory.c.created_at, workflow_memory.c.id)
    ).all()
    return [PendingRun.from_row(r) for r in rows]


def peek(conn: Connection, n: int) -> list[PendingRun]:
    """Pending rows without claiming them (dry runs)."""
    q = select(*_COLUMNS).where(_pending(())).order_by(workflow_memory.c.created_at, workflow_memory.c.id).limit(n)
    return [PendingRun.from_row(r) for r in conn.execute(q)]


def clear(conn: Connection, ids: Sequence[str]) -> int:
    """Take rows out of the outbox (set-based)."""
    if not ids:
        return 0
    result = conn.execute(
        update(workflow_memory)
        .where(workflow_memory.c.id.in_(list(ids)))
        .values(shadow_pending=0, shadow_claimed_at=None)
    )
    return int(result.rowcount or 0)


def write_evaluations(conn: Connection, evaluations: dict[str, list[dict[str, Any]]]) -> None:
    """Store each run's full ``shadow_evaluations`` list and clear it from the outbox (executemany)."""
    if not evaluations:
        return
    stmt = (
        update(workflow_memory)
        .where(workflow_memory.c.id == bindparam("b_id"))
        .values(shadow_evaluations=bindparam("b_evals"), shadow_pending=0, shadow_claimed_at=None)
    )
    conn.execute(stmt, [{"b_id": rid, "b_evals": evals} for rid, evals in evaluations.items()])


def requeue_changed(conn: Connection, runs: Sequence[PendingRun]) -> int:
    """Put back into the outbox the runs of a drained batch whose outcome changed after the drain read it (a
    conversation's late outcome committed between a SQLite drain's read and its write): their records name the
    old outcome, and the next drain corrects them. One statement per outcome read; returns the count."""
    by_outcome: dict[str, list[str]] = {}
    for run in runs:
        by_outcome.setdefault(run.outcome, []).append(run.id)
    changed = 0
    for outcome, ids in by_outcome.items():
        result = conn.execute(
            update(workflow_memory)
            .where(workflow_memory.c.id.in_(ids), workflow_memory.c.outcome != outcome)
            .values(shadow_pending=1, shadow_claimed_at=None)
        )
        changed += int(result.rowcount or 0)
    return changed


def requeue_unevaluated(conn: Connection, since: datetime | None = None) -> int:
    """Put tool-calling runs that never went through shadow evaluation back into the outbox (the backlog).

    Runs recorded while capture still read the agent's own ``shadow_evaluation_enabled`` (or cleared by a
    drain while evaluation was off) have ``shadow_pending = 0`` and no ``shadow_evaluations``; this set-based
    update re-queues them (optionally only those created at or after ``since``). Returns the count.
    """
    cond = (
        (workflow_memory.c.shadow_pending == 0)
        & workflow_memory.c.canonical_hash.is_not(None)
        & workflow_memory.c.shadow_evaluations.is_(None)
    )
    if since is not None:
        cond = cond & (workflow_memory.c.created_at >= since)
    result = conn.execute(update(workflow_memory).where(cond).values(shadow_pending=1, shadow_claimed_at=None))
    return int(result.rowcount or 0)


def pending_count(conn: Connection) -> int:
    from sqlalchemy import func

    return int(conn.execute(select(func.count()).where(workflow_memory.c.shadow_pending == 1)).scalar() or 0)


def release(conn: Connection, ids: Sequence[str]) -> None:
    """SQLite: drop our claim on rows we could not evaluate so the next drain retries them."""
    if ids:
        conn.execute(
            update(workflow_memory)
            .where(workflow_memory.c.id.in_(list(ids)), workflow_memory.c.shadow_pending == 1)
            .values(shadow_claimed_at=None)
        )


def uses_row_locks_engine(engine: Any) -> bool:
    return str(engine.dialect.name) in SKIP_LOCKED_DIALECTS
