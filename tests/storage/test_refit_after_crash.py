"""A crash between a decision's commit and its rule refit is repaired by running the decision again.

Activation, demotion, rollback and drift demotion refit the tenant's applicability rule right after their own
transaction (docs/guide/runtime.md, "Which skill, or none"). A process killed in between leaves a stale rule,
which injects nothing for the whole tenant — the skills the decision did not touch included. Re-asking for
the decision (a no-op on the rows) and the next scheduled drift run must refit it. Before, each returned
early and the tenant went without skills until its next promotion cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, select

from skillflow.kernel.models import utcnow
from skillflow.lifecycle import decisions, drift, rollback
from skillflow.promotion.cycle import run_partition
from skillflow.runtime import Skillflow
from skillflow.storage.schema import skillbox
from tests.support.promotion import AGENT, agent, config, record_cancel, record_payment

pytestmark = pytest.mark.usefixtures("offline_providers")
CFG = config(require_shadow=True)
CANCEL = "Please cancel my reservation ZQ7399K"
CHARGE = "Please charge my card for order OR5999Z"


def _id(engine: Engine, name: str) -> str:
    with engine.connect() as conn:
        return str(conn.execute(select(skillbox.c.id).where(skillbox.c.name == name)).scalar_one())


def _tenant(engine: Engine) -> Skillflow:
    """Two SHADOW skills (cancel, charge) and a fitted rule; the charge skill ACTIVE and injected."""
    sf = agent(engine)
    for i in range(6):
        record_cancel(sf, "u1", i)
        record_payment(sf, "u1", i, accepted=i != 0)
    for i in range(14):
        steps = [{"tool": "search_flights", "arguments": {"to": f"C{i}"}, "result": {"n": i}}]
        sf.record_run(f"Find me flights to city number {i} next month", "u1", steps,
                      created_at=utcnow() - timedelta(minutes=90 - i), strict=True)  # fmt: skip
    assert len(run_partition(engine, AGENT, "u1", CFG, flow_run_id="seed").promoted) == 2
    decisions.activate_skill(engine, _id(engine, "charge-payment"), actor="alice", config=CFG)
    return Skillflow(agent_id=AGENT, engine=engine, config=CFG, continual_learning=True)


def _injected(sf: Skillflow, engine: Engine) -> dict[str, tuple[str, ...]]:
    names = {_id(engine, n): n for n in ("cancel-reservation", "charge-payment")}
    return {q: tuple(names[s] for s in sf.prepare(q, "u1").skill_ids) for q in (CANCEL, CHARGE)}


def _crash_once(monkeypatch: pytest.MonkeyPatch, module: Any, run: Callable[[], Any]) -> None:
    """Run the decision with its refit lost (the process died right after the commit)."""
    monkeypatch.setattr(module, "refresh_rule", lambda *a, **k: "failed")
    run()
    monkeypatch.undo()


def _failed_cancels(sf: Skillflow, engine: Engine) -> None:
    for i in range(12):
        rid = f"ZQ{8100 + i}K"
        steps = [
            {"tool": "get_reservation_details", "arguments": {"reservation_id": rid}, "result": {"s": "b"}},
            {"tool": "cancel_reservation", "arguments": {"reservation_id": rid}, "error": "Error: no"},
        ]
        sf.record_run(f"Please cancel my reservation {rid}", "u1", steps, strict=True,
                      created_at=utcnow() + timedelta(seconds=1 + i),
                      skills_activated=[_id(engine, "cancel-reservation")])  # fmt: skip


def test_activating_again_refits_what_a_crash_left_stale(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    sf = _tenant(engine)
    cancel = _id(engine, "cancel-reservation")
    _crash_once(monkeypatch, decisions, lambda: decisions.activate_skill(engine, cancel, actor="alice", config=CFG))
    assert _injected(sf, engine) == {CANCEL: (), CHARGE: ()}  # the stale rule: nothing for the whole tenant
    decisions.activate_skill(engine, cancel, actor="alice", config=CFG)  # re-asked: a no-op on the rows
    assert _injected(sf, engine) == {CANCEL: ("cancel-reservation",), CHARGE: ("charge-payment",)}


def test_demoting_again_refits_what_a_crash_left_stale(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    sf = _tenant(engine)
    cancel = _id(engine, "cancel-reservation")
    decisions.activate_skill(engine, cancel, actor="alice", config=CFG)
    _crash_once(monkeypatch, decisions, lambda: decisions.demote_skill(engine, cancel, "changed", actor="alice"))
    assert _injected(sf, engine)[CHARGE] == ()
    decisions.demote_skill(engine, cancel, "changed", actor="alice")
    assert _injected(sf, engine) == {CANCEL: (), CHARGE: ("charge-payment",)}


def test_rolling_back_again_refits_what_a_crash_left_stale(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    sf = _tenant(engine)
    cancel = _id(engine, "cancel-reservation")
    decisions.activate_skill(engine, cancel, actor="alice", config=CFG)
    decisions.demote_skill(engine, cancel, "oops", actor="alice")
    back = lambda: rollback.rollback_skill(engine, cancel, 1, actor="alice", reason="back", config=CFG)  # noqa: E731
    _crash_once(monkeypatch, rollback, back)
    assert _injected(sf, engine)[CHARGE] == ()
    back()
    assert _injected(sf, engine) == {CANCEL: ("cancel-reservation",), CHARGE: ("charge-payment",)}


def test_the_next_drift_run_refits_what_a_crash_left_stale(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    sf = _tenant(engine)
    decisions.activate_skill(engine, _id(engine, "cancel-reservation"), actor="alice", config=CFG)
    _failed_cancels(sf, engine)
    check = lambda run: drift.run_drift(engine, CFG, agent_id=AGENT, user_id="u1", flow_run_id=run)  # noqa: E731
    _crash_once(monkeypatch, drift, lambda: check("drift-1"))
    assert _injected(sf, engine)[CHARGE] == ()
    report = check("drift-2")  # the next scheduled run: a new flow-run id, nothing left to demote
    assert report.demoted == []
    assert _injected(sf, engine) == {CANCEL: (), CHARGE: ("charge-payment",)}
