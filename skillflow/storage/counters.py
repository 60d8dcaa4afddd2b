"""Per-partition counters the promotion cycle plans from, read without counting history.

``partition_state`` holds, per (agent, user), the cycle count, the runs seen at the last cycle and
``runs_folded`` (migration 011): the partition's runs folded into the class statistics, kept by
:mod:`skillflow.storage.class_stats` (the fold adds, the recount sets, ``delete_runs`` subtracts). A partition's
stored runs are ``runs_folded`` plus its pending runs, which are read off the pending-only index. Until the first
recount has run (a database just migrated) the counters do not hold yet and callers count ``workflow_memory``
(the reference path, :func:`skillflow.storage.aggregate.partitions_reference`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, func, literal, select, true, union, union_all, update
from sqlalchemy.sql import Select

from skillflow.storage import class_stats_oracle as ora
from skillflow.storage.class_stats_sql import Partition, dialect_insert, pending_runs, tenant
from skillflow.storage.schema import class_stats_state, partition_state, workflow_memory

ps, wm = partition_state, workflow_memory
SLICE = 1000  # partitions per statement: a bounded IN list (PostgreSQL overflows its parser stack near 10 000)


@dataclass(frozen=True)
class Counters:
    """One partition's cadence state: ``runs`` stored (folded + pending) and ``runs_since`` the last cycle."""

    cycle_count: int = 0
    runs_at_last_cycle: int = 0
    runs_folded: int = 0
    pending: int = 0

    @property
    def runs(self) -> int:
        return self.runs_folded + self.pending

    @property
    def runs_since(self) -> int:
        return max(0, self.runs - self.runs_at_last_cycle)


def recounted(conn: Connection) -> bool:
    """The counters hold: a recount has run since the database was migrated (the fold's bookkeeping row)."""
    return conn.execute(select(class_stats_state.c.id).where(class_stats_state.c.id == 1)).first() is not None


def read_counters(conn: Connection, partitions: Sequence[Partition]) -> dict[Partition, Counters]:
    """Every listed partition's counters, one statement per :data:`SLICE` partitions (a partition with no row
    and no pending run reads all zeros). Only valid after a recount (:func:`recounted`)."""
    out: dict[Partition, Counters] = {}
    wanted = list(dict.fromkeys(partitions))
    for i in range(0, len(wanted), SLICE):
        part = wanted[i : i + SLICE]
        p = pending_runs()
        zero = literal(0)
        stmt = union_all(
            select(ps.c.agent_id, ps.c.user_id, ps.c.cycle_count, ps.c.runs_at_last_cycle, ps.c.runs_folded, zero)
            .where(*tenant(ps, None, None, part)),
            select(p.c.agent_id, p.c.user_id, zero, zero, zero, func.count())
            .where(*tenant(p, None, None, part))  # this slice's pending runs only, not every slice's again
            .group_by(p.c.agent_id, p.c.user_id),
        )  # fmt: skip
        rows: dict[Partition, list[int]] = {key: [0, 0, 0, 0] for key in part}
        for a, u, cycles, seen, folded, pending in conn.execute(stmt).all():
            acc = rows[(a, u)]
            for j, v in enumerate((cycles, seen, folded, pending)):
                acc[j] += int(v or 0)
        out.update({key: Counters(*acc) for key, acc in rows.items()})
    return out


def listing(agent_id: str | None, user_id: str | None) -> Any:
    """The statement of :func:`listed_partitions` (exposed so tests can inspect its plan)."""
    p = pending_runs()
    return union(
        select(ps.c.agent_id, ps.c.user_id).where(ps.c.runs_folded > 0, *tenant(ps, agent_id, user_id)),
        select(p.c.agent_id, p.c.user_id).where(*tenant(p, agent_id, user_id)),
    )


def listed_partitions(conn: Connection, agent_id: str | None, user_id: str | None) -> list[Partition]:
    """Partitions with stored runs from the counters: a folded run, or a pending one (one statement)."""
    return sorted((r[0], r[1]) for r in conn.execute(listing(agent_id, user_id)))


def run_counts(
    agent_id: str | None, user_id: str | None, partitions: Sequence[Partition] | None = None, pending: bool = True
) -> Select[Any]:
    """Runs per partition in scope (only the pending ones with ``pending``), hashed or not."""
    src: Any = pending_runs() if pending else wm
    return (
        select(src.c.agent_id, src.c.user_id, func.count().label("runs_folded"))
        .where(true(), *tenant(src, agent_id, user_id, partitions))  # SQLite's upsert needs a WHERE
        .group_by(src.c.agent_id, src.c.user_id)
    )


def fold_counters(
    dialect: str,
    agent_id: str | None,
    user_id: str | None,
    partitions: Sequence[Partition] | None = None,
    *,
    recount: bool = False,
) -> Any:
    """Add each partition's pending runs to ``partition_state.runs_folded`` (``recount``: set it to all its runs);
    a partition without a row gets one. Runs before :func:`clear_pending`, in the same snapshot."""
    source = run_counts(agent_id, user_id, partitions, pending=not recount)
    if dialect == "oracle":
        return ora.merge_counters(source, add=not recount)
    ins = dialect_insert(dialect)(ps).from_select(["agent_id", "user_id", "runs_folded"], source)
    value = ins.excluded.runs_folded if recount else ps.c.runs_folded + ins.excluded.runs_folded
    return ins.on_conflict_do_update(index_elements=["agent_id", "user_id"], set_={"runs_folded": value})


def reset_counters(agent_id: str | None, user_id: str | None) -> Any:
    """Zero the counters in scope before a recount sets them (a partition whose runs are all gone keeps 0)."""
    return update(ps).where(*tenant(ps, agent_id, user_id)).values(runs_folded=0)
