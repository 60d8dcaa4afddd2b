"""Defect 1: a failed execution stays a failure whatever the evaluator does; a high unknown share is not eligible."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import Engine

from skillflow.capture.outcome import Workflow
from skillflow.kernel.models import utcnow
from skillflow.promotion.gates import evaluate_gates
from skillflow.storage.aggregate import aggregate_classes
from tests.support.promotion import AGENT, agent, config


def _cancel_status(wf: Workflow) -> bool:
    """A business check written for dict results: raises (TypeError) when the last tool returned nothing."""
    last = list(wf.steps.values())[-1]
    return bool(last["result"]["status"] == "cancelled")


def _record(engine: Engine, evaluator: Any, n: int, failed: set[int]) -> None:
    sf = agent(engine, evaluator)
    for i in range(n):
        ok = i not in failed
        steps = [
            {"tool": "get_reservation_details", "arguments": {"reservation_id": f"R{i}"}, "result": {"x": 1}},
            {
                "tool": "cancel_reservation",
                "arguments": {"reservation_id": f"R{i}"},
                "result": {"status": "cancelled"} if ok else None,
            },
        ]
        res = sf.record_run(
            f"cancel reservation R{i} please {i}",
            "u1",
            steps,
            execution_error=None if ok else "ToolTimeout",
            run_id=f"run-{i}",
            created_at=utcnow() - timedelta(minutes=30 - i),
        )
        assert res.stored, res.error


def test_failed_executions_stay_in_the_success_rate_when_the_evaluator_raises(engine: Engine) -> None:
    _record(engine, _cancel_status, 10, failed={1, 3, 5, 7, 9})
    with engine.connect() as conn:
        [cls] = aggregate_classes(conn, AGENT, "u1")
    assert (cls.executions, cls.successes, cls.failures, cls.unknown) == (10, 5, 5, 0)
    assert cls.success_rate == 0.5
    gate = evaluate_gates(cls, config(), utcnow(), live_skill=False)
    assert not gate.eligible and gate.reason == "success_rate 0.50 < 0.8"


def test_evaluator_errors_on_successful_runs_are_unknown_and_a_high_share_is_not_eligible(engine: Engine) -> None:
    def flaky(wf: Workflow) -> bool:
        if wf.id in {"run-0", "run-2", "run-4"}:
            raise KeyError("status")
        return True

    _record(engine, flaky, 10, failed=set())
    with engine.connect() as conn:
        [cls] = aggregate_classes(conn, AGENT, "u1")
    assert (cls.executions, cls.successes, cls.unknown) == (7, 7, 3)
    gate = evaluate_gates(cls, config(), utcnow(), live_skill=False)
    assert not gate.eligible
    assert gate.reason == "unknown_share 0.30 > 0.2"
    assert gate.checks["unknown_share"] is False
    relaxed = evaluate_gates(cls, config(max_unknown_share=0.3), utcnow(), live_skill=False)
    assert relaxed.eligible and relaxed.checks["unknown_share"] is True
