"""Seeded runs for the promotion tests: a cancel-reservation procedure and a declined-payment procedure."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, func, select, true

from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import utcnow
from skillflow.runtime import Skillflow
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import metadata
from tests.support import patient_capture

AGENT = "agent-a"
TOOLS = ["get_reservation_details", "cancel_reservation", "lookup_order", "charge_payment", "search_flights"]
CANCEL_QUERIES = [
    "Please cancel my reservation {rid}",
    "I need to cancel booking {rid} for next week",
    "cancel reservation {rid} please, plans changed",
    "Can you cancel my trip {rid}?",
    "I want to cancel the flight booking {rid}",
    "Cancel booking {rid}, I can no longer travel",
]
PAY_QUERIES = ["Pay for order {oid}", "Please charge my card for order {oid}", "I want to pay order {oid} now"]


@pytest.fixture
def offline_providers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline distiller/judge and the hashing embedder: no network, no model load."""
    monkeypatch.setenv("SKILLFLOW_EMBEDDER", "hashing")
    monkeypatch.setenv("SKILLFLOW_DISTILLER", "offline")
    monkeypatch.setenv("SKILLFLOW_JUDGE", "offline")


def config(**overrides: Any) -> PromotionConfig:
    base: dict[str, Any] = {"require_shadow": False, "promotion_every_n_runs": 0, "shadow_evaluation_enabled": False}
    return PromotionConfig(**{**base, **overrides})


def agent(engine: Engine, evaluator: Any = None, **overrides: Any) -> Skillflow:
    with patient_capture():
        sf = Skillflow(agent_id=AGENT, engine=engine, config=config(**overrides), workflow_outcome_evaluator=evaluator)
    sf.register_tools(TOOLS)
    return sf


def record_cancel(sf: Skillflow, user: str, i: int, *, ok: bool = True, when: datetime | None = None) -> str:
    rid = f"ZQ{7310 + i}K"
    steps: list[dict[str, Any]] = [
        {"tool": "get_reservation_details", "arguments": {"reservation_id": rid}, "result": {"status": "booked"}},
        {
            "tool": "cancel_reservation",
            "arguments": {"reservation_id": rid},
            "result": None if not ok else {"status": "cancelled", "refund_to": f"card_{9000 + i}"},
            "error": None if ok else "Error: reservation is not cancellable",
            "error_class": None if ok else "NotCancellable",
        },
    ]
    result = sf.record_run(
        CANCEL_QUERIES[i % len(CANCEL_QUERIES)].format(rid=rid),
        user,
        steps,
        run_id=f"cancel-{user}-{i}",
        created_at=when or utcnow() - timedelta(minutes=60 - i),
        strict=True,
    )
    assert result.stored, result.error
    return result.canonical_hash or ""


def seed_cancels(url: str, user: str, runs: int = 6) -> None:
    """A migrated database at ``url`` holding ``runs`` successful cancel procedures of ``user``."""
    engine = make_engine(url)
    migrate(engine)
    sf = agent(engine)
    for i in range(runs):
        record_cancel(sf, user, i)
    engine.dispose()


def record_payment(sf: Skillflow, user: str, i: int, *, accepted: bool) -> str:
    oid = f"OR{5120 + i}Z"
    steps = [
        {"tool": "lookup_order", "arguments": {"order_id": oid}, "result": {"total": 120 + i}},
        {"tool": "charge_payment", "arguments": {"order_id": oid, "amount": 120 + i}, "result": {"accepted": accepted}},
    ]
    result = sf.record_run(
        PAY_QUERIES[i % len(PAY_QUERIES)].format(oid=oid),
        user,
        steps,
        run_id=f"pay-{user}-{i}",
        created_at=utcnow() - timedelta(minutes=30 - i),
        strict=True,
    )
    assert result.stored, result.error
    return result.canonical_hash or ""


def payment_accepted(workflow: Any) -> bool:
    """The documented business evaluator: every dict result must not say ``accepted: false``."""
    return all(
        step.get("result", {}).get("accepted", True)
        for step in workflow.steps.values()
        if isinstance(step.get("result"), dict)
    )


# The maintained class statistics (docs/guide/aggregate.md) are folded, in their own transaction, before the
# gates read them: a crash later in the cycle leaves them folded, which is right (a cache of the runs, not a
# decision). tests/storage/test_class_stats.py proves a dry run leaves them untouched.
DERIVED = frozenset({"class_stats", "class_fingerprints", "class_stats_state"})


def counts(engine: Engine) -> dict[str, int]:
    """Row count of every table but the derived statistics (to prove a dry run or a crashed store wrote nothing);
    ``partition_state`` counts the partitions with a cycle mark (the fold's run counters are derived too)."""
    marked = metadata.tables["partition_state"].c.last_cycle_at.is_not(None)
    with engine.connect() as conn:
        return {
            name: int(
                conn.execute(
                    select(func.count()).select_from(t).where(marked if name == "partition_state" else true())
                ).scalar()
                or 0
            )
            for name, t in metadata.tables.items()
            if name not in DERIVED
        }


def cancel_history(url: str, n: int = 6, **overrides: Any) -> tuple[Engine, Skillflow]:
    """A migrated database at ``url`` whose tenant (AGENT, u1) holds ``n`` successful cancel runs: one class the
    gates promote."""
    from skillflow.storage.engine import make_engine
    from skillflow.storage.migrations import migrate

    engine = make_engine(url)
    migrate(engine)
    sf = agent(engine, **overrides)
    for i in range(n):
        record_cancel(sf, "u1", i)
    return engine, sf
