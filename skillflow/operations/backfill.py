"""Backfill canonical identity onto stored runs that predate it (legacy rows with a NULL canonical_hash).

Rows are read in keyset-paginated batches ordered by id, identity is recomputed from the stored
``steps`` (upstream ``"Step N: tool"`` mapping or the project's list shape) and written back with one
executemany UPDATE per batch. Idempotent: a re-run finds nothing to update. ``force`` recomputes every
row (e.g. after changing ``noop_tools``) and updates only rows whose identity changed. A newly hashed
run of a class with an ACTIVE skill in its tenant is stamped, as capture would have done.

Each batch commits with the report so far (its totals and keyset cursor), so a retry of the same flow run —
after a crash, or a task retry — resumes after the last committed batch and stores the report a run without the
crash stores (docs/RELIABILITY.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, func, select, update

from skillflow.kernel import canonical
from skillflow.kernel.models import SkillStatus, utcnow
from skillflow.storage.reports import report_id, write_report
from skillflow.storage.schema import reports, skillbox, workflow_memory

wm = workflow_memory
ProgressFn = Callable[["BatchResult"], None]
_listeners: list[ProgressFn] = []


@dataclass(frozen=True)
class BatchResult:
    """What one batch did; ``last_id`` is the keyset cursor for the next batch (None: no rows left)."""

    scanned: int = 0
    updated: int = 0
    unchanged: int = 0
    no_steps: int = 0
    invalid: int = 0
    last_id: str | None = None


@dataclass
class BackfillReport:
    """``scanned = updated + already_hashed + no_steps + invalid`` over the rows in scope."""

    scanned: int = 0
    updated: int = 0
    already_hashed: int = 0
    no_steps: int = 0
    invalid: int = 0
    batches: int = 0
    dry_run: bool = False
    force: bool = False
    agent_id: str | None = None
    batch_size: int = 500
    last_id: str | None = None  # the keyset cursor: the last row a committed batch visited
    extra: dict[str, Any] = field(default_factory=dict)

    def add(self, batch: BatchResult) -> None:
        self.scanned += batch.scanned
        self.updated += batch.updated
        self.already_hashed += batch.unchanged
        self.no_steps += batch.no_steps
        self.invalid += batch.invalid
        self.batches += 1
        self.last_id = batch.last_id

    def resume(self, body: Any) -> bool:
        """Take the totals and cursor of a stored report of the same backfill (a retry of its flow run)."""
        same = ("dry_run", "force", "agent_id", "batch_size")
        if not isinstance(body, dict) or not body.get("last_id") or any(body.get(k) != getattr(self, k) for k in same):
            return False
        for name in ("scanned", "updated", "already_hashed", "no_steps", "invalid", "batches", "last_id"):
            setattr(self, name, body[name])
        return True

    def summary(self) -> str:
        verb = "would update" if self.dry_run else "updated"
        text = f"scanned={self.scanned} {verb}={self.updated} already_hashed={self.already_hashed}"
        return text + f" no_steps={self.no_steps}" + (f" invalid={self.invalid}" if self.invalid else "")

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "summary": self.summary()}

    def markdown(self) -> str:
        verb = "Would update" if self.dry_run else "Updated"
        rows = [
            ("Scanned", self.scanned),
            (verb, self.updated),
            ("Already hashed", self.already_hashed),
            ("No steps (no identity)", self.no_steps),
            ("Unreadable steps", self.invalid),
            ("Batches", self.batches),
        ]
        scope = f"agent `{self.agent_id}`" if self.agent_id else "all agents"
        mode = ("dry run, " if self.dry_run else "") + ("force" if self.force else "NULL hashes only")
        lines = [f"# Canonical-hash backfill ({scope}; {mode})", "", "| | rows |", "|---|---:|"]
        lines += [f"| {label} | {value} |" for label, value in rows]
        return "\n".join(lines) + f"\n\n`{self.summary()}`\n"


def add_listener(fn: ProgressFn) -> None:
    """Observe every finished batch in this process (the CLI's progress bar)."""
    _listeners.append(fn)


def remove_listener(fn: ProgressFn) -> None:
    if fn in _listeners:
        _listeners.remove(fn)


def notify(batch: BatchResult) -> None:
    for fn in list(_listeners):
        fn(batch)


def _scope(agent_id: str | None) -> list[Any]:
    return [wm.c.agent_id == agent_id] if agent_id is not None else []


def count_scope(conn: Connection, agent_id: str | None = None, force: bool = False) -> tuple[int, int]:
    """(rows the batches will visit, rows already hashed and therefore skipped) for the scope."""
    total, with_hash = conn.execute(
        select(func.count(), func.count(wm.c.canonical_hash)).select_from(wm).where(*_scope(agent_id))
    ).one()
    total, with_hash = int(total or 0), int(with_hash or 0)
    return (total, 0) if force else (total - with_hash, with_hash)


def _identity(steps_doc: Any, query: str, noop_tools: Sequence[str]) -> dict[str, Any] | None:
    """Recomputed identity for one stored row; None when the steps yield no signature."""
    steps = canonical.steps_from_document({"steps": steps_doc if steps_doc is not None else []})
    units = canonical.signature(steps, noop_tools)
    chash = canonical.canonical_hash(units)
    if chash is None:
        return None
    return {
        "canonical_hash": chash,
        "signature": [u.as_hashable() for u in units],
        "tool_sequence": canonical.stored_sequence(units),
        "step_count": len(steps),
        "query_fingerprint": canonical.query_fingerprint(query),
    }


_UPDATE = (
    update(wm)
    .where(wm.c.id == bindparam("b_id"))
    .values(
        canonical_hash=bindparam("b_hash"),
        signature=bindparam("b_signature", type_=wm.c.signature.type),
        tool_sequence=bindparam("b_seq"),
        step_count=bindparam("b_steps"),
        query_fingerprint=bindparam("b_fingerprint"),  # the current reading of the request (a forced run rewrites it)
        promoted_skill_id=func.coalesce(wm.c.promoted_skill_id, bindparam("b_stamp")),
    )
)


def _active_skills(conn: Connection, keys: Iterable[tuple[str, str, str]]) -> dict[tuple[str, str, str], str]:
    wanted = set(keys)
    if not wanted:
        return {}
    rows = conn.execute(
        select(skillbox.c.agent_id, skillbox.c.user_id, skillbox.c.canonical_hash, skillbox.c.id).where(
            skillbox.c.status == SkillStatus.ACTIVE.value,
            skillbox.c.canonical_hash.in_({k[2] for k in wanted}),
        )
    )
    return {(r[0], r[1], r[2]): r[3] for r in rows if (r[0], r[1], r[2]) in wanted}


def backfill_batch(
    conn: Connection,
    after_id: str | None,
    batch_size: int = 500,
    agent_id: str | None = None,
    force: bool = False,
    dry_run: bool = False,
    noop_tools: Sequence[str] = canonical.DEFAULT_NOOP_TOOLS,
) -> BatchResult:
    """Process the next batch after ``after_id`` (keyset on id) in the caller's transaction."""
    q = select(wm.c.id, wm.c.agent_id, wm.c.user_id, wm.c.query, wm.c.steps, wm.c.canonical_hash, wm.c.signature,
               wm.c.tool_sequence, wm.c.query_fingerprint).where(*_scope(agent_id))  # fmt: skip
    if not force:
        q = q.where(wm.c.canonical_hash.is_(None))
    if after_id is not None:
        q = q.where(wm.c.id > after_id)
    rows = conn.execute(q.order_by(wm.c.id).limit(batch_size)).all()
    if not rows:
        return BatchResult()
    changes: list[dict[str, Any]] = []
    unchanged = no_steps = invalid = 0
    for row in rows:
        try:
            ident = _identity(row.steps, row.query, noop_tools)
        except (ValueError, TypeError, AttributeError):
            invalid += 1
            continue
        if ident is None:
            no_steps += 1
            continue
        if (row.canonical_hash, row.signature, row.tool_sequence, row.query_fingerprint) == (
            ident["canonical_hash"],
            ident["signature"],
            ident["tool_sequence"],
            ident["query_fingerprint"],
        ):
            unchanged += 1
            continue
        changes.append({"row": row, **ident})
    stamps = _active_skills(conn, ((c["row"].agent_id, c["row"].user_id, c["canonical_hash"]) for c in changes))
    if changes and not dry_run:
        from skillflow.storage.class_stats import mark_stale  # the old and the new class of every re-hashed run

        keys = [
            (c["row"].agent_id, c["row"].user_id, h)
            for c in changes
            for h in (c["canonical_hash"], c["row"].canonical_hash)
            if h
        ]
        mark_stale(conn, keys)  # before the runs, in a fold's order (storage.skills._restamp)
        conn.execute(
            _UPDATE,
            [
                {
                    "b_id": c["row"].id,
                    "b_hash": c["canonical_hash"],
                    "b_signature": c["signature"],
                    "b_seq": c["tool_sequence"],
                    "b_steps": c["step_count"],
                    "b_fingerprint": c["query_fingerprint"],
                    "b_stamp": stamps.get((c["row"].agent_id, c["row"].user_id, c["canonical_hash"])),
                }
                for c in changes
            ],
        )
    return BatchResult(len(rows), len(changes), unchanged, no_steps, invalid, rows[-1].id)


def run_backfill(
    engine: Engine,
    batch_size: int = 500,
    agent_id: str | None = None,
    force: bool = False,
    dry_run: bool = False,
    noop_tools: Sequence[str] = canonical.DEFAULT_NOOP_TOOLS,
    *,
    flow_run_id: str | None = None,
) -> BackfillReport:
    """The whole backfill, one transaction per keyset batch, then the stored report (kind ``backfill``).

    The one composition of the backfill: the ``backfill-canonical-hashes`` flow runs it. Each batch's transaction
    also stores the report so far; a retry of the same flow run resumes from it (the module's docstring).
    """
    report = BackfillReport(dry_run=dry_run, force=force, agent_id=agent_id, batch_size=batch_size)
    rid = report_id("backfill", flow_run_id, agent_id)
    with engine.connect() as conn:
        stored = conn.execute(select(reports.c.body).where(reports.c.id == rid)).scalar() if flow_run_id else None
        if not report.resume(stored):
            _, report.already_hashed = count_scope(conn, agent_id, force)
            report.scanned = report.already_hashed
    while True:
        with engine.begin() as conn:
            batch = backfill_batch(conn, report.last_id, batch_size, agent_id, force, dry_run, noop_tools)
            if batch.last_id is not None:
                report.add(batch)
                _store(conn, report, rid, flow_run_id)  # the progress commits with the batch
        if batch.last_id is None:
            break
        notify(batch)
    with engine.begin() as conn:
        report.extra["report_id"] = _store(conn, report, rid, flow_run_id)
    return report


def _store(conn: Connection, report: BackfillReport, rid: str, flow_run_id: str | None) -> str:
    return write_report(
        conn,
        report_id=rid,
        kind="backfill",
        body=report.as_dict(),
        created_at=utcnow(),
        agent_id=report.agent_id,
        flow_run_id=flow_run_id,
        dry_run=report.dry_run,
    )
