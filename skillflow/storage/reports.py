"""The one report writer: promotion, drift, data-quality and backfill reports share one id scheme and one write.

Id scheme: inside a flow run the id is ``sha256(kind, flow_run_id, scope…)[:32]``, so a retried task or a
re-run of the same flow run addresses the same row; outside a flow run every call gets a fresh id.
Idempotency: delete-then-insert by id in one transaction, so a retry replaces, never duplicates.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, insert, select

from skillflow.kernel.models import new_id
from skillflow.storage.schema import reports


def report_id(kind: str, flow_run_id: str | None, *scope: str | None) -> str:
    """Deterministic within a flow run (per kind and scope), fresh otherwise."""
    if not flow_run_id:
        return new_id()
    key = "\x1f".join([kind, flow_run_id, *("" if s is None else s for s in scope)])
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def write_report(
    conn: Connection,
    *,
    report_id: str,
    kind: str,
    body: dict[str, Any],
    created_at: datetime,
    agent_id: str | None = None,
    user_id: str | None = None,
    flow_run_id: str | None = None,
    dry_run: bool = False,
) -> str:
    """Replace the report row ``report_id`` inside the caller's transaction."""
    conn.execute(delete(reports).where(reports.c.id == report_id))
    conn.execute(
        insert(reports).values(
            id=report_id,
            kind=kind,
            agent_id=agent_id,
            user_id=user_id,
            flow_run_id=flow_run_id,
            dry_run=1 if dry_run else 0,
            created_at=created_at,
            body=body,
        )
    )
    return report_id


def latest_body(conn: Connection, kind: str) -> Any:
    """The body of the newest report of ``kind`` (None when there is none)."""
    q = select(reports.c.body).where(reports.c.kind == kind).order_by(reports.c.created_at.desc()).limit(1)
    return conn.execute(q).scalar()


def bodies_of_runs(conn: Connection, kind: str, flow_run_ids: list[str]) -> list[Any]:
    """The bodies of every non-dry-run report of ``kind`` written by these flow runs (a fan-out's children)."""
    if not flow_run_ids:
        return []
    q = (
        select(reports.c.body)
        .where(reports.c.kind == kind, reports.c.flow_run_id.in_(flow_run_ids), reports.c.dry_run == 0)
        .order_by(reports.c.created_at, reports.c.id)
    )
    return list(conn.execute(q).scalars())
