"""Run capture: identity at write time, the outcome-evaluator contract, bad input, idempotency."""

from __future__ import annotations

import functools
import gc
import math
import subprocess
import sys
import warnings
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from skillflow.capture.outcome import Workflow
from skillflow.capture.record import RunValidationError
from skillflow.kernel.models import Step, WorkflowOutcome
from skillflow.runtime import Skillflow
from skillflow.storage.schema import skill_activations, workflow_memory

GOLDEN_HASH = "5e6b70e86ec21732b51dd93e2ddd9627b12c43186d3d048e7a8d356b41c37e12"


def _steps(accepted: bool = True) -> list[Step]:
    return [
        Step("lookup_order", {"order_id": "A1"}, {"id": "A1"}),
        Step("issue_refund", {"order_id": "A1", "amount": 5}, {"accepted": accepted}),
    ]


def _sf(engine: Engine, evaluator=None, tmp_path: Path | None = None) -> Skillflow:  # type: ignore[no-untyped-def]
    return Skillflow(agent_id="agent", engine=engine, workflow_outcome_evaluator=evaluator, spool_dir=tmp_path)


def _row(engine: Engine, run_id: str):  # type: ignore[no-untyped-def]
    with engine.connect() as conn:
        return conn.execute(select(workflow_memory).where(workflow_memory.c.id == run_id)).mappings().one()


def test_record_run_computes_identity_and_outbox(engine: Engine) -> None:
    res = _sf(engine).record_run("Refund order A1", "u1", _steps(), strict=True)
    row = _row(engine, res.run_id)
    assert row["canonical_hash"] == GOLDEN_HASH
    assert row["outcome"] == "success" and row["outcome_source"] == "execution"
    assert row["tool_sequence"] == "lookup_order > issue_refund"
    assert row["created_at"].tzinfo is not None
    assert row["steps"][1]["arguments"] == {"order_id": "A1", "amount": 5}
    assert row["skills_activated"] == []


def test_run_without_tool_calls_has_no_identity(engine: Engine) -> None:
    res = _sf(engine).record_run("hello", "u1", [], strict=True)
    row = _row(engine, res.run_id)
    assert row["canonical_hash"] is None and row["shadow_pending"] == 0


def test_business_evaluator_contract(engine: Engine) -> None:
    def accepted(wf: Workflow) -> bool:
        return all(s["result"].get("accepted", True) for s in wf.steps.values() if isinstance(s["result"], dict))

    sf = _sf(engine, accepted)
    assert sf.record_run("refund", "u1", _steps(False)).outcome == "failure"
    assert sf.record_run("refund", "u1", _steps(True)).outcome == "success"
    for value, expected in [
        ("success", "success"),
        ("failure", "failure"),
        (WorkflowOutcome.FAILURE, "failure"),
        (None, "success"),
    ]:
        assert _sf(engine, lambda wf, v=value: v).record_run("q", "u1", _steps()).outcome == expected


def test_evaluator_errors_are_learning_failures_not_agent_failures(engine: Engine) -> None:
    def boom(wf: Workflow) -> bool:
        raise RuntimeError("secret-token-123")

    res = _sf(engine, boom).record_run("q", "u1", _steps())
    row = _row(engine, res.run_id)
    assert res.stored and row["outcome"] == "unknown" and row["outcome_source"] == "learning_failure"
    assert row["learning_error"] == "evaluator failed: RuntimeError"  # the class, never the message
    res2 = _sf(engine, lambda wf: 42).record_run("q", "u1", _steps())
    assert _row(engine, res2.run_id)["learning_error"] == "evaluator failed: TypeError"


async def _async_check(wf: Workflow) -> bool:  # an asyncio agent's natural business check
    return True


class _AsyncCheck:
    async def __call__(self, wf: Workflow) -> bool:
        return True


async def _async_items(wf: Workflow) -> AsyncIterator[bool]:
    yield True


@pytest.mark.parametrize(
    "evaluator", [_async_check, _AsyncCheck(), functools.partial(_async_check), _async_items, 42, "is_ok"]
)
def test_an_async_or_uncallable_evaluator_is_refused_where_the_handle_is_made(engine: Engine, evaluator: Any) -> None:
    """Construction is setup time, not the agent's run: an ``async def`` evaluator would never be awaited (every run
    ``unknown``, a RuntimeWarning only), so it is refused there, naming the parameter. Before, it was taken."""
    with pytest.raises(TypeError, match=r"workflow_outcome_evaluator must be a sync (function|callable)"):
        _sf(engine, evaluator)


def test_an_evaluator_that_returns_an_awaitable_records_unknown_with_the_reason(engine: Engine) -> None:
    """The second line: an evaluator set after construction, or a sync one that returns a coroutine. The coroutine is
    closed, never awaited (no RuntimeWarning), and the run is ``unknown`` with the reason on the result and the row.
    Before, the result said nothing (``error=None``) and a RuntimeWarning was the only trace."""
    late = _sf(engine)
    late.workflow_outcome_evaluator = _async_check
    wrapped = _sf(engine, lambda wf: _async_check(wf))
    reason = "evaluator failed: it returned an awaitable (workflow_outcome_evaluator must be a sync function)"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = [sf.record_run("refund", "u1", _steps()) for sf in (late, wrapped)]
        gc.collect()
    assert [w for w in caught if issubclass(w.category, RuntimeWarning)] == []
    for res in results:
        assert (res.stored, res.outcome, res.error, res.learning_error) == (True, "unknown", None, reason)
        row = _row(engine, res.run_id)
        assert (row["outcome"], row["outcome_source"], row["learning_error"]) == ("unknown", "learning_failure", reason)
    # Every learning failure is named on the result now, an evaluator that raises too (its class, never its text).
    res = _sf(engine, lambda wf: 1 / 0).record_run("q", "u1", _steps())
    assert (res.outcome, res.learning_error) == ("unknown", "evaluator failed: ZeroDivisionError")
    assert _sf(engine, lambda wf: True).record_run("q", "u1", _steps()).learning_error is None


def test_execution_failure_is_never_upgraded(engine: Engine) -> None:
    sf = _sf(engine, lambda wf: True)
    assert sf.record_run("q", "u1", _steps(), execution_error=ValueError("x")).outcome == "failure"
    failing = [Step("lookup_order", {"order_id": "A"}, error="not found", error_class="KeyError")]
    assert sf.record_run("q", "u1", failing).outcome == "failure"


def test_bad_input_is_a_clear_error_never_an_exception(engine: Engine) -> None:
    sf = _sf(engine)
    assert sf.record_run("q", "", _steps()).error == "user_id must be a non-empty string"
    assert "steps[0]" in (sf.record_run("q", "u1", [42]).error or "")  # type: ignore[list-item]
    with pytest.raises(RunValidationError):
        sf.record_run("q", "u1", [{"arguments": {}}], strict=True)


def test_safe_coercions(engine: Engine) -> None:
    class Opaque:
        def __repr__(self) -> str:
            return "<Opaque>"

    bad_tool = _sf(engine).record_run("q", "u1", [Step("lookup\x00", {})])
    assert bad_tool.error == "steps[0].tool must not contain control characters" and not bad_tool.stored
    steps = [
        Step(
            "lookup",
            {"order_id": float("nan"), "blob": b"\x00\x01"},
            {"o": Opaque(), "big": "x" * 100_000, "c": "a\x00b"},
        )
    ]
    res = _sf(engine).record_run("q\x00uery", "u1", steps, strict=True)
    row = _row(engine, res.run_id)
    assert row["steps"][0]["arguments"] == {"order_id": None, "blob": "<2 bytes>"}
    result = row["steps"][0]["result"]
    assert result["o"] == "<Opaque>" and result["c"] == "a\ufffdb" and len(result["big"]) < 9000
    assert not any(isinstance(v, float) and math.isnan(v) for v in row["steps"][0]["arguments"].values())


def test_capture_is_idempotent_on_run_id(engine: Engine) -> None:
    sf = _sf(engine)
    a = sf.record_run("q", "u1", _steps(), run_id="run-1")
    b = sf.record_run("q", "u1", _steps(), run_id="run-1")
    assert a.stored and b.stored and a.canonical_hash == b.canonical_hash
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(workflow_memory)).scalar() == 1
    other = Skillflow(agent_id="other-agent", engine=engine).record_run("q", "u1", _steps(), run_id="run-1")
    assert not other.stored and other.error == "run_id is already used by another agent or user"


def test_unknown_or_foreign_skill_ids_are_not_recorded(engine: Engine) -> None:
    res = _sf(engine).record_run("q", "u1", _steps(), skills_activated=["no-such-skill"])
    assert res.skills_activated == ()
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(skill_activations)).scalar() == 0


def test_database_outage_spools_and_replays(tmp_path: Path) -> None:
    from skillflow.storage.engine import make_engine
    from skillflow.storage.migrations import migrate

    db = tmp_path / "later.db"
    db.mkdir()  # a directory where the database file belongs: every connect fails (OperationalError)
    broken = make_engine(f"sqlite:///{db}")
    sf = Skillflow(agent_id="agent", engine=broken, spool_dir=tmp_path / "spool")
    when = datetime.now(UTC) - timedelta(minutes=1)
    res = sf.record_run("q", "u1", _steps(), created_at=when)
    assert not res.stored and res.spooled
    db.rmdir()  # the database comes back
    migrate(broken)
    assert sf.replay_spool() == 1
    row = _row(broken, res.run_id)
    assert row["canonical_hash"] == GOLDEN_HASH and row["created_at"] == when.replace(microsecond=when.microsecond)


def test_runtime_imports_neither_prefect_nor_great_expectations() -> None:
    code = (
        "import sys, skillflow.runtime, skillflow.injection.selection\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('prefect', 'great_expectations', 'scipy', 'torch')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_continual_learning_switch_controls_injection(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    from skillflow.injection.embeddings import HashingEmbedder
    from skillflow.injection.retrieval import write_skill_vectors
    from skillflow.kernel.models import SkillStatus
    from skillflow.storage.skills import insert_skill

    emb = HashingEmbedder()
    with engine.begin() as conn:
        skill = insert_skill(
            conn,
            agent_id="agent",
            user_id="u1",
            canonical_hash=GOLDEN_HASH,
            name="refund-order",
            description="Use when the user asks for a refund of an order.",
            content="---\nname: refund-order\n---\n",
            status=SkillStatus.ACTIVE,
            preconditions=["the user gave an order id"],
            trigger_queries=["please refund my order"],
        )
        write_skill_vectors(conn, skill, emb)
    monkeypatch.delenv("SKILLFLOW_CONTINUAL_LEARNING", raising=False)
    off = Skillflow(agent_id="agent", engine=engine, embedder=emb)
    assert not off.options.continual_learning and not off.options.skillbox and off.options.workflow_memory
    assert off.prepare("please refund my order", "u1").skill_ids == ()
    assert off.record_run("please refund my order", "u1", _steps()).stored  # workflow memory still records
    monkeypatch.setenv("SKILLFLOW_CONTINUAL_LEARNING", "1")
    on = Skillflow(agent_id="agent", engine=engine, embedder=emb, workflow_memory=False)
    assert on.options.workflow_memory and on.options.skillbox  # enabling it forces both on
    assert on.prepare("please refund my order", "u1").skill_ids == (skill.id,)
