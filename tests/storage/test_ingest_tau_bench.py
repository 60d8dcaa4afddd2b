"""τ-bench ingest: counts from the corpus README, idempotency, reward outcomes, the class contrast."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select, text

from skillflow.lab.ingest import error_class_for, ingest_tau_bench, parse_tau_bench
from skillflow.runtime import Skillflow
from skillflow.storage.schema import agent_tools, workflow_memory

END = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)


def _sf(engine: Engine, agent_id: str = "tau-bench-airline") -> Skillflow:
    return Skillflow(agent_id=agent_id, engine=engine)


def test_parse_matches_corpus_counts(tau_bench_path: Path) -> None:
    runs = parse_tau_bench(tau_bench_path)
    assert len(runs) == 1490  # user turns
    assert sum(1 for r in runs if r.steps) == 569  # user turns with at least one tool call
    assert sum(len(r.steps) for r in runs) == 1164
    assert sum(1 for r in runs if any(s.error for s in r.steps)) == 57
    assert sum(1 for r in runs for s in r.steps if s.error) == 73
    assert len({s.tool for r in runs for s in r.steps}) == 14  # the airline toolbox
    assert len({r.run_id for r in runs}) == 1490
    first = runs[0]
    assert first.run_id == "tau-0-0-0" and first.user_id == "shared"
    assert first.metadata["customer_id"] == "mia_li_3668" and first.metadata["reward"] == 0.0
    assert all("###STOP###" not in r.query for r in runs)
    # arguments are decoded JSON objects; results parsed when they are JSON
    call = next(s for r in runs for s in r.steps if s.tool == "get_user_details")
    assert isinstance(call.arguments, dict) and "user_id" in call.arguments
    assert isinstance(call.result, dict)


def test_error_class_strips_values_and_is_stable() -> None:
    a = error_class_for("Error: payment amount does not add up, total price is 305, but paid 255")
    b = error_class_for("Error: payment amount does not add up, total price is 1203, but paid 833")
    assert a == b == "Error:payment_amount_does_not_add_up"
    assert (
        error_class_for("Error: flight HAT030 not available on date 2024-05-13") == "Error:flight_not_available_on_date"
    )
    assert error_class_for("Error: payment method certificate_7504069 not found") == error_class_for(
        "Error: payment method not found"
    )


@pytest.fixture
def tau_subset(tau_bench_path: Path, tmp_path: Path) -> Path:
    """The first 20 conversations (tasks 0-4), to keep the database round trips of this test small."""
    path = tmp_path / "tau-subset.json"
    path.write_text(json.dumps(json.loads(tau_bench_path.read_text(encoding="utf-8"))[:20]), encoding="utf-8")
    return path


def test_ingest_is_idempotent_and_registers_tools(engine: Engine, tau_subset: Path) -> None:
    parsed = parse_tau_bench(tau_subset)
    n, with_calls = len(parsed), sum(1 for r in parsed if r.steps)
    first = ingest_tau_bench(tau_subset, _sf(engine), end=END)
    assert (first.runs, first.stored, first.new, first.with_tool_calls) == (n, n, n, with_calls)
    assert 0 < first.with_identity <= with_calls and not first.rejected
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(workflow_memory)).scalar() == n
        first_at, last_at = conn.execute(
            select(func.min(workflow_memory.c.created_at), func.max(workflow_memory.c.created_at))
        ).one()
        tools = set(
            conn.execute(select(agent_tools.c.tool_name).where(agent_tools.c.agent_id == "tau-bench-airline")).scalars()
        )
    assert last_at == END and first_at == END - timedelta(minutes=n - 1)  # one minute apart, ending at END
    assert tools == {s.tool for r in parsed for s in r.steps}
    again = ingest_tau_bench(tau_subset, _sf(engine))
    assert (again.stored, again.new, again.already_present) == (n, 0, n)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(workflow_memory)).scalar() == n
    other = ingest_tau_bench(tau_subset, _sf(engine, "another-agent"))
    assert other.rejected == {"run id already stored for another agent or user": n} and other.stored == 0


CLASS_RATES = text(
    "select tool_sequence, count(*) as n, "
    "sum(case when execution_outcome = 'success' then 1 else 0 end) as by_execution, "
    "sum(case when outcome = 'success' then 1 else 0 end) as by_reward "
    "from workflow_memory where agent_id = :agent and user_id = :user and canonical_hash is not null "
    "group by canonical_hash, tool_sequence"
)


@pytest.fixture
def tau_book_cancel(tau_bench_path: Path, tmp_path: Path) -> Path:
    """The conversations that book or cancel (64 of 200). Every turn of the booking and cancelling classes is
    in them, so those classes' rates equal the full corpus's, with a third of the database round trips."""
    wanted = {"book_reservation", "cancel_reservation"}
    episodes = [
        e
        for e in json.loads(tau_bench_path.read_text(encoding="utf-8"))
        if any(c["function"]["name"] in wanted for m in e["traj"] for c in m.get("tool_calls") or [])
    ]
    path = tmp_path / "tau-book-cancel.json"
    path.write_text(json.dumps(episodes), encoding="utf-8")
    return path


def test_reward_outcome_follows_the_episode_reward(engine: Engine, tau_book_cancel: Path) -> None:
    parsed = parse_tau_bench(tau_book_cancel)
    report = ingest_tau_bench(tau_book_cancel, _sf(engine), outcome="reward", end=END)
    assert report.stored == len(parsed) and report.outcome_mode == "reward"
    reward = {r.run_id: r.metadata["reward"] for r in parsed}
    with engine.connect() as conn:
        rows = conn.execute(
            select(workflow_memory.c.id, workflow_memory.c.outcome, workflow_memory.c.execution_outcome)
        ).all()
    for run_id, outcome, execution in rows:
        if execution == "failure":  # an execution failure is never upgraded
            assert outcome == "failure"
        else:
            assert outcome == ("success" if reward[run_id] == 1.0 else "failure"), run_id
    assert sum(1 for _, o, _ in rows if o == "success") < sum(1 for _, _, e in rows if e == "success")

    # The frequent booking and cancelling per-turn classes look reliable by execution, not by reward.
    with engine.connect() as conn:
        classes = conn.execute(CLASS_RATES, {"agent": "tau-bench-airline", "user": "shared"}).all()
    rates = {seq: (by_exec / n, by_reward / n, n) for seq, n, by_exec, by_reward in classes}
    for seq in ("book_reservation", "cancel_reservation"):
        by_exec, by_reward, n = rates[seq]
        assert n >= 15 and by_exec >= 0.9 and by_reward <= 0.4, (seq, rates[seq])
    assert rates["book_reservation"][1] < 0.1
