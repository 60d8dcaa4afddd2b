"""Operational status per tenant, the last run of each flow, and the lifecycle event log.

Everything is set-based SQL. The Prefect side is read over its REST API with the standard library
(``skillflow`` never imports prefect); without a reachable API every flow state is reported as ``unknown``.
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, case, func, select

from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import utcnow
from skillflow.promotion.stages import assess_classes, backfill_command
from skillflow.storage.aggregate import cycle_count, unhashed_runs
from skillflow.storage.schema import reports, skill_events, skillbox, workflow_memory

# Flow (= deployment) name -> the ``reports.kind`` it stores (None: it stores no report). Both promotion flows
# store kind ``promotion``; the report body's ``mode`` (``cycle`` | ``distill``) tells them apart.
FLOW_REPORT_KINDS: dict[str, str | None] = {
    "promotion-cycle": "promotion",
    "distill-class": "promotion",
    "shadow-evaluation": None,
    "activation-review": None,
    "drift-demotion": "drift",
    "data-quality": "data-quality",
    "backfill-canonical-hashes": "backfill",
}
FLOW_REPORT_MODES = {"promotion-cycle": "cycle", "distill-class": "distill"}
# Only finished runs count as "last run": a scheduled or running one is not a result yet.
FINISHED_STATES = ["COMPLETED", "FAILED", "CRASHED", "CANCELLED"]
# A run still going is shown beside it: a review waiting for its reviewer is Paused ("Suspended"), a cycle Running.
OPEN_STATES = ["PENDING", "RUNNING", "PAUSED", "CANCELLING"]
NO_FINISHED_RUN = "no finished run"  # the state when the only runs are open ones ("never run" said otherwise)
MODE_SCAN = 500  # newest promotion reports read to find the newest of each mode
UNKNOWN = "unknown"
UNREACHABLE = "unknown: the Prefect API did not answer"
# On a work pool each running chunk of a cycle (a ``promotion-partitions`` run) holds one slot of the fleet's global
# concurrency limit (tasks/fanout.py, ``partition_slot``); a run in these states may hold one.
SLOT_FLOWS = ["promotion-partitions"]
SLOT_HOLDING_STATES = ["PENDING", "RUNNING", "CANCELLING", "PAUSED"]


@dataclass
class TenantStatus:
    agent_id: str
    user_id: str
    runs: int
    classes: int
    eligible_classes: int
    eligibility_method: str
    outbox_backlog: int
    skills: dict[str, dict[str, int]] = field(default_factory=dict)
    unhashed_runs: int = 0  # legacy rows without a canonical hash: not aggregated until backfilled
    backfill_command: str | None = None  # the exact command that hashes them (None when there are none)


@dataclass
class FlowStatus:
    flow: str
    report_kind: str | None
    last_report_at: datetime | None
    last_report_flow_run_id: str | None
    state: str
    last_run_at: datetime | None = None
    last_flow_run_id: str | None = None
    open_state: str | None = None  # the newest run still going (Pending, Running, Paused/Suspended, Cancelling)
    open_since: datetime | None = None
    open_flow_run_id: str | None = None


@dataclass
class SlotStatus:
    """The fleet's global concurrency limit: slots taken, and whether they are taken with no chunk to hold them."""

    limit: str
    active_slots: int
    chunk_runs: int  # SLOT_FLOWS runs Pending, Running, Cancelling or Paused
    leaked: bool  # slots taken while no chunk run could hold one: lost releases (docs/guide/ops.md)
    reset_command: str


def _tenant_counts(conn: Connection, agent_id: str | None) -> list[Any]:
    wm = workflow_memory
    q = select(
        wm.c.agent_id,
        wm.c.user_id,
        func.count().label("runs"),
        func.count(wm.c.canonical_hash.distinct()).label("classes"),
        func.coalesce(func.sum(case((wm.c.shadow_pending == 1, 1), else_=0)), 0).label("backlog"),
    ).group_by(wm.c.agent_id, wm.c.user_id)
    if agent_id is not None:
        q = q.where(wm.c.agent_id == agent_id)
    return list(conn.execute(q.order_by(wm.c.agent_id, wm.c.user_id)))


def _skill_counts(conn: Connection, agent_id: str | None) -> dict[tuple[str, str], dict[str, dict[str, int]]]:
    sb = skillbox
    q = select(sb.c.agent_id, sb.c.user_id, sb.c.status, sb.c.injection_role, func.count().label("n")).group_by(
        sb.c.agent_id, sb.c.user_id, sb.c.status, sb.c.injection_role
    )
    if agent_id is not None:
        q = q.where(sb.c.agent_id == agent_id)
    out: dict[tuple[str, str], dict[str, dict[str, int]]] = {}
    for row in conn.execute(q):
        out.setdefault((row.agent_id, row.user_id), {}).setdefault(row.status, {})[row.injection_role] = int(row.n)
    return out


def _eligible_by_gates(engine: Engine, conn: Connection, agent_id: str, user_id: str, config: PromotionConfig) -> int:
    """What the next cycle would find eligible: its own gates, declared tool flags, live skills and backoff."""
    cycle = cycle_count(conn, agent_id, user_id) + 1
    return sum(1 for a in assess_classes(engine, agent_id, user_id, config, utcnow(), cycle) if a.eligible)


def tenant_status(engine: Engine, config: PromotionConfig, agent_id: str | None = None) -> list[TenantStatus]:
    """Runs, classes, eligible classes, skills by status and role, the shadow outbox and unhashed legacy rows."""
    out: list[TenantStatus] = []
    with engine.connect() as conn:
        skills = _skill_counts(conn, agent_id)
        tenants = {(r.agent_id, r.user_id): r for r in _tenant_counts(conn, agent_id)}
        for key in sorted(set(tenants) | set(skills)):
            row = tenants.get(key)
            out.append(
                TenantStatus(
                    agent_id=key[0],
                    user_id=key[1],
                    runs=int(row.runs) if row else 0,
                    classes=int(row.classes) if row else 0,
                    eligible_classes=_eligible_by_gates(engine, conn, key[0], key[1], config) if row else 0,
                    eligibility_method="promotion gates",
                    outbox_backlog=int(row.backlog) if row else 0,
                    skills=skills.get(key, {}),
                )
            )
            legacy = unhashed_runs(conn, key[0], key[1]) if row else 0
            if legacy:
                out[-1].unhashed_runs = legacy
                out[-1].backfill_command = backfill_command(engine).strip("`")
    return out


def _last_reports(conn: Connection) -> dict[str, tuple[datetime, str | None]]:
    latest = select(reports.c.kind, func.max(reports.c.created_at).label("at")).group_by(reports.c.kind).subquery()
    q = select(reports.c.kind, reports.c.created_at, reports.c.flow_run_id).join(
        latest, (latest.c.kind == reports.c.kind) & (latest.c.at == reports.c.created_at)
    )
    found = {row.kind: (row.created_at, row.flow_run_id) for row in conn.execute(q)}
    newest = (
        select(reports.c.created_at, reports.c.flow_run_id, reports.c.body)
        .where(reports.c.kind == "promotion")
        .order_by(reports.c.created_at.desc())
        .limit(MODE_SCAN)
    )
    for row in conn.execute(newest):
        mode = (row.body or {}).get("mode", "cycle") if isinstance(row.body, dict) else "cycle"
        found.setdefault(f"promotion:{mode}", (row.created_at, row.flow_run_id))
    return found


def _prefect_last_run(
    api_url: str, flow_name: str, timeout: float, states: list[str] = FINISHED_STATES, sort: str = "END_TIME_DESC"
) -> dict[str, Any] | None:
    body = {
        "flows": {"name": {"any_": [flow_name]}},
        "flow_runs": {"state": {"type": {"any_": states}}},
        "sort": sort,
        "limit": 1,
    }
    runs = _prefect(api_url, "/flow_runs/filter", body, timeout)
    return runs[0] if runs else None


def _prefect(api_url: str, path: str, body: Any, timeout: float) -> Any:
    """POST ``body`` as JSON to the Prefect API (GET when None); the JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"{api_url.rstrip('/')}{path}", data=data, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # the operator-configured API URL
        return json.loads(resp.read())


def _stamp(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _state_name(run: dict[str, Any]) -> str:
    state = run.get("state") or {}
    return str(state.get("name") or state.get("type") or UNKNOWN)


def flow_status(engine: Engine, prefect_api_url: str | None = None, timeout: float = 3.0) -> list[FlowStatus]:
    """The last stored report per flow and, when the Prefect API answers, the last finished flow run's state and the
    newest open one's (a review waiting for its reviewer is open, not "never run"; docs/guide/ops.md). The runs are
    the Prefect server's, whichever database they used."""
    with engine.connect() as conn:
        last = _last_reports(conn)
    out = []
    for name, kind in FLOW_REPORT_KINDS.items():
        key = f"{kind}:{FLOW_REPORT_MODES[name]}" if name in FLOW_REPORT_MODES else kind or ""
        at, run_id = last.get(key, (None, None))
        out.append(
            FlowStatus(flow=name, report_kind=kind, last_report_at=at, last_report_flow_run_id=run_id, state=UNKNOWN)
        )
    if not prefect_api_url:
        return out
    try:
        for item in out:
            run = _prefect_last_run(prefect_api_url, item.flow, timeout)
            going = _prefect_last_run(prefect_api_url, item.flow, timeout, OPEN_STATES, "EXPECTED_START_TIME_DESC")
            if going is not None:
                item.open_state, item.open_flow_run_id = _state_name(going), going.get("id")
                item.open_since = _stamp(going.get("start_time") or going.get("expected_start_time"))
            if run is None:
                item.state = "never run" if going is None else NO_FINISHED_RUN
                continue
            item.state = _state_name(run)
            item.last_run_at = _stamp(run.get("end_time") or run.get("start_time"))
            item.last_flow_run_id = run.get("id")
    except (OSError, ValueError):  # URLError/HTTPError/timeouts are OSErrors; bad JSON is a ValueError
        for item in out:  # an unreachable or confused API: say so rather than guess
            item.state, item.last_run_at, item.last_flow_run_id = UNREACHABLE, None, None
            item.open_state, item.open_since, item.open_flow_run_id = None, None, None
    return out


def partition_slots(api_url: str, limit: str, timeout: float = 3.0) -> SlotStatus | None:
    """The slots of the global concurrency limit ``limit`` and the chunk runs that may hold them; None when the
    limit does not exist (no ``skillflow deploy``) or the API did not answer.

    Slots taken while no ``promotion-partitions`` run is Pending, Running, Cancelling or Paused are leaked: their
    releases were lost (a Prefect server restarted with its concurrency leases in memory). The limit is read
    before and after the runs are counted and the smaller count is kept, so a chunk that ends while they are
    counted is not taken for a leak. While any chunk run is in progress nothing is called leaked, a cycle whose
    children wait on leaked slots included: this check sees a leak between cycles.
    """
    from urllib.parse import quote

    holding = {
        "flows": {"name": {"any_": SLOT_FLOWS}},
        "flow_runs": {"state": {"type": {"any_": SLOT_HOLDING_STATES}}},
    }
    try:
        before = _prefect(api_url, f"/v2/concurrency_limits/{quote(limit, safe='')}", None, timeout)
        runs = int(_prefect(api_url, "/flow_runs/count", holding, timeout))
        after = _prefect(api_url, f"/v2/concurrency_limits/{quote(limit, safe='')}", None, timeout)
        active = min(int(before["active_slots"]), int(after["active_slots"]))
    except (OSError, ValueError, KeyError, TypeError):  # a missing limit is an HTTPError (404), an OSError
        return None
    reset = f"prefect gcl update {limit} --active-slots 0"
    return SlotStatus(limit=limit, active_slots=active, chunk_runs=runs, leaked=active > 0 and runs == 0,
                      reset_command=reset)  # fmt: skip


def collect_status(
    engine: Engine,
    config: PromotionConfig,
    agent_id: str | None = None,
    prefect_api_url: str | None = None,
    slot_limit: str | None = None,
) -> dict[str, Any]:
    """Tenants and flows; with an API that answers and ``slot_limit`` (the fleet's global limit) also its slots."""
    flows = flow_status(engine, prefect_api_url)
    answered = not any(f.state == UNREACHABLE for f in flows)
    slots = partition_slots(prefect_api_url, slot_limit) if prefect_api_url and slot_limit and answered else None
    return {
        "generated_at": utcnow(),
        "prefect_api": prefect_api_url or None,
        "tenants": [asdict(t) for t in tenant_status(engine, config, agent_id)],
        "flows": [asdict(f) for f in flows],
        "partition_slots": asdict(slots) if slots else None,
    }


def list_events(
    engine: Engine, skill_id: str | None = None, agent_id: str | None = None, limit: int = 50
) -> list[dict[str, Any]]:
    """The lifecycle log, newest first: who, what, when, why, and the flow run that did it.

    ``skill_id`` may be a prefix of at least 6 characters (``skillflow skills`` prints 12).
    """
    ev = skill_events
    q = select(
        ev.c.created_at, ev.c.skill_id, ev.c.agent_id, ev.c.user_id, ev.c.event, ev.c.from_status, ev.c.to_status,
        ev.c.actor, ev.c.reason, ev.c.flow_run_id, ev.c.details,
    )  # fmt: skip
    if skill_id is not None:
        match = ev.c.skill_id == skill_id
        if len(skill_id) >= 6:
            match = match | ev.c.skill_id.startswith(skill_id, autoescape=True)
        q = q.where(match)
    if agent_id is not None:
        q = q.where(ev.c.agent_id == agent_id)
    q = q.order_by(ev.c.created_at.desc(), ev.c.id.desc()).limit(limit)
    with engine.connect() as conn:
        return [dict(row) for row in conn.execute(q).mappings()]
