"""The simulator: real tool execution, realistic failures, determinism, break_tool, steering, held-out tasks."""

from __future__ import annotations

import json
import random
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, select
from typer.testing import CliRunner

from skillflow.cli import app
from skillflow.lab.simulator import (
    INTENTS,
    SkillHint,
    business_outcome,
    execute,
    good_procedure,
    held_out_requests,
    new_task,
    procedures_for,
    simulate_runs,
)
from skillflow.lab.simulator.domain import NotFoundError, PaymentMethod, State, Tools, User
from skillflow.lab.simulator.templates import HELD_OUT, TEMPLATES
from skillflow.runtime import Skillflow
from skillflow.storage.schema import workflow_memory

START = datetime(2024, 6, 1, tzinfo=UTC)


def _sf(engine: Engine, agent_id: str = "sim") -> Skillflow:
    return Skillflow(agent_id=agent_id, engine=engine, workflow_outcome_evaluator=business_outcome)


def _rows(engine: Engine, agent_id: str = "sim") -> list[dict]:  # type: ignore[type-arg]
    with engine.connect() as conn:
        query = (
            select(workflow_memory).where(workflow_memory.c.agent_id == agent_id).order_by(workflow_memory.c.created_at)
        )
        return [dict(r) for r in conn.execute(query).mappings()]


def test_tools_execute_against_state() -> None:
    state = State()
    user = User("ava_kim_1234", "Ava Kim")
    user.payment_methods["gift_card_1"] = PaymentMethod("gift_card_1", "gift_card", balance=30.0)
    state.users[user.id] = user
    tools = Tools(state)
    assert tools.call("charge_payment", {"user_id": user.id, "payment_id": "gift_card_1", "amount": 20.0})["accepted"]
    assert user.payment_methods["gift_card_1"].balance == 10.0
    declined = tools.call("charge_payment", {"user_id": user.id, "payment_id": "gift_card_1", "amount": 20.0})
    assert declined == {"accepted": False, "reason": "declined"}  # no exception: the documented example
    with pytest.raises(NotFoundError):
        tools.call("get_reservation_details", {"reservation_id": "NOPE00"})


def test_intents_templates_and_procedures() -> None:
    assert len(INTENTS) >= 5
    for intent in INTENTS:
        assert len(TEMPLATES[intent]) >= 6 and not set(TEMPLATES[intent]) & set(HELD_OUT[intent])
        assert len(procedures_for(intent)) >= 2


def test_good_procedures_beat_worse_ones() -> None:
    rng = random.Random(5)
    failed: Counter[str] = Counter()
    correct: Counter[str] = Counter()
    for intent in INTENTS:
        for _ in range(60):
            task = new_task(intent, rng)
            for proc in procedures_for(intent):
                run = execute(proc, task)
                declined = any(isinstance(s.result, dict) and s.result.get("accepted") is False for s in run.steps)
                failed[proc.name] += any(s.error for s in run.steps) or declined
                correct[proc.name] += run.answer_correct
    for intent in INTENTS:
        good = good_procedure(intent)
        assert failed[good.name] == 0 and correct[good.name] == 60
        for worse in (p for p in procedures_for(intent) if not p.good):
            assert failed[worse.name] + (60 - correct[worse.name]) >= 6, worse.name  # reliably worse
    # the declined-payment procedure never raises, yet often fails the task
    assert failed["book_stated_payment"] >= 6


def test_unknown_id_is_a_step_error_with_class() -> None:
    rng = random.Random(11)
    for _ in range(50):
        task = new_task("cancel_reservation", rng)
        run = execute("cancel_direct", task)
        if run.steps[-1].error:
            assert run.steps[-1].error_class in {"NotFoundError", "InvalidStateError"}
            return
    pytest.fail("no stale reservation id in 50 tasks")


def test_held_out_tasks_are_deterministic() -> None:
    tasks = held_out_requests("refund_order", n=5, seed=1)
    assert tasks == held_out_requests("refund_order", n=5, seed=1)
    for task in tasks:
        assert any(task.request.startswith(t.split("{")[0]) for t in HELD_OUT["refund_order"])
        run = execute(good_procedure("refund_order"), task)
        assert run.answer_correct and tuple(s.tool for s in run.steps) == task.expected_tools
        assert execute(good_procedure("refund_order"), task).answer == task.expected_answer  # re-executable


def test_simulation_is_deterministic_and_recorded(engine: Engine) -> None:
    a = simulate_runs(_sf(engine, "sim-a"), 50, seed=3, start=START)
    b = simulate_runs(_sf(engine, "sim-b"), 50, seed=3, start=START)
    key = [(r.intent, r.procedure, r.query, r.canonical_hash, r.outcome) for r in a.records]
    assert key == [(r.intent, r.procedure, r.query, r.canonical_hash, r.outcome) for r in b.records]
    assert a.stored == 50 and len({r.query for r in a.records}) > 45
    rows = _rows(engine, "sim-a")
    assert (
        len(rows) == 50 and rows[0]["created_at"] == START and rows[-1]["created_at"] == START + timedelta(minutes=49)
    )
    assert {r["metadata"]["intent"] for r in rows} == set(INTENTS)
    again = simulate_runs(_sf(engine, "sim-a"), 50, seed=3, start=START)  # same ids: converges
    assert again.stored == 50 and len(_rows(engine, "sim-a")) == 50
    c = simulate_runs(_sf(engine, "sim-c"), 50, seed=4, start=START)
    assert [r.query for r in c.records] != [r.query for r in a.records]


def test_declined_payment_is_a_business_failure(engine: Engine) -> None:
    simulate_runs(_sf(engine), 120, seed=1, start=START)
    declined = [
        r
        for r in _rows(engine)
        if any(isinstance(s["result"], dict) and s["result"].get("accepted") is False for s in r["steps"])
    ]
    assert declined
    for row in declined:
        assert row["execution_outcome"] == "success" and row["outcome"] == "failure"
        assert row["outcome_source"] == "evaluator"


def test_break_tool_from_run_index(engine: Engine) -> None:
    report = simulate_runs(_sf(engine), 100, seed=2, start=START, break_tool=("cancel_reservation", 50))
    assert report.broken_runs == 50
    for row in _rows(engine):
        cancels = [s for s in row["steps"] if s["tool"] == "cancel_reservation"]
        if not cancels:
            continue
        if row["metadata"]["index"] >= 50:
            assert cancels[0]["error_class"] == "ServiceUnavailableError" and row["outcome"] == "failure"
        else:
            assert cancels[0]["error_class"] != "ServiceUnavailableError"


def test_break_tool_wrong_results_fail_only_the_business_outcome(engine: Engine) -> None:
    simulate_runs(_sf(engine), 60, seed=2, start=START, break_tool=("cancel_reservation", 0), break_mode="wrong")
    cancelled = [
        r for r in _rows(engine) if any(s["tool"] == "cancel_reservation" and not s["error"] for s in r["steps"])
    ]
    assert cancelled
    assert all(r["execution_outcome"] == "success" and r["outcome"] == "failure" for r in cancelled)


def test_skills_for_query_steers_the_procedure(engine: Engine) -> None:
    seen: list[str] = []

    def hook(query: str) -> SkillHint:
        seen.append(query)
        return SkillHint(
            skill_ids=("not-an-active-skill",),
            preferred=("get_user_details", "get_reservation_details", "cancel_reservation"),
        )

    report = simulate_runs(_sf(engine), 60, seed=8, start=START, skills_for_query=hook)
    assert len(seen) == 60
    assert report.by_procedure["cancel_direct"] == 0 and report.by_procedure["cancel_cited"] == 0
    assert report.by_procedure["cancel_verified"] == report.by_intent["cancel_reservation"] > 0
    assert report.by_procedure["refund_stated_amount"] > 0  # other intents are not forced
    assert all(r["skills_activated"] == [] for r in _rows(engine))  # only ACTIVE skills are kept by capture


def test_simulate_command(engine: Engine) -> None:
    db_url = engine.url.render_as_string(hide_password=False)  # simulate never migrates: the fixture did
    result = CliRunner().invoke(
        app,
        [
            "simulate",
            "--runs",
            "30",
            "--seed",
            "1",
            "--db",
            db_url,
            "--json",
            "--break-tool",
            "cancel_reservation",
            "--break-after",
            "10",
        ],
    )
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["runs"] == 30 and body["stored"] == 30 and body["broken_runs"] == 20
    bad = CliRunner().invoke(app, ["simulate", "--runs", "3", "--db", db_url, "--break-tool", "teleport"])
    assert bad.exit_code == 2 and "unknown tool" in bad.output
